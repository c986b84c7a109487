// The addon's background work has an owner: a task handle that nothing
// holds any more stops its work (an exec's process tree is killed, a follow
// ends), and a provider that nothing holds any more, with its sandboxes and
// handles, ends what is left. The public API always awaits its handles, so
// these tests hold the native classes directly and drop them; V8's
// collector runs their Rust drop.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { skip } from "./cluster.mjs";
import { OPTIONS, openSandbox, scratchDir, sh, waitGone } from "./sandbox-fixture.mjs";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc");
const native = createRequire(import.meta.url)("../native.cjs");

/**
 * Collects garbage until `done()` holds: napi runs a class's finalizer (the
 * Rust drop) after the collection that found it unreachable, on a later turn.
 */
async function collectUntil(done) {
  while (!done()) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe("task ownership", { skip, timeout: 300_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let box;
  let dir;
  before(async () => {
    box = await openSandbox("tasks");
    dir = await scratchDir(box.sandbox, "tasks");
  });
  after(async () => box?.close());

  /** Starts `sleep 600` through `nativeSandbox` without awaiting it; resolves its pid once it runs. */
  async function startSleep(nativeSandbox, name) {
    const handle = nativeSandbox.startExec(`sleep 600 & echo $! > ${name}.tmp && mv ${name}.tmp ${name}; wait`, { cwd: dir }, null);
    const pid = (await sh(box.sandbox, `until [ -e ${name} ]; do sleep 0.1; done; cat ${name}`, { cwd: dir })).trim();
    assert.match(pid, /^\d+$/);
    return { handle, pid };
  }

  test("an exec handle dropped without wait() kills its command", async () => {
    const provider = new native.NativeProvider(OPTIONS, null);
    const nativeSandbox = await provider.connect(box.actor, box.id);
    let { handle, pid } = await startSleep(nativeSandbox, "dropped-exec");
    assert.equal(provider.backgroundTasks(), 1);
    assert.ok(handle);
    handle = undefined;
    await collectUntil(() => provider.backgroundTasks() === 0);
    await waitGone(box.sandbox, pid);
  });

  test("a follow handle dropped without wait() ends the follow; the process goes on", async () => {
    const provider = new native.NativeProvider(OPTIONS, null);
    const nativeSandbox = await provider.connect(box.actor, box.id);
    const proc = await nativeSandbox.spawn("sleep 600", {}, new native.NativeCancel());
    let follow = proc.startFollow(undefined, () => {});
    assert.equal(provider.backgroundTasks(), 1);
    assert.ok(follow);
    follow = undefined;
    await collectUntil(() => provider.backgroundTasks() === 0);
    const polled = await proc.poll(undefined, new native.NativeCancel());
    assert.equal(polled.exit ?? null, null, "the process still runs");
    await proc.kill(undefined, new native.NativeCancel());
  });

  test("a provider dropped with its sandbox and a running exec's handle kills the command", async () => {
    let provider = new native.NativeProvider(OPTIONS, null);
    let nativeSandbox = await provider.connect(box.actor, box.id);
    let { handle, pid } = await startSleep(nativeSandbox, "dropped-provider");
    let collected = false;
    const registry = new FinalizationRegistry(() => (collected = true));
    registry.register(provider, "provider");
    assert.ok(handle && nativeSandbox);
    provider = nativeSandbox = handle = undefined;
    await collectUntil(() => collected);
    await waitGone(box.sandbox, pid);
  });
});
