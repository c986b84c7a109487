// usage() against the local control plane, whose real node gives each pod its
// own cgroup v1 under runc, and gVisor's cgroupfs of its own under gVisor
// (dev/cluster/README.md): the pod spec's limits read back as limits, and
// memory held, CPU burnt and bytes written to cwd show up. The parsers and the
// cgroup v2 layout are tested on fixtures in core/src/usage.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { directSandbox, getObject, gvisor, kubectl, skip } from "./cluster.mjs";
import { openSandbox, provider, scratchDir, sh, withSandbox } from "./sandbox-fixture.mjs";

/** A Kubernetes quantity ("2Gi", "512M", "1500m", "2") as a number. */
function quantity(q) {
  const m = /^([0-9.]+)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$/.exec(String(q));
  assert.ok(m, `quantity ${q}`);
  const unit = { m: 1e-3, k: 1e3, Ki: 2 ** 10, M: 1e6, Mi: 2 ** 20, G: 1e9, Gi: 2 ** 30, T: 1e12, Ti: 2 ** 40 }[m[2]] ?? 1;
  return Number(m[1]) * unit;
}

describe("usage", { skip, timeout: 600_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let box;
  let sandbox;
  let dir;
  before(async () => {
    box = await openSandbox("usage");
    sandbox = box.sandbox;
    dir = await scratchDir(sandbox, "usage");
  });
  after(async () => box?.close());

  test("the pod's own cgroup: every field, and the pod spec's limits as limits", async () => {
    const u = await sandbox.usage();
    console.log("usage:", JSON.stringify(u));
    assert.equal(u.source, "cgroup1", "this node runs cgroup v1 (and gVisor shows v1)");
    for (const k of ["timestamp", "cpuSeconds", "memoryBytes", "memoryWorkingSetBytes", "pids", "diskBytes", "diskTotalBytes"]) {
      assert.ok(Number.isFinite(u[k]) && u[k] >= 0, `${k}: ${u[k]}`);
    }
    // gVisor has no memory.stat: the working set is all of it.
    if (gvisor) assert.equal(u.memoryWorkingSetBytes, u.memoryBytes);
    assert.ok(!("cpuPercent" in u), "no cpuPercent without sampleMs");
    assert.ok(u.memoryWorkingSetBytes <= u.memoryBytes);
    assert.ok(u.pids >= 1 && u.pids < 100, `pids ${u.pids}: this pod's tasks, not the node's`);
    assert.ok(u.diskBytes <= u.diskTotalBytes);
    // The limits of the pod's spec (as the API server stored it, LimitRange defaults included).
    const pod = getObject("pod", (await sh(sandbox, "hostname")).trim());
    const limits = pod.spec.containers[0].resources?.limits ?? {};
    assert.equal(u.memoryLimitBytes, limits.memory === undefined ? null : quantity(limits.memory));
    assert.equal(u.cpuLimitCores, limits.cpu === undefined ? null : quantity(limits.cpu));
    // The kubelet's podPidsLimit (4096 here) is set on the pod's cgroup, a
    // parent the container does not see (runc mounts the container's own):
    // the container's cgroup has no limit of its own.
    assert.equal(u.pidsLimit, null);
    // gVisor counts no OOM kills (no memory.oom_control).
    assert.equal(u.oomKills, gvisor ? null : 0);
  });

  test("a process holding 200 MB raises memoryBytes and the working set by as much", async () => {
    const before = await sandbox.usage();
    // tail keeps a line that never ends: all 200 MB, held while sleep keeps the pipe open.
    const p = await sandbox.spawn(`{ head -c 200000000 /dev/zero; echo held >&2; exec sleep 600; } | tail`);
    const held = new AbortController();
    await p
      .follow({ onOutput: (c) => Buffer.from(c.data).toString().includes("held") && held.abort(), signal: held.signal })
      .catch((e) => assert.equal(e.code, "aborted", e.message));
    const during = await sandbox.usage();
    await p.kill();
    const grew = during.memoryBytes - before.memoryBytes;
    const ws = during.memoryWorkingSetBytes - before.memoryWorkingSetBytes;
    console.log(`memoryBytes +${grew}, working set +${ws}`);
    assert.ok(grew >= 190e6, `memoryBytes grew by ${grew}`);
    assert.ok(ws >= 190e6, `working set grew by ${ws}`);
  });

  test("2 s of CPU raise cpuSeconds by as much; a busy loop shows in cpuPercent", { timeout: 300_000 }, async () => {
    const before = await sandbox.usage();
    // Busy until this shell itself has used 200 ticks (2 s) of CPU: the
    // same work however loaded the machine is.
    // (Its own `sh -c`: in an exec, `$$` is the provider's wrapper.)
    await sh(sandbox, `sh -c 'while :; do read -r s </proc/$$/stat; set -- $s; [ $((\${14}+\${15})) -ge 200 ] && break; done'`);
    const burnt = (await sandbox.usage()).cpuSeconds - before.cpuSeconds;
    console.log(`cpuSeconds +${burnt.toFixed(3)}`);
    assert.ok(burnt >= 1.5, `cpuSeconds grew by ${burnt}`);

    const p = await sandbox.spawn("while :; do :; done");
    const sampled = await sandbox.usage({ sampleMs: 1000 });
    await p.kill();
    console.log(`cpuPercent over 1 s with one busy loop: ${sampled.cpuPercent?.toFixed(1)} (limit ${sampled.cpuLimitCores})`);
    // However loaded the machine, a busy loop gets some of a second of CPU; a
    // broken sample reads 0.
    assert.ok(sampled.cpuPercent > 1, `cpuPercent ${sampled.cpuPercent}`);
    // At most every core of the machine busy (no CPU limit: % of one core).
    assert.ok(sampled.cpuPercent <= 100 * (sampled.cpuLimitCores ?? 64) * 1.1, `cpuPercent ${sampled.cpuPercent}`);
  });

  test("100 MB written to cwd raise diskBytes", async () => {
    const before = await sandbox.usage();
    await sh(sandbox, "dd if=/dev/zero of=disk.bin bs=1M count=100 conv=fsync 2>/dev/null", { cwd: dir });
    const during = await sandbox.usage();
    await sandbox.remove(`${dir}/disk.bin`);
    // The filesystem is the node's, shared with whatever else runs there.
    const grew = during.diskBytes - before.diskBytes;
    console.log(`diskBytes +${grew} (filesystem of ${during.diskTotalBytes} bytes)`);
    assert.ok(grew >= 90e6, `diskBytes grew by ${grew}`);
  });

  test("every bad sampleMs or options is invalid_request before anything runs", async () => {
    for (const sampleMs of [-1, 0, 1.5, 10_001, 1e9, NaN, Infinity, -Infinity, 2 ** 53, "1000", true, {}, [], 10n]) {
      await assert.rejects(sandbox.usage({ sampleMs }), (e) => e.code === "invalid_request", `sampleMs ${String(sampleMs)}`);
    }
    for (const options of [0, "x", true, 10n]) {
      await assert.rejects(sandbox.usage(options), (e) => e.code === "invalid_request", `options ${String(options)}`);
    }
    const t0 = performance.now();
    const u = await sandbox.usage({ sampleMs: 1 });
    console.log(`usage({ sampleMs: 1 }) took ${(performance.now() - t0).toFixed(0)} ms`);
    assert.equal(typeof u.cpuPercent, "number");
  });

  test("the container's memory limit kills a process that goes past it, and usage() counts the kill", { skip: gvisor && "gVisor ends the whole sandbox (next test)" }, async () => {
    const { p } = provider({ sandbox: directSandbox({ resources: { memory: "64Mi" } }), suspend: "none", cwd: "/tmp" });
    await withSandbox(p, "oom", async (ctx, id) => {
      const box = await p.connect(ctx, id);
      const before = await box.usage();
      assert.equal(before.memoryLimitBytes, 64 * 1024 * 1024);
      assert.equal(before.oomKills, 0);
      // tail holds the line that never ends: 200 MB, past the 64 MiB limit.
      const r = await box.exec("head -c 200000000 /dev/zero | tail > /dev/null; echo survived");
      assert.equal(r.stdout, "survived\n", "the shell outside the killed pipeline lives on");
      const after = await box.usage();
      console.log(`oomKills ${before.oomKills} -> ${after.oomKills}`);
      assert.ok(after.oomKills >= 1, `oomKills ${after.oomKills}`);
      assert.ok(after.memoryBytes <= after.memoryLimitBytes);
    });
  });

  test("gVisor: going past the memory limit ends the whole sandbox, and its container comes back", { skip: !gvisor && "runc kills one process (the test before)" }, async () => {
    const { p } = provider({ sandbox: directSandbox({ resources: { memory: "64Mi" } }), suspend: "none", cwd: "/tmp" });
    await withSandbox(p, "oom", async (ctx, id) => {
      const box = await p.connect(ctx, id);
      const before = await box.usage();
      assert.equal(before.memoryLimitBytes, 64 * 1024 * 1024);
      assert.equal(before.oomKills, null);
      const pod = (await sh(box, "hostname")).trim();
      // The exec ends with the sandbox, however it is reported.
      const r = await box.exec("head -c 200000000 /dev/zero | tail > /dev/null; echo survived").catch((e) => ({ error: e.code }));
      console.log("past the limit under gVisor:", JSON.stringify(r));
      assert.notEqual(r.stdout, "survived\n", "the sandbox went on past its memory limit");
      // The kubelet restarts the container: wait for that, then calls work again.
      kubectl("wait", "--for=jsonpath={.status.containerStatuses[0].restartCount}=1", `pod/${pod}`, "--timeout=120s");
      kubectl("wait", "--for=condition=Ready", `pod/${pod}`, "--timeout=120s");
      const after = await box.exec("echo back");
      assert.equal(after.stdout, "back\n");
    });
  });
});
