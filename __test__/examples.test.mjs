// The user-facing examples are what the tests run: the RBAC table of docs/api.md is
// examples/manifests/rbac/, the local cluster runs on the example manifests,
// and examples/durable-actor.mjs (a durable actor's life as Rivet's runtime
// drives a provider) runs to its end against the local cluster.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { kubectl, skip } from "./cluster.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const read = (path) => readFileSync(`${root}${path}`, "utf8");
const objects = (path) => parseAllDocuments(read(path)).map((d) => d.toJSON());

/** `[group, resources, verbs]` of each rule, sorted, as strings. */
const normal = (rules) => rules.map((r) => r.map((list) => [...list].sort().join(",")).join(" | ")).sort();

/** The table's "Role" column values that each file of rbac/ holds. */
const ROLES = { "warm-pool.yaml": ["warm pool", "both"], "direct.yaml": ["direct", "both"], "ports.yaml": ["ports"] };

test("the RBAC table of docs/api.md is the Roles in examples/manifests/rbac/", () => {
  const section = /^## RBAC\n([\s\S]*?)\n#/m.exec(read("docs/api.md"))[1];
  const ticks = (s) => [...s.matchAll(/`([^`]*)`/g)].map((m) => (m[1] === '""' ? "" : m[1]));
  const rows = [...section.matchAll(/^\| (`[^|]*`) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|/gm)].map(([, g, r, v, role]) => ({
    rule: [ticks(g), ticks(r), v.split(",").map((s) => s.trim())],
    role: role.trim(),
  }));
  assert.deepEqual([...new Set(rows.map((r) => r.role))].sort(), [...new Set(Object.values(ROLES).flat())].sort());
  for (const [file, roles] of Object.entries(ROLES)) {
    const [role] = objects(`examples/manifests/rbac/${file}`).filter((o) => o.kind === "Role");
    const fromYaml = role.rules.map((r) => [r.apiGroups, r.resources, r.verbs]);
    const fromReadme = rows.filter((r) => roles.includes(r.role)).map((r) => r.rule);
    assert.deepEqual(normal(fromReadme), normal(fromYaml), file);
  }
});

test("every RoleBinding of rbac/ binds its Role to the provider's ServiceAccount, in the provider's namespace", () => {
  const [ns, sa, ...more] = objects("examples/manifests/rbac/service-account.yaml");
  assert.deepEqual([ns.kind, sa.kind, more], ["Namespace", "ServiceAccount", []]);
  assert.equal(sa.metadata.namespace, ns.metadata.name);
  assert.ok(!ns.metadata.labels, "not a sandbox namespace: no admission policy or Pod Security level of the sandboxes");
  for (const file of Object.keys(ROLES)) {
    const docs = objects(`examples/manifests/rbac/${file}`);
    const [role] = docs.filter((o) => o.kind === "Role");
    const bindings = docs.filter((o) => o.kind === "RoleBinding");
    assert.equal(bindings.length, 1, file);
    assert.deepEqual(bindings[0].roleRef, { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role.metadata.name }, file);
    assert.deepEqual(bindings[0].subjects, [{ kind: "ServiceAccount", name: sa.metadata.name, namespace: sa.metadata.namespace }], file);
    // Applied with `-n <sandbox namespace>`: no object names another.
    for (const o of docs) assert.equal(o.metadata.namespace, undefined, `${file}: ${o.kind}`);
  }
});

describe("the examples against the local cluster", { skip, timeout: 300_000 }, () => {
  test("the local cluster runs on the example manifests", () => {
    const image = (name) => kubectl("get", "sandboxtemplate", name, "-o", "jsonpath={.spec.podTemplate.spec.containers[0].image}");
    for (const name of ["workspace", "ephemeral"]) {
      const file = read(`examples/manifests/template-${name}.yaml`);
      assert.equal(image(name), /image: (\S+)/.exec(file)[1], name);
    }
    assert.equal(kubectl("get", "networkpolicy", "agent-sandboxes", "-o", "name").trim(), "networkpolicy.networking.k8s.io/agent-sandboxes");
    assert.equal(kubectl("get", "sandboxwarmpool", "pool-workspace", "-o", "jsonpath={.spec.sandboxTemplateRef.name}"), "workspace");
  });

  test("examples/durable-actor.mjs: wake, tools, sleep, wake with the files, destroy", () => {
    const out = execFileSync(process.execPath, [`${root}examples/durable-actor.mjs`], { encoding: "utf8", timeout: 240_000 });
    assert.match(out, /^wake 1: \/workspace$/m);
    assert.match(out, /^wake 2: notes.txt says "first run" \(same sandbox: true\)$/m);
    assert.match(out, /^after destroy, connect\(\S+\) → undefined$/m);
  });
});
