// Wrong types and values for every argument of a Sandbox and a
// SandboxProcess, as a careless caller or a model would pass them: each call
// rejects with `invalid_request` and runs nothing (every command would leave a
// file behind; the directory stays empty). Against the local control plane.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { skip } from "./cluster.mjs";
import { openSandbox, scratchDir } from "./sandbox-fixture.mjs";

/** Values that are never a valid string, number, object or function argument. */
const NOT_STRING = [undefined, null, 0, 1.5, true, 10n, Symbol("s"), [], {}, () => "x", new Uint8Array(1)];
const BAD_COUNT = [-1, 1.5, NaN, Infinity, -Infinity, 2 ** 53, 1e300, Number.MAX_VALUE, "10", true, {}, [], 10n];
const BAD_TIMEOUT = [-1, NaN, Infinity, 1e23, Number.MAX_VALUE, 1e300, "100", true, {}, [], 10n];
const NOT_OBJECT = [0, "x", true, 10n, Symbol("s"), () => 1, []];
/** Never a valid number for any numeric option or argument (fractions: see below). */
const HOSTILE_NUMBERS = [1e300, 2 ** 64, Number.MAX_VALUE, NaN, Infinity, -Infinity, -1, -0.5, "1", true, {}, [], 10n, Symbol("n")];

describe("bad arguments", { skip, timeout: 600_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let box;
  let s;
  let dir;
  let n = 0;
  /** A command that would leave a file behind if it ran. */
  const touch = () => `touch ${dir}/ran-${n++}`;
  before(async () => {
    box = await openSandbox("args");
    s = box.sandbox;
    dir = await scratchDir(s, "args");
  });
  after(async () => box?.close());

  /** Asserts the call rejects with invalid_request. */
  async function rejects(what, call) {
    await assert.rejects(
      (async () => call())(),
      (e) => {
        assert.equal(e?.code, "invalid_request", `${what}: ${e?.code} ${e?.message}`);
        assert.ok(e instanceof Error);
        return true;
      },
      what,
    );
  }
  const show = (v) => {
    if (typeof v === "bigint") return `${v}n`;
    if (typeof v === "symbol" || typeof v === "function") return typeof v;
    try {
      return JSON.stringify(v) ?? String(v);
    } catch {
      return Object.prototype.toString.call(v);
    }
  };

  test("exec: command, options and each option", async () => {
    for (const v of NOT_STRING) await rejects(`exec(${show(v)})`, () => s.exec(v, { cwd: dir }));
    for (const v of NOT_OBJECT) await rejects(`exec options ${show(v)}`, () => s.exec(touch(), v));
    const cases = {
      cwd: [0, true, 10n, Symbol("s"), {}, [], () => 1],
      env: [0, "x", true, [], { A: {} }, { A: [] }, { A: Symbol("s") }, { A: () => 1 }, { A: 1n }, { "B-AD": "x" }, { "": "x" }, { A: "a\0b" }],
      timeoutMs: BAD_TIMEOUT,
      maxOutputBytes: BAD_COUNT,
      signal: [0, "x", {}, [], { aborted: false }, () => 1],
      onData: [0, "x", {}, [], true],
      onStdout: [0, "x", {}],
      onStderr: [0, "x", {}],
      stdin: [0, true, {}, [], 10n, () => 1],
      encoding: ["latin1", "hex", 0, {}, true],
      reattach: ["yes", 1, {}],
    };
    for (const [name, values] of Object.entries(cases)) {
      for (const v of values) await rejects(`exec ${name}: ${show(v)}`, () => s.exec(touch(), { cwd: dir, [name]: v }));
    }
    await rejects("exec with a NUL in the command", () => s.exec(`${touch()}\0`, { cwd: dir }));
    assert.deepEqual(await s.readdir(dir), [], "nothing ran");
  });

  test("spawn, process(id) and the process handle's methods", async () => {
    for (const v of NOT_STRING) await rejects(`spawn(${show(v)})`, () => s.spawn(v));
    for (const v of NOT_OBJECT) await rejects(`spawn options ${show(v)}`, () => s.spawn(touch(), v));
    const cases = {
      cwd: [0, {}, []],
      env: [0, "x", { A: {} }, { "B-AD": "x" }],
      timeoutMs: BAD_TIMEOUT,
      maxOutputBytes: [...BAD_COUNT, 2 ** 27],
      stdin: [0, false, {}, [], 10n],
    };
    for (const [name, values] of Object.entries(cases)) {
      for (const v of values) await rejects(`spawn ${name}: ${show(v)}`, () => s.spawn(touch(), { cwd: dir, [name]: v }));
    }
    for (const v of NOT_STRING) await rejects(`process(${show(v)})`, () => s.process(v));
    assert.deepEqual(await s.readdir(dir), [], "nothing was started");

    const p = await s.spawn("cat", { stdin: true });
    for (const v of [-1, 1.5, NaN, Infinity, 2 ** 60, "1", {}, true]) {
      await rejects(`poll(${show(v)})`, () => p.poll(v));
      await rejects(`follow({ after: ${show(v)} })`, () => p.follow({ after: v }));
    }
    for (const v of NOT_OBJECT) {
      await rejects(`follow(${show(v)})`, () => p.follow(v));
      await rejects(`wait(${show(v)})`, () => p.wait(v));
    }
    for (const v of [0, "x", {}, []]) {
      await rejects(`follow({ onOutput: ${show(v)} })`, () => p.follow({ onOutput: v }));
      await rejects(`follow({ signal: ${show(v)} })`, () => p.follow({ signal: v }));
    }
    for (const v of [9, "NOPE", "SIGNOPE", "", {}, "TERM; rm -rf /"]) await rejects(`kill(${show(v)})`, () => p.kill(v));
    for (const v of [undefined, null, 0, {}, [], true]) await rejects(`writeStdin(${show(v)})`, () => p.writeStdin(v));
    assert.equal((await p.poll()).exit, undefined, "the process is still running after all that");
    await p.kill("KILL");
  });

  test("file methods: paths and options", async () => {
    for (const m of ["readFile", "writeFile", "mkdir", "stat", "readdir", "readdirBytes", "exists", "remove"]) {
      for (const v of [...NOT_STRING, ""]) await rejects(`${m}(${show(v)})`, () => s[m](v, "x"));
      await rejects(`${m} with a NUL`, () => s[m](`${dir}/a\0b`, "x"));
    }
    for (const v of [...NOT_STRING.filter((x) => typeof x !== "string" && !(x instanceof Uint8Array))]) {
      await rejects(`writeFile content ${show(v)}`, () => s.writeFile(`${dir}/f`, v));
    }
    for (const v of NOT_OBJECT) {
      await rejects(`readFile options ${show(v)}`, () => s.readFile(`${dir}/f`, v));
      await rejects(`remove options ${show(v)}`, () => s.remove(`${dir}/f`, v));
    }
    for (const v of BAD_COUNT) {
      await rejects(`readFile maxBytes ${show(v)}`, () => s.readFile(`${dir}/f`, { maxBytes: v }));
      await rejects(`readFile offset ${show(v)}`, () => s.readFile(`${dir}/f`, { offset: v }));
      await rejects(`readFile length ${show(v)}`, () => s.readFile(`${dir}/f`, { length: v }));
    }
    assert.deepEqual(await s.readdir(dir), [], "nothing was written");
  });

  test("one rule for the options argument of every method: null is no options, a non-object is invalid_request", async () => {
    const files = await scratchDir(s, "args-null");
    await s.writeFile(`${files}/f`, "x");
    const done = await s.spawn("true");
    await done.wait();
    /** Every method that takes options, with arguments that make the call itself harmless. */
    const methods = {
      exec: (o) => s.exec("true", o),
      spawn: (o) => s.spawn("true", o),
      terminal: (o) => s.terminal(o),
      process: (o) => s.process("00000000000000000000", o),
      processes: (o) => s.processes(o),
      readFile: (o) => s.readFile(`${files}/f`, o),
      writeFile: (o) => s.writeFile(`${files}/f`, "x", o),
      mkdir: (o) => s.mkdir(`${files}/d`, o),
      stat: (o) => s.stat(`${files}/f`, o),
      readdir: (o) => s.readdir(files, o),
      readdirBytes: (o) => s.readdirBytes(files, o),
      exists: (o) => s.exists(`${files}/f`, o),
      remove: (o) => s.remove(`${files}/missing`, o),
      usage: (o) => s.usage(o),
      upload: (o) => s.upload(new Uint8Array(1024), `${files}/up`, o),
      download: (o) => s.download(`${files}/d`, o),
      listeningPorts: (o) => s.listeningPorts(o),
      forward: (o) => s.forward(1, o),
      poll: (o) => done.poll(undefined, o),
      follow: (o) => done.follow(o),
      wait: (o) => done.wait(o),
      writeStdin: (o) => done.writeStdin("x", o),
      closeStdin: (o) => done.closeStdin(o),
      kill: (o) => done.kill("TERM", o),
    };
    const outcome = async (call) => {
      try {
        const r = await call();
        r?.destroy?.();
        return "resolved";
      } catch (e) {
        return `${e?.code}: ${e?.message}`;
      }
    };
    for (const [name, call] of Object.entries(methods)) {
      assert.equal(await outcome(() => call(null)), await outcome(() => call(undefined)), `${name}(…, null) is ${name}(…)`);
      for (const v of NOT_OBJECT) {
        await assert.rejects(
          (async () => call(v))(),
          (e) => e?.code === "invalid_request" && /options must be an object/.test(e.message),
          `${name} options ${show(v)}`,
        );
      }
    }
  });

  test("the same hostile numbers through every numeric option and argument: invalid_request, nothing runs", async () => {
    const files = await scratchDir(s, "args-numbers");
    await s.writeFile(`${files}/f`, "x");
    const p = await s.spawn("cat", { stdin: true });
    const onData = () => {};
    /** [what, call, whether a fraction means nothing there] */
    const options = [
      ["exec timeoutMs", (v) => s.exec(touch(), { cwd: dir, timeoutMs: v }), false],
      ["exec maxOutputBytes", (v) => s.exec(touch(), { cwd: dir, maxOutputBytes: v }), true],
      ["spawn timeoutMs", (v) => s.spawn(touch(), { cwd: dir, timeoutMs: v }), false],
      ["spawn maxOutputBytes", (v) => s.spawn(touch(), { cwd: dir, maxOutputBytes: v }), true],
      ["terminal timeoutMs", (v) => s.terminal({ command: touch(), cwd: dir, onData, timeoutMs: v }), false],
      ["terminal cols", (v) => s.terminal({ command: touch(), cwd: dir, onData, cols: v }), true],
      ["terminal rows", (v) => s.terminal({ command: touch(), cwd: dir, onData, rows: v }), true],
      ["readFile maxBytes", (v) => s.readFile(`${files}/f`, { maxBytes: v }), true],
      ["readFile offset", (v) => s.readFile(`${files}/f`, { offset: v }), true],
      ["readFile length", (v) => s.readFile(`${files}/f`, { length: v }), true],
      ["usage sampleMs", (v) => s.usage({ sampleMs: v }), true],
      ["upload maxBytes", (v) => s.upload(new Uint8Array(1024), dir, { maxBytes: v }), true],
      ["upload maxEntries", (v) => s.upload(new Uint8Array(1024), dir, { maxEntries: v }), true],
      ["download maxBytes", (v) => s.download(files, { maxBytes: v }), true],
      ["download maxEntries", (v) => s.download(files, { maxEntries: v }), true],
      ["forward port", (v) => s.forward(v, { verify: false }), true],
      ["forward localPort", (v) => s.forward(1, { verify: false, localPort: v }), true],
      ["fetch port", (v) => s.fetch(v, "/"), true],
      ["url port", (v) => s.url(v), true],
      ["poll after", (v) => p.poll(v), true],
      ["follow after", (v) => p.follow({ after: v }), true],
    ];
    for (const [what, call, whole] of options) {
      for (const v of whole ? [...HOSTILE_NUMBERS, 1.5] : HOSTILE_NUMBERS) await rejects(`${what}: ${show(v)}`, () => call(v));
    }
    assert.deepEqual(await s.readdir(dir), [], "nothing ran, nothing was uploaded");
    await p.kill("KILL");
  });

  test("the extreme values that used to abort the process are errors in a child that then exits normally", async () => {
    const { spawnSync } = await import("node:child_process");
    const { fileURLToPath } = await import("node:url");
    const child = spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `
        const { openSandbox } = await import(${JSON.stringify(new URL("./sandbox-fixture.mjs", import.meta.url).href)});
        const box = await openSandbox("extremes");
        let codes = [];
        for (const timeoutMs of [1e23, Number.MAX_VALUE, 1e300, 2 ** 64]) {
          for (const call of [() => box.sandbox.exec("true", { timeoutMs }), () => box.sandbox.spawn("true", { timeoutMs })]) {
            try { await call(); codes.push("resolved"); } catch (e) { codes.push(e.code); }
          }
        }
        await box.close();
        console.log(JSON.stringify(codes));
        `,
      ],
      { encoding: "utf8", timeout: 120_000, cwd: fileURLToPath(new URL("..", import.meta.url)) },
    );
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(JSON.parse(child.stdout.trim().split("\n").at(-1)), Array(8).fill("invalid_request"));
  });
});
