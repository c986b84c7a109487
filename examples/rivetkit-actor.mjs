// A RivetKit actor with a sandbox of its own on Kubernetes. The actor's state
// holds only the sandbox id; waking connects (creating the sandbox on the first
// start), sleeping suspends it (the pod goes, the volume at /workspace stays),
// destroying the actor deletes it. Two actions use it: `exec` and `readFile`.
//
//   node examples/rivetkit-actor.mjs       # the local cluster (dev/cluster), warm pool "pool-workspace"
//   KUBECONFIG=~/.kube/config SANDBOX_NAMESPACE=agents SANDBOX_WARM_POOL=my-pool node examples/rivetkit-actor.mjs
//
// RivetKit needs no account or outside service here: it starts its engine from
// the `rivetkit` npm package on 127.0.0.1:6420 and leaves it running for the
// next start (its pid is in ~/.rivetkit/var/engine/runtime.json).
// __test__/rivetkit.test.mjs runs this actor.

import { existsSync, readFileSync } from "node:fs";
import { posix } from "node:path";
import { actor, setup } from "rivetkit";
import { createClient } from "rivetkit/client";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";

const envFile = new URL("../.cluster/env", import.meta.url);
if (!process.env.KUBECONFIG && existsSync(envFile)) {
  for (const m of readFileSync(envFile, "utf8").matchAll(/^export ([A-Z_]+)=(.*)$/gm)) process.env[m[1]] ??= m[2];
}

// One provider serves every actor: it keeps nothing per actor, the id in the
// actor's state is all it needs to find a sandbox again (from any process).
export const provider = agentSandboxProvider({
  warmPool: process.env.SANDBOX_WARM_POOL ?? "pool-workspace",
  namespace: process.env.SANDBOX_NAMESPACE ?? process.env.SANDBOX_TEST_NAMESPACE,
  // A backstop against leaks: a sandbox unused (connected or suspended) for an
  // hour is deleted, and a later wake creates a new one, without the files.
  // Make it longer than your actors sleep, or leave it out.
  ttlSeconds: 3600,
});

/** Connects to the actor's sandbox (resuming it if suspended), creating one if it has none. */
async function connectOrCreate(c) {
  if (c.state.sandboxId) {
    // Throws on an outage (the id is kept); undefined only when the sandbox is gone.
    const sandbox = await provider.connect(c, c.state.sandboxId);
    if (sandbox) return sandbox;
    c.log.warn({ msg: "the sandbox is gone with its files; creating a new one", sandboxId: c.state.sandboxId });
  }
  c.state.sandboxId = await provider.create(c); // named after c.actorId: a retried create finds it
  await c.saveState({ immediate: true });
  const sandbox = await provider.connect(c, c.state.sandboxId);
  if (!sandbox) throw new Error(`sandbox ${c.state.sandboxId} not found right after it was created`);
  return sandbox;
}

/** This generation's sandbox: one connect, shared by every caller; retried after a failure. */
function sandbox(c) {
  c.vars.sandbox ??= connectOrCreate(c).catch((err) => {
    c.vars.sandbox = undefined;
    throw err;
  });
  return c.vars.sandbox;
}

export const sandboxActor = actor({
  state: { sandboxId: null }, // persisted across sleeps
  createVars: () => ({ sandbox: undefined }), // this generation's connect, never persisted

  // Start connecting (a resume takes seconds) but do not hold up the wake on
  // it: RivetKit fails an onWake that takes over 30 s, and a cold start can.
  // Actions wait for it and see its error; keepAwake blocks sleep meanwhile.
  onWake: (c) => {
    c.keepAwake(sandbox(c)).catch(() => {});
  },
  // Sleep suspends: the processes end, the volume at cwd stays. The next
  // wake's connect resumes the same sandbox.
  onSleep: async (c) => {
    await c.vars.sandbox?.catch(() => {}); // never suspend under a connect still running
    if (c.state.sandboxId) await provider.suspend(c, c.state.sandboxId);
  },
  onDestroy: async (c) => {
    await c.vars.sandbox?.catch(() => {});
    if (c.state.sandboxId) await provider.destroy(c, c.state.sandboxId);
  },

  actions: {
    exec: async (c, command) => {
      const s = await sandbox(c);
      // Within RivetKit's actionTimeout (60 s by default), so a slow command
      // resolves with timedOut rather than failing the action.
      const { exitCode, timedOut, stdout, stderr } = await s.exec(command, { cwd: s.cwd, timeoutMs: 30_000 });
      return { exitCode, timedOut, stdout, stderr };
    },
    readFile: async (c, path) => {
      const s = await sandbox(c);
      return new TextDecoder().decode(await s.readFile(posix.resolve(s.cwd, path)));
    },
    sandboxId: (c) => c.state.sandboxId,
    // RivetKit sleeps an idle actor by itself (after `sleepTimeout`, 30 s by
    // default) and destroys one only when asked: these ask now.
    sleep: (c) => c.sleep(),
    destroy: (c) => c.destroy(),
  },

  // Bounds onSleep and onDestroy (15 s by default): a suspend waits for the
  // pod to be gone, a destroy for the Sandbox too.
  options: { sleepGracePeriod: 120_000 },
});

export const registry = setup({ use: { sandboxActor } });

// Run as a script: one actor's life, as a client sees it.
if (import.meta.main) {
  await registry.startAndWait();
  const client = createClient(registry.parseConfig().endpoint);
  const agent = client.sandboxActor.getOrCreate([`example-${process.pid}`]);
  try {
    const first = await agent.exec("echo kept > notes.txt; pwd");
    console.log(`wake: sandbox ${await agent.sandboxId()}, cwd ${first.stdout.trim()}`);
    await agent.sleep();
    console.log("sleep: onSleep suspends the sandbox; the next action wakes the actor, which resumes it");
    console.log(`wake: notes.txt says "${(await agent.readFile("notes.txt")).trim()}", sandbox ${await agent.sandboxId()}`);
  } finally {
    await agent.destroy();
    await client.dispose();
    await registry.shutdown(); // waits for onDestroy
    console.log("destroy: the actor and its sandbox are deleted");
  }
  // rivetkit 2.3 keeps the event loop alive after shutdown (rivet-dev/actors#5766).
  process.exit();
}
