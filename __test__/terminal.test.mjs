// sandbox.terminal() against the real control plane: a TTY exec through
// the API server to the node (nodeexec serves it as a kubelet's runtime
// does), the wrapper's handshake, resize, Ctrl-C, exit status, close,
// a throwing onData, bad arguments, the concurrency cap, and a connection
// cut by the fault proxy.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { skip } from "./cluster.mjs";
import { apiServerAddress, faultProxy, kubeconfigThrough } from "./fault-proxy.mjs";
import { everyEnvName, printEnvCommand, printedEnv } from "./env-names.mjs";
import { openSandbox, sh, waitGone } from "./sandbox-fixture.mjs";

/**
 * Opens a terminal whose output is collected; `until(re)` resolves with the
 * match once the output so far matches (no clock: only output settles it).
 */
async function open(sandbox, options = {}) {
  let out = "";
  /** @type {{ re: RegExp, resolve: (m: RegExpMatchArray) => void }[]} */
  let waiting = [];
  const check = () => {
    waiting = waiting.filter(({ re, resolve }) => {
      const m = re.exec(out);
      if (m) resolve(m);
      return !m;
    });
  };
  const t = await sandbox.terminal({
    onData: (chunk) => {
      out += Buffer.from(chunk).toString("utf8");
      check();
    },
    ...options,
  });
  const until = (re) =>
    new Promise((resolve) => {
      waiting.push({ re, resolve });
      check();
    });
  return { t, until, output: () => out };
}

describe("terminals", { skip, timeout: 300_000 }, () => {
  let box;
  before(async () => {
    box = await openSandbox("terminal", { maxConcurrentExecs: 2, maxConcurrentExecsPerSandbox: 2 });
  });
  after(async () => {
    await box?.close();
  });

  test("an interactive sh reads a line written through write; exit 7 resolves { exitCode: 7 }", async () => {
    const t0 = Date.now();
    const { t, until } = await open(box.sandbox, { command: "sh -i" });
    console.log(`# terminal open in ${Date.now() - t0} ms, pid ${t.pid}`);
    assert.ok(Number.isInteger(t.pid) && t.pid > 1);
    await t.write('read x; echo "got:$x"\n');
    await t.write("hello\n");
    await until(/got:hello\r\n/);
    // stderr comes merged into the terminal.
    await t.write("ls /nonexistent-dir\n");
    await until(/nonexistent-dir.*No such file/);
    // Keystroke echo round trips (a figure for the log; bench/ has no row yet).
    // READY is printed by the shell once it runs the line, so its prompt
    // for the line before has come (the line's own echo, from the tty, can
    // come before that prompt under load, and a late prompt would end the
    // output instead of the keystroke).
    await t.write("echo READY; cat >/dev/null\n");
    await until(/READY\r\n/);
    const times = [];
    let typed = "";
    for (let i = 0; i < 20; i++) {
      const k = String.fromCharCode(97 + (i % 26));
      typed += k;
      const at = performance.now();
      // Only the echo writes while cat reads (the prompt, if late, comes before).
      const echoed = until(new RegExp(`${typed}$`));
      await t.write(k);
      await echoed;
      times.push(performance.now() - at);
    }
    times.sort((x, y) => x - y);
    console.log(`# keystroke echo round trip: median ${times[10].toFixed(1)} ms, max ${times[19].toFixed(1)} ms`);
    await t.write("\n\x04"); // Ctrl-D at the start of a line ends cat
    await t.write("exit 7\n");
    assert.deepEqual(await t.wait(), { exitCode: 7, timedOut: false });
    await assert.rejects(t.write("x"), (e) => e.code === "invalid_state");
    await assert.rejects(t.resize(80, 24), (e) => e.code === "invalid_state");
    await t.close(); // idempotent, also after the end
  });

  test("the default command is a login shell with TERM=xterm-256color", async () => {
    const { t, until } = await open(box.sandbox);
    await t.write('echo "term=$TERM"\n');
    await until(/term=xterm-256color\r\n/);
    await t.write("exit\n");
    assert.equal((await t.wait()).exitCode, 0);
  });

  test("every env name a caller may set reaches the terminal's command and its children exactly", async () => {
    const env = everyEnvName();
    const { t, until } = await open(box.sandbox, { command: `${printEnvCommand(env)}; printf END-OF-ENV`, env });
    const [, printed] = await until(/^([^]*)END-OF-ENV$/);
    assert.equal((await t.wait()).exitCode, 0);
    // The terminal prints each newline as CR LF; the values hold no CR.
    assert.equal(printed.replaceAll("\r\n", "\n"), printedEnv(env));
  });

  test("stty size reflects the initial size and a resize", async () => {
    const { t, until, output } = await open(box.sandbox, { command: "stty size; exec sh -i", cols: 101, rows: 33 });
    await until(/^33 101\r\n/);
    await t.resize(120, 40);
    // The node applies a resize as it arrives, beside the input stream:
    // ask until it shows.
    const sizes = () => (/** @type {string} */ (output()).match(/\d+ \d+\r\n/g) ?? []);
    while (!sizes().includes("40 120\r\n")) {
      const n = sizes().length;
      await t.write("stty size\n");
      await until(new RegExp(`(?:[^]*?\\d+ \\d+\\r\\n){${n + 1}}`));
    }
    await assert.rejects(t.resize(0, 10), (e) => e.code === "invalid_request");
    await assert.rejects(t.resize(80, 4097), (e) => e.code === "invalid_request");
    await t.close();
    await waitGone(box.sandbox, String(t.pid));
  });

  test("Ctrl-C interrupts sleep 100 and the shell survives", async () => {
    const { t, until } = await open(box.sandbox, { command: "sh -i" });
    await t.write("echo started; sleep 100\n");
    await until(/started\r\n/); // the echoed input line has "started;"
    await t.write("\x03");
    await t.write("echo after-$?\n");
    await until(/after-130\r\n/);
    await t.write("exit 3\n");
    assert.equal((await t.wait()).exitCode, 3);
  });

  test("close() ends a tree that ignores HUP (KILL after 2 s), and is idempotent", async () => {
    const { t, until } = await open(box.sandbox, { command: `trap '' HUP; sleep 1000 & echo "bg:$!"; wait` });
    const [, bg] = await until(/bg:(\d+)\r\n/);
    await Promise.all([t.close(), t.close()]);
    await waitGone(box.sandbox, `${t.pid} ${bg}`);
    const exit = await t.wait();
    assert.equal(exit.timedOut, false);
    console.log(`# closed terminal ended with ${exit.exitCode}`);
  });

  test("kill(signal) signals the tree; kill() defaults to HUP", async () => {
    const { t, until } = await open(box.sandbox, { command: "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.1; done" });
    await until(/ready\r\n/);
    await t.kill("USR1");
    await until(/got-usr1/);
    await assert.rejects(t.kill("BOGUS"), (e) => e.code === "invalid_request");
    await t.kill();
    const exit = await t.wait();
    assert.equal(exit.exitCode, 129, "HUP ended it");
  });

  test("an onData that throws closes the terminal; wait() rejects with what it threw", async () => {
    const boom = new Error("boom");
    let calls = 0;
    const t = await box.sandbox.terminal({
      command: "echo first; sleep 1000",
      onData: () => {
        calls++;
        throw boom;
      },
    });
    await assert.rejects(t.wait(), (e) => e === boom);
    assert.equal(calls, 1, "onData is not called again after it threw");
    await waitGone(box.sandbox, String(t.pid));
  });

  test("every bad argument is a documented code and nothing runs", async () => {
    const marker = `/tmp/terminal-ran-${process.pid}`;
    const command = `touch ${marker}`;
    const onData = () => {};
    const bad = [
      [undefined, "invalid_request"],
      [null, "invalid_request"],
      [{ command }, "invalid_request"], // no onData
      [{ command, onData: "x" }, "invalid_request"],
      [{ command: 5, onData }, "invalid_request"],
      [{ command, onData, cwd: 5 }, "invalid_request"],
      [{ command, onData, env: { "B-AD": "x" } }, "invalid_request"],
      [{ command, onData, env: { A: {} } }, "invalid_request"],
      [{ command, onData, env: { A: "a\0b" } }, "invalid_request"],
      [{ command: "a\0b", onData }, "invalid_request"],
      [{ command, onData, timeoutMs: -1 }, "invalid_request"],
      [{ command, onData, signal: "x" }, "invalid_request"],
      [{ command, onData, cwd: "/no/such/dir" }, "not_found"],
    ];
    for (const v of [0, -1, 4097, 1e9, NaN, 80.5, Infinity, "80"]) {
      bad.push([{ command, onData, cols: v }, "invalid_request"]);
      bad.push([{ command, onData, rows: v }, "invalid_request"]);
    }
    for (const [options, code] of bad) {
      await assert.rejects(box.sandbox.terminal(options), (e) => e.code === code, `${JSON.stringify(options)} → ${code}`);
    }
    const aborted = new AbortController();
    aborted.abort();
    await assert.rejects(box.sandbox.terminal({ command, onData, signal: aborted.signal }), (e) => e.code === "aborted");
    assert.equal(await sh(box.sandbox, `[ -e ${marker} ] && echo ran || echo not-run`), "not-run\n");
  });

  test("timeoutMs kills the tree and resolves timedOut; an abort rejects aborted", async () => {
    const { t } = await open(box.sandbox, { command: "sleep 1000", timeoutMs: 1000 });
    assert.deepEqual(await t.wait(), { exitCode: null, timedOut: true });
    await waitGone(box.sandbox, String(t.pid));
    const ac = new AbortController();
    const { t: t2, until } = await open(box.sandbox, { command: "echo up; sleep 1000", signal: ac.signal });
    await until(/up\r\n/);
    ac.abort();
    await assert.rejects(t2.wait(), (e) => e.code === "aborted");
    await waitGone(box.sandbox, String(t2.pid));
  });

  test("terminals count against maxConcurrentExecs", async () => {
    // The sandbox's two slots taken by two terminals: an exec waits for one.
    const a = await open(box.sandbox, { command: "sh -i" });
    const b = await open(box.sandbox, { command: "sh -i" });
    const probe = box.sandbox.exec(`kill -0 ${a.t.pid} 2>/dev/null && echo a-alive || echo a-gone`);
    await a.t.write("exit\n");
    await a.t.wait();
    assert.equal((await probe).stdout, "a-gone\n", "the exec ran while both terminals held the slots");
    await b.t.close();
  });
});

describe("a terminal whose connection is cut", { skip, timeout: 300_000 }, () => {
  let proxy;
  let box;
  before(async () => {
    const { host, port } = apiServerAddress();
    proxy = await faultProxy(host, port);
    box = await openSandbox("terminal-cut", { kubeConfig: kubeconfigThrough(proxy) });
  });
  after(async () => {
    await box?.close();
    await proxy?.close();
  });

  test("rejects connection_lost and leaves no process (the kubelet sends no SIGHUP)", async () => {
    const { t, until } = await open(box.sandbox, { command: "sh -i" });
    await t.write('sleep 1000 & echo "bg:$!"; echo "sh:$$"\n');
    const [, bg] = await until(/bg:(\d+)\r\n/);
    const [, shell] = await until(/sh:(\d+)\r\n/);
    const t0 = Date.now();
    await proxy.cut();
    await assert.rejects(t.wait(), (e) => e.code === "connection_lost");
    console.log(`# cut detected in ${Date.now() - t0} ms`);
    await waitGone(box.sandbox, `${t.pid} ${shell} ${bg}`);
    await assert.rejects(t.write("x"), (e) => e.code === "invalid_state");
  });
});
