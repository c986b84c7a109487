// Ports against the real control plane: a server started with spawn in the
// sandbox is found by listeningPorts, fetched by fetch and reached through
// forward by Node's own HTTP clients. Under runc the tunnels are
// pods/portforward through the API server to the real node's kubelet; under
// gVisor (SANDBOX_TEST_RUNTIME_CLASS=gvisor), where the kubelet cannot reach
// the sandbox's network, they are the provider's exec relay. The sandbox is
// the provider's own (agentSandboxProvider), so its destroy closes what is
// open.

import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { after, before, describe, test } from "node:test";
import { ErrorCode } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, busyboxImage, directSandbox, getObject, gvisor, kubectl, namespace, objectName, serverPort, skip } from "./cluster.mjs";
import { provider, withSandbox } from "./sandbox-fixture.mjs";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc");
/**
 * What the process keeps alive, after a full collection: the JS heap and the
 * Buffers' memory as Node's allocator counts it (`arrayBuffers`). Not V8's
 * `external`, which lags: a collection's freed backing stores leave it only
 * when the concurrent sweeper is done, which the second gc() waits for.
 */
const live = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};

const MiB = 1024 * 1024;
const BIG = 64 * MiB;
// A port of this run, and one nothing listens on.
const PORT = serverPort();
const FREE = PORT + 20001;
// The hostile server's port.
const HOSTILE = PORT + 1;

// /        → "hello <method> <url> host=<host>"
// /echo    → the request body
// /big     → BIG bytes, byte i = i % 1 MiB % 251
// /sent    → how many bytes of the last /big the server has handed to its socket
// /slow    → headers, then nothing until the client goes
// /hold    → nothing until /release ends it with "released" (/held: how many wait)
const SERVER = `
const http = require("node:http");
const block = Buffer.alloc(1 << 20);
for (let i = 0; i < block.length; i++) block[i] = i % 251;
let sent = 0;
const held = [];
http.createServer((req, res) => {
  if (req.url === "/echo") return req.pipe(res);
  if (req.url === "/sent") return res.end(String(sent));
  if (req.url === "/big") {
    res.writeHead(200, { "content-length": ${BIG} });
    sent = 0;
    const more = () => {
      while (sent < ${BIG}) {
        const n = Math.min(block.length - (sent % block.length), ${BIG} - sent);
        const ok = res.write(block.subarray(sent % block.length, (sent % block.length) + n));
        sent += n;
        if (!ok) return res.once("drain", more);
      }
      res.end();
    };
    return more();
  }
  if (req.url === "/slow") return res.writeHead(200).flushHeaders();
  if (req.url === "/hold") return held.push(res);
  if (req.url === "/held") return res.end(String(held.length));
  if (req.url === "/release") return res.end(String(held.splice(0).map((r) => r.end("released")).length));
  res.end("hello " + req.method + " " + req.url + " host=" + req.headers.host);
}).listen(Number(process.argv[1]), "127.0.0.1");
`;

// A server as a hostile sandbox runs one, raw TCP: /101 answers
// "101 Switching Protocols" bare, /101-upgrade with the upgrade headers,
// /count how many connections it holds; anything else gets no answer, ever.
const HOSTILE_SERVER = `
let open = 0;
require("node:net").createServer((s) => {
  let head = "";
  s.on("error", () => {});
  s.on("data", (d) => {
    if (head.includes("\\r\\n\\r\\n")) return;
    head += d;
    if (!head.includes("\\r\\n\\r\\n")) return;
    const path = head.split(" ")[1];
    if (path === "/count") return s.end("HTTP/1.1 200 OK\\r\\nConnection: close\\r\\n\\r\\n" + open);
    if (path === "/101") return s.write("HTTP/1.1 101 Switching Protocols\\r\\n\\r\\n");
    if (path === "/101-upgrade") return s.write("HTTP/1.1 101 Switching Protocols\\r\\nConnection: Upgrade\\r\\nUpgrade: websocket\\r\\n\\r\\n");
    open++;
    s.on("close", () => open--);
  });
}).listen(Number(process.argv[1]), "127.0.0.1");
`;

/** Resolves once `sandbox` lists `port` as listening. */
async function listening(sandbox, port) {
  for (let i = 0; !(await sandbox.listeningPorts()).some((x) => x.port === port); i++) {
    assert.ok(i < 600, `nothing ever listened on ${port}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Connections to one sandbox's port held open at once: its 32 tunnels
 * (maxTunnelsPerSandbox), or under gVisor its 8 relays.
 */
const HELD = gvisor ? 8 : 32;

describe("ports", { skip, timeout: 600_000 }, () => {
  const { p } = provider({ warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp" });
  const ctx = { actorId: actorId("ports"), client: () => undefined };
  let id;
  /** @type {any} */
  let sandbox;

  before(async () => {
    id = await p.create(ctx);
    sandbox = await p.connect(ctx, id);
    await sandbox.spawn(`exec node -e '${SERVER}' ${PORT}`);
    await sandbox.spawn(`exec node -e '${HOSTILE_SERVER}' ${HOSTILE}`);
    // Wait for the servers: the call agents use to wait for their dev server.
    await listening(sandbox, PORT);
    await listening(sandbox, HOSTILE);
  });
  after(async () => {
    if (id) await p.destroy(ctx, id);
  });

  test("listeningPorts reports the server, bound to loopback", async () => {
    const found = (await sandbox.listeningPorts()).filter((x) => x.port === PORT);
    assert.deepEqual(found, [{ port: PORT, address: "127.0.0.1", family: "IPv4", loopbackOnly: true }]);
  });

  test("fetch: status, exact body, default Host, request body", async () => {
    const r = await sandbox.fetch(PORT, "/a?b=1");
    assert.equal(r.status, 200);
    assert.ok(r instanceof Response);
    assert.equal(await r.text(), `hello GET /a?b=1 host=localhost:${PORT}`);
    const own = await sandbox.fetch(PORT, "http://ignored.example/x", { headers: { host: "app.local" } });
    assert.equal(await own.text(), "hello GET /x host=app.local");
    const body = Buffer.alloc(3 * MiB + 7, "xyz");
    const echo = await sandbox.fetch(PORT, "/echo", { method: "POST", body });
    assert.deepEqual(Buffer.from(await echo.arrayBuffer()), body);
    const req = await sandbox.fetch(PORT, new Request("http://x/", { method: "DELETE" }));
    assert.equal(await req.text(), `hello DELETE / host=localhost:${PORT}`);
  });

  test("fetch streams a 64 MiB body: a paused reader stops the server, memory stays bounded", async () => {
    const before = live();
    const r = await sandbox.fetch(PORT, "/big");
    const reader = r.body.getReader();
    let n = 0;
    let wrong = -1;
    const take = (chunk) => {
      for (let i = 0; i < chunk.length && wrong < 0; i += 4099) if (chunk[i] !== ((n + i) % MiB) % 251) wrong = n + i;
      n += chunk.length;
    };
    while (n < MiB) {
      const { value, done } = await reader.read();
      assert.ok(!done, "the body ended early");
      take(value);
    }
    // Backpressure, end to end: with the reader paused, the server's writes
    // stall once the buffers between it and the reader are full. Whatever
    // buffers the body instead would let the server send all of it.
    let sent = -1;
    for (let polls = 0; ; polls++) {
      const now = Number(await (await sandbox.fetch(PORT, "/sent")).text());
      if (now === sent) break;
      assert.ok(polls < 200, `the server never stalled (sent ${now})`);
      sent = now;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const held = live() - before;
    console.log(`paused reader: server stalled ${((sent - n) / MiB).toFixed(1)} MiB ahead of it, ${(held / MiB).toFixed(1)} MiB of it in this process`);
    assert.ok(sent < BIG, "the server sent the whole body to a paused reader");
    // The kernel's socket buffers of each hop (sandbox → node → API server →
    // here) hold most of what is in flight, as much as their autotuning
    // allows (up to net.ipv4.tcp_rmem's 32 MiB per socket here, 24.9 MiB in
    // all seen in CI): not this process's to bound. It holds a few MiB.
    assert.ok(held < 16 * MiB, `this process holds ${held / MiB} MiB for a paused reader`);

    // The rest at full speed, collecting every 8 MiB: left to itself the
    // collector lets hundreds of MiB/s of consumed chunks pile up as garbage,
    // which RSS counts but is not the body being held.
    const baseRss = process.memoryUsage().rss;
    let peak = 0;
    let peakRss = 0;
    for (let next = n + 8 * MiB; ; ) {
      const { value, done } = await reader.read();
      if (done) break;
      take(value);
      if (n >= next) {
        peak = Math.max(peak, live() - before);
        peakRss = Math.max(peakRss, process.memoryUsage().rss - baseRss);
        next = n + 8 * MiB;
      }
    }
    console.log(`the other 63 MiB (collecting every 8 MiB): live memory +${(peak / MiB).toFixed(1)} MiB, RSS +${(peakRss / MiB).toFixed(1)} MiB`);
    assert.equal(n, BIG);
    assert.equal(wrong, -1);
    // Buffered whole, the body alone would keep up to 63 MiB alive.
    assert.ok(peak < 16 * MiB, `live memory grew ${peak / MiB} MiB`);
    assert.ok(peakRss < 48 * MiB, `RSS grew ${peakRss / MiB} MiB`);
  });

  test("forward: Node's fetch, then 200 parallel connections through one forward, 32 tunnels at a time", async () => {
    // 201 connections at most: the 200 and the one Node's fetch above keeps alive.
    const f = await sandbox.forward(PORT, { maxConnections: 201 });
    try {
      assert.match(f.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const r = await fetch(`${f.url}/via-forward`);
      assert.equal(await r.text(), `hello GET /via-forward host=${f.url.slice(7)}`);
      const get = (i) =>
        new Promise((resolve, reject) => {
          http
            .get(`${f.url}/c${i}`, { agent: false }, (res) => {
              let text = "";
              res.setEncoding("utf8").on("data", (d) => (text += d)).on("end", () => resolve(text)).on("error", reject);
            })
            .on("error", reject);
        });
      const t0 = performance.now();
      const texts = await Promise.all(Array.from({ length: 200 }, (_, i) => get(i)));
      console.log(`200 parallel connections through forward: ${(performance.now() - t0).toFixed(0)} ms`);
      texts.forEach((t, i) => assert.equal(t, `hello GET /c${i} host=${f.url.slice(7)}`));
    } finally {
      await f.close();
    }
  });

  test("nothing listening: not_found before a forward resolves, and from fetch", async () => {
    await assert.rejects(sandbox.forward(FREE), { code: ErrorCode.NotFound });
    await assert.rejects(sandbox.fetch(FREE, "/"), (err) => {
      assert.equal(err.code, ErrorCode.NotFound);
      assert.match(err.message, new RegExp(`nothing listens on port ${FREE}`));
      return true;
    });
  });

  test("a failing tunnel resets only its own connection", async () => {
    const errors = [];
    const f = await sandbox.forward(FREE, { verify: false, onError: (e) => errors.push(e) });
    try {
      await assert.rejects(fetch(f.url));
      assert.equal(errors[0]?.code, ErrorCode.NotFound);
      const good = await sandbox.forward(PORT);
      assert.equal((await fetch(good.url)).status, 200);
      await good.close();
    } finally {
      await f.close();
    }
  });

  test("fetch: a signal aborts the exchange and its body", async () => {
    const c = new AbortController();
    c.abort();
    await assert.rejects(sandbox.fetch(PORT, "/", { signal: c.signal }), { code: ErrorCode.Aborted });
    const c2 = new AbortController();
    const r = await sandbox.fetch(PORT, "/slow", { signal: c2.signal });
    const reading = r.text();
    c2.abort();
    await assert.rejects(reading, { code: ErrorCode.Aborted });
  });

  test("every bad argument is invalid_request and opens nothing", async () => {
    const before = (await sandbox.listeningPorts()).length;
    for (const port of [0, -1, 65536, 1.5, NaN, "80", null, undefined, {}, 2 ** 53]) {
      await assert.rejects(sandbox.fetch(port, "/"), { code: ErrorCode.InvalidRequest }, String(port));
      await assert.rejects(sandbox.forward(port), { code: ErrorCode.InvalidRequest }, String(port));
    }
    for (const options of [
      "x",
      7,
      { localPort: 70000 },
      { localPort: "80" },
      { host: "" },
      { host: 1 },
      { verify: "yes" },
      { signal: {} },
      { onError: "f" },
      // Reachable from other machines: only with allowRemote.
      { host: "0.0.0.0" },
      { host: "::" },
      { host: "192.168.1.10" },
      { host: "fe80::1" },
      { host: "example.com" },
      { host: "0.0.0.0", allowRemote: "yes" },
      { maxConnections: 0 },
      { maxConnections: 1.5 },
      { maxConnections: "2" },
      { maxConnections: 4097 },
      { checkHost: "yes" },
      { checkHost: 1 },
    ]) {
      await assert.rejects(sandbox.forward(PORT, options), { code: ErrorCode.InvalidRequest }, JSON.stringify(options));
    }
    for (const headers of [{ upgrade: "websocket", connection: "Upgrade" }, { connection: "keep-alive, Upgrade" }]) {
      await assert.rejects(sandbox.fetch(PORT, "/", { headers }), { code: ErrorCode.InvalidRequest });
    }
    await assert.rejects(sandbox.fetch(PORT, "/", { method: "GET", body: "x" }), { code: ErrorCode.InvalidRequest });
    await assert.rejects(sandbox.fetch(PORT, 42n), { code: ErrorCode.InvalidRequest });
    assert.equal((await sandbox.listeningPorts()).length, before);
  });

  test("without pods/portforward: forbidden naming it (gVisor: a relayed sandbox needs none)", async () => {
    const role = kubectl("get", "role", "sandbox-client-ports", "-o", "json");
    kubectl("delete", "role", "sandbox-client-ports");
    try {
      // A provider that has not relayed to this sandbox asks the node first.
      const fresh = await provider({ warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp" }).p.connect(ctx, id);
      let err;
      // The authorizer's cache takes a moment to see the deletion.
      for (let i = 0; i < 200; i++) {
        err = await fresh.fetch(PORT, "/").then(() => undefined, (e) => e);
        if (err) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(err?.code, ErrorCode.Forbidden);
      assert.match(err.message, /pods\/portforward/);
      // Under gVisor the suite's provider learned that only the relay
      // reaches this sandbox: it goes on with pods/exec alone.
      if (gvisor) assert.equal((await sandbox.fetch(PORT, "/")).status, 200);
      const errors = [];
      const f = await fresh.forward(PORT, { onError: (e) => errors.push(e) });
      await assert.rejects(fetch(f.url));
      assert.equal(errors[0]?.code, ErrorCode.Forbidden);
      await f.close();
    } finally {
      const { metadata, ...rest } = JSON.parse(role);
      const file = `/tmp/ports-role-${process.pid}.json`;
      (await import("node:fs")).writeFileSync(file, JSON.stringify({ ...rest, metadata: { name: metadata.name } }));
      kubectl("apply", "-f", file);
    }
  });

  test("forward: loopback hosts by default, others only with allowRemote", async () => {
    for (const host of ["localhost", "127.0.0.2"]) {
      const f = await sandbox.forward(PORT, { host });
      assert.equal((await fetch(f.url)).status, 200, host);
      await f.close();
    }
    const open = await sandbox.forward(PORT, { host: "0.0.0.0", allowRemote: true });
    assert.equal((await fetch(`http://127.0.0.1:${open.localPort}/`)).status, 200);
    await open.close();
  });

  test("forward: a connection beyond maxConnections is reset and reported unavailable", async () => {
    const errors = [];
    const f = await sandbox.forward(PORT, { maxConnections: 2, onError: (e) => errors.push(e) });
    try {
      /** A connection that stays open (/slow): resolves its response. */
      const hold = () =>
        new Promise((resolve, reject) => {
          http.get(`${f.url}/slow`, { agent: false }, resolve).on("error", reject);
        });
      const held = [await hold(), await hold()];
      assert.equal(f.connections, 2);
      await assert.rejects(fetch(`${f.url}/third`));
      assert.equal(errors.length, 1);
      assert.equal(errors[0].code, ErrorCode.Unavailable);
      assert.match(errors[0].message, /maxConnections \(2\)/);
      for (const res of held) res.destroy();
      while (f.connections > 0) await new Promise((r) => setTimeout(r, 20));
      assert.equal(await (await fetch(`${f.url}/again`)).text(), `hello GET /again host=${f.url.slice(7)}`);
    } finally {
      await f.close();
    }
  });

  test("forward with checkHost: a request naming another Host gets 421 and opens no tunnel", async () => {
    const errors = [];
    const f = await sandbox.forward(PORT, { checkHost: true, onError: (e) => errors.push(e) });
    try {
      /** One raw request with `host` as its Host header: the status line of the answer. */
      const ask = (host) =>
        new Promise((resolve, reject) => {
          const socket = net.connect(f.localPort, "127.0.0.1");
          let got = "";
          socket.on("data", (d) => (got += d));
          socket.on("error", reject);
          socket.on("close", () => resolve(got.split("\r\n")[0]));
          socket.write(`GET /rebind HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
        });
      const before = p.stats().connections;
      for (const host of ["evil.example", `evil.example:${f.localPort}`, `127.0.0.1:${f.localPort + 1}`]) {
        assert.equal(await ask(host), "HTTP/1.1 421 Misdirected Request", host);
      }
      assert.equal(p.stats().connections, before, "a refused connection opens no tunnel");
      assert.equal(errors.length, 3);
      assert.ok(errors.every((e) => e.code === ErrorCode.InvalidRequest), String(errors));
      for (const host of [`127.0.0.1:${f.localPort}`, `LOCALHOST:${f.localPort}`]) {
        assert.equal(await ask(host), "HTTP/1.1 200 OK", host);
      }
      assert.equal(await (await fetch(`${f.url}/own`)).text(), `hello GET /own host=${f.url.slice(7)}`);
    } finally {
      await f.close();
    }
  });

  test("another actor's suspend and destroy of this id are invalid_state and close nothing", async () => {
    const other = { actorId: actorId("ports-other"), client: () => undefined };
    const f = await sandbox.forward(PORT);
    const pending = sandbox.fetch(PORT, "/hold");
    while ((await (await sandbox.fetch(PORT, "/held")).text()) !== "1") await new Promise((r) => setTimeout(r, 20));
    await assert.rejects(p.suspend(other, id), { code: ErrorCode.InvalidState });
    await assert.rejects(p.destroy(other, id), { code: ErrorCode.InvalidState });
    assert.equal(await (await fetch(`${f.url}/still`)).text(), `hello GET /still host=${f.url.slice(7)}`);
    assert.equal(await (await sandbox.fetch(PORT, "/release")).text(), "1");
    assert.equal(await (await pending).text(), "released");
    await f.close();
  });

  test("a non-string id is invalid_request for connect, suspend and destroy", async () => {
    for (const bad of [undefined, null, 42, {}, [], true]) {
      for (const call of ["connect", "suspend", "destroy"]) {
        await assert.rejects(p[call](ctx, bad), { code: ErrorCode.InvalidRequest }, `${call}(${JSON.stringify(bad)})`);
      }
    }
    // A malformed string names no sandbox of this provider: connect resolves undefined.
    assert.equal(await p.connect(ctx, "not an id"), undefined);
  });

  test("fetch without a signal: a server that never answers is timeout, one that answers 101 unavailable", async () => {
    const short = provider({ warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp", callTimeoutMs: 3000 }).p;
    const box = await short.connect(ctx, id);
    const t0 = performance.now();
    await assert.rejects(box.fetch(HOSTILE, "/"), { code: ErrorCode.Timeout });
    const waited = performance.now() - t0;
    assert.ok(waited >= 2900 && waited < 8000, `settled after ${waited} ms`);
    for (const path of ["/101", "/101-upgrade"]) {
      const r = await box.fetch(HOSTILE, path).then(
        (res) => ({ message: `resolved ${res.status}` }),
        (e) => e,
      );
      assert.equal(r.code, ErrorCode.Unavailable, `${path}: ${r.message}`);
    }
  });

  test(`200 fetches at a silent server hold ${HELD} connections; another sandbox's exec is served meanwhile; none outlives its fetch`, async () => {
    const storm = provider({ warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp", callTimeoutMs: 20_000 }).p;
    await withSandbox(storm, "ports-b", async (ctxB, idB) => {
      const b = await storm.connect(ctxB, idB);
      const a = await storm.connect(ctx, id);
      await b.exec("true");
      const before = storm.stats().connections;
      let settled = 0;
      const t0 = performance.now();
      const fetches = Array.from({ length: 200 }, () =>
        a
          .fetch(HOSTILE, "/")
          .then(
            () => "resolved",
            (e) => e.code,
          )
          .finally(() => settled++),
      );
      // The suite's provider has tunnels of its own to ask the server.
      const held = async () => Number(await (await sandbox.fetch(HOSTILE, "/count")).text());
      while ((await held()) < HELD) await new Promise((r) => setTimeout(r, 50));
      const opened = storm.stats().connections - before;
      const t1 = performance.now();
      const r = await b.exec("true");
      const execMs = performance.now() - t1;
      console.log(`# 200 silent fetches in A: ${HELD} held after ${(t1 - t0).toFixed(0)} ms, ${opened} connections; B's exec ${execMs.toFixed(0)} ms`);
      assert.equal(r.exitCode, 0);
      assert.equal(settled, 0, "B's exec completed while the storm was in flight");
      assert.ok(execMs < 5000, `B's exec took ${execMs} ms`);
      // Under gVisor, the new provider's first 32 tunnels each try the node
      // before their relay.
      assert.ok(opened <= (gvisor ? 32 + HELD : HELD), `${opened} connections for 200 fetches`);
      assert.equal(await held(), HELD);
      const codes = await Promise.all(fetches);
      assert.deepEqual([...new Set(codes)], [ErrorCode.Timeout]);
      // Every connection ended with its fetch (a relay included).
      while ((await held()) > 0) await new Promise((r) => setTimeout(r, 50));
    });
  });

  test("url: without a Service it names the fix; bad ports are invalid_request", () => {
    assert.throws(() => sandbox.url(PORT), (e) => e.code === ErrorCode.Unsupported && /service: true/.test(e.message));
    for (const bad of [0, 65536, 1.5, -1, Number.NaN, "80", null, undefined, {}]) {
      assert.throws(() => sandbox.url(bad), { code: ErrorCode.InvalidRequest }, String(bad));
    }
  });

  test("url: a direct sandbox with service: true is named by its headless Service", async () => {
    const direct = provider({ sandbox: directSandbox({ service: true }), suspend: "none", cwd: "/tmp" }).p;
    await withSandbox(direct, "ports-url", async (c, sid) => {
      const box = await direct.connect(c, sid);
      const name = objectName(sid);
      const fqdn = getObject("sandboxes.agents.x-k8s.io", name).status.serviceFQDN;
      assert.ok(fqdn.startsWith(`${name}.${namespace}.svc.`), fqdn);
      assert.deepEqual(box.url(8080), { url: `http://${fqdn}:8080`, host: fqdn, port: 8080 });
      // The controller made it: headless, so the name resolves to the pod's IP.
      assert.equal(getObject("services", name).spec.clusterIP, "None");
    });
  });

  test("destroy through the provider closes open forwards and exchanges", async () => {
    // Runs last: it destroys the suite's sandbox.
    const f = await sandbox.forward(PORT);
    const slow = await sandbox.fetch(PORT, "/slow");
    const reading = slow.text();
    reading.catch(() => {}); // asserted below, after the destroy
    const held = http.get(`${f.url}/slow`);
    const heldClosed = new Promise((r) => held.once("close", r));
    held.on("error", () => {}); // reset by the close below: what the test waits for
    /** @type {http.IncomingMessage} */
    const res = await new Promise((r) => held.once("response", r));
    res.on("error", () => {});
    res.resume();
    await p.destroy(ctx, id);
    id = undefined;
    await f.closed;
    await heldClosed;
    assert.equal(f.connections, 0);
    await assert.rejects(reading, { code: ErrorCode.ConnectionLost });
    await assert.rejects(fetch(f.url));
  });
});

// A sandbox that controls the `cat` the provider's listing runs (a writable
// directory early in its PATH, here through `sandbox.env`) forges the socket
// tables: the list stays bounded, a bad row is skipped, and what the forged
// `cat` writes to stderr is never quoted raw.
describe("listeningPorts with a forged table", { skip, timeout: 300_000 }, () => {
  const forged = "/tmp/forged";
  const { p } = provider({
    sandbox: directSandbox({ env: { PATH: `${forged}:/usr/local/bin:/usr/bin:/bin` } }),
    suspend: "none",
    cwd: "/tmp",
  });
  // $forged/mode: many (300,000 distinct rows), few (4,000 among garbage), fail.
  const CAT = `#!/bin/sh
case "$1" in
/proc/net/tcp) ;;
/proc/net/tcp6) exit 0 ;;
*) exec /bin/cat "$@" ;;
esac
case $(/bin/cat ${forged}/mode) in
many) exec awk 'BEGIN { for (i = 0; i < 300000; i++) printf "%d: %08X:%04X 00000000:0000 0A\\n", i, i, 1 + i % 65535 }' ;;
few) awk 'BEGIN { for (i = 0; i < 4000; i++) { printf "%d: %08X:%04X 00000000:0000 0A\\n", i, i, 1 + i; printf "%d: %08X:%04X 00000000:0000 0A\\n", i, i, 1 + i; printf "x: \\001\\377:%04X 0:0 0A\\n\\n", i } }' ;;
fail) printf 'evil\\000\\033[31m\\377 bytes\\n' >&2; exit 3 ;;
esac
`;

  test("300,000 rows are too_large, 4,000 among garbage are listed, a failing cat's stderr is escaped", async () => {
    await withSandbox(p, "ports-forged", async (ctx, sid) => {
      const box = await p.connect(ctx, sid);
      await box.mkdir(forged);
      await box.writeFile(`${forged}/cat`, CAT);
      await box.exec(`chmod +x ${forged}/cat`);
      assert.equal((await box.exec("command -v cat")).stdout, `${forged}/cat\n`, "the forged cat is the one found");

      await box.writeFile(`${forged}/mode`, "many");
      const rss = process.memoryUsage().rss;
      await assert.rejects(box.listeningPorts(), (e) => {
        assert.equal(e.code, ErrorCode.TooLarge);
        assert.match(e.message, /more than 4096/);
        return true;
      });
      console.log(`# 300,000 forged rows: RSS +${((process.memoryUsage().rss - rss) / MiB).toFixed(1)} MiB`);

      await box.writeFile(`${forged}/mode`, "few");
      const few = await box.listeningPorts();
      assert.equal(few.length, 4000);
      assert.deepEqual(few[0], { port: 1, address: "0.0.0.0", family: "IPv4", loopbackOnly: false });

      await box.writeFile(`${forged}/mode`, "fail");
      await assert.rejects(box.listeningPorts(), (e) => {
        assert.equal(e.code, ErrorCode.Internal);
        assert.match(e.message, /exit 3/);
        assert.match(e.message, /evil\\0\\u\{1b\}/);
        assert.doesNotMatch(e.message, /[\0\x1b]/);
        return true;
      });
    });
  });
});

// An image with BusyBox alone: its httpd answers through the node's
// port-forward under runc, and under gVisor through the relay, whose only
// tool there is BusyBox's nc.
describe("ports in a BusyBox-only image", { skip, timeout: 300_000 }, () => {
  test("BusyBox httpd answers fetch and forward", async () => {
    const { p } = provider({ sandbox: directSandbox({ image: busyboxImage }), suspend: "none", cwd: "/tmp" });
    await withSandbox(p, "ports-busybox", async (c, boxId) => {
      const box = await p.connect(c, boxId);
      const port = serverPort();
      // httpd forks into the background and the exec returns.
      const r = await box.exec(`mkdir -p www && echo hello from busybox > www/index.html && httpd -p 127.0.0.1:${port} -h www`);
      assert.equal(r.exitCode, 0, r.stderr);
      await listening(box, port);
      const res = await box.fetch(port, "/index.html");
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "hello from busybox\n");
      const f = await box.forward(port);
      try {
        const viaForward = await fetch(`${f.url}/index.html`);
        assert.equal(await viaForward.text(), "hello from busybox\n");
      } finally {
        await f.close();
      }
    });
  });
});
