// npm run bench:poll-loop [-- --seconds=60]
//
// What a process driven by the sandbox-adapter's `runRemoteProcess` costs the
// API server: its loop (poll every 100 ms until the exit, as the adapter's
// source has it) over a process that prints a line every 100 ms for N
// seconds, with pods/exec requests counted from the API server's own
// `apiserver_request_total` (nothing else execs meanwhile). Before this
// package answered loops from a follower, every poll was one exec.
// Writes bench/results/poll-loop.json.

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { ROOT, ensureCluster } from "./lib/cluster.mjs";

const seconds = Number(process.argv.find((a) => a.startsWith("--seconds="))?.slice(10) ?? 60);
ensureCluster();
const kubectl = (...args) =>
  execFileSync(process.env.SANDBOX_TEST_KUBECTL, ["--kubeconfig", process.env.SANDBOX_TEST_ADMIN_KUBECONFIG, ...args], {
    encoding: "utf8",
    maxBuffer: 256 * 2 ** 20,
  });
/** pods/exec requests the API server has answered so far (every verb and code). */
function execRequests() {
  let n = 0;
  for (const line of kubectl("get", "--raw", "/metrics").split("\n")) {
    if (line.startsWith("apiserver_request_total{") && line.includes('resource="pods"') && line.includes('subresource="exec"')) {
      n += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return n;
}

const { agentSandboxProvider } = await import(`${ROOT}index.js`);
const provider = agentSandboxProvider({
  namespace: process.env.SANDBOX_TEST_NAMESPACE,
  warmPool: "pool-ephemeral",
  suspend: "none",
  cwd: "/tmp",
});
const ctx = { actorId: `bench-poll-${Date.now().toString(36)}`, client() {} };
const id = await provider.create(ctx);
try {
  const sandbox = await provider.connect(ctx, id);
  const proc = await sandbox.spawn(`for i in $(seq 1 ${seconds * 10}); do echo $i; sleep 0.1; done`);
  const before = execRequests();
  const t0 = Date.now();
  let after;
  let polls = 0;
  let lines = 0;
  for (;;) {
    const r = await proc.poll(after);
    polls++;
    for (const c of r.chunks) {
      if (after !== undefined && c.sequence <= after) continue;
      after = c.sequence;
      lines += Buffer.from(c.data).toString().split("\n").length - 1;
    }
    if (r.exit) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const elapsed = (Date.now() - t0) / 1000;
  const execs = execRequests() - before;
  const result = {
    seconds: Math.round(elapsed),
    polls,
    lines,
    execs,
    execsPerMinute: Math.round((execs / elapsed) * 60 * 10) / 10,
    // Before: one read script per poll.
    execsPerMinuteBefore: Math.round((polls / elapsed) * 60),
    date: new Date().toISOString(),
  };
  console.log(JSON.stringify(result));
  writeFileSync(`${ROOT}bench/results/poll-loop.json`, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  await provider.destroy(ctx, id);
}
