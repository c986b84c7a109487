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
const NOT_OBJECT = [0, "x", true, 10n, Symbol("s"), () => 1];

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
    for (const v of [...NOT_OBJECT, null]) await rejects(`exec options ${show(v)}`, () => s.exec(touch(), v));
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
    for (const v of [...NOT_OBJECT, null]) await rejects(`spawn options ${show(v)}`, () => s.spawn(touch(), v));
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
