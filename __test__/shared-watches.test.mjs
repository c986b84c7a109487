// One provider serves every actor of a worker: what its calls cost the API
// server must not grow with the number of sandboxes. Counted from the client
// side with `provider.stats()` (requests by verb and resource, and the shared
// watches), against the real API server and controller.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { actorId, apiserver, getObject, image, kubectl, namespace, node, objectName, skip } from "./cluster.mjs";
import { provider } from "./sandbox-fixture.mjs";

const IMAGE = image;
const C = "sandboxclaims.extensions.agents.x-k8s.io";
const NODE = node;

/** `after - before` of two `stats().requests`, without zeros. */
function spent(before, after) {
  const out = {};
  for (const [key, n] of Object.entries(after)) {
    const d = n - (before[key] ?? 0);
    if (d) out[key] = d;
  }
  return out;
}

/** Requests of `verb` on the kinds the shared watches follow. */
const sum = (requests, verb) =>
  ["sandboxclaims", "sandboxes", "pods"].reduce((n, kind) => n + (requests[`${verb} ${kind}`] ?? 0), 0);

async function untilApiServerAnswers() {
  for (let i = 0; i < 600; i++) {
    try {
      kubectl("get", "--raw", "/readyz");
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error("the API server did not come back");
}

describe("ten sandboxes on one provider", { skip, timeout: 600_000 }, () => {
  // Room for the 50 long execs and the checks beside them.
  const { p } = provider({ warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp", maxConcurrentExecs: 64 });
  const boxes = Array.from({ length: 10 }, (_, i) => ({ ctx: { actorId: actorId(`shared-${i}`) } }));

  before(async () => {
    await Promise.all(
      boxes.map(async (b) => {
        b.id = await p.create(b.ctx);
        b.sandbox = await p.connect(b.ctx, b.id);
      }),
    );
  });
  after(async () => {
    await Promise.allSettled(boxes.filter((b) => b.id).map((b) => p.destroy(b.ctx, b.id)));
  });

  test("created and connected on at most one watch per kind", () => {
    const stats = p.stats();
    assert.ok(stats.watches <= 3, JSON.stringify(stats));
    assert.ok((stats.requests["watch sandboxclaims"] ?? 0) <= 1, JSON.stringify(stats.requests));
    assert.ok((stats.requests["watch pods"] ?? 0) <= 1, JSON.stringify(stats.requests));
    assert.ok(sum(stats.requests, "list") <= 3, `one list per kind, not per sandbox: ${JSON.stringify(stats.requests)}`);
    assert.ok(
      (stats.requests["create selfsubjectrulesreviews"] ?? 0) <= 2,
      `the permission review is shared by a burst of creates: ${JSON.stringify(stats.requests)}`,
    );
    // The claims carry the orphan sweep's mark from their create: the first
    // connects neither sweep (the pods were the pool's) nor write the mark.
    assert.equal(stats.requests["exec pods/exec"] ?? 0, 0, JSON.stringify(stats.requests));
    assert.equal(sum(stats.requests, "patch"), 0, JSON.stringify(stats.requests));
  });

  test("a reconnect of a ready sandbox reads only its Sandbox, and sweeps nothing this process took over", async () => {
    // One GET each: a suspend made elsewhere just before a reconnect must be
    // seen, and the shared watch can be a moment behind it. The claim and
    // pod come from the watches; no exec, no patch, no list, no watch. The
    // GETs, all at once, share the calls' HTTP/2 connection: over HTTP/1.1
    // each would open one.
    const before = p.stats();
    const again = await Promise.all(boxes.map((b) => p.connect(b.ctx, b.id)));
    assert.ok(again.every(Boolean));
    const stats = p.stats();
    assert.deepEqual(spent(before.requests, stats.requests), { "get sandboxes": boxes.length });
    assert.equal(stats.connections - before.connections, 0, "connections opened");
  });

  test("50 execs on 10 sandboxes share one pod watch; a pod deleted by hand fails only its own execs", async () => {
    const before = p.stats();
    const victim = boxes[3];
    const pod = getObject(C, objectName(victim.id)).status.sandbox.name;
    const marker = `/tmp/started-${process.pid}`;
    const runs = boxes.flatMap((b) =>
      Array.from({ length: 5 }, (_, i) =>
        b.sandbox.exec(`touch ${marker}-${i}; exec sleep 600`, { timeoutMs: 590_000 }).then(
          (r) => ({ b, r }),
          (e) => ({ b, e }),
        ),
      ),
    );
    // Every exec of the victim runs before its pod goes.
    for (let i = 0; i < 5; i++) {
      for (;;) {
        const r = await victim.sandbox.exec(`test -e ${marker}-${i}`);
        if (r.exitCode === 0) break;
      }
    }
    kubectl("delete", "pod", pod, "--wait=false");
    const ended = await Promise.race([
      Promise.all(runs.filter((_, i) => Math.floor(i / 5) === 3)),
      new Promise((r) => setTimeout(() => r(null), 120_000)),
    ]);
    assert.ok(ended, "the victim's execs ended");
    for (const { e } of ended) {
      assert.equal(e?.code, "connection_lost", e?.message);
      assert.match(e.message, /was deleted|is being deleted|was replaced/);
    }
    const stats = p.stats();
    assert.ok(stats.watches <= 3, JSON.stringify(stats));
    assert.equal(sum(spent(before.requests, stats.requests), "watch"), 0, "no new watch for 50 execs");
    assert.equal(sum(spent(before.requests, stats.requests), "list"), 0, "no list for 50 execs");
    // The others still run (destroying their sandboxes ends them).
    const settled = [];
    runs.forEach((run, i) =>
      run.then(({ b, r, e }) => {
        if (b !== victim) settled.push({ run: i, exitCode: r?.exitCode, code: e?.code, message: e?.message ?? r?.stderr });
      }),
    );
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(settled, [], "only the victim's execs ended");
  });
});

describe("connects waiting across an API server restart", { skip, timeout: 600_000 }, () => {
  // Sandboxes whose pods cannot be scheduled until the node gets a label:
  // their connects wait, through a restart of the API server, for an event.
  const label = `sandbox-test/hold-${process.pid}`;
  const { p } = provider({
    sandbox: { image: IMAGE, podTemplate: { spec: { nodeSelector: { [label]: "yes" } } } },
    suspend: "none",
    readyTimeoutMs: 300_000,
  });
  const boxes = Array.from({ length: 20 }, (_, i) => ({ ctx: { actorId: actorId(`restart-${i}`) } }));

  after(async () => {
    kubectl("label", "node", NODE, `${label}-`, "--overwrite");
    await Promise.allSettled(boxes.filter((b) => b.id).map((b) => p.destroy(b.ctx, b.id)));
  });

  test("all 20 resolve, with one list per watch for the recovery, and none saw a stale state", async () => {
    for (const b of boxes) b.id = await p.create(b.ctx);
    const events = [];
    const connects = boxes.map((b) => p.connect(b.ctx, b.id).then((s) => events.push(b) && s));
    // Every connect waits on the shared watches: each pod is Pending.
    for (const b of boxes) {
      for (;;) {
        const pod = getObject("pods", objectName(b.id));
        if (pod?.status?.conditions?.some((c) => c.type === "PodScheduled" && c.status === "False")) break;
      }
    }
    const before = p.stats();
    assert.equal(events.length, 0, "nothing resolved while the pods cannot run");
    apiserver("stop");
    try {
      await new Promise((r) => setTimeout(r, 5_000));
    } finally {
      apiserver("start");
    }
    await untilApiServerAnswers();
    assert.equal(events.length, 0, "no connect resolved on a state from before the restart");
    kubectl("label", "node", NODE, `${label}=yes`, "--overwrite");
    const sandboxes = await Promise.all(connects);
    assert.ok(sandboxes.every(Boolean), "every connect returned its sandbox");
    for (const s of sandboxes) assert.equal((await s.exec("echo up")).stdout, "up\n");
    const stats = p.stats();
    const cost = spent(before.requests, stats.requests);
    console.log(`# recovery of 20 waiting connects: ${JSON.stringify(cost)}`);
    // Each of the (at most 3) watches lists again once it can, or a few times
    // while the server is still starting: never once per waiting connect.
    const lists = sum(cost, "list");
    assert.ok(lists >= 1 && lists <= 9, `lists for the recovery: ${lists} (${JSON.stringify(cost)})`);
    assert.ok(stats.watches <= 3, JSON.stringify(stats));
    assert.equal(stats.failing, 0, "every watch recovered");
  });
});
