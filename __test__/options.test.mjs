// Option validation: every bad option throws synchronously from
// agentSandboxProvider() with code "config" and a message naming the option.
// Needs the built addon, no cluster.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import vm from "node:vm";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
  assert.deepEqual(Object.keys(p).sort(), ["connect", "create", "cwd", "destroy", "name", "stats", "suspend"]);
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

test("every numeric quantity: hostile numbers are `config` naming the option; plain ones are taken", () => {
  const options = (path, value) => {
    const sandbox = { image: "i", resources: {}, volume: { size: "1Gi" } };
    if (path === "volume.size") sandbox.volume.size = value;
    else sandbox.resources[path.split(".")[1]] = value;
    return { suspend: "none", sandbox };
  };
  const paths = ["resources.cpu", "resources.memory", "resources.ephemeralStorage", "volume.size"];
  const hostile = [1e300, 2 ** 64, 2 ** 53, Number.MAX_VALUE, NaN, Infinity, -Infinity, -1, -0.5, 1e-300];
  for (const path of paths) {
    for (const value of hostile) configError(options(path, value), `\`sandbox.${path}\``);
    // A fraction of a byte means nothing; of a core, down to a millicore.
    if (path === "resources.cpu") {
      configError(options(path, 0.0005), "`sandbox.resources.cpu`", "millicores");
      agentSandboxProvider(options(path, 0.25));
    } else {
      configError(options(path, 1.5), `\`sandbox.${path}\``, "whole bytes");
    }
    for (const value of [0, 2, 2 ** 30, 2 ** 53 - 1, "64Gi"]) agentSandboxProvider(options(path, value));
  }
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

// A known secret in every place a credential can be; none of it in an
// error, an event or a trace line (AGENT_SANDBOX_LOG=debug in a child).
const SECRET = "s3cr3t-5b1f0c9e77d2";

/** A kubeconfig whose YAML breaks on line 8, two lines below the token. */
const BAD_KUBECONFIG = `apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: ${SECRET}\n    username: u\n   bad: indent\n`;

/** Runs `script` (ESM) in a child Node with tracing on; its stdout parsed as JSON, and its stderr. */
function traced(script, env = {}) {
  const childEnv = { ...process.env, AGENT_SANDBOX_LOG: "debug", ...env };
  delete childEnv.KUBERNETES_SERVICE_HOST;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: childEnv, encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  for (const [name, text] of [["stdout", r.stdout], ["stderr", r.stderr]]) assert.ok(!text.includes(SECRET), `${name} carries the secret:\n${text}`);
  return { result: JSON.parse(r.stdout), stderr: r.stderr };
}

/** Collects the errors and events of `calls` (a function body using `provider(kubeConfig)`, `fail(promise)` and `ctx`). */
const collecting = (calls) => `
import { writeFileSync } from "node:fs";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
const events = [];
const errors = [];
const ctx = { actorId: "a" };
const provider = (kubeConfig) => agentSandboxProvider({ warmPool: "p", namespace: "ns", kubeConfig, onEvent: (e) => events.push(e) });
const fail = (promise) => promise.then(
  () => errors.push({ code: "none", message: "resolved" }),
  (e) => errors.push({ code: e.code, message: e.message }),
);
${calls}
process.stdout.write(JSON.stringify({ events, errors }));
`;

test("a kubeconfig that does not parse is named with its line and column, never its text", () => {
  const dir = mkdtempSync(join(tmpdir(), "kubeconfig-secret-"));
  try {
    const file = join(dir, "config");
    writeFileSync(file, BAD_KUBECONFIG);
    for (const [kubeConfig, where] of [[file, `kubeconfig file ${file}`], [BAD_KUBECONFIG, "the kubeconfig string"]]) {
      assert.throws(
        () => agentSandboxProvider({ ...pool, kubeConfig }),
        (err) => {
          assert.equal(err.code, "config", err.message);
          assert.ok(err.message.includes(`${where} is not valid kubeconfig YAML at line 8, column`), err.message);
          assert.ok(!err.message.includes(SECRET) && !err.message.includes("token"), err.message);
          return true;
        },
      );
    }
    // The default configuration: KUBECONFIG, else ~/.kube/config.
    mkdirSync(join(dir, ".kube"));
    writeFileSync(join(dir, ".kube", "config"), BAD_KUBECONFIG);
    const calls = collecting("await fail(provider(undefined).create(ctx));");
    for (const [env, named] of [[{ KUBECONFIG: file }, file], [{ KUBECONFIG: "", HOME: dir }, join(dir, ".kube", "config")]]) {
      const { result } = traced(calls, env);
      assert.equal(result.errors[0].code, "config", result.errors[0].message);
      assert.ok(result.errors[0].message.includes(`kubeconfig file ${named} is not valid kubeconfig YAML at line 8`), result.errors[0].message);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a tls-server-name that names no host is `config`, naming it, on the first call", async () => {
  // The server certificate is checked against this name; one that is no DNS
  // name or IP address can name nothing, and the call sends nothing.
  for (const name of ["bad name!", "", "ignore previous instructions; rm -rf /", "\u0000x"]) {
    const kubeConfig = [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      `- { name: c, cluster: { server: "https://127.0.0.1:1", tls-server-name: ${JSON.stringify(name)} } }`,
      "contexts: [{ name: x, context: { cluster: c, user: u } }]",
      "current-context: x",
      `users: [{ name: u, user: { token: ${SECRET} } }]`,
    ].join("\n");
    const p = agentSandboxProvider({ ...pool, namespace: "ns", kubeConfig });
    await assert.rejects(p.connect({ actorId: "a" }, "ns/sbx-00000000000000000000"), (err) => {
      assert.equal(err.code, "config", err.message);
      assert.ok(err.message.includes("tls-server-name") && err.message.includes("is not a DNS name or IP address"), err.message);
      assert.ok(!err.message.includes(SECRET), err.message);
      return true;
    });
  }
});

test("a failing exec credential plugin is named with its exit status, never its arguments, environment or output", () => {
  const dir = mkdtempSync(join(tmpdir(), "plugin-secret-"));
  // The plugin `kubelogin` (a symlink to /bin/sh running a script) gets the
  // secret as an argument and in its environment, and prints it.
  const plugin = (name, body) => {
    mkdirSync(join(dir, name));
    symlinkSync("/bin/sh", join(dir, name, "kubelogin"));
    writeFileSync(join(dir, name, "plugin.sh"), body);
    const kubeconfig = join(dir, name, "config");
    writeFileSync(
      kubeconfig,
      `apiVersion: v1\nkind: Config\ncurrent-context: x\n` +
        `clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n` +
        `contexts:\n- name: x\n  context: { cluster: c, user: u }\n` +
        `users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n` +
        `      command: ${join(dir, name, "kubelogin")}\n      args: ["${join(dir, name, "plugin.sh")}", "--client-secret", "${SECRET}"]\n` +
        `      env:\n      - name: VAULT_TOKEN\n        value: "${SECRET}"\n`,
    );
    return kubeconfig;
  };
  try {
    const failing = plugin("failing", `printf '{"status": {"token": "%s"}}' "$VAULT_TOKEN"; echo "denied $* $VAULT_TOKEN" >&2; exit 3`);
    const garbage = plugin("garbage", `printf '{"status": {"token": "%s"},\n  garbage: [\n' "$VAULT_TOKEN"`);
    // An expired token, so the plugin runs again before each request; it
    // fails once the marker exists.
    const refreshing = plugin(
      "refreshing",
      `if [ -e "$0.fail" ]; then echo "$VAULT_TOKEN" >&2; echo "$VAULT_TOKEN"; exit 4; fi\n` +
        `printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}' "$VAULT_TOKEN"`,
    );
    const { result, stderr } = traced(
      collecting(`
        await fail(provider(${JSON.stringify(failing)}).create(ctx));
        await fail(provider(${JSON.stringify(garbage)}).create(ctx));
        const refreshing = provider(${JSON.stringify(refreshing)});
        await refreshing.connect(ctx, "not-an-id"); // builds the client: the plugin succeeds
        writeFileSync(${JSON.stringify(join(dir, "refreshing", "plugin.sh.fail"))}, "");
        await fail(refreshing.create(ctx));
      `),
    );
    const [atBuild, unparsable, atRefresh] = result.errors;
    for (const e of result.errors) assert.equal(e.code, "config", e.message);
    assert.ok(atBuild.message.includes("the credential plugin `kubelogin` failed (exit status: 3)"), atBuild.message);
    assert.ok(unparsable.message.includes("the credential plugin `kubelogin` printed something that is not an ExecCredential at line "), unparsable.message);
    assert.ok(atRefresh.message.includes("the credential plugin `kubelogin` failed (exit status: 4)"), atRefresh.message);
    for (const e of result.errors) assert.ok(!e.message.includes(dir) && !e.message.includes("denied"), e.message);
    assert.match(stderr, / create a: failed: config \(.*`kubelogin` failed \(exit status: 4\)/);
    assert.deepEqual(result.events, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("credentials over plain http:// or unchecked TLS give one warning event and trace line", () => {
  // 0.0.0.0 is this host to Linux's connect (refused at once) but not a
  // loopback address, which would be exempt.
  for (const [server, extra, says] of [
    ["http://0.0.0.0:1", {}, "the API server http://0.0.0.0:1 is plain http://"],
    ["https://0.0.0.0:1", { insecureSkipTlsVerify: true }, "the API server https://0.0.0.0:1's certificate is not checked"],
  ]) {
    const kubeConfig = { server, token: SECRET, ...extra };
    const { result, stderr } = traced(
      collecting(`
        const p = provider(${JSON.stringify(kubeConfig)});
        await fail(p.create(ctx));
        await fail(p.create(ctx));
      `),
    );
    assert.deepEqual(result.errors.map((e) => e.code), ["unavailable", "unavailable"]);
    assert.equal(result.events.length, 1, JSON.stringify(result.events));
    const [warning] = result.events;
    assert.equal(warning.type, "warning");
    assert.equal(warning.actorId, "a");
    assert.ok(warning.message.startsWith(says), warning.message);
    assert.equal(stderr.split("\n").filter((l) => / Warning after \d+ ms: /.test(l)).length, 1, stderr);
    assert.ok(stderr.includes(says), stderr);
  }
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
