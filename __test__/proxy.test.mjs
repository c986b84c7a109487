// Through an HTTP CONNECT proxy (connect-proxy.mjs) or a SOCKS5 proxy
// (socks-proxy.mjs) named by the kubeconfig's `proxy-url`, as teams behind
// corporate proxies configure it: every request and every exec goes through
// the tunnel, credentials in the URL reach the proxy, and a loopback cluster
// is never sent to an HTTPS_PROXY from the environment (as kubectl).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, describe, test } from "node:test";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, namespace, skip } from "./cluster.mjs";
import { connectProxy } from "./connect-proxy.mjs";
import { socksProxy } from "./socks-proxy.mjs";

const kubeconfig = () => readFileSync(process.env.KUBECONFIG, "utf8");
/** The API server's `host:port`. */
const apiServer = () => /server: https:\/\/(\S+)/.exec(kubeconfig())[1];
/** Where the test kubeconfig points instead: a closed port only the proxy routes to the API server. */
const ONLY_VIA_PROXY = "127.0.0.1:9";

/** The test kubeconfig with `proxy-url` set on its cluster, and its server reachable only through it. */
function withProxyUrl(url) {
  return kubeconfig()
    .replace(/server: https:\/\/\S+/, `server: https://${ONLY_VIA_PROXY}`)
    .replace(/(\n(\s*)server: .*)/, `$1\n$2proxy-url: ${url}`);
}

/** Proxies started by the tests, closed at the end. */
const proxies = [];
after(() => proxies.forEach((p) => p.close()));
/** `proxy`, to be closed at the end. */
const started = (proxy) => (proxies.push(proxy), proxy);

/** create, connect, an exec and a file round trip, destroy, with `kubeConfig`. */
async function lifecycle(kubeConfig, label) {
  const p = agentSandboxProvider({ namespace, warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp", kubeConfig });
  const ctx = { actorId: actorId(label) };
  const id = await p.create(ctx);
  try {
    const sandbox = await p.connect(ctx, id);
    assert.equal((await sandbox.exec(`echo ${label}`)).stdout, `${label}\n`);
    await sandbox.writeFile(`/tmp/${label}.txt`, `via ${label}`);
    assert.equal(Buffer.from(await sandbox.readFile(`/tmp/${label}.txt`)).toString(), `via ${label}`);
  } finally {
    await p.destroy(ctx, id);
  }
}

/** A create through `proxyUrl` (whose password is "wrong-password") is `unavailable`, without the password. */
async function refusedLogin(proxyUrl, label) {
  const p = agentSandboxProvider({ namespace, warmPool: "pool-ephemeral", suspend: "none", kubeConfig: withProxyUrl(proxyUrl) });
  await assert.rejects(p.create({ actorId: actorId(label) }), (e) => {
    assert.equal(e.code, "unavailable", e.message);
    assert.doesNotMatch(e.message, /wrong-password/);
    return true;
  });
}

describe("through an HTTP CONNECT proxy", { skip, timeout: 300_000 }, () => {
  test("create, connect, exec, files and destroy all go through the proxy's tunnels", async () => {
    const proxy = started(await connectProxy({ auth: "agent:s3cr%t", routes: { [ONLY_VIA_PROXY]: apiServer() } }));
    await lifecycle(withProxyUrl(proxy.url.replace("//", "//agent:s3cr%25t@")), "proxied");
    // The server named in the kubeconfig is a closed port: all of that
    // worked only through the tunnels.
    assert.ok(proxy.seen.tunnels > 0);
    assert.deepEqual([...proxy.seen.targets], [ONLY_VIA_PROXY], "every tunnel asked for the configured server");
    assert.equal(proxy.seen.refused, 0, "the URL's credentials were sent (percent-decoded)");
  });

  test("a proxy that refuses the credentials is an error naming the failure, without the password", async () => {
    const proxy = started(await connectProxy({ auth: "agent:right", routes: { [ONLY_VIA_PROXY]: apiServer() } }));
    await refusedLogin(proxy.url.replace("//", "//agent:wrong-password@"), "refused");
    assert.ok(proxy.seen.refused > 0);
  });

  test("HTTPS_PROXY in the environment is not used for a loopback API server (as kubectl)", () => {
    // A child with a proxy that does not exist: it still reaches the cluster.
    const script = `
      import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
      const p = agentSandboxProvider({ namespace: ${JSON.stringify(namespace)}, warmPool: "pool-ephemeral", suspend: "none" });
      console.log(String(await p.connect({ actorId: "x" }, ${JSON.stringify(`${namespace}/sbx-00000000000000000000`)})));
    `;
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, HTTPS_PROXY: "http://127.0.0.1:9", https_proxy: "http://127.0.0.1:9" },
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      encoding: "utf8",
    });
    assert.equal(out.trim(), "undefined", "a missing sandbox, found without the proxy");
  });
});

describe("through a SOCKS5 proxy", { skip, timeout: 300_000 }, () => {
  test("socks5h:// with a username and password: everything goes through the proxy", async () => {
    const proxy = started(await socksProxy({ auth: "agent:s3cr%t", routes: { [ONLY_VIA_PROXY]: apiServer() } }));
    await lifecycle(withProxyUrl(proxy.url.replace("socks5://", "socks5h://agent:s3cr%25t@")), "socks5h");
    assert.ok(proxy.seen.tunnels > 0);
    assert.deepEqual([...proxy.seen.targets], [ONLY_VIA_PROXY], "every tunnel asked for the configured server");
    assert.equal(proxy.seen.refused, 0, "the URL's credentials were sent (percent-decoded)");
    assert.ok(proxy.seen.users.every((u) => u === "agent"));
  });

  test("socks5:// without credentials", async () => {
    const proxy = started(await socksProxy({ routes: { [ONLY_VIA_PROXY]: apiServer() } }));
    await lifecycle(withProxyUrl(proxy.url), "socks5");
    assert.ok(proxy.seen.tunnels > 0);
    assert.deepEqual(proxy.seen.users, []);
  });

  test("a SOCKS5 proxy that refuses the login is `unavailable`, without the password", async () => {
    const proxy = started(await socksProxy({ auth: "agent:right", routes: { [ONLY_VIA_PROXY]: apiServer() } }));
    await refusedLogin(proxy.url.replace("//", "//agent:wrong-password@"), "socks-refused");
    assert.ok(proxy.seen.refused > 0);
  });
});
