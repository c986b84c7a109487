// Option validation: every bad option throws synchronously from
// agentSandboxProvider() with code "config" and a message naming the option.
// Needs the built addon, no cluster.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import * as pkg from "@rivet-dev/sandbox-adapter-kubernetes";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";

const pool = { warmPool: "pool-workspace" };

function configError(options, ...fragments) {
  assert.throws(
    () => agentSandboxProvider(options),
    (err) => {
      assert.equal(err.code, "config", `code of ${err.message}`);
      for (const f of fragments) assert.match(err.message, new RegExp(escape(f)), err.message);
      return true;
    },
  );
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

test("the package exports exactly the values index.d.ts declares", () => {
  const dts = readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");
  const declared = [...dts.matchAll(/^export (?:declare )?(?:function|const) (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual(Object.keys(pkg).sort(), declared.sort());
  assert.deepEqual(declared.sort(), ["ErrorCode", "agentSandboxProvider"]);
});

test("a valid warm-pool configuration gives a plain provider object with defaults", () => {
  const p = agentSandboxProvider(pool);
  assert.equal(p.name, "agent-sandbox");
  assert.equal(p.cwd, "/workspace");
  for (const m of ["create", "connect", "suspend", "destroy"]) assert.equal(typeof p[m], "function", m);
  assert.deepEqual(Object.keys(p).sort(), ["connect", "create", "cwd", "destroy", "name", "suspend"]);
});

test("name and cwd options are reflected on the provider", () => {
  const p = agentSandboxProvider({ ...pool, name: "k8s", cwd: "/home/agent", suspend: "none" });
  assert.equal(p.name, "k8s");
  assert.equal(p.cwd, "/home/agent");
});

test("exactly one of warmPool and sandbox", () => {
  configError({}, "warmPool", "sandbox");
  configError({ warmPool: "p", sandbox: { image: "i" } }, "exclusive");
  configError({ sandbox: { image: "i" }, suspend: "none", claim: {} }, "`claim`");
});

test("non-object options", () => {
  configError(undefined, "must be an object");
  configError("pool-workspace", "must be an object");
});

test("each bad top-level option is named", () => {
  configError({ ...pool, namespace: "Not_A_Namespace" }, "`namespace`");
  configError({ ...pool, cwd: "relative/dir" }, "`cwd`", "absolute");
  configError({ ...pool, container: "Bad Name" }, "`container`");
  configError({ ...pool, readyTimeoutMs: -5 }, "`readyTimeoutMs`");
  configError({ ...pool, readyTimeoutMs: "soon" }, "`readyTimeoutMs`");
  configError({ ...pool, suspend: "pause" }, "`suspend`", '"pod" or "none"');
  configError({ ...pool, ttlSeconds: 10 }, "`ttlSeconds`", "at least");
  configError({ ...pool, maxConcurrentExecs: 0 }, "`maxConcurrentExecs`");
  configError({ ...pool, onEvent: "log" }, "`onEvent`", "function");
  configError({ ...pool, name: "" }, "`name`");
  configError({ ...pool, warmPool: "UPPER" }, "`warmPool`");
  configError({ ...pool, warmPol: "typo" }, "unknown option `warmPol`");
});

test("claim options are validated", () => {
  configError({ ...pool, claim: { labels: { "bad key!": "x" } } }, "`claim.labels`");
  configError({ ...pool, claim: { labels: { team: "not valid!" } } }, "`claim.labels`");
  configError({ ...pool, claim: { env: { "1BAD": "x" } } }, "`claim.env`");
  configError({ ...pool, claim: { env: { OK: 1 } } }, "`claim.env`", "string");
  configError({ ...pool, claim: { volumeClaimTemplates: [{ spec: {} }] } }, "`claim.volumeClaimTemplates`", "metadata.name");
  configError({ ...pool, claim: { shutdownAfterSeconds: 1.5 } }, "`claim.shutdownAfterSeconds`");
  configError({ ...pool, claim: { unknown: true } }, "`claim.unknown`");
});

test("direct-mode sandbox options are validated", () => {
  const direct = (sandbox, extra = {}) => ({ suspend: "none", sandbox, ...extra });
  configError(direct({}), "`sandbox.image`", "required");
  configError(direct({ image: "has space" }), "`sandbox.image`");
  configError(direct({ image: "i", resources: { cpu: "lots" } }), "`sandbox.resources.cpu`", "quantity");
  configError(direct({ image: "i", resources: { gpu: 1 } }), "`sandbox.resources.gpu`");
  configError(direct({ image: "i", volume: {} }), "`sandbox.volume.size`");
  configError(direct({ image: "i", volume: { size: "1Gi", path: "data" } }), "`sandbox.volume.path`");
  configError(direct({ image: "i", runtimeClassName: "Bad_Name" }), "`sandbox.runtimeClassName`");
  configError(direct({ image: "i", podTemplate: { spec: { containers: "x" } } }), "`sandbox.podTemplate.spec`");
  configError(direct({ image: "i", podTemplate: { extra: 1 } }), "`sandbox.podTemplate.extra`");
});

test('suspend "pod" without a volume at cwd is refused with the fix', () => {
  configError({ sandbox: { image: "i" } }, "sandbox.volume", 'suspend: "none"');
  configError({ sandbox: { image: "i", volume: { size: "1Gi", path: "/data" } } }, '"/workspace"');
  agentSandboxProvider({ sandbox: { image: "i", volume: { size: "1Gi" } } });
  agentSandboxProvider({ sandbox: { image: "i" }, suspend: "none" });
});

test("kubeConfig forms are checked and secrets never appear in errors", () => {
  configError({ ...pool, kubeConfig: "/nonexistent/kubeconfig" }, "`kubeConfig`", "/nonexistent/kubeconfig");
  configError({ ...pool, kubeConfig: "clusters: [\n" }, "`kubeConfig`", "not valid kubeconfig");
  configError({ ...pool, kubeConfig: { server: "https://127.0.0.1:1" } }, "`kubeConfig.token`");
  configError({ ...pool, kubeConfig: { server: "not a url", token: "t" } }, "`kubeConfig.server`");
  configError({ ...pool, kubeConfig: 42 }, "`kubeConfig`");
  const secret = "s3cr3t-token-value";
  for (const bad of [
    { server: "https://127.0.0.1:1", token: secret, caFile: "/nonexistent/ca.pem" },
    { server: "https://127.0.0.1:1", token: secret, bogus: secret },
    { server: "https://127.0.0.1:1", token: 12345678987654 },
  ]) {
    assert.throws(
      () => agentSandboxProvider({ ...pool, kubeConfig: bad }),
      (err) => !err.message.includes(secret) && !err.message.includes("12345678987654"),
    );
  }
  const yaml = `apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: ${secret}\n`;
  agentSandboxProvider({ ...pool, kubeConfig: yaml });
});

test("an unreachable API server is `unavailable`, not a config error, and names the action", async () => {
  const p = agentSandboxProvider({
    ...pool,
    namespace: "ns",
    kubeConfig: { server: "https://127.0.0.1:1", token: "s3cr3t", insecureSkipTlsVerify: true },
  });
  await assert.rejects(p.create({ actorId: "a" }), (err) => {
    assert.equal(err.code, "unavailable", err.message);
    assert.match(err.message, /sandboxwarmpools/);
    assert.doesNotMatch(err.message, /s3cr3t/);
    return true;
  });
  // An id this provider could not have made needs no server to answer: undefined.
  assert.equal(await p.connect({ actorId: "a" }, "not-an-id"), undefined);
});

test("the addon does not keep Node alive", () => {
  // A provider with an event callback that made a failed call: the process
  // must exit on its own once the script is done.
  const script = `
    import * as pkg from "@rivet-dev/sandbox-adapter-kubernetes";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
    const p = agentSandboxProvider({ warmPool: "p", namespace: "ns", onEvent() {},
      kubeConfig: { server: "https://127.0.0.1:1", token: "t" } });
    await p.create({ actorId: "a" }).catch(() => {});
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { timeout: 30_000, encoding: "utf8" });
  assert.equal(r.error, undefined, "the child process did not exit by itself");
  assert.equal(r.status, 0, r.stderr);
});
