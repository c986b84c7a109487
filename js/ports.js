// The ports of a sandbox: `listeningPorts`, `forward` (a local listener whose
// every connection is its own tunnel) and `fetch` (one HTTP exchange over a
// tunnel, as a WHATWG Response). The tunnel (pods/portforward) is the
// addon's NativeTunnel; what napi cannot do lives here: Node's listener, its
// HTTP client over the tunnel as a socket, and web streams.

import http from "node:http";
import net from "node:net";
import { Duplex, Readable } from "node:stream";

import { abortError, callNativeSync, fromNative, invalidRequest, withCode } from "./errors.js";
import { native as addon } from "./native.js";
import { callOptions, callWithSignal, isSignal } from "./tasks.js";

/**
 * Things one actor opened to one sandbox (forwards, tunnels) that the
 * provider's suspend/destroy closes: a Set per actor and sandbox id,
 * dropped when empty.
 */
export class OpenPorts {
  /** @type {Map<string, Set<{ close(): void }>>} */
  #byKey = new Map();

  /** Records `thing` under `actor` and `id`; returns what forgets it. */
  add(actor, id, thing) {
    const key = JSON.stringify([actor, id]);
    let set = this.#byKey.get(key);
    if (!set) this.#byKey.set(key, (set = new Set()));
    set.add(thing);
    return () => {
      set.delete(thing);
      if (set.size === 0 && this.#byKey.get(key) === set) this.#byKey.delete(key);
    };
  }

  /** Closes everything `actor` opened to `id`. */
  closeAll(actor, id) {
    const key = JSON.stringify([actor, id]);
    const set = this.#byKey.get(key);
    this.#byKey.delete(key);
    for (const thing of set ?? []) thing.close();
  }
}

/** `port` as a number in 1..65535 (the addon checks the number), else `invalid_request`. */
function checkPort(port, name = "port") {
  if (typeof port !== "number") {
    throw invalidRequest(`${name} must be an integer from 1 to 65535, got ${String(port)}; nothing was opened`);
  }
  return callNativeSync(() => addon.checkPort(name, port));
}

/**
 * One connection to a port in the sandbox as a Node Duplex: bytes from the
 * port are pushed as they arrive, and the tunnel pauses while the reader's
 * buffer is full; writes settle once the tunnel took them. The server
 * closing the connection is the end of the readable side; a tunnel that
 * fails destroys the socket with the tunnel's error (`not_found` when
 * nothing listens). The WebSocket has no half-close, so ending the writable
 * side sends nothing.
 */
class TunnelSocket extends Duplex {
  /** @param {any} native @param {number} port @param {(socket: TunnelSocket) => () => void} track */
  constructor(native, port, track) {
    super({ allowHalfOpen: false });
    this.handle = native.openTunnel(port, (/** @type {number} */ _stream, /** @type {Buffer} */ chunk) => {
      if (!this.destroyed && !this.push(chunk)) this.handle.pause();
    });
    this.untrack = track(this);
    this.handle.wait().then(
      () => this.push(null),
      (/** @type {unknown} */ err) => this.destroy(/** @type {Error} */ (fromNative(err))),
    );
  }

  _read() {
    this.handle.resume();
  }

  _write(chunk, _encoding, callback) {
    this.handle.write(chunk).then(() => callback(), callback);
  }

  _final(callback) {
    callback();
  }

  _destroy(err, callback) {
    this.handle.close();
    this.untrack();
    callback(err);
  }

  close() {
    this.destroy(withCode(new Error("the sandbox was suspended or destroyed"), "connection_lost"));
  }

  // What Node's HTTP client asks of a socket.
  setNoDelay() {}
  setKeepAlive() {}
  setTimeout() {}
  ref() {}
  unref() {}
}

/**
 * @param {any} native a NativeSandbox
 * @param {(thing: { close(): void }) => () => void} track records what suspend/destroy closes
 */
export function portMethods(native, track) {
  const listeningPorts = async (options) => {
    const list = await callWithSignal(options, "listeningPorts", (cancel) => native.listeningPorts(cancel));
    return list.map((p) => ({ port: p.port, address: p.address, family: p.family, loopbackOnly: p.loopbackOnly }));
  };

  return {
    /** TCP ports listening in the sandbox: [{ port, address, family, loopbackOnly }]. */
    listeningPorts,

    /** `{ url, host, port }` of `port` through the sandbox's Service, for clients inside the cluster. */
    url(port) {
      const u = callNativeSync(() => native.url(port));
      return { url: u.url, host: u.host, port: u.port };
    },

    /**
     * A local listener (default 127.0.0.1, a free port) whose every
     * connection is tunnelled to `port` in the sandbox: loopback only
     * unless `allowRemote`, at most `maxConnections` at once.
     */
    async forward(port, options) {
      checkPort(port);
      const o = callOptions(options, "forward");
      const { localPort = 0, host = "127.0.0.1", verify = true, signal, onError } = o;
      const { allowRemote = false, maxConnections = DEFAULT_MAX_CONNECTIONS, checkHost = false } = o;
      if (localPort !== 0) checkPort(localPort, "localPort");
      if (typeof host !== "string" || host === "") throw invalidRequest("host must be a non-empty string");
      if (typeof allowRemote !== "boolean") throw invalidRequest("allowRemote must be a boolean");
      if (!allowRemote && !isLoopback(host)) {
        throw invalidRequest(
          `host ${JSON.stringify(host)} is not a loopback address, so other machines could reach the sandbox's port: ` +
            "pass allowRemote: true to mean it; nothing was opened",
        );
      }
      if (!Number.isInteger(maxConnections) || maxConnections < 1 || maxConnections > MAX_CONNECTIONS) {
        throw invalidRequest(`maxConnections must be an integer from 1 to ${MAX_CONNECTIONS}, got ${String(maxConnections)}`);
      }
      if (typeof checkHost !== "boolean") throw invalidRequest("checkHost must be a boolean");
      if (typeof verify !== "boolean") throw invalidRequest("verify must be a boolean");
      if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
      if (onError != null && typeof onError !== "function") throw invalidRequest("onError must be a function");
      if (signal?.aborted) throw abortError();
      if (verify && !(await listeningPorts({ signal })).some((p) => p.port === port)) {
        throw withCode(new Error(`nothing listens on port ${port} in the sandbox; nothing was opened`), "not_found");
      }
      if (signal?.aborted) throw abortError();
      return openForward(native, port, { localPort, host, maxConnections, checkHost, signal, onError }, track);
    },

    /**
     * One HTTP/1.1 exchange with `port` in the sandbox, as a WHATWG
     * Response whose body streams with backpressure.
     */
    async fetch(port, input, init) {
      checkPort(port);
      return fetchThrough(native, port, input, init, track);
    },
  };
}

/** Connections a forward takes at once by default, and at most. */
const DEFAULT_MAX_CONNECTIONS = 32;
const MAX_CONNECTIONS = 4096;

/** Whether `host` names a loopback address: "localhost", 127.0.0.0/8, ::1 (also IPv4-mapped). */
function isLoopback(host) {
  if (host === "localhost") return true;
  if (net.isIPv4(host)) return LOOPBACK.check(host, "ipv4");
  return net.isIPv6(host) && LOOPBACK.check(host, "ipv6");
}
const LOOPBACK = new net.BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");
LOOPBACK.addSubnet("::ffff:127.0.0.0", 104, "ipv6");

/** Most bytes, and longest wait, for a request head `checkHost` reads before it refuses a connection. */
const MAX_REQUEST_HEAD = 16 * 1024;
const REQUEST_HEAD_TIMEOUT_MS = 30_000;

/**
 * With `checkHost`: the bytes up to the end of the connection's first HTTP
 * request head, or null when the connection ends, errs or sends more than
 * MAX_REQUEST_HEAD first. Nothing is forwarded meanwhile.
 * @param {net.Socket} socket
 * @returns {Promise<Buffer | null>}
 */
function readRequestHead(socket) {
  return new Promise((resolve) => {
    /** @type {Buffer[]} */
    const chunks = [];
    let size = 0;
    const done = (/** @type {Buffer | null} */ head) => {
      socket.setTimeout(0);
      socket.off("data", onData).off("end", fail).off("error", fail).off("close", fail).off("timeout", fail);
      socket.pause();
      resolve(head);
    };
    const fail = () => done(null);
    const onData = (/** @type {Buffer} */ chunk) => {
      chunks.push(chunk);
      size += chunk.length;
      const buffered = Buffer.concat(chunks);
      if (buffered.subarray(0, MAX_REQUEST_HEAD).includes("\r\n\r\n")) done(buffered);
      else if (size > MAX_REQUEST_HEAD) fail();
    };
    // A client that never finishes its head would hold a connection slot.
    socket.setTimeout(REQUEST_HEAD_TIMEOUT_MS);
    socket.on("data", onData).on("end", fail).on("error", fail).on("close", fail).on("timeout", fail);
  });
}

/**
 * Whether a request head names one of `allowed` as its Host (one Host
 * line, compared without case). A DNS-rebinding page reaches the listener
 * under its own name, which is what this refuses.
 * @param {Buffer} head
 * @param {Set<string>} allowed
 */
function hostAllowed(head, allowed) {
  const lines = head.subarray(0, head.indexOf("\r\n\r\n")).toString("latin1").split("\r\n").slice(1);
  const hosts = lines.filter((l) => /^host[ \t]*:/i.test(l)).map((l) => l.slice(l.indexOf(":") + 1).trim().toLowerCase());
  return hosts.length === 1 && allowed.has(hosts[0]);
}

const MISDIRECTED = "HTTP/1.1 421 Misdirected Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/** The listener of `forward`. */
async function openForward(native, port, { localPort, host, maxConnections, checkHost, signal, onError }, track) {
  /** @type {Set<TunnelSocket>} */
  const tunnels = new Set();
  /** @type {Set<net.Socket>} */
  const sockets = new Set();
  /** Tells the caller about a failed connection; the listener goes on. */
  const report = (/** @type {Error} */ err) => {
    if (!onError) return;
    try {
      onError(err);
    } catch (e) {
      process.emitWarning(`agent-sandbox-provider: forward's onError threw: ${/** @type {any} */ (e)?.stack ?? e}`);
    }
  };
  const server = net.createServer((socket) => {
    // Each connection is a tunnel: beyond the cap it is reset, not queued.
    if (sockets.size >= maxConnections) {
      socket.on("error", () => {});
      socket.resetAndDestroy();
      report(withCode(new Error(`forward: more than maxConnections (${maxConnections}) connections at once; this one was reset`), "unavailable"));
      return;
    }
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    if (!checkHost) {
      connect(socket, null);
      return;
    }
    // The tunnel opens only for a request that names this listener.
    socket.on("error", () => {});
    readRequestHead(socket).then((head) => {
      if (head && hostAllowed(head, allowedHosts)) return connect(socket, head);
      if (!socket.destroyed) socket.end(MISDIRECTED, () => socket.destroy());
      report(
        withCode(
          new Error(`forward: a connection whose request did not name this listener as its Host (${[...allowedHosts].join(", ")}) was refused with 421`),
          "invalid_request",
        ),
      );
    });
  });
  /** Tunnels `socket` to the sandbox's port, `head` (already read from it) first. */
  const connect = (/** @type {net.Socket} */ socket, /** @type {Buffer | null} */ head) => {
    const tunnel = new TunnelSocket(native, port, (t) => {
      tunnels.add(t);
      return () => tunnels.delete(t);
    });
    if (head) tunnel.write(head);
    socket.pipe(tunnel).pipe(socket);
    socket.on("error", () => tunnel.destroy());
    socket.on("close", () => tunnel.destroy());
    // Only this connection fails: reset it, tell the caller, keep listening.
    tunnel.on("error", (err) => {
      socket.resetAndDestroy();
      report(err);
    });
  };
  await new Promise((resolve, reject) => {
    server.once("error", (/** @type {any} */ err) =>
      reject(withCode(new Error(`cannot listen on ${host}:${localPort}: ${err.message}`), "invalid_request")),
    );
    server.listen(localPort, host, () => resolve(undefined));
  });
  let resolveClosed = () => {};
  const closed = new Promise((resolve) => (resolveClosed = () => resolve(undefined)));
  let untrack = () => {};
  const close = () => {
    untrack();
    signal?.removeEventListener("abort", close);
    server.close(() => resolveClosed());
    for (const t of tunnels) t.destroy();
    for (const s of sockets) s.destroy();
    return closed;
  };
  const forward = {
    localPort: /** @type {net.AddressInfo} */ (server.address()).port,
    url: "",
    get connections() {
      return sockets.size;
    },
    close,
    closed,
  };
  const authority = `${host.includes(":") ? `[${host}]` : host}:${forward.localPort}`;
  forward.url = `http://${authority}`;
  // The names a client of this listener uses: its own, and for a loopback
  // listener the other spellings of loopback.
  const allowedHosts = new Set([authority.toLowerCase()]);
  if (isLoopback(host)) for (const h of ["localhost", "127.0.0.1", "[::1]"]) allowedHosts.add(`${h}:${forward.localPort}`);
  untrack = track(forward);
  signal?.addEventListener("abort", close, { once: true });
  return forward;
}

const NULL_BODY = new Set([101, 204, 205, 304]);

/** `fetch`: the request through Node's HTTP client over one tunnel. */
async function fetchThrough(native, port, input, init, track) {
  /** @type {Request} */
  let request;
  try {
    const base = `http://localhost:${port}`;
    request = new Request(typeof input === "string" ? new URL(input, base) : input, init);
  } catch (err) {
    throw withCode(new TypeError(`fetch: ${/** @type {any} */ (err)?.message}`), "invalid_request");
  }
  const headers = new Headers(request.headers);
  if (headers.has("upgrade") || /\bupgrade\b/i.test(headers.get("connection") ?? "") || request.method === "CONNECT") {
    throw invalidRequest("fetch does not carry upgrades (WebSocket, CONNECT): use forward; nothing was sent");
  }
  const signal = request.signal;
  if (signal.aborted) throw abortError();
  if (!headers.has("host")) headers.set("host", `localhost:${port}`);
  const url = new URL(request.url);
  const headTimeoutMs = native.callTimeoutMs;
  return new Promise((resolve, reject) => {
    /** @type {TunnelSocket | undefined} */
    let socket;
    /** @type {http.IncomingMessage | undefined} */
    let response;
    let settled = false;
    const fail = (/** @type {Error} */ err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      reject(err);
    };
    // A server that never answers holds a tunnel: the head has the
    // provider's call timeout, as every other call has.
    const timer = setTimeout(() => {
      const err = withCode(
        new Error(`fetch: no response from port ${port} in the sandbox within ${headTimeoutMs} ms (callTimeoutMs)`),
        "timeout",
      );
      fail(err);
      req.destroy(err);
    }, headTimeoutMs);
    const req = http.request({
      method: request.method,
      path: url.pathname + url.search,
      headers: Object.fromEntries(headers),
      // No agent: with createConnection alone Node uses that one socket.
      createConnection: () => (socket = new TunnelSocket(native, port, track)),
    });
    // The body being read fails with the abort (or the tunnel's error), not
    // with Node's own "aborted" ECONNRESET.
    const onAbort = () => {
      response?.destroy(abortError());
      req.destroy(abortError());
    };
    signal.addEventListener("abort", onAbort, { once: true });
    req.on("error", (err) => fail(asFetchError(err, port)));
    // Without this listener Node answers a 101 by destroying the socket
    // silently, and the exchange would never settle.
    req.on("upgrade", (_res, upgraded) => {
      upgraded.destroy();
      fail(withCode(new Error(`fetch: the server on port ${port} switched protocols (101); fetch carries no upgrades, use forward`), "unavailable"));
    });
    // Whatever else ends the request before a response (no error said).
    req.on("close", () => fail(withCode(new Error(`fetch: the connection to port ${port} closed before a response`), "connection_lost")));
    req.on("response", (res) => {
      settled = true;
      clearTimeout(timer);
      response = res;
      socket?.once("error", (err) => res.destroy(asFetchError(err, port)));
      res.on("close", () => signal.removeEventListener("abort", onAbort));
      const out = new Headers();
      for (let i = 0; i < res.rawHeaders.length; i += 2) {
        try {
          out.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
        } catch {
          // A header the Fetch standard refuses (a hostile server's) is left out.
        }
      }
      const status = /** @type {number} */ (res.statusCode);
      const empty = NULL_BODY.has(status) || request.method === "HEAD";
      if (empty) res.resume();
      try {
        resolve(
          new Response(empty ? null : /** @type {ReadableStream} */ (Readable.toWeb(res)), {
            status,
            statusText: res.statusMessage,
            headers: out,
          }),
        );
      } catch (err) {
        socket?.destroy();
        signal.removeEventListener("abort", onAbort);
        reject(withCode(new Error(`fetch: the server's answer is not a valid response: ${/** @type {any} */ (err)?.message}`), "unavailable"));
      }
    });
    if (request.body) {
      Readable.fromWeb(/** @type {any} */ (request.body)).on("error", (err) => req.destroy(err)).pipe(req);
    } else {
      req.end();
    }
  });
}

/** An error of the HTTP exchange with a `code`: the tunnel's own, or `connection_lost`. */
function asFetchError(err, port) {
  if (typeof err?.code === "string" && /^[a-z_]+$/.test(err.code)) return err;
  return withCode(new Error(`fetch to port ${port} in the sandbox failed: ${err?.message ?? err}`), "connection_lost");
}
