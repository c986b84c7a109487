// A loopback TCP proxy in front of the API server that can fail on purpose:
// `cut()` resets every open connection (a network failure), `stall()` stops
// forwarding on every open connection while keeping its socket open (a hung
// middlebox or node: TCP keepalive never notices, the kernel still ACKs).
// New connections are forwarded normally in both cases. TLS passes through
// untouched; the API server's certificate names the IP, so only the port
// differs from a direct connection.
//
// The proxy runs in a child process of its own, as a middlebox would: Node 22
// could hang at exit in its handle cleanup when the test process itself held
// the stalled-then-reset sockets (they stayed "closing" forever), and killing
// the child closes everything at once.

import { fork } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import net from "node:net";
import { fileURLToPath } from "node:url";

const self = fileURLToPath(import.meta.url);

/** Starts a proxy to `host:port` in a child process; resolves once it listens. */
export async function faultProxy(host, port) {
  const child = fork(self, [host, String(port)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const [{ port: listening }] = await Promise.race([
    once(child, "message"),
    once(child, "exit").then(([code]) => Promise.reject(new Error(`the fault proxy exited (${code})`))),
  ]);
  /** Sends `op` and resolves with the child's answer once it was done. */
  const ask = async (op) => {
    child.send({ op });
    const [answer] = await once(child, "message");
    return answer;
  };
  return {
    port: listening,
    /** Connections accepted so far. */
    accepted: async () => (await ask("count")).accepted,
    /** Resets every open connection. */
    cut: () => ask("cut"),
    /** Stops forwarding on every open connection; the sockets stay open. */
    stall: () => ask("stall"),
    /** Ends the proxy and, with it, every connection through it. */
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, "exit");
      child.kill("SIGKILL");
      await exited;
    },
  };
}

/** The proxy itself (the child process). */
async function serve(host, port) {
  const open = new Set();
  let accepted = 0;
  const server = net.createServer((client) => {
    accepted++;
    const upstream = net.connect(port, host);
    const pair = { client, upstream };
    open.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      open.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) socket.on("error", end).on("close", end);
  });
  await new Promise((resolve, reject) => server.once("error", reject).listen(0, "127.0.0.1", resolve));
  const ops = {
    count: () => {},
    cut() {
      for (const { client, upstream } of open) {
        client.resetAndDestroy();
        upstream.destroy();
      }
    },
    stall() {
      for (const { client, upstream } of open) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
  };
  process.on("message", ({ op }) => {
    ops[op]();
    process.send({ op, accepted });
  });
  // The parent gone (a crashed test): go too.
  process.on("disconnect", () => process.exit(0));
  process.send({ port: server.address().port });
}

/** The test ServiceAccount's kubeconfig (YAML) with its server replaced by the proxy. */
export function kubeconfigThrough(proxy) {
  const yaml = readFileSync(process.env.KUBECONFIG, "utf8");
  return yaml.replace(/server: https:\/\/[^:\s]+:\d+/, `server: https://127.0.0.1:${proxy.port}`);
}

/** The API server's host and port from the test kubeconfig. */
export function apiServerAddress() {
  const yaml = readFileSync(process.env.KUBECONFIG, "utf8");
  const [, host, port] = /server: https:\/\/([^:\s]+):(\d+)/.exec(yaml);
  return { host, port: Number(port) };
}

if (process.argv[1] === self) await serve(process.argv[2], Number(process.argv[3]));
