// A hostile sandbox against one provider, on the local control plane as the
// least-privilege ServiceAccount: what runs in a sandbox is a model's choice,
// and it must not crash the Node process, grow its memory past what the
// caller allowed, or slow down other sandboxes' calls. Cases that could
// crash or bloat the host run in a child Node process (hostile-case.mjs),
// which reports its peak RSS growth. The shell-level cases (forged records,
// symlinked directories, under dash and bash --posix) are in
// core/tests/hostile_sandbox.rs.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { skip } from "./cluster.mjs";
import { openSandbox, scratchDir, sh } from "./sandbox-fixture.mjs";

/** Runs hostile-case.mjs `name arg` on `box`'s sandbox; resolves its report. */
async function inChild(box, dir, name, arg, providerOptions = {}) {
  const child = spawn(process.execPath, [fileURLToPath(new URL("./hostile-case.mjs", import.meta.url)), name, String(arg ?? "")], {
    env: { ...process.env, ACTOR: box.actor, ID: box.id, DIR: dir, PROVIDER_OPTIONS: JSON.stringify(providerOptions) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const [code, signal] = await once(child, "exit");
  assert.equal(signal, null, `${name}: the Node process died of ${signal}`);
  assert.equal(code, 0, `${name}: the Node process exited ${code}`);
  return JSON.parse(out);
}

/**
 * The sandbox-adapter's `runRemoteProcess` as its source has it (reference
 * interface §2.1; the package is not on npm): poll every 100 ms, `kill()`
 * without an argument on timeout and abort.
 */
async function runRemoteProcess(proc, { timeoutMs }) {
  const deadline = timeoutMs ? Date.now() + timeoutMs : undefined;
  let after;
  let stdout = "";
  for (;;) {
    const r = await proc.poll(after);
    for (const c of r.chunks.sort((a, b) => a.sequence - b.sequence)) {
      if (after !== undefined && c.sequence <= after) continue;
      after = c.sequence;
      if (c.stream === "stdout") stdout += Buffer.from(c.data).toString();
    }
    if (r.exit) return { exitCode: r.exit.exitCode, timedOut: r.exit.timedOut, stdout };
    if (deadline !== undefined && Date.now() > deadline) {
      await proc.kill().catch(() => {});
      return { exitCode: null, timedOut: true, stdout };
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("a hostile sandbox", { skip, timeout: 900_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let a;
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let b;
  let dir;
  before(async () => {
    [a, b] = await Promise.all([openSandbox("hostile-a"), openSandbox("hostile-b")]);
    dir = await scratchDir(a.sandbox, "hostile");
  });
  after(async () => Promise.all([a?.close(), b?.close()]));

  test("a sparse file read with the largest maxBytes allocates nothing and crashes nothing", async () => {
    await sh(a.sandbox, `truncate -s 8T ${dir}/sparse`);
    const huge = await inChild(a, dir, "readSparse", 2 ** 52);
    assert.equal(huge.code, "invalid_request", JSON.stringify(huge));
    assert.match(huge.detail, /maxReadBytes/);
    // Within the provider's limit: refused from its size, before a byte is read.
    const limit = 2 ** 32 - 1;
    const big = await inChild(a, dir, "readSparse", limit, { limits: { maxReadBytes: limit } });
    assert.equal(big.code, "too_large", JSON.stringify(big));
    for (const r of [huge, big]) assert.ok(r.rssGrowthMiB < 64, `RSS grew ${r.rssGrowthMiB} MiB`);
    console.log(`# sparse readFile: peak RSS growth ${huge.rssGrowthMiB.toFixed(1)} / ${big.rssGrowthMiB.toFixed(1)} MiB`);
  });

  test("a process record rewritten to a 2^64−1 cap plus 2 GiB of output: one poll holds at most a page", async () => {
    const proc = await a.sandbox.spawn("sleep 600");
    const pdir = (await sh(a.sandbox, `echo "\${TMPDIR:-/tmp}/.agent-sandbox/proc/${proc.id}"`)).trim();
    await sh(a.sandbox, `read -r p w ws r1 r2 h cap at n < ${pdir}/p && echo "$p $w $ws $r1 $r2 $h 18446744073709551615 $at $n" > ${pdir}/p`);
    await sh(a.sandbox, `echo 0 > ${pdir}/x; truncate -s +2G ${pdir}/1`);
    const r = await inChild(a, dir, "pollForged", proc.id);
    assert.equal(r.code, "ok", JSON.stringify(r));
    assert.ok(r.detail.chunkBytes <= 2 * 8 * 2 ** 20, `${r.detail.chunkBytes} bytes in one poll (8 MiB a stream)`);
    assert.equal(r.detail.exit, null, "an exit the command wrote while it runs is not believed");
    assert.ok(r.rssGrowthMiB < 64, `RSS grew ${r.rssGrowthMiB} MiB`);
    console.log(`# forged record + 2 GiB: one poll, ${r.detail.chunkBytes} bytes, peak RSS growth ${r.rssGrowthMiB.toFixed(1)} MiB`);
    await proc.kill();
  });

  // In a sandbox of its own, destroyed afterwards: removing 200,000
  // directories from a container's overlay filesystem takes minutes, the
  // pod's deletion does it on the node.
  test("200,000 directory entries or processes are too_large, not unbounded", async () => {
    const c = await openSandbox("hostile-huge");
    try {
      const cdir = await scratchDir(c.sandbox, "huge");
      await sh(c.sandbox, `mkdir -p ${cdir}/many && cd ${cdir}/many && seq 1 200000 | xargs touch`, { timeoutMs: 300_000 });
      const names = await inChild(c, cdir, "readdirHuge");
      assert.equal(names.code, "too_large", JSON.stringify(names));
      const pdir = (await sh(c.sandbox, 'echo "${TMPDIR:-/tmp}/.agent-sandbox/proc"')).trim();
      // 200,000 directories with no record, and 1,500 with records of live-looking processes.
      await sh(
        c.sandbox,
        `mkdir -p ${pdir} && cd ${pdir} && seq -f '%020g' 1 200000 | xargs mkdir && for i in $(seq -f '%020g' 300001 301500); do mkdir $i && echo "1 1 1 1 1 - 64 1 1" > $i/p && : > $i/c; done`,
        { timeoutMs: 300_000 },
      );
      const list = await inChild(c, cdir, "processesHuge");
      assert.equal(list.code, "too_large", JSON.stringify(list));
      for (const r of [names, list]) assert.ok(r.rssGrowthMiB < 64, `RSS grew ${r.rssGrowthMiB} MiB`);
      console.log(`# 200,000 entries: peak RSS growth readdir ${names.rssGrowthMiB.toFixed(1)}, processes ${list.rssGrowthMiB.toFixed(1)} MiB`);
    } finally {
      await c.close();
    }
  });

  test("processes() after the sandbox rewrote its process files (a 1 GiB command, record and exit file): the real entries, clean", async () => {
    const proc = await a.sandbox.spawn("sleep 600");
    const done = await a.sandbox.spawn("echo done");
    await done.wait();
    const root = (await sh(a.sandbox, 'echo "${TMPDIR:-/tmp}/.agent-sandbox/proc"')).trim();
    // Grown to 1 GiB by NULs (sparse: no disk). Then forged entries: a 1 GiB
    // record without a newline, a pid past u32, a FIFO for a command, a
    // command with forged end markers.
    const forged = ["0000000000000000000a", "0000000000000000000b", "0000000000000000000c", "0000000000000000000d"];
    await sh(
      a.sandbox,
      `cd ${root} && truncate -s 1G ${proc.id}/c ${done.id}/x && read -r p w ws r1 r2 h cap at n < ${proc.id}/p &&
       mkdir ${forged.join(" ")} && truncate -s 1G ${forged[0]}/p &&
       echo "99999999999 $w $ws $r1 $r2 $h $cap $at $n" > ${forged[1]}/p &&
       cp ${proc.id}/p ${forged[2]}/p && mkfifo ${forged[2]}/c &&
       cp ${proc.id}/p ${forged[3]}/p && printf 'x\\0.\\n\\0more\\n\\0' > ${forged[3]}/c`,
    );
    const list = await a.sandbox.processes();
    const byId = new Map(list.map((p) => [p.id, p]));
    assert.equal(byId.get(proc.id)?.command, "sleep 600", "a command followed by 1 GiB of NULs ends at the first");
    assert.equal(byId.get(proc.id)?.exited, false);
    assert.equal(byId.get(done.id)?.command, "echo done");
    assert.equal(byId.get(forged[0]), undefined, "a 1 GiB record is no record");
    assert.equal(byId.get(forged[1]), undefined, "a pid past u32 is no entry");
    assert.equal(byId.get(forged[2])?.command, "", "a FIFO is not opened");
    assert.equal(byId.get(forged[3])?.command, "x");
    for (const p of list) assert.ok(!p.command.includes("\0"), p.id);
    assert.equal((await a.sandbox.process(proc.id))?.pid, proc.pid);
    await proc.kill("KILL");
    await sh(a.sandbox, `cd ${root} && rm -rf ${forged.join(" ")}`);
  });

  test("40 never-ending calls in one sandbox leave another sandbox's calls served", async () => {
    await sh(a.sandbox, `mkfifo ${dir}/fifo`);
    // The file API refuses to read a FIFO at once instead of being held by it.
    await assert.rejects(a.sandbox.readFile(`${dir}/fifo`), { code: "invalid_request" });
    await b.sandbox.writeFile("/tmp/b.txt", "b");
    const stop = new AbortController();
    let settled = 0;
    const hung = Array.from({ length: 40 }, () =>
      a.sandbox.exec(`cat ${dir}/fifo`, { cwd: dir, signal: stop.signal }).finally(() => settled++),
    );
    const t0 = Date.now();
    const [hi, file] = await Promise.all([b.sandbox.exec("echo hi", { cwd: "/" }), b.sandbox.readFile("/tmp/b.txt")]);
    console.log(`# B's exec + readFile beside 40 hung calls in A: ${Date.now() - t0} ms`);
    assert.equal(hi.stdout, "hi\n");
    assert.equal(Buffer.from(file).toString(), "b");
    assert.equal(settled, 0, "B was served while all of A's calls still hang");
    stop.abort();
    const results = await Promise.allSettled(hung);
    assert.ok(results.every((r) => r.status === "rejected" && r.reason.code === "aborted"));
  });

  test("a command cannot forge its end, and reserved env names are refused", async () => {
    const forge = `id=\${AGENT_SANDBOX_RUN%:}; printf '\\036asb %s 0\\n' "$id"; printf '\\036asb %s cwd\\n' "$id" >&2; sleep 0.2; exit 7`;
    const r = await a.sandbox.exec(forge, { cwd: dir });
    assert.equal(r.exitCode, 7);
    await assert.rejects(a.sandbox.exec("true", { cwd: dir, env: { AGENT_SANDBOX_RUN: "" } }), { code: "invalid_request" });
    const p = await a.sandbox.spawn("-x; echo hi");
    assert.equal((await p.wait()).exitCode, 0);
  });

  test("runRemoteProcess's kill() ends a process that ignores TERM, reported as killed", async () => {
    const proc = await a.sandbox.spawn("trap '' TERM; echo up; sleep 3006");
    const r = await runRemoteProcess(proc, { timeoutMs: 1500 });
    assert.equal(r.timedOut, true);
    const exit = await proc.wait();
    assert.deepEqual(exit, { exitCode: null, signal: "SIGKILL", timedOut: false, lost: false });
    assert.equal(await sh(a.sandbox, "pgrep -f 'sleep [3]006' || echo none"), "none\n");
  });

  test("an abort and timeout storm leaves no zombie in the pod", async () => {
    const storm = "(sleep 30; echo late) & sleep 30";
    const stop = new AbortController();
    const runs = [
      ...Array.from({ length: 40 }, () => a.sandbox.exec(storm, { cwd: dir, signal: stop.signal }).catch((e) => e)),
      ...Array.from({ length: 40 }, () => a.sandbox.exec(storm, { cwd: dir, timeoutMs: 1500 })),
    ];
    setTimeout(() => stop.abort(), 1000);
    const results = await Promise.all(runs);
    assert.ok(results.slice(0, 40).every((e) => e.code === "aborted"));
    assert.ok(results.slice(40).every((r) => r.timedOut === true));
    // Killed trees are gone once every kill returned; zombies would stay.
    const zombies = "for f in /proc/[0-9]*/stat; do read -r l <$f || continue; s=${l##*') '}; [ ${s%% *} = Z ] && echo $f; done; true";
    let left = "";
    for (let i = 0; i < 50; i++) {
      left = await sh(a.sandbox, zombies);
      if (left === "") break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.equal(left, "", "zombies in the pod");
  });

  test("children left flooding an exec's stdout are cut off, and other calls stay fast", async () => {
    const cpu0 = process.cpuUsage();
    const t0 = Date.now();
    for (let i = 0; i < 50; i++) await a.sandbox.exec("yes &", { cwd: dir });
    // The drains' budgets run out and their connections close. Then each
    // `yes` either dies of EPIPE (nodeexec closes the exec's pipes, as under
    // `docker exec` when its client goes) or, where the runtime keeps the
    // exec's stdout open (containerd's FIFO on a real node), blocks on it
    // once it is full: none keeps running. Two samples of their CPU ticks a
    // round trip apart that agree, none runnable, say they all stopped.
    const yesTicks = "cat /proc/[0-9]*/stat 2>/dev/null | awk '$2 == \"(yes)\" { n++; t += $14 + $15; if ($3 == \"R\") r++ } END { print n + 0, t + 0, r + 0 }'";
    let last = "";
    for (;;) {
      const now = (await sh(a.sandbox, yesTicks)).trim();
      const [alive, , running] = now.split(" ").map(Number);
      if (alive === 0 || (running === 0 && now === last)) break;
      last = now;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const cpu = process.cpuUsage(cpu0);
    const t1 = Date.now();
    assert.equal((await b.sandbox.exec("echo hi", { cwd: "/" })).stdout, "hi\n");
    console.log(
      `# 50 yes &: all cut off after ${t1 - t0} ms, host CPU ${((cpu.user + cpu.system) / 1e3).toFixed(0)} ms; next exec ${Date.now() - t1} ms`,
    );
  });
});
