// Faults between the provider and the API server, through a loopback TCP
// proxy of our own (fault-proxy.mjs): a connection cut mid-exec, a
// connection that stalls with its socket open, and a quiet command on a
// healthy connection (the API server answers the provider's pings).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { skip } from "./cluster.mjs";
import { apiServerAddress, faultProxy, kubeconfigThrough } from "./fault-proxy.mjs";
import { openSandbox, scratchDir, waitGone } from "./sandbox-fixture.mjs";

/** Starts `touch alive` every 0.2 s in the background and sleeps; resolves once it runs. */
function startToucher(sandbox, dir) {
  let started;
  const running = new Promise((resolve) => (started = resolve));
  const run = sandbox.exec("(while :; do touch alive; sleep 0.2; done) & echo $! >toucher.pid; echo started; sleep 3600", {
    cwd: dir,
    onData: () => started(),
  });
  return { run, running };
}

/**
 * True once the toucher is gone (killed), false if it still runs after
 * 120 s: waits for the pid, not for a time a slow machine could outlast.
 */
async function toucherDead(sandbox, dir) {
  try {
    await waitGone(sandbox, "$(cat toucher.pid)", { cwd: dir });
    return true;
  } catch {
    return false;
  }
}

describe("faults between the provider and the API server", { skip, timeout: 300_000 }, () => {
  let proxy;
  let box;
  before(async () => {
    const { host, port } = apiServerAddress();
    proxy = await faultProxy(host, port);
    box = await openSandbox("faults", { kubeConfig: kubeconfigThrough(proxy) });
  });
  after(async () => {
    await box?.close();
    await proxy?.close();
  });

  test("the provider's traffic goes through the proxy", async () => {
    assert.ok((await proxy.accepted()) > 0, "no connection went through the proxy");
  });

  test("a connection cut mid-exec fails the exec with connection_lost at once, and the command is killed", async () => {
    const dir = await scratchDir(box.sandbox, "cut");
    const { run, running } = startToucher(box.sandbox, dir);
    await running;
    const t0 = Date.now();
    await proxy.cut();
    // A reset is seen as one, not waited out until the stall detection (or
    // TCP keepalive) notices: the message says which.
    await assert.rejects(run, (e) => e.code === "connection_lost" && /exec connection/.test(e.message) && !/stalled/.test(e.message));
    console.log(`# cut detected in ${Date.now() - t0} ms`);
    // The engine's kill went through a new connection: no connect needed.
    assert.ok(await toucherDead(box.sandbox, dir), "the command outlived its failed exec");
  });

  test("a connection stalled with its socket open is connection_lost within the stall bound", async () => {
    const dir = await scratchDir(box.sandbox, "stall");
    const { run, running } = startToucher(box.sandbox, dir);
    await running;
    const t0 = Date.now();
    await proxy.stall();
    await assert.rejects(run, (e) => e.code === "connection_lost" && /stalled/.test(e.message));
    const elapsed = Date.now() - t0;
    console.log(`# stall detected in ${elapsed} ms`);
    // 15 s of silence at least (a lower bound: load only adds to it); a stall
    // that is never detected meets the suite's timeout.
    assert.ok(elapsed >= 10_000, `rejected after ${elapsed} ms`);
    // The stalled connections are dead to the provider; end them as the
    // middlebox eventually would, then the next connect sweeps the command
    // if the engine's kill could not reach it.
    await proxy.cut();
    const sandbox = await box.connect();
    assert.ok(await toucherDead(sandbox, dir), "the command outlived its stalled exec");
  });

  test("a command quiet for longer than the stall time completes: the API server answers pings", async () => {
    const r = await box.sandbox.exec("sleep 20; echo done", { cwd: "/" });
    assert.deepEqual([r.exitCode, r.stdout], [0, "done\n"]);
  });
});
