// examples/rivetkit-actor.mjs under RivetKit itself (the `rivetkit` npm
// package), against the local cluster: first run as a user runs it (a
// script), then under RivetKit's test driver (`rivetkit/test`'s setupTest
// starts the example's registry and RivetKit's local engine), a RivetKit
// client calling the actor's actions; sleep and destroy are RivetKit's own
// (`c.sleep()`, `c.destroy()`, which the example's actions call). What each
// did to the sandbox is read from the cluster, waiting for the objects to
// change. Each part runs an engine of its own, stopped at its end.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { getObject, leftovers, objectName, skip } from "./cluster.mjs";

const CLAIM = "sandboxclaims.extensions.agents.x-k8s.io";
const SANDBOX = "sandboxes.agents.x-k8s.io";

/** Polls `check` until it returns a truthy value; fails with `what` after `timeoutMs`. */
async function until(what, check, timeoutMs = 90_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** True when 127.0.0.1:port can be bound now. */
const bindable = (port) =>
  new Promise((resolve) => {
    const server = createServer().once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });

/**
 * A port for RivetKit's engine (it also takes port+1 and port+10), below the
 * ephemeral range that the control plane's loopback connections use.
 */
async function enginePort() {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if ((await bindable(port)) && (await bindable(port + 1)) && (await bindable(port + 10))) return port;
  }
}

/**
 * The environment of a RivetKit engine of its own: a fresh store (RivetKit
 * keeps actors across runs in ~/.rivetkit otherwise) and free ports.
 */
async function engineEnv() {
  return {
    RIVETKIT_STORAGE_PATH: mkdtempSync(join(tmpdir(), "rivetkit-test-")),
    RIVET_RUN_ENGINE_PORT: String(await enginePort()),
  };
}

/** Stops the engine RivetKit started with this store (it leaves it running for reuse), then removes the store. */
async function stopEngine(storage) {
  const runtime = `${storage}/.rivetkit/var/engine/runtime.json`;
  if (existsSync(runtime)) {
    const { pid } = JSON.parse(readFileSync(runtime, "utf8"));
    const alive = () => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    if (alive()) process.kill(pid, "SIGTERM");
    await until(`the engine (pid ${pid}) exits`, () => !alive(), 30_000);
  }
  rmSync(storage, { recursive: true, force: true });
}

const example = fileURLToPath(new URL("../examples/rivetkit-actor.mjs", import.meta.url));
const runId = `${process.pid}-${Date.now().toString(36)}`;

describe("examples/rivetkit-actor.mjs as a script, on the local cluster", { skip, timeout: 300_000 }, () => {
  test("one actor: a command, a sleep, a wake with the file, a destroy", async () => {
    const env = await engineEnv();
    try {
      const run = promisify(execFile);
      const { stdout } = await run(process.execPath, [example], { env: { ...process.env, ...env }, timeout: 240_000 });
      const id = /^wake: sandbox (\S+), cwd \/workspace$/m.exec(stdout)?.[1];
      assert.ok(id, stdout);
      assert.ok(stdout.includes(`\nwake: notes.txt says "kept", sandbox ${id}\n`), stdout);
      assert.match(stdout, /^destroy: the actor and its sandbox are deleted$/m);
      assert.equal(getObject(CLAIM, objectName(id)), null, "the claim is gone");
    } finally {
      await stopEngine(env.RIVETKIT_STORAGE_PATH);
    }
  });
});

describe("examples/rivetkit-actor.mjs under RivetKit, on the local cluster", { skip, timeout: 600_000 }, () => {
  let actorModule, client, storage;
  const disposers = [];
  /** Every sandbox the actors made, for the backstop in `after`. */
  const made = [];

  before(async () => {
    const env = await engineEnv();
    storage = env.RIVETKIT_STORAGE_PATH;
    Object.assign(process.env, env);
    actorModule = await import("../examples/rivetkit-actor.mjs");
    const { setupTest } = await import("rivetkit/test");
    // setupTest takes vitest's TestContext, of which it uses onTestFinished
    // (to dispose of its client).
    ({ client } = await setupTest({ onTestFinished: (fn) => disposers.push(fn) }, actorModule.registry));
  });

  after(async () => {
    for (const dispose of disposers) await dispose();
    await actorModule?.registry.shutdown(); // live actors sleep: their sandboxes are suspended
    // Whatever a failed test left, deleted by the provider itself.
    for (const { actorId, sandboxId } of made) {
      await actorModule.provider.destroy({ actorId, client: () => undefined }, sandboxId).catch(() => {});
    }
    if (storage) await stopEngine(storage);
    // rivetkit 2.3's native runtime keeps the event loop alive after its
    // shutdown (rivet-dev/actors#5766): this file's process would never end.
    setImmediate(() => process.exit());
  });

  /** An actor of the example and what the cluster holds for it. */
  async function actorOf(label) {
    const handle = client.sandboxActor.getOrCreate([`${label}-${runId}`]);
    const result = await handle.exec("echo kept > notes.txt; echo lost > /tmp/lost.txt; pwd");
    const sandboxId = await handle.sandboxId();
    made.push({ actorId: await handle.resolve(), sandboxId });
    const claim = () => getObject(CLAIM, objectName(sandboxId));
    return { handle, result, sandboxId, claim, sandboxName: () => claim().status.sandbox.name };
  }

  let first;

  test("the first action creates the actor's sandbox and runs in it", async () => {
    first = await actorOf("first");
    assert.deepEqual(first.result, { exitCode: 0, timedOut: false, stdout: "/workspace\n", stderr: "" });
    assert.match(first.sandboxId, /^[a-z0-9-]+\/sbx-[0-9a-f]{20}$/);
    assert.ok(first.claim(), "a SandboxClaim of the warm pool");
    assert.equal(getObject("pods", first.sandboxName())?.status.phase, "Running");
    assert.equal(await first.handle.readFile("notes.txt"), "kept\n");
  });

  test("RivetKit's sleep suspends it: the Sandbox is Suspended, its pod gone, the claim kept", async () => {
    first.podUid = getObject("pods", first.sandboxName()).metadata.uid;
    const name = first.sandboxName();
    await first.handle.sleep();
    await until("the Sandbox is Suspended and its pod gone", () => {
      return getObject(SANDBOX, name)?.spec.operatingMode === "Suspended" && !getObject("pods", name);
    });
    assert.ok(first.claim(), "the claim stays");
    assert.ok(getObject("persistentvolumeclaims", `workspace-${name}`), "the workspace volume stays");
  });

  test("the next action wakes it: the same sandbox, resumed, with the workspace kept", async () => {
    // An action that does not use the sandbox: the wake itself resumes it.
    assert.equal(await first.handle.sandboxId(), first.sandboxId, "the same sandbox");
    await until("onWake resumes the sandbox", () => getObject("pods", first.sandboxName())?.status.phase === "Running");
    assert.equal(await first.handle.readFile("notes.txt"), "kept\n", "written before the sleep, read after it");
    const pod = getObject("pods", first.sandboxName());
    assert.notEqual(pod.metadata.uid, first.podUid, "in a new pod");
    assert.equal(getObject(SANDBOX, first.sandboxName()).spec.operatingMode, "Running");
    const lost = await first.handle.exec("test -e /tmp/lost.txt");
    assert.equal(lost.exitCode, 1, "outside the volume, nothing survives a sleep");
  });

  let second;

  test("a second actor gets a sandbox of its own", async () => {
    second = await actorOf("second");
    assert.equal(second.result.exitCode, 0);
    assert.notEqual(second.sandboxId, first.sandboxId);
    assert.notEqual(second.sandboxName(), first.sandboxName());
    assert.notEqual(await second.handle.resolve(), await first.handle.resolve(), "two actors");
    await second.handle.exec("echo second > notes.txt");
    assert.equal(await first.handle.readFile("notes.txt"), "kept\n", "the first actor's workspace is its own");
  });

  test("RivetKit's destroy deletes the sandbox: no claim, Sandbox, pod or volume left", async () => {
    for (const actor of [first, second]) {
      const name = actor.sandboxName();
      await actor.handle.destroy();
      await until(`nothing is left of ${actor.sandboxId}`, () => !actor.claim() && leftovers(name).length === 0);
    }
  });
});
