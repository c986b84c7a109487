// The Pi coding agent's real tools (@mariozechner/pi-coding-agent: bash,
// write, read, ls) driven against a Sandbox the way Rivet's sandbox adapter
// wires them (its `sandboxEnv`: the tools' operations call the Sandbox; the
// host's environment is not forwarded; timeouts in seconds become timeoutMs).
// A third-party client, so these check what an agent really gets: background
// servers started with `&` or `nohup`, files, listings.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  createBashToolDefinition,
  createLsToolDefinition,
  createReadToolDefinition,
  createWriteToolDefinition,
} from "@mariozechner/pi-coding-agent";
import { serverPort as port, skip } from "./cluster.mjs";
import { openSandbox, scratchDir } from "./sandbox-fixture.mjs";

/** Pi's BashOperations over a Sandbox, as the adapter maps them. */
function bashOperations(sandbox) {
  return {
    exec: async (command, cwd, { onData, signal, timeout }) => {
      const r = await sandbox.exec(command, { cwd, signal, onData, timeoutMs: timeout ? timeout * 1000 : undefined });
      if (r.timedOut) throw new Error(`timeout:${timeout}`);
      return { exitCode: r.exitCode };
    },
  };
}

/** Runs a tool call; the text it returns (a failing call throws, as in Pi). */
async function call(tool, params) {
  const r = await tool.execute(`call-${Date.now()}`, params, undefined, undefined, {});
  return r.content.map((c) => c.text).join("");
}

const fetchStatus = (p) => `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${p}/').status)"`;

describe("the Pi coding agent's tools against a sandbox", { skip, timeout: 300_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let box;
  let dir;
  let bash;
  before(async () => {
    box = await openSandbox("pi");
    dir = await scratchDir(box.sandbox, "pi");
    bash = createBashToolDefinition(dir, { operations: bashOperations(box.sandbox) });
  });
  after(async () => box?.close());

  test("bash: a server started with a plain `&` returns at once and answers the next call", async () => {
    const p = port();
    // The server never ends: a call that waited for it would time out (60 s).
    const pid = (await call(bash, { command: `python3 -m http.server ${p} --bind 127.0.0.1 & echo $!`, timeout: 60 })).trim();
    assert.match(pid, /^\d+$/);
    assert.equal((await call(bash, { command: `for i in $(seq 1 50); do ${fetchStatus(p)} 2>/dev/null && break; sleep 0.1; done` })).trim(), "200");
    // The server logs each request to the stderr it inherited from the first
    // call: it keeps answering.
    assert.equal((await call(bash, { command: fetchStatus(p) })).trim(), "200");
    await call(bash, { command: `kill ${pid}` });
  });

  test("bash: `nohup … > log 2>&1 &` and `sleep 15 & echo started`", async () => {
    const p = port();
    // Neither background child ends by itself: a call that waited for it
    // would time out (60 s) instead of returning.
    const out = await call(bash, { command: `nohup python3 -m http.server ${p} --bind 127.0.0.1 > server.log 2>&1 & echo started`, timeout: 60 });
    assert.equal(out.trim(), "started");
    assert.equal((await call(bash, { command: "sleep 3600 & echo started", timeout: 60 })).trim(), "started");
    assert.equal((await call(bash, { command: `for i in $(seq 1 50); do ${fetchStatus(p)} 2>/dev/null && break; sleep 0.1; done` })).trim(), "200");
    assert.match(await call(bash, { command: "cat server.log" }), /GET \/ HTTP/);
  });

  test("bash: a failing command and a timeout are reported the way Pi reports them", async () => {
    await assert.rejects(call(bash, { command: "echo out; echo err >&2; exit 3" }), /out\nerr\n\n\nCommand exited with code 3|Command exited with code 3/);
    await assert.rejects(call(bash, { command: "echo before; sleep 30", timeout: 1 }), /Command timed out after 1 seconds/);
  });

  test("bash: a 100 KB heredoc writes its file (the command is too long for a URL)", async () => {
    const body = Array.from({ length: 10_000 }, (_, i) => `line ${String(i).padStart(5, "0")}`).join("\n") + "\n";
    const out = await call(bash, { command: `cat > big.txt <<'EOF'\n${body}EOF\nwc -c < big.txt` });
    assert.equal(out.trim(), String(Buffer.byteLength(body)));
    assert.equal(Buffer.from(await box.sandbox.readFile(`${dir}/big.txt`)).toString(), body);
  });

  test("write, read and ls tools round-trip through the sandbox's files", async () => {
    const s = box.sandbox;
    const write = createWriteToolDefinition(dir, {
      operations: { writeFile: (path, content) => s.writeFile(path, content), mkdir: (d) => s.mkdir(d) },
    });
    const read = createReadToolDefinition(dir, {
      operations: {
        readFile: async (path) => Buffer.from(await s.readFile(path)),
        access: async (path) => {
          if (!(await s.exists(path))) throw Object.assign(new Error(`ENOENT: ${path}`), { code: "ENOENT" });
        },
      },
    });
    // Pi's ls wants fs.Stats-like objects; the adapter turns the Sandbox's
    // `{ isDirectory }` into one.
    const stats = async (p) => {
      const st = await s.stat(p);
      return { isDirectory: () => st.isDirectory, isFile: () => st.isFile, size: st.size, mtimeMs: st.mtimeMs };
    };
    const ls = createLsToolDefinition(dir, {
      operations: { exists: (p) => s.exists(p), stat: stats, readdir: (p) => s.readdir(p) },
    });
    await call(write, { path: "src/hello.py", content: "print('hello from pi')\n" });
    assert.match(await call(read, { path: "src/hello.py" }), /print\('hello from pi'\)/);
    assert.match(await call(ls, { path: "src" }), /hello\.py/);
    assert.equal((await call(bash, { command: "python3 src/hello.py" })).trim(), "hello from pi");
  });
});
