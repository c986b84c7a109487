// How the provider reaches the API server, against the local control plane:
// calls share one HTTP/2 connection (watches and WebSocket upgrades, execs
// among them, have their own), and kubeconfig's tls-server-name is the name
// the server's certificate is checked against.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { apiConnections } from "../bench/lib/scale-observe.mjs";
import { actorId, image, namespace, skip } from "./cluster.mjs";
import { provider, sh, withSandbox } from "./sandbox-fixture.mjs";

const kubeconfig = () => readFileSync(process.env.KUBECONFIG, "utf8");
const apiPort = () => Number(new URL(/server:\s*(\S+)/.exec(kubeconfig())[1]).port);

/** The test ServiceAccount's kubeconfig with `tls-server-name: name` on its cluster. */
const withServerName = (name) => kubeconfig().replace(/^(\s*)server: (.*)$/m, `$1server: $2\n$1tls-server-name: ${name}`);

describe("the API connection", { skip, timeout: 300_000 }, () => {
  test("calls share one connection; each watch has its own, and an exec opens one", async () => {
    const { p } = provider({ warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp" });
    await withSandbox(p, "one-connection", async (ctx, id) => {
      const sandbox = await p.connect(ctx, id);
      // The three watches are open; nothing else is in flight (a warm
      // create+connect makes no exec): one connection each, and one that the
      // create's and connect's requests shared.
      assert.equal(p.stats().watches, 3, JSON.stringify(p.stats()));
      assert.equal(apiConnections(process.pid, apiPort()), 4, "connections of this process to the API server");
      const before = p.stats().connections;
      await Promise.all(Array.from({ length: 20 }, () => p.connect(ctx, id)));
      assert.equal(p.stats().connections - before, 0, "20 connects at once open no connection");
      await sh(sandbox, "true");
      assert.equal(p.stats().connections - before, 1, "an exec opens one (a WebSocket upgrade)");
    });
  });

  test("tls-server-name is the name the certificate is checked against", async () => {
    // The local API server's certificate names 127.0.0.1 and kubernetes.default.svc, not other.example.
    const id = `${namespace}/sbx-00000000000000000000`;
    const ctx = { actorId: actorId("server-name") };
    const options = (kubeConfig) => ({ namespace, sandbox: { image }, suspend: "none", kubeConfig });
    const named = agentSandboxProvider(options(withServerName("kubernetes.default.svc")));
    assert.equal(await named.connect(ctx, id), undefined, "reached the API server: no such sandbox");
    const wrong = agentSandboxProvider(options(withServerName("other.example")));
    await assert.rejects(wrong.connect(ctx, id), (err) => {
      assert.equal(err.code, "unavailable", err.message);
      assert.match(err.message, /certificate/i);
      return true;
    });
  });
});
