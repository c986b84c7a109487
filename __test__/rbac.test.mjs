// Each mode's Role (examples/manifests/rbac/) is all a provider in that mode
// needs, and the warm-pool one cannot create Sandboxes: run as the cluster's
// per-mode ServiceAccounts, which hold that Role alone. Then, with each verb
// of the warm-pool Role removed in turn (edited with the admin kubeconfig),
// every call either works or rejects with `forbidden` and leaves its sandbox
// as it was: no resume, suspend, delete or claim happens that the caller is
// told failed. Which calls need which verb is the README's RBAC table; the
// expected failures below are that table.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, getObject, image, kubectl, namespace, objectName, skip } from "./cluster.mjs";

const POOL = "pool-workspace";
const C = "sandboxclaims.extensions.agents.x-k8s.io";
const S = "sandboxes.agents.x-k8s.io";

/** [resource as can-i names it, verb] → the calls that must fail without it. */
const EXPECTED = [
  [C, "create", ["create"]],
  [C, "get", ["create", "suspend", "connect", "destroy"]],
  [C, "list", ["create", "connect", "destroy"]],
  [C, "watch", ["create", "connect", "destroy"]],
  [C, "patch", []],
  [C, "delete", ["create", "destroy"]],
  [S, "get", ["create", "suspend", "connect", "destroy"]],
  [S, "list", ["create", "suspend", "connect", "destroy"]],
  [S, "watch", ["create", "suspend", "connect", "destroy"]],
  [S, "patch", ["suspend", "connect"]],
  [S, "delete", ["create", "destroy"]],
  ["sandboxwarmpools.extensions.agents.x-k8s.io", "get", ["create"]],
  ["sandboxtemplates.extensions.agents.x-k8s.io", "get", ["create"]],
  ["pods", "get", ["create", "suspend", "connect", "destroy"]],
  ["pods", "list", ["create", "suspend", "connect", "destroy"]],
  ["pods", "watch", ["create", "suspend", "connect", "destroy"]],
  ["pods", "delete", ["create", "destroy"]],
  ["networkpolicies.networking.k8s.io", "list", []], // only the preflight's warning needs it
  ["pods/exec", "get", ["connect"]],
  ["pods/exec", "create", ["connect"]],
];

const ROLE = "sandbox-client-warm-pool";
/** The local cluster's per-mode identities (dev/cluster/cluster.sh), each holding its mode's Role alone. */
const KUBECONFIG = { "warm-pool": process.env.SANDBOX_TEST_WARM_POOL_KUBECONFIG, direct: process.env.SANDBOX_TEST_DIRECT_KUBECONFIG };
const IMAGE = image;

/** kubectl as `mode`'s ServiceAccount, `input` on stdin. */
const kubectlAs = (mode, args, input) =>
  execFileSync(process.env.SANDBOX_TEST_KUBECTL ?? "kubectl", ["--kubeconfig", KUBECONFIG[mode], ...args], { encoding: "utf8", input });

/** The rules a SelfSubjectRulesReview gives `mode`'s ServiceAccount in the namespace. */
function rulesOf(mode) {
  const review = { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectRulesReview", spec: { namespace } };
  const { status } = JSON.parse(kubectlAs(mode, ["create", "--raw", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "-f", "-"], JSON.stringify(review)));
  assert.equal(status.incomplete, false);
  return status.resourceRules;
}

/** Whether `rules` grant `verb` on `resource` (`plural.group`), wildcards included. */
function grants(rules, resource, verb) {
  const [plural, ...group] = resource.split(".");
  const any = (list, want) => (list ?? []).some((x) => x === "*" || x === want);
  return rules.some((r) => any(r.verbs, verb) && any(r.apiGroups, group.join(".")) && any(r.resources, plural));
}

/** The username of `mode`'s ServiceAccount. */
const username = (mode) => JSON.parse(kubectlAs(mode, ["auth", "whoami", "-o", "json"])).status.userInfo.username;

/** The Role's rules as the cluster has them (restored after the test). */
function readRole() {
  return JSON.parse(kubectl("get", "role", ROLE, "-o", "json"));
}

function writeRole(role) {
  const file = join(tmpdir(), `rbac-test-role-${process.pid}.json`);
  const { metadata, ...rest } = role;
  writeFileSync(file, JSON.stringify({ ...rest, metadata: { name: metadata.name, namespace: metadata.namespace } }));
  kubectl("apply", "-f", file);
}

/** The rules with `verb` removed from the rule that grants it on `resource`. */
function without(rules, resource, verb) {
  const [plural, ...group] = resource.split(".");
  const groupName = group.join(".");
  return rules.map((r) =>
    r.apiGroups.includes(groupName) && r.resources.includes(plural)
      ? r.resources.length === 1
        ? { ...r, verbs: r.verbs.filter((v) => v !== verb) }
        : r // sandboxwarmpools and sandboxtemplates share a rule: split it
      : r,
  ).flatMap((r) => {
    if (!(r.apiGroups.includes(groupName) && r.resources.includes(plural) && r.resources.length > 1)) return [r];
    return [
      { ...r, resources: r.resources.filter((x) => x !== plural) },
      { ...r, resources: [plural], verbs: r.verbs.filter((v) => v !== verb) },
    ];
  }).filter((r) => r.verbs.length > 0);
}

/** Waits until the authorizer says `allowed` for the warm-pool ServiceAccount. */
async function untilAuthorized(resource, verb, allowed) {
  const [plural, sub] = resource.split("/");
  const args = ["auth", "can-i", verb, plural, `--as=${username("warm-pool")}`, ...(sub ? [`--subresource=${sub}`] : [])];
  for (let i = 0; i < 200; i++) {
    let yes;
    try {
      yes = kubectl(...args).trim() === "yes";
    } catch {
      yes = false;
    }
    if (yes === allowed) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`can-i ${verb} ${resource} never became ${allowed}`);
}

/** What a test observes of a claim: gone, deleting, or its Sandbox's mode and pod. */
function stateOf(id) {
  const claim = getObject(C, objectName(id));
  if (!claim) return "gone";
  if (claim.metadata.deletionTimestamp) return "deleting";
  const name = claim.status?.sandbox?.name;
  if (!name) return "unbound";
  const sb = getObject(S, name);
  return `${sb?.spec?.operatingMode ?? "none"}${getObject("pods", name) ? "+pod" : ""}`;
}

describe("each mode's Role, alone, is what that mode needs", { skip, timeout: 300_000 }, () => {
  const modes = {
    // The warm-pool Role may patch and delete its claimed Sandboxes, never create one.
    "warm-pool": { options: { warmPool: POOL }, creates: C, lacks: [[S, ["create"]]] },
    direct: { options: { sandbox: { image: IMAGE, volume: { size: "1Gi" } } }, creates: S, lacks: [[C, ["create", "get", "patch", "delete"]]] },
  };
  for (const [mode, { options, creates, lacks }] of Object.entries(modes)) {
    test(`${mode}: create on ${creates}, not on the other mode's kind; create, connect, exec, suspend, resume, destroy work`, async () => {
      const rules = rulesOf(mode);
      assert.ok(grants(rules, creates, "create"), JSON.stringify(rules));
      for (const [resource, verbs] of lacks) {
        for (const verb of verbs) assert.ok(!grants(rules, resource, verb), `${verb} ${resource}: ${JSON.stringify(rules)}`);
      }
      // Nothing else of the namespace: no Secrets, no pods to create.
      assert.ok(!grants(rules, "secrets", "get") && !grants(rules, "pods", "create") && !grants(rules, "configmaps", "get"));
      const p = agentSandboxProvider({ namespace, readyTimeoutMs: 120_000, kubeConfig: KUBECONFIG[mode], ...options });
      const ctx = { actorId: actorId(`rbac-${mode}`), client: () => undefined };
      const id = await p.create(ctx);
      try {
        assert.equal((await (await p.connect(ctx, id)).exec("echo ok")).stdout, "ok\n");
        await p.suspend(ctx, id);
        assert.equal((await (await p.connect(ctx, id)).exec("echo again")).stdout, "again\n");
      } finally {
        await p.destroy(ctx, id);
      }
      assert.equal(await p.connect(ctx, id), undefined, "destroyed");
    });
  }
});

describe("with each verb of the warm-pool Role removed, a call works or changes nothing", { skip, timeout: 900_000 }, () => {
  let role;
  const p = (onEvent) =>
    agentSandboxProvider({ namespace, warmPool: POOL, readyTimeoutMs: 120_000, kubeConfig: KUBECONFIG["warm-pool"], onEvent });
  const full = p();
  const ctx = (label) => ({ actorId: actorId(label), client: () => undefined });
  const running = { ctx: ctx("rbac-running") };
  const suspended = { ctx: ctx("rbac-suspended") };
  const doomed = { ctx: ctx("rbac-doomed") };
  const made = [];

  before(async () => {
    role = readRole();
    for (const box of [running, suspended, doomed]) box.id = await full.create(box.ctx);
    await Promise.all([full.connect(running.ctx, running.id), full.connect(suspended.ctx, suspended.id)]);
    await full.suspend(suspended.ctx, suspended.id);
  });
  after(async () => {
    if (role) writeRole(role);
    await untilAuthorized(C, "delete", true).catch(() => {});
    await Promise.allSettled([running, suspended, doomed, ...made].map((b) => b.id && full.destroy(b.ctx, b.id)));
  });

  for (const [resource, verb, mustFail] of EXPECTED) {
    test(`without ${verb} on ${resource}: ${mustFail.join(", ") || "nothing"} refused, nothing half done`, async () => {
      writeRole({ ...role, rules: without(role.rules, resource, verb) });
      try {
        await untilAuthorized(resource, verb, false);
        const before = { running: stateOf(running.id), suspended: stateOf(suspended.id), doomed: stateOf(doomed.id) };
        assert.equal(before.running, "Running+pod");
        assert.equal(before.suspended, "Suspended");
        assert.notEqual(before.doomed, "gone");
        const events = [];
        const provider = p((e) => events.push(e)); // no cached pool check
        const fresh = { ctx: ctx("rbac-new") };
        const calls = {
          create: () => provider.create(fresh.ctx).then((id) => (fresh.id = id)),
          suspend: () => provider.suspend(running.ctx, running.id),
          connect: () => provider.connect(suspended.ctx, suspended.id),
          destroy: () => provider.destroy(doomed.ctx, doomed.id),
        };
        const names = Object.keys(calls);
        const results = await Promise.allSettled(names.map((n) => calls[n]()));
        if (fresh.id) made.push(fresh);
        const failed = [];
        for (const [i, r] of results.entries()) {
          if (r.status === "fulfilled") continue;
          failed.push(names[i]);
          assert.equal(r.reason.code, "forbidden", `${names[i]}: ${r.reason.code}: ${r.reason.message}`);
          assert.match(r.reason.message, /forbidden/);
          // The provider's own check names the Role of its mode.
          if (/which this call needs/.test(r.reason.message)) assert.match(r.reason.message, /examples\/manifests\/rbac\/warm-pool\.yaml/);
        }
        // A refused call left its sandbox as it was; an allowed one did its job.
        assert.equal(stateOf(running.id), failed.includes("suspend") ? "Running+pod" : "Suspended", "suspend");
        assert.equal(stateOf(suspended.id), failed.includes("connect") ? "Suspended" : "Running+pod", "connect");
        assert.equal(stateOf(doomed.id), failed.includes("destroy") ? before.doomed : "gone", "destroy");
        const claim = getObject(C, objectName(`${namespace}/${fresh.ctx.actorId}`));
        assert.equal(fresh.id === undefined, failed.includes("create"), "create returned an id iff it was allowed");
        if (fresh.id) assert.ok(getObject(C, objectName(fresh.id)), "create made its claim");
        else assert.equal(claim, null, "a refused create made no claim");
        assert.deepEqual(failed.sort(), [...mustFail].sort(), "the calls refused");
        // Only the preflight's NetworkPolicy check needs `list networkpolicies`: without it, create says so.
        const unchecked = events.filter((e) => e.type === "warning" && /could not be checked/.test(e.message));
        if (failed.includes("create")) assert.deepEqual(unchecked, []);
        else assert.equal(unchecked.length, resource.startsWith("networkpolicies.") ? 1 : 0, JSON.stringify(unchecked));
      } finally {
        // Back to the full Role and the starting states.
        writeRole(role);
        await untilAuthorized(resource, verb, true);
        if (stateOf(running.id) !== "Running+pod") await full.connect(running.ctx, running.id);
        if (stateOf(suspended.id) !== "Suspended") await full.suspend(suspended.ctx, suspended.id);
        if (["gone", "deleting"].includes(stateOf(doomed.id))) doomed.id = await full.create((doomed.ctx = ctx("rbac-doomed")));
      }
    });
  }
});
