// A small HTTP CONNECT proxy on loopback, as a corporate proxy would be: it
// counts the tunnels it opened and the Proxy-Authorization it was shown, and
// can require credentials (407 otherwise). `routes` maps a CONNECT target to
// where the proxy really connects, so a test can name a server that only the
// proxy can reach.

import http from "node:http";
import net from "node:net";

/** Starts the proxy; `auth` ("user:pass") makes it demand those credentials. */
export async function connectProxy({ auth, routes = {} } = {}) {
  const seen = { tunnels: 0, refused: 0, targets: new Set(), authorizations: [] };
  const sockets = new Set();
  const server = http.createServer((_req, res) => res.writeHead(405).end());
  server.on("connect", (req, client, head) => {
    const given = req.headers["proxy-authorization"];
    seen.authorizations.push(given);
    if (auth && given !== `Basic ${Buffer.from(auth).toString("base64")}`) {
      seen.refused++;
      client.end("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n");
      return;
    }
    const [host, port] = (routes[req.url] ?? req.url).split(":");
    const upstream = net.connect(Number(port), host, () => {
      seen.tunnels++;
      seen.targets.add(req.url);
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
      s.on("close", () => sockets.delete(s));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}
