// Processes as agents run them, against the local control plane as the
// least-privilege ServiceAccount: exec returning when its command exits while
// a background child holds the pipes, servers started with `&`, spawned
// processes followed from one Node process and resumed from another after a
// SIGKILL, wait after the fact, stdin, kill of the whole tree, the output
// cap, listing after a provider restart, the orphan sweep, exec({ reattach })
// across an API server restart, and suspend ending every process.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, apiserver, getObject, namespace, objectName, serverPort as port, skip } from "./cluster.mjs";
import { everyEnvName, printEnvCommand, printedEnv } from "./env-names.mjs";
import { openSandbox, sandboxChild, scratchDir, sh, waitGone } from "./sandbox-fixture.mjs";

/** Numbered lines 1..n, as `seq` prints them. */
const numbered = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => `${from + i}\n`).join("");
const text = (chunks, stream) => chunks.filter((c) => c.stream === stream).map((c) => Buffer.from(c.data).toString()).join("");

describe("processes", { skip, timeout: 900_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let box;
  let sandbox;
  before(async () => {
    box = await openSandbox("proc");
    sandbox = box.sandbox;
    current = box;
  });
  after(async () => box?.close());

  test("exec returns when its command exits, while a background child still holds stdout", async () => {
    // The child never ends by itself: an exec that waited for it would hang
    // (the suite's timeout), not merely be slow.
    const r = await sandbox.exec("sleep 3600 & echo $! > /tmp/sleep.pid; echo started", { cwd: "/" });
    assert.deepEqual(r, { exitCode: 0, timedOut: false, stdout: "started\n", stderr: "", truncated: false });
    // The child was not killed by the return.
    assert.equal(await sh(sandbox, 'kill -0 "$(cat /tmp/sleep.pid)" && echo alive'), "alive\n");
    await sh(sandbox, 'kill "$(cat /tmp/sleep.pid)"');
  });

  test("a server started with a plain `&` keeps serving after the exec returned", async () => {
    const p = port();
    const r = await sandbox.exec(`python3 -m http.server ${p} --bind 127.0.0.1 & echo $!`, { cwd: "/tmp", timeoutMs: 10_000 });
    assert.equal(r.exitCode, 0);
    const pid = r.stdout.trim();
    // Every request makes the server log to the stderr it inherited from the
    // exec: it must keep working (no EPIPE) once the exec has returned.
    const get = `python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:${p}/').status)"`;
    await sh(sandbox, `for i in $(seq 1 50); do ${get} >/dev/null 2>&1 && break; sleep 0.1; done`);
    for (let i = 0; i < 3; i++) assert.equal(await sh(sandbox, get), "200\n");
    await sh(sandbox, `kill ${pid}`);
  });

  test("the Pi-style `nohup … > log 2>&1 &` returns at once and the server runs", async () => {
    const p = port();
    const dir = await scratchDir(sandbox, "nohup");
    // The server never ends: returning at all is returning at once.
    const r = await sandbox.exec(`nohup python3 -m http.server ${p} --bind 127.0.0.1 > server.log 2>&1 & echo "pid $!"`, { cwd: dir });
    assert.match(r.stdout, /^pid \d+\n$/);
    const get = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${p}/').status)"`;
    await sh(sandbox, `for i in $(seq 1 50); do ${get} >/dev/null 2>&1 && break; sleep 0.1; done`);
    assert.equal(await sh(sandbox, get), "200\n");
    assert.match(await sh(sandbox, "cat server.log", { cwd: dir }), /GET \/ HTTP/);
    await sh(sandbox, `kill ${r.stdout.split(" ")[1]}`);
  });

  test("spawn: follow until the server says it listens, call it, kill it (the README's example)", async () => {
    const p = port();
    const server = await sandbox.spawn(`exec python3 -u -m http.server ${p} --bind 127.0.0.1`, { cwd: "/tmp" });
    assert.match(server.id, /^[0-9a-f]{20}$/);
    const ac = new AbortController();
    let seen = "";
    await assert.rejects(
      server.follow({
        signal: ac.signal,
        onOutput: (c) => {
          seen += Buffer.from(c.data).toString();
          if (/Serving HTTP/.test(seen)) ac.abort();
        },
      }),
      { name: "AbortError" },
    );
    const get = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${p}/').status)"`;
    assert.equal(await sh(sandbox, get), "200\n");
    await server.kill();
    const exit = await server.wait();
    assert.deepEqual(exit, { exitCode: null, signal: "SIGTERM", timedOut: false, lost: false });
    const poll = await server.poll();
    assert.match(text(poll.chunks, "stderr"), /"GET \/ HTTP\/1.1" 200/);
    assert.deepEqual(poll.exit, exit);
  });

  test("a 30 s process followed by Node process A, SIGKILLed part way, then by B from A's last sequence: no gap, no duplicate", async () => {
    const proc = await sandbox.spawn("for i in $(seq 1 300); do echo $i; echo err$i >&2; sleep 0.1; done; exit 7");
    const a = follower(proc.id, undefined);
    const lines = [];
    for await (const line of a.lines) {
      lines.push(JSON.parse(line));
      if (lines.length === 40) break;
    }
    a.child.kill("SIGKILL");
    await once(a.child, "exit");
    const last = lines.at(-1).sequence;
    const b = follower(proc.id, last);
    const rest = [];
    for await (const line of b.lines) rest.push(JSON.parse(line));
    const end = rest.pop();
    assert.deepEqual(end.exit, { exitCode: 7, signal: null, timedOut: false, lost: false, truncated: false });
    const all = [...lines, ...rest];
    assert.equal(text(all, "stdout"), numbered(1, 300));
    assert.equal(text(all, "stderr"), Array.from({ length: 300 }, (_, i) => `err${i + 1}\n`).join(""));
    assert.ok(all.every((c, i) => i === 0 || c.sequence > all[i - 1].sequence), "sequences increase");
  });

  test("wait() and poll() on a process that exited while nobody was connected", async () => {
    const proc = await sandbox.spawn("echo done; exit 3");
    await new Promise((r) => setTimeout(r, 1000));
    const again = await (await box.connect()).process(proc.id);
    assert.ok(again, "found from another connection");
    assert.deepEqual(await again.wait(), { exitCode: 3, signal: null, timedOut: false, lost: false });
    const poll = await again.poll();
    assert.equal(text(poll.chunks, "stdout"), "done\n");
    assert.deepEqual(poll.exit, { exitCode: 3, signal: null, timedOut: false, lost: false });
    // Past the last chunk there is nothing more, and the exit.
    const after = await again.poll(poll.chunks.at(-1).sequence);
    assert.deepEqual([after.chunks, after.exit?.exitCode], [[], 3]);
  });

  test("kill of a spawned process kills its grandchildren too: their marker never appears", async () => {
    const dir = await scratchDir(sandbox, "killtree");
    const proc = await sandbox.spawn(
      "(sleep 30; touch child) & echo $! >child.pid; (sh -c 'echo $$ >orphan.tmp; mv orphan.tmp orphan.pid; sleep 30; touch orphan' &); sleep 100",
      { cwd: dir },
    );
    // Killed once both run (their pids written), not after a time.
    await sh(sandbox, "i=0; until test -e child.pid && test -e orphan.pid; do i=$((i+1)); [ $i -lt 1200 ] || exit 1; sleep 0.1; done", { cwd: dir });
    await proc.kill("TERM");
    assert.deepEqual(await proc.wait(), { exitCode: null, signal: "SIGTERM", timedOut: false, lost: false });
    // Gone either way: killed, or after writing their marker.
    await waitGone(sandbox, "$(cat child.pid orphan.pid)", { cwd: dir });
    assert.equal((await sandbox.exec("ls", { cwd: dir })).stdout, "child.pid\norphan.pid\n");
  });

  test("stdin: cat echoes what is written, closeStdin gives it EOF", async () => {
    const proc = await sandbox.spawn("cat; echo eof", { stdin: true });
    await proc.writeStdin("one\n");
    await proc.writeStdin(new Uint8Array([0, 255, 10]));
    const seen = [];
    const following = proc.follow({ onOutput: (c) => seen.push(c) });
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await proc.poll()).exit, undefined, "still reading");
    await proc.closeStdin();
    assert.deepEqual(await following, { exitCode: 0, signal: null, timedOut: false, lost: false, truncated: false });
    assert.deepEqual([...Buffer.concat(seen.map((c) => c.data))], [...Buffer.from("one\n"), 0, 255, 10, ...Buffer.from("eof\n")]);
    await assert.rejects(proc.writeStdin("late"), { code: "invalid_state" });
    const noStdin = await sandbox.spawn("true");
    await assert.rejects(noStdin.writeStdin("x"), (e) => e.code === "invalid_state" && /stdin: true/.test(e.message));
  });

  test("output past maxOutputBytes is dropped and reported", async () => {
    const proc = await sandbox.spawn("head -c 3000000 /dev/zero | tr '\\0' x; echo tail >&2", { maxOutputBytes: 100_000 });
    const end = await proc.follow();
    assert.deepEqual(end, { exitCode: 0, signal: null, timedOut: false, lost: false, truncated: true });
    const poll = await proc.poll();
    assert.equal(text(poll.chunks, "stdout"), "x".repeat(100_000));
    assert.equal(text(poll.chunks, "stderr"), "tail\n");
    assert.equal(poll.truncated, true);
  });

  test("every env name a caller may set reaches the spawned command and its children exactly (a `J` or `d` chose what ran)", async () => {
    const env = everyEnvName();
    const proc = await sandbox.spawn(printEnvCommand(env), { env });
    // follow, not wait then poll: it ends once every chunk is in.
    const chunks = [];
    assert.equal((await proc.follow({ onOutput: (c) => chunks.push(c) })).exitCode, 0);
    assert.equal(text(chunks, "stderr"), "");
    assert.equal(text(chunks, "stdout"), printedEnv(env));
  });

  test("the timeout is enforced in the sandbox", async () => {
    const proc = await sandbox.spawn("echo started; sleep 100", { timeoutMs: 500 });
    assert.deepEqual(await proc.wait(), { exitCode: null, signal: null, timedOut: true, lost: false });
    assert.equal(text((await proc.poll()).chunks, "stdout"), "started\n");
  });

  test("processes() lists from a new provider object; the orphan sweep spares spawned processes and kills plain execs", async () => {
    const dir = await scratchDir(sandbox, "sweep");
    const kept = await sandbox.spawn("while :; do touch spawned; sleep 0.2; done", { cwd: dir });
    // A plain exec left by a dead host process (see exec.test.mjs's orphan test).
    const child = sandboxChild(box, ["exec", "(while :; do touch plain; sleep 0.2; done) & echo $! >plain.pid; echo started; sleep 100"], dir);
    const [line] = await once(child.stdout, "data");
    assert.equal(String(line).trim(), "started");
    child.kill("SIGKILL");
    await once(child, "exit");

    // A new connection (as after a provider restart) sweeps.
    const fresh = await box.connect();
    const list = await fresh.processes();
    const entry = list.find((p) => p.id === kept.id);
    assert.ok(entry, `listed: ${JSON.stringify(list.map((p) => p.id))}`);
    assert.deepEqual([entry.command, entry.exited, entry.exitCode], ["while :; do touch spawned; sleep 0.2; done", false, null]);
    // Events, not a time a slow machine could outlast: the plain exec's loop
    // is gone (waitGone fails after 120 s), the spawned one touches again.
    await waitGone(fresh, "$(cat plain.pid)", { cwd: dir });
    assert.equal(await sh(fresh, "rm -f spawned; until test -e spawned; do sleep 0.1; done; echo spawned-alive", { cwd: dir }), "spawned-alive\n");
    await kept.kill("KILL");
    assert.deepEqual(await kept.wait(), { exitCode: null, signal: "SIGKILL", timedOut: false, lost: false });
    assert.equal(await fresh.process("00000000000000000000"), undefined);
    assert.equal(await fresh.process("not an id"), undefined);
  });

  test("bad arguments are rejected with invalid_request, starting nothing", async () => {
    const dir = await scratchDir(sandbox, "badspawn");
    for (const [command, options] of [
      [42, {}],
      ["touch ran", { env: { "BAD-NAME": "x" } }],
      ["touch ran", { maxOutputBytes: 2 ** 27 }],
      ["touch ran", { timeoutMs: -1 }],
      ["touch ran", { timeoutMs: 1e300 }],
      ["touch ran", { stdin: 5 }],
    ]) {
      await assert.rejects(sandbox.spawn(command, { cwd: dir, ...options }), { code: "invalid_request" }, JSON.stringify([command, options]));
    }
    await assert.rejects(sandbox.spawn("touch ran", []), { code: "invalid_request" });
    await assert.rejects(sandbox.spawn("touch ran", { cwd: `${dir}/missing` }), { code: "not_found" });
    assert.deepEqual(await sandbox.readdir(dir), []);
    const p = await sandbox.spawn("true");
    await assert.rejects(p.poll(-1), { code: "invalid_request" });
    await assert.rejects(p.poll(1.5), { code: "invalid_request" });
    await assert.rejects(p.kill("NOPE"), { code: "invalid_request" });
    await assert.rejects(p.follow({ onOutput: "x" }), { code: "invalid_request" });
  });
});

/** A Node process following `id` from `after`: one JSON line per chunk, then one for the end. */
function follower(id, afterSequence) {
  const child = sandboxChild(current, ["follow", id, ...(afterSequence === undefined ? [] : [String(afterSequence)])]);
  return { child, lines: createInterface({ input: child.stdout }) };
}

/** The suite's sandbox, for the follower children. */
let current;

describe("exec({ reattach: true })", { skip, timeout: 300_000 }, () => {
  test("the same result as a plain exec, also across an API server restart in the middle", async () => {
    const box = await openSandbox("reattach");
    try {
      const command = "for i in $(seq 1 60); do echo $i; echo e$i >&2; sleep 0.1; done; exit 4";
      const plain = await box.sandbox.exec(command, { cwd: "/" });
      let streamed = "";
      let stopped = false;
      const run = box.sandbox.exec(command, {
        cwd: "/",
        reattach: true,
        onStdout: (c) => {
          streamed += Buffer.from(c).toString();
          if (!stopped && streamed.includes("10\n")) {
            stopped = true;
            apiserver("stop");
            setTimeout(() => apiserver("start"), 2000);
          }
        },
      });
      const r = await run;
      assert.ok(stopped, "the API server was stopped in the middle");
      assert.deepEqual(r, plain);
      assert.equal(streamed, numbered(1, 60));
    } finally {
      apiserver("start");
      await box.close();
    }
  });
});

describe("processes and suspend", { skip, timeout: 300_000 }, () => {
  test("suspend ends every process: handles report lost, the id is unknown after resume", async () => {
    const p = agentSandboxProvider({ namespace, warmPool: "pool-workspace", readyTimeoutMs: 120_000 });
    const ctx = { actorId: actorId("proc-suspend"), client: () => undefined };
    const id = await p.create(ctx);
    try {
      const sandbox = await p.connect(ctx, id);
      const podOf = () => {
        const claim = getObject("sandboxclaims.extensions.agents.x-k8s.io", objectName(id));
        const pod = getObject("pods", claim.status.sandbox.name);
        return `${pod?.metadata.name} ${pod?.metadata.uid} ${pod?.metadata.deletionTimestamp ?? ""}`;
      };
      const before = podOf();
      const proc = await sandbox.spawn("sleep 600");
      const waiting = proc.wait();
      await p.suspend(ctx, id);
      assert.deepEqual(await waiting, { exitCode: null, signal: null, timedOut: false, lost: true });
      const resumed = await p.connect(ctx, id);
      const now = podOf();
      assert.notEqual(now, before, "the resumed sandbox has a new pod");
      assert.equal(await resumed.process(proc.id), undefined, `pod before ${before}, after ${now}`);
      assert.deepEqual(await proc.wait(), { exitCode: null, signal: null, timedOut: false, lost: true });
      assert.deepEqual((await proc.poll()).exit, { exitCode: null, signal: null, timedOut: false, lost: true });
      assert.deepEqual(await resumed.processes(), []);
    } finally {
      await p.destroy(ctx, id);
    }
  });
});
