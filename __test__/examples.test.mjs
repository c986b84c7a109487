// The user-facing examples are what the tests run: the README's RBAC table is
// examples/manifests/rbac.yaml, the local cluster runs on the example
// manifests, and examples/durable-actor.mjs (a durable actor's life as Rivet's
// runtime drives a provider) runs to its end against the local cluster.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { kubectl, skip } from "./cluster.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const read = (path) => readFileSync(`${root}${path}`, "utf8");

/** `[group, resources, verbs]` of each rule, sorted, as strings. */
const normal = (rules) => rules.map((r) => r.map((list) => [...list].sort().join(",")).join(" | ")).sort();

test("the README's RBAC table is the Role in examples/manifests/rbac.yaml", () => {
  const yaml = read("examples/manifests/rbac.yaml");
  const list = (s) => [...s.matchAll(/"([^"]*)"/g)].map((m) => m[1]);
  const fromYaml = [...yaml.matchAll(/- apiGroups: \[([^\]]*)\]\n\s+resources: \[([^\]]*)\]\n\s+verbs: \[([^\]]*)\]/g)].map(
    ([, g, r, v]) => [list(g), list(r), list(v)],
  );
  const section = /### RBAC\n([\s\S]*?)\n\n[A-Z]/.exec(read("README.md"))[1];
  const ticks = (s) => [...s.matchAll(/`([^`]*)`/g)].map((m) => (m[1] === '""' ? "" : m[1]));
  const fromReadme = [...section.matchAll(/^\| (`[^|]*`) \| ([^|]*) \| ([^|]*) \|/gm)].map(([, g, r, v]) => [
    ticks(g),
    ticks(r),
    v.split(",").map((s) => s.trim()),
  ]);
  assert.ok(fromYaml.length >= 5, `found ${fromYaml.length} rules in rbac.yaml`);
  assert.deepEqual(normal(fromReadme), normal(fromYaml));
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
