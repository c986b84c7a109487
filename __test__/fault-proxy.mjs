// A loopback TCP proxy in front of the API server that can fail on purpose:
// `cut()` resets every open connection (a network failure), `stall()` stops
// forwarding on every open connection while keeping its socket open (a hung
// middlebox or node: TCP keepalive never notices, the kernel still ACKs).
// New connections are forwarded normally in both cases. TLS passes through
// untouched; the API server's certificate names the IP, so only the port
// differs from a direct connection.

import net from "node:net";
import { readFileSync } from "node:fs";

/** Starts a proxy to `host:port`; resolves once it listens. */
export async function faultProxy(host, port) {
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
  return {
    port: server.address().port,
    /** Connections accepted so far. */
    get accepted() {
      return accepted;
    },
    /** Resets every open connection. */
    cut() {
      for (const { client, upstream } of open) {
        client.resetAndDestroy();
        upstream.destroy();
      }
    },
    /** Stops forwarding on every open connection; the sockets stay open. */
    stall() {
      for (const { client, upstream } of open) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    close() {
      this.cut();
      server.close();
    },
  };
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
