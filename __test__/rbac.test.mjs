// With each verb of the documented Role removed in turn (the test
// ServiceAccount's Role, edited with the admin kubeconfig), every call either
// works or rejects with `forbidden` and leaves its sandbox as it was: no
// resume, suspend, delete or claim happens that the caller is told failed.
// Which calls need which verb is the README's RBAC table; the expected
// failures below are that table.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, getObject, kubectl, namespace, objectName, skip } from "./cluster.mjs";

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
  [S, "create", []],
  [S, "get", ["create", "suspend", "connect", "destroy"]],
  [S, "list", ["create", "suspend", "connect", "destroy"]],
  [S, "watch", ["create", "suspend", "connect", "destroy"]],
  [S, "patch", ["suspend", "connect"]],
  [S, "delete", ["create", "destroy"]],
  ["sandboxwarmpools.extensions.agents.x-k8s.io", "get", ["create"]],
  ["sandboxtemplates.extensions.agents.x-k8s.io", "get", ["create"]],
  ["pods", "get", ["create", "connect", "destroy"]],
  ["pods", "list", ["create", "connect", "destroy"]],
  ["pods", "watch", ["create", "connect", "destroy"]],
  ["pods", "delete", ["create", "destroy"]],
  ["networkpolicies.networking.k8s.io", "list", []], // only the preflight's warning needs it
  ["pods/exec", "get", ["connect"]],
  ["pods/exec", "create", ["connect"]],
];

const ROLE = "sandbox-client";
const AS = `system:serviceaccount:${namespace}:sandbox-client`;

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

/** Waits until the authorizer says `allowed` for the ServiceAccount. */
async function untilAuthorized(resource, verb, allowed) {
  const [plural, sub] = resource.split("/");
  const args = ["auth", "can-i", verb, plural, `--as=${AS}`, ...(sub ? [`--subresource=${sub}`] : [])];
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

describe("with each verb of the Role removed, a call works or changes nothing", { skip, timeout: 900_000 }, () => {
  let role;
  const p = (onEvent) => agentSandboxProvider({ namespace, warmPool: POOL, readyTimeoutMs: 120_000, onEvent });
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
