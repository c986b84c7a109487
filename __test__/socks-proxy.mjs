// A small SOCKS5 proxy on loopback (RFC 1928, with RFC 1929 username and
// password when `auth` is given), the other kind of proxy teams run: it
// counts the tunnels it opened, the targets asked for (IPv4 or a name, as
// `socks5://` and `socks5h://` send them) and the users it was shown.
// `routes` maps a target to where the proxy really connects.

import net from "node:net";

/** Starts the proxy; `auth` ("user:pass") makes it demand those credentials. */
export async function socksProxy({ auth, routes = {} } = {}) {
  const seen = { tunnels: 0, refused: 0, targets: new Set(), users: [] };
  const sockets = new Set();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client)).on("error", () => client.destroy());
    negotiate(client, auth, routes, seen, sockets);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `socks5://127.0.0.1:${server.address().port}`,
    seen,
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/** The greeting, the optional login and the CONNECT request, then the tunnel. */
function negotiate(client, auth, routes, seen, sockets) {
  let buf = Buffer.alloc(0);
  let stage = "greeting";
  const onData = (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (stage === "greeting") {
        if (buf.length < 2 || buf.length < 2 + buf[1]) return;
        const methods = [...buf.subarray(2, 2 + buf[1])];
        buf = buf.subarray(2 + buf[1]);
        const method = auth ? 0x02 : 0x00;
        if (!methods.includes(method)) return void client.end(Buffer.from([5, 0xff]));
        client.write(Buffer.from([5, method]));
        stage = auth ? "login" : "request";
      } else if (stage === "login") {
        if (buf.length < 2) return;
        const ulen = buf[1];
        if (buf.length < 3 + ulen) return;
        const plen = buf[2 + ulen];
        if (buf.length < 3 + ulen + plen) return;
        const user = buf.subarray(2, 2 + ulen).toString();
        const pass = buf.subarray(3 + ulen, 3 + ulen + plen).toString();
        buf = buf.subarray(3 + ulen + plen);
        seen.users.push(user);
        if (`${user}:${pass}` !== auth) {
          seen.refused++;
          return void client.end(Buffer.from([1, 1]));
        }
        client.write(Buffer.from([1, 0]));
        stage = "request";
      } else {
        if (buf.length < 5) return;
        const atyp = buf[3];
        const len = atyp === 1 ? 4 : atyp === 3 ? 1 + buf[4] : 16;
        if (buf.length < 4 + len + 2) return;
        const host = atyp === 1 ? [...buf.subarray(4, 8)].join(".") : atyp === 3 ? buf.subarray(5, 5 + buf[4]).toString() : "ipv6";
        const target = `${host}:${buf.readUInt16BE(4 + len)}`;
        const early = buf.subarray(4 + len + 2);
        client.off("data", onData);
        tunnel(client, target, routes[target] ?? target, early, seen, sockets);
        return;
      }
    }
  };
  client.on("data", onData);
}

function tunnel(client, target, route, early, seen, sockets) {
  client.pause();
  const [host, port] = route.split(":");
  const upstream = net.connect(Number(port), host, () => {
    seen.tunnels++;
    seen.targets.add(target);
    client.write(Buffer.from([5, 0, 0, 1, 127, 0, 0, 1, 0, 0]));
    if (early.length) upstream.write(early);
    upstream.pipe(client);
    client.pipe(upstream);
    client.resume();
  });
  sockets.add(upstream);
  upstream.on("close", () => sockets.delete(upstream));
  upstream.on("error", () => {
    client.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0]));
    upstream.destroy();
  });
  client.on("close", () => upstream.destroy());
}
