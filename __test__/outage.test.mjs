// What clusters do to a provider: the API server gone for longer than the
// node's lease (40 s on the local kwok node), then a sandbox's pod deleted by
// hand. Connect and destroy must still work within bounded times, and every
// component of the control plane must be running afterwards (its supervisor
// restarts what exited).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, test } from "node:test";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, apiserver, getObject, kubectl, leftovers, namespace, objectName, skip } from "./cluster.mjs";

const C = "sandboxclaims.extensions.agents.x-k8s.io";
const OUTAGE_MS = 45_000;
// The controller's informers back off while the API server is away (client-go's
// reflector, up to 30 s between tries) and notice the deleted pod only when they
// relist: about 75 s on the local cluster. The bound is the readiness timeout.
const READY_TIMEOUT_MS = 180_000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function untilApiServerAnswers() {
  for (let i = 0; i < 300; i++) {
    try {
      kubectl("get", "--raw", "/readyz");
      return;
    } catch {
      await sleep(100);
    }
  }
  throw new Error("the API server did not come back");
}

describe("after a long API server outage and a pod deleted by hand", { skip, timeout: 600_000 }, () => {
  test("connect brings the sandbox back, destroy removes everything, and the control plane runs", async () => {
    const p = agentSandboxProvider({ namespace, warmPool: "pool-workspace", readyTimeoutMs: READY_TIMEOUT_MS });
    const [a, b] = [{ actorId: actorId("outage-a") }, { actorId: actorId("outage-b") }];
    const ids = [await p.create(a), await p.create(b)];
    try {
      const sandbox = await p.connect(a, ids[0]);
      assert.ok(await p.connect(b, ids[1]));
      assert.equal((await sandbox.exec("echo kept > kept.txt")).exitCode, 0);
      const podName = getObject(C, objectName(ids[0])).status.sandbox.name;
      const podUid = getObject("pods", podName).metadata.uid;

      apiserver("stop");
      try {
        await sleep(OUTAGE_MS);
      } finally {
        apiserver("start");
      }
      await untilApiServerAnswers();
      kubectl("delete", "pod", podName, "--wait=false");

      let t0 = Date.now();
      const back = await p.connect(a, ids[0]);
      const connectMs = Date.now() - t0;
      console.log(`# connect after the outage and the pod deletion: ${connectMs} ms`);
      assert.ok(back, "connect returns the sandbox");
      assert.notEqual(getObject("pods", podName)?.metadata.uid, podUid, "a new pod");
      assert.equal((await back.exec("cat kept.txt")).stdout, "kept\n", "the volume survived");

      t0 = Date.now();
      await Promise.all([p.destroy(a, ids[0]), p.destroy(b, ids[1])]);
      const destroyMs = Date.now() - t0;
      console.log(`# two destroys after the outage: ${destroyMs} ms`);
      // Figures, not bounds: connect and destroy fail with `timeout` past
      // their own deadlines, and a hang meets the suite's timeout.
      for (const id of ids) {
        assert.equal(getObject(C, objectName(id)), null, `${id} deleted`);
      }
      // The garbage collector removes the PVC and Service right after.
      for (let i = 0; i < 300 && leftovers(podName).length > 0; i++) await sleep(100);
      assert.deepEqual(leftovers(podName), [], "nothing of the sandbox is left");
      ids.length = 0;
    } finally {
      await Promise.allSettled(ids.map((id, i) => p.destroy([a, b][i], id)));
    }
    const status = execFileSync("bash", [process.env.SANDBOX_CLUSTER_SCRIPT, "status"], { encoding: "utf8" });
    console.log(status.trim().replace(/^/gm, "# "));
    assert.doesNotMatch(status, /: stopped/, status);
  });

  // Right after an outage the garbage collector and the node act only once
  // their informers have relisted (client-go backs off up to 30 s): left to the
  // collector, the Sandbox and pod of a deleted claim lingered 6–46 s here.
  // destroy deletes them itself, so what remains is the node finishing the
  // pod's deletion; the documented bound is readyTimeoutMs.
  test("destroy right after a short outage removes the claim, its Sandbox and pod within readyTimeoutMs", async () => {
    const bound = 30_000;
    const p = agentSandboxProvider({ namespace, warmPool: "pool-workspace", readyTimeoutMs: bound });
    const a = { actorId: actorId("outage-short") };
    const id = await p.create(a);
    try {
      await p.connect(a, id);
      const sandboxName = getObject(C, objectName(id)).status.sandbox.name;
      const sandboxUid = getObject("sandboxes.agents.x-k8s.io", sandboxName).metadata.uid;
      apiserver("stop");
      try {
        await sleep(5_000);
      } finally {
        apiserver("start");
      }
      await untilApiServerAnswers();
      const t0 = Date.now();
      await p.destroy(a, id);
      console.log(`# destroy right after a 5 s outage: ${Date.now() - t0} ms`);
      assert.equal(getObject(C, objectName(id)), null, "the claim is gone");
      assert.equal(getObject("sandboxes.agents.x-k8s.io", sandboxName), null, "its Sandbox is gone");
      const pod = getObject("pods", sandboxName);
      if (pod) {
        // agent-sandbox's controller, its informers still stale from the
        // outage, can make the destroyed Sandbox's pod again after destroy
        // saw it go: then it must be an orphan of that Sandbox (owned by its
        // UID, which no object has any more), which the garbage collector
        // removes. Anything else is a pod destroy left behind.
        const owner = pod.metadata.ownerReferences?.find((o) => o.controller);
        assert.deepEqual([owner?.kind, owner?.uid], ["Sandbox", sandboxUid], "a pod destroy left behind");
        console.log("# the controller made the destroyed Sandbox's pod again; waiting for the garbage collector");
        kubectl("wait", "--for=delete", `pod/${sandboxName}`, "--timeout=120s");
      }
    } finally {
      await p.destroy(a, id).catch(() => {});
    }
  });
});
