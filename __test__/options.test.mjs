// Option validation: every bad option throws synchronously from
// agentSandboxProvider() with code "config" and a message naming the option.
// Needs the built addon, no cluster.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import vm from "node:vm";
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

// Values napi cannot convert to JSON (or JSON would silently change) are
// caught in JS: `config`, the option's path, and none of napi's or serde's text.
function unconvertible(options, path, ...fragments) {
  assert.throws(
    () => agentSandboxProvider(options),
    (err) => {
      assert.equal(err.code, "config", `code of ${err.message}`);
      assert.ok(err.message.includes(path), `${JSON.stringify(path)} in: ${err.message}`);
      for (const f of fragments) assert.ok(err.message.includes(f), `${JSON.stringify(f)} in: ${err.message}`);
      assert.doesNotMatch(err.message, /napi|serde|Failed to convert/i);
      return true;
    },
  );
}

const vct = { metadata: { name: "work" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } } };
const direct = (sandbox) => ({ sandbox: { image: "i", ...sandbox }, suspend: "none" });
const throwingGetter = (obj, key) =>
  Object.defineProperty(obj, key, { enumerable: true, get: () => { throw new Error("getter boom"); } });
function nested(depth) {
  // Built iteratively: deep enough to overflow a naive recursive copy.
  let o = {};
  for (let i = 0; i < depth; i++) o = { x: o };
  return o;
}
function revoked() {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}
function cyclic() {
  const o = { ...pool, claim: { labels: {} } };
  o.claim.labels.self = o;
  return o;
}
function selfArray() {
  const a = [];
  a.push(a);
  return a;
}

// [what, options, the path as the message names it, ...other fragments]
const UNCONVERTIBLE = [
  // top level
  ["NaN", { ...pool, readyTimeoutMs: NaN }, "`readyTimeoutMs`", "finite number", "NaN"],
  ["Infinity", { ...pool, readyTimeoutMs: Infinity }, "`readyTimeoutMs`", "Infinity"],
  ["-Infinity", { ...pool, maxConcurrentExecs: -Infinity }, "`maxConcurrentExecs`", "-Infinity"],
  ["BigInt", { ...pool, ttlSeconds: 600n }, "`ttlSeconds`", "bigint"],
  ["symbol", { ...pool, name: Symbol("n") }, "`name`", "symbol"],
  ["function", { ...pool, namespace: () => "ns" }, "`namespace`", "function"],
  ["Date", { ...pool, cwd: new Date() }, "`cwd`", "a Date"],
  ["Map", { ...pool, claim: new Map([["labels", {}]]) }, "`claim`", "a Map"],
  ["Buffer", { ...pool, kubeConfig: Buffer.from("apiVersion: v1") }, "`kubeConfig`", "a Buffer"],
  ["class instance", { ...pool, claim: new (class ClaimOptions {})() }, "`claim`", "a ClaimOptions"],
  ["boxed string", { ...pool, warmPool: new String("p") }, "`warmPool`", "a String"],
  ["throwing getter", throwingGetter({ ...pool }, "namespace"), "`namespace`", "could not be read"],
  ["throwing onEvent getter", throwingGetter({ ...pool }, "onEvent"), "`onEvent`", "could not be read"],
  ["revoked Proxy", { ...pool, claim: revoked() }, "`claim`", "could not be read"],
  // nested
  ["nested Infinity", direct({ resources: { cpu: Infinity } }), "`sandbox.resources.cpu`", "finite number"],
  ["nested NaN", direct({ volume: { size: NaN } }), "`sandbox.volume.size`", "finite number"],
  ["nested symbol", { ...pool, claim: { labels: { a: Symbol() } } }, "`claim.labels.a`", "symbol"],
  ["nested BigInt, quoted key", { ...pool, claim: { labels: { "x y": 1n } } }, '`claim.labels["x y"]`', "bigint"],
  ["nested function", { ...pool, claim: { env: { KEY() {} } } }, "`claim.env.KEY`", "function"],
  ["nested Date", direct({ annotations: { when: new Date() } }), "`sandbox.annotations.when`", "a Date"],
  ["[undefined]", { ...pool, claim: { volumeClaimTemplates: [undefined] } }, "`claim.volumeClaimTemplates[0]`", "undefined"],
  ["sparse array", { ...pool, claim: { volumeClaimTemplates: [vct, , vct] } }, "`claim.volumeClaimTemplates[1]`", "hole"],
  [
    "NaN inside an array entry",
    { ...pool, claim: { volumeClaimTemplates: [{ ...vct, spec: { resources: { requests: { storage: NaN } } } }] } },
    "`claim.volumeClaimTemplates[0].spec.resources.requests.storage`",
  ],
  [
    "symbol deep in a pod template",
    direct({ podTemplate: { spec: { containers: [{ name: "c", env: [{ name: "K", value: Symbol() }] }] } } }),
    "`sandbox.podTemplate.spec.containers[0].env[0].value`",
    "symbol",
  ],
  ["nested throwing getter", { ...pool, claim: throwingGetter({}, "labels") }, "`claim.labels`", "could not be read"],
  [
    "Proxy whose get throws",
    { ...pool, claim: new Proxy({ labels: {} }, { get() { throw new Error("trap"); } }) },
    "`claim.labels`",
    "could not be read",
  ],
  [
    "Proxy whose ownKeys throws",
    direct({ resources: new Proxy({}, { ownKeys() { throw new Error("trap"); } }) }),
    "`sandbox.resources`",
    "could not be read",
  ],
  ["cyclic object", cyclic(), "`claim.labels.self`", "cycle"],
  ["cyclic array", { ...pool, claim: { volumeClaimTemplates: selfArray() } }, "`claim.volumeClaimTemplates[0]`", "cycle"],
  ["depth over the bound", direct({ podTemplate: { metadata: nested(40) } }), "`sandbox.podTemplate.metadata.x.x.x", "32 levels"],
  ["huge depth", direct({ podTemplate: { metadata: nested(200_000) } }), "`sandbox.podTemplate.metadata.x", "32 levels"],
  // the whole options
  ["options = a function", () => pool, "the options", "must be an object", "a function"],
  ["options = Symbol()", Symbol(), "the options", "must be an object", "a symbol"],
  ["options = BigInt", 1n, "the options", "must be an object", "a bigint"],
  ["options = NaN", NaN, "the options", "must be an object", "a number"],
  ["options = an array", [pool], "the options", "must be an object", "an array"],
  ["options = a Date", new Date(), "the options", "must be an object", "a Date"],
  ["options = a revoked Proxy", revoked(), "the options", "could not be read"],
  [
    "options = a Proxy whose ownKeys throws",
    new Proxy({ ...pool }, { ownKeys() { throw new Error("trap"); } }),
    "the options",
    "could not be read",
  ],
];

for (const [what, options, path, ...fragments] of UNCONVERTIBLE) {
  test(`an option napi cannot convert is \`config\` naming it: ${what}`, () => unconvertible(options, path, ...fragments));
}

test("what a throwing getter or trap threw is the error's cause", () => {
  assert.throws(
    () => agentSandboxProvider(throwingGetter({ ...pool }, "namespace")),
    (err) => err.code === "config" && err.cause?.message === "getter boom",
  );
});

test("options that are plain JSON in another shape are accepted", () => {
  // Symbol keys are ignored (no option is named by one), as JSON.stringify does.
  agentSandboxProvider({ ...pool, [Symbol("meta")]: Symbol("ignored") });
  // undefined means "not set", at any depth of an object.
  agentSandboxProvider({ ...pool, namespace: undefined, onEvent: undefined, claim: { labels: undefined, env: { A: "1", B: undefined } } });
  // Null-prototype objects, objects from another realm, a Proxy over valid options.
  agentSandboxProvider(Object.assign(Object.create(null), pool, { claim: Object.assign(Object.create(null), { labels: { a: "b" } }) }));
  agentSandboxProvider(vm.runInNewContext('({ warmPool: "p", claim: { volumeClaimTemplates: [vct] } })', { vct }));
  agentSandboxProvider(new Proxy({ ...pool }, {}));
  // One object used twice is shared, not a cycle.
  const labels = { team: "a" };
  agentSandboxProvider({ ...pool, claim: { labels, podLabels: labels } });
  // A pod template of ordinary depth.
  const p = agentSandboxProvider(direct({ podTemplate: { spec: { containers: [{ name: "c", env: [{ name: "K", valueFrom: { secretKeyRef: { name: "s", key: "k" } } }] }] } } }));
  assert.equal(p.cwd, "/workspace");
});

test("each option is read exactly once, and the provider keeps what it read", () => {
  const reads = new Map();
  const counted = (obj) =>
    new Proxy(obj, {
      get(target, key, receiver) {
        if (typeof key === "string") reads.set(key, (reads.get(key) ?? 0) + 1);
        return Reflect.get(target, key, receiver);
      },
    });
  let events = 0;
  let names = 0;
  const options = counted({ warmPool: "p", onEvent: () => events++, claim: counted({ labels: { a: "b" } }) });
  Object.defineProperty(options, "name", { enumerable: true, get: () => (names++ ? "second" : "first") });
  const p = agentSandboxProvider(options);
  assert.equal(p.name, "first");
  assert.equal(names, 1);
  for (const key of ["warmPool", "onEvent", "claim", "labels"]) assert.equal(reads.get(key), 1, key);
});

test("a top-level onEvent that is not a function is named", () => {
  configError({ ...pool, onEvent: Symbol() }, "`onEvent`", "function");
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
  configError(direct({ image: "i", securityProfile: "privileged" }), "`sandbox.securityProfile`", '"restricted" or "baseline"');
  configError(direct({ image: "i", securityProfile: true }), "`sandbox.securityProfile`");
  for (const profile of ["restricted", "baseline"]) agentSandboxProvider(direct({ image: "i", securityProfile: profile }));
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
