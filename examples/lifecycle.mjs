// Creates a sandbox, runs commands, suspends and resumes it, and destroys it.
//
//   node examples/lifecycle.mjs                 # the local cluster (dev/cluster), warm pool "pool-workspace"
//   KUBECONFIG=~/.kube/config SANDBOX_NAMESPACE=agents SANDBOX_WARM_POOL=my-pool node examples/lifecycle.mjs
//   SANDBOX_IMAGE=ubuntu:24.04 node examples/lifecycle.mjs   # direct mode: a Sandbox per actor, 1Gi volume at /workspace
//
// Without KUBECONFIG it reads <repo>/.cluster/env (written by
// `bash dev/cluster/cluster.sh up`) and runs as the local cluster's
// least-privilege ServiceAccount.

import { existsSync, readFileSync } from "node:fs";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";

const envFile = new URL("../.cluster/env", import.meta.url);
if (!process.env.KUBECONFIG && existsSync(envFile)) {
  for (const m of readFileSync(envFile, "utf8").matchAll(/^export ([A-Z_]+)=(.*)$/gm)) process.env[m[1]] ??= m[2];
}

const mode = process.env.SANDBOX_IMAGE
  ? { sandbox: { image: process.env.SANDBOX_IMAGE, volume: { size: "1Gi" } } }
  : { warmPool: process.env.SANDBOX_WARM_POOL ?? "pool-workspace" };

const provider = agentSandboxProvider({
  ...mode,
  namespace: process.env.SANDBOX_NAMESPACE ?? process.env.SANDBOX_TEST_NAMESPACE,
  ttlSeconds: 3600, // backstop: deleted an hour after the last use if this script dies
  onEvent: (e) => console.log(`  [${e.elapsedMs} ms] ${e.type}${e.sandbox ? ` ${e.sandbox}` : ""}${e.message ? `: ${e.message}` : ""}`),
});

// Rivet passes the actor's context; only actorId is used.
const ctx = { actorId: `example-${process.pid}`, client: () => undefined };

const time = async (label, fn) => {
  const start = performance.now();
  const result = await fn();
  console.log(`${label}: ${Math.round(performance.now() - start)} ms`);
  return result;
};

const id = await time("create", () => provider.create(ctx));
console.log(`id ${id}`);
try {
  let sandbox = await time("connect", () => provider.connect(ctx, id));
  const run = async (command) => {
    const r = await sandbox.exec(command, { cwd: sandbox.cwd, onData: (chunk) => process.stdout.write(chunk) });
    if (r.exitCode !== 0) console.log(`  (exit ${r.exitCode}${r.timedOut ? ", timed out" : ""})`);
  };
  await run("uname -a; echo cwd=$(pwd)");
  await sandbox.writeFile(`${sandbox.cwd}/notes.txt`, "kept across suspend\n");
  await run("echo lost > /tmp/scratch.txt; ls -l");

  await time("suspend", () => provider.suspend(ctx, id));
  sandbox = await time("connect (resume)", () => provider.connect(ctx, id));
  await run("cat notes.txt; test -e /tmp/scratch.txt || echo '/tmp/scratch.txt is gone (new pod)'");
} finally {
  await time("destroy", () => provider.destroy(ctx, id));
}
