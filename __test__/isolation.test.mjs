// How the sandboxes are kept in their box (examples/manifests/, the direct
// mode's default pod): the shipped NetworkPolicy, Pod Security labels,
// admission policy and templates, checked as files; then against the local
// cluster, whose real API server enforces Pod Security and the admission
// policy and evaluates label selectors (it has no CNI, so traffic itself is
// not tested); and what its node honours of a pod's securityContext, as a
// kubelet does.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { provider, sh, withSandbox } from "./sandbox-fixture.mjs";
import { actorId, getObject, image, namespace, objectName, skip } from "./cluster.mjs";

const manifests = fileURLToPath(new URL("../examples/manifests/", import.meta.url));
const IMAGE = image;
const S = "sandboxes.agents.x-k8s.io";

/** Every object of every YAML file of examples/manifests/, with its file's text. */
const shipped = readdirSync(manifests)
  .filter((f) => f.endsWith(".yaml"))
  .flatMap((file) => {
    const text = readFileSync(`${manifests}${file}`, "utf8");
    return parseAllDocuments(text).map((d) => ({ file, text, object: d.toJSON() }));
  });
const ofKind = (kind) => shipped.filter((s) => s.object.kind === kind);
const policies = ofKind("NetworkPolicy").map((s) => s.object);
const templates = ofKind("SandboxTemplate");

/** Whether a label selector (`{}` or absent: everything) selects `labels`. */
function selects({ matchLabels = {}, matchExpressions = [] } = {}, labels = {}) {
  const has = (k) => Object.hasOwn(labels, k);
  return (
    Object.entries(matchLabels).every(([k, v]) => labels[k] === v) &&
    matchExpressions.every(({ key, operator, values = [] }) => {
      if (operator === "In") return has(key) && values.includes(labels[key]);
      if (operator === "NotIn") return !has(key) || !values.includes(labels[key]);
      if (operator === "Exists") return has(key);
      if (operator === "DoesNotExist") return !has(key);
      throw new Error(`operator ${operator}`);
    })
  );
}

/** The same selector as a `kubectl -l` string ("" selects everything). */
function labelSelector({ matchLabels = {}, matchExpressions = [] } = {}) {
  const exprs = matchExpressions.map(({ key, operator, values = [] }) =>
    ({ In: `${key} in (${values})`, NotIn: `${key} notin (${values})`, Exists: key, DoesNotExist: `!${key}` })[operator],
  );
  return [...Object.entries(matchLabels).map(([k, v]) => `${k}=${v}`), ...exprs].join(",");
}

const ipv4 = (a) => a.split(".").reduce((n, octet) => n * 256 + Number(octet), 0);
const inCidr = (addr, cidr) => {
  const [base, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(ipv4(addr) / size) === Math.floor(ipv4(base) / size);
};

/**
 * Whether the policy lets its pods open `addr:port` (an address outside the
 * cluster's pods: only ipBlock peers, or a rule without peers, can allow it).
 */
function egressAllows(policy, addr, port, protocol = "TCP") {
  return (policy.spec.egress ?? []).some((rule) => {
    const portOk = !rule.ports?.length || rule.ports.some((p) => (p.protocol ?? "TCP") === protocol && (p.port ?? port) === port);
    const peerOk =
      !rule.to?.length ||
      rule.to.some((peer) => peer.ipBlock && inCidr(addr, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((e) => inCidr(addr, e)));
    return portOk && peerOk;
  });
}

describe("the shipped manifests", () => {
  test("every NetworkPolicy selects every pod of the namespace, and no template opts out of it", () => {
    assert.ok(policies.length >= 1 && templates.length >= 2, `${policies.length} policies, ${templates.length} templates`);
    // A direct-mode pod carries only the provider's labels, or none at all
    // (`sandbox.podTemplate: { metadata: { labels: null } }`).
    const podLabels = [{}, { "agent-sandbox-provider/actor-hash": "0", "app.kubernetes.io/managed-by": "agent-sandbox-provider" }];
    for (const { object: t } of templates) {
      const name = t.metadata.name;
      // Managed would add agent-sandbox's own policy for these pods, and
      // policies add up: it would open egress on every port.
      assert.equal(t.spec.networkPolicyManagement, "Unmanaged", name);
      // A NetworkPolicy does not apply to pods on the host's network.
      assert.ok(!t.spec.podTemplate.spec.hostNetwork, name);
      podLabels.push(t.spec.podTemplate.metadata?.labels ?? {});
    }
    for (const p of policies) {
      assert.deepEqual([...p.spec.policyTypes].sort(), ["Egress", "Ingress"], p.metadata.name);
      for (const labels of podLabels) assert.ok(selects(p.spec.podSelector, labels), `${p.metadata.name} selects ${JSON.stringify(labels)}`);
    }
  });

  test("the NetworkPolicy: no ingress, DNS only to kube-dns, the internet on 80/443 but no private, metadata or wire-server address", () => {
    for (const p of policies) {
      assert.deepEqual(p.spec.ingress ?? [], []);
      const dns = p.spec.egress.filter((r) => r.ports?.some((x) => x.port === 53));
      assert.equal(dns.length, 1, "one DNS rule");
      assert.deepEqual(dns[0].to, [
        { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } }, podSelector: { matchLabels: { "k8s-app": "kube-dns" } } },
      ]);
      const closed = [
        "169.254.169.254", // cloud metadata (AWS, GCP, Azure, OpenStack, ...)
        "169.254.170.2", // ECS task metadata
        "100.100.100.200", // Alibaba metadata
        "168.63.129.16", // Azure WireServer
        "169.254.20.10", // NodeLocal DNSCache (opt-in, see the file)
        "10.96.0.1", // the API server's Service here; pods, Services, nodes
        "172.16.5.4",
        "192.168.1.1",
        "100.64.0.1",
      ];
      for (const addr of closed) {
        for (const [port, proto] of [[80, "TCP"], [443, "TCP"], [53, "UDP"], [53, "TCP"], [6443, "TCP"], [32526, "TCP"]]) {
          assert.ok(!egressAllows(p, addr, port, proto), `${addr}:${port}/${proto} is closed`);
        }
      }
      assert.ok(egressAllows(p, "1.1.1.1", 443) && egressAllows(p, "151.101.0.223", 80), "the internet on 443 and 80");
      assert.ok(!egressAllows(p, "1.1.1.1", 22) && !egressAllows(p, "8.8.8.8", 53, "UDP"), "no other port, no public DNS");
    }
  });

  test("the templates run Pod Security restricted pods without a token, with resources and a RuntimeClass line", () => {
    for (const { object: t, text, file } of templates) {
      const spec = t.spec.podTemplate.spec;
      assert.equal(spec.automountServiceAccountToken, false, file);
      assert.equal(spec.enableServiceLinks, false, file);
      const pod = spec.securityContext;
      assert.equal(pod.runAsNonRoot, true, file);
      assert.ok(pod.runAsUser > 0 && pod.runAsGroup > 0, file);
      assert.equal(pod.seccompProfile.type, "RuntimeDefault", file);
      // The group that gets the volumes, so the non-root user can write them.
      if (t.spec.volumeClaimTemplates?.length) assert.equal(pod.fsGroup, pod.runAsGroup, file);
      for (const c of spec.containers) {
        assert.equal(c.securityContext.allowPrivilegeEscalation, false, file);
        assert.deepEqual(c.securityContext.capabilities, { drop: ["ALL"] }, file);
        for (const r of ["cpu", "memory", "ephemeral-storage"]) assert.ok(c.resources.requests[r], `${file}: requests.${r}`);
        for (const r of ["memory", "ephemeral-storage"]) assert.ok(c.resources.limits[r], `${file}: limits.${r}`);
      }
      assert.match(text, /^\s*(# )?runtimeClassName: \S+/m, `${file} says where the RuntimeClass goes`);
    }
  });

  test("the namespace enforces Pod Security restricted, and the admission policy is bound to it with its parameters", () => {
    const [ns] = ofKind("Namespace").map((s) => s.object);
    for (const mode of ["enforce", "warn", "audit"]) assert.equal(ns.metadata.labels[`pod-security.kubernetes.io/${mode}`], "restricted", mode);
    const [policy] = ofKind("ValidatingAdmissionPolicy").map((s) => s.object);
    const [binding] = ofKind("ValidatingAdmissionPolicyBinding").map((s) => s.object);
    assert.equal(policy.spec.failurePolicy, "Fail");
    assert.equal(binding.spec.policyName, policy.metadata.name);
    assert.deepEqual(binding.spec.validationActions, ["Deny"]);
    assert.ok(selects(binding.spec.matchResources.namespaceSelector, ns.metadata.labels), "the binding selects the namespace");
    // Without its parameters the binding refuses everything, never lets it through.
    const [params] = ofKind("ConfigMap").map((s) => s.object);
    assert.deepEqual(binding.spec.paramRef, { name: params.metadata.name, parameterNotFoundAction: "Deny" });
    assert.deepEqual(policy.spec.paramKind, { apiVersion: "v1", kind: "ConfigMap" });
    assert.deepEqual(Object.values(params.data), ["", "", ""], "no RuntimeClass, toleration or PriorityClass allowed by default");
    // The pod template rule names the provider's ServiceAccount.
    const [sa] = parseAllDocuments(readFileSync(`${manifests}rbac/service-account.yaml`, "utf8")).map((d) => d.toJSON()).filter((o) => o.kind === "ServiceAccount");
    assert.ok(policy.spec.validations.some((v) => v.expression.includes(`':${sa.metadata.name}'`)), sa.metadata.name);
    assert.ok(ofKind("LimitRange").length === 1 && ofKind("ResourceQuota").length === 1);
  });
});

const kubectlBin = process.env.SANDBOX_TEST_KUBECTL ?? "kubectl";

/** kubectl with `kubeconfig` in the test namespace, `input` on stdin; throws with its stderr. */
function kubectlWith(kubeconfig, args, input) {
  try {
    return execFileSync(kubectlBin, ["--kubeconfig", kubeconfig, "-n", namespace, ...args], {
      encoding: "utf8",
      input,
      stdio: ["pipe", "pipe", "pipe"],
    });
  } catch (e) {
    throw new Error(`kubectl ${args.join(" ")}: ${e.stderr}`);
  }
}
/** As the provider's ServiceAccount (the tests' KUBECONFIG). */
const asProvider = (args, input) => kubectlWith(process.env.KUBECONFIG, args, input);
const asAdmin = (args, input) => kubectlWith(process.env.SANDBOX_TEST_ADMIN_KUBECONFIG, args, input);
/** Why the API server refused `fn`'s request ("" when it was admitted). */
function refusal(fn) {
  try {
    fn();
    return "";
  } catch (e) {
    return e.message;
  }
}

/** Why the API server refused to create `json` as `who` ("" when it would have). */
const dryRun = (who, json) => refusal(() => who(["create", "--dry-run=server", "-f", "-"], json));

/** A pod spec Pod Security "restricted" and the admission policy admit. */
const goodPod = () => ({
  automountServiceAccountToken: false,
  securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } },
  containers: [{ name: "sandbox", image: IMAGE, securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } } }],
});
const sandboxJson = (name, spec, volumeClaimTemplates) =>
  JSON.stringify({ apiVersion: "agents.x-k8s.io/v1beta1", kind: "Sandbox", metadata: { name }, spec: { podTemplate: { spec }, volumeClaimTemplates } });
const templateJson = (name, spec, volumeClaimTemplates) =>
  JSON.stringify({
    apiVersion: "extensions.agents.x-k8s.io/v1beta1",
    kind: "SandboxTemplate",
    metadata: { name },
    spec: { podTemplate: { spec }, volumeClaimTemplates },
  });
const podJson = (name, spec) => JSON.stringify({ apiVersion: "v1", kind: "Pod", metadata: { name }, spec });

/** Resolves once `condition()` holds (the API server's informers catching up with a change). */
async function until(condition) {
  for (let i = 0; i < 200; i++) {
    if (condition()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`never held: ${condition}`);
}

/** `Key: value` lines of the command's /proc/self/status, for the keys asked. */
async function status(sandbox, ...keys) {
  const lines = (await sh(sandbox, "cat /proc/self/status")).split("\n");
  return Object.fromEntries(keys.map((k) => [k, lines.find((l) => l.startsWith(`${k}:`))?.split(/:\s*/)[1].trim()]));
}

describe("isolation on the local cluster", { skip, timeout: 600_000 }, () => {
  test("every pod the provider makes, in both modes, is selected by every shipped NetworkPolicy", async () => {
    const inCluster = JSON.parse(asAdmin(["get", "networkpolicies", "-o", "json"])).items;
    assert.deepEqual(inCluster.map((p) => p.metadata.name).sort(), policies.map((p) => p.metadata.name).sort());
    const warm = provider({ warmPool: "pool-workspace" }).p;
    // Labels of its own in place of the provider's: the pod has only what the controller adds.
    const direct = provider({ sandbox: { image: IMAGE, podTemplate: { metadata: { labels: null } } }, suspend: "none" }).p;
    await withSandbox(warm, "np-warm", async (wctx, wid) => {
      await withSandbox(direct, "np-direct", async (dctx, did) => {
        await Promise.all([warm.connect(wctx, wid), direct.connect(dctx, did)]);
        const warmPod = getObject("sandboxclaims.extensions.agents.x-k8s.io", objectName(wid)).status.sandbox.name;
        const pods = [warmPod, objectName(did)];
        assert.equal(getObject("pods", pods[1]).metadata.labels["agent-sandbox-provider/actor-hash"], undefined, "no label of ours");
        const all = asAdmin(["get", "pods", "-o", "name"]).split("\n").filter(Boolean);
        for (const p of inCluster) {
          // The API server evaluates the policy's selector as a label selector.
          const sel = labelSelector(p.spec.podSelector);
          const selected = asAdmin(["get", "pods", "-o", "name", ...(sel ? ["-l", sel] : [])]).split("\n").filter(Boolean);
          for (const pod of pods) assert.ok(selected.includes(`pod/${pod}`), `${p.metadata.name} selects ${pod}`);
          assert.deepEqual(selected.sort(), all.sort(), `${p.metadata.name} selects every pod of the namespace (warm pools too)`);
        }
      });
    });
  });

  test("the NetworkPolicy leaves the API server's addresses closed", () => {
    const service = JSON.parse(asAdmin(["get", "--raw", "/api/v1/namespaces/default/services/kubernetes"]));
    const slices = JSON.parse(
      asAdmin(["get", "--raw", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name%3Dkubernetes"]),
    );
    const addresses = [...service.spec.clusterIPs, ...slices.items.flatMap((s) => (s.endpoints ?? []).flatMap((e) => e.addresses))];
    const ports = [443, ...service.spec.ports.map((p) => p.targetPort)];
    assert.ok(addresses.length >= 1);
    for (const p of policies) for (const a of addresses) for (const port of ports) assert.ok(!egressAllows(p, a, port), `${a}:${port}`);
  });

  test("a privileged Sandbox made with the provider's credentials is refused at once, nothing created", async () => {
    // Through the provider: the message names the policy and the reason.
    const spec = goodPod();
    spec.containers[0].securityContext = { privileged: true };
    for (const [podTemplate, why] of [
      [{ spec }, /privileged containers are not allowed/],
      [{ spec: { hostNetwork: true } }, /host's network, PID and IPC namespaces/],
    ]) {
      const { p } = provider({ sandbox: { image: IMAGE, podTemplate }, suspend: "none" });
      const ctx = { actorId: actorId("privileged") };
      await assert.rejects(p.create(ctx), (err) => {
        assert.equal(err.code, "invalid_request", err.message);
        assert.match(err.message, /ValidatingAdmissionPolicy 'agent-sandboxes'/);
        assert.match(err.message, why);
        return true;
      });
      // The name create would have used (names.rs: object_name).
      const name = `sbx-${createHash("sha256").update(`sandbox\0${ctx.actorId}`).digest("hex").slice(0, 20)}`;
      assert.equal(getObject(S, name), null, "no Sandbox was created");
    }
    // Straight to the API server with the same credentials: every escape is refused.
    const escapes = {
      "privileged containers": (s) => (s.containers[0].securityContext.privileged = true),
      "host's network": (s) => (s.hostNetwork = true),
      "PID and IPC": (s) => (s.hostPID = true),
      "IPC namespaces": (s) => (s.hostIPC = true),
      "hostPath volumes": (s) => (s.volumes = [{ name: "host", hostPath: { path: "/" } }]),
      "adding capabilities": (s) => (s.containers[0].securityContext.capabilities.add = ["NET_RAW"]),
      "automountServiceAccountToken: false": (s) => delete s.automountServiceAccountToken,
      "mount no ServiceAccount token": (s) =>
        (s.volumes = [{ name: "t", projected: { sources: [{ serviceAccountToken: { path: "token" } }] } }]),
    };
    for (const [why, change] of Object.entries(escapes)) {
      const s = goodPod();
      change(s);
      const err = dryRun(asProvider, sandboxJson("escape", s));
      assert.match(err, /ValidatingAdmissionPolicy 'agent-sandboxes'/, why);
      assert.ok(err.includes(why), `${why}: ${err}`);
    }
    assert.equal(dryRun(asProvider, sandboxJson("fine", goodPod())), "");
  });

  test("templates and pods are held to the same rules, also for the cluster admin; pods to Pod Security restricted", () => {
    const spec = goodPod();
    spec.containers[0].securityContext.privileged = true;
    assert.match(dryRun(asAdmin, templateJson("escape", spec)), /privileged containers are not allowed/);
    const pod = (s) => podJson("escape", s);
    const root = goodPod();
    delete root.securityContext;
    assert.match(dryRun(asAdmin, pod(root)), /violates PodSecurity "restricted:latest"/);
    const hostPath = goodPod();
    hostPath.volumes = [{ name: "host", hostPath: { path: "/" } }];
    assert.match(dryRun(asAdmin, pod(hostPath)), /hostPath/);
    assert.equal(dryRun(asAdmin, pod(goodPod())), "");
  });

  test("the policy refuses every Secret-, node- and ServiceAccount-reaching spec: Sandboxes as the provider, templates as the admin", () => {
    // A Secret of the namespace that none of these may reach.
    asAdmin(["apply", "-f", "-"], asAdmin(["create", "secret", "generic", "canary", "--from-literal=k=v", "--dry-run=client", "-o", "json"]));
    const secretRef = { secretKeyRef: { name: "canary", key: "k" } };
    try {
      const escapes = {
        "secret volume": [/volumes may only be/, (s) => (s.volumes = [{ name: "s", secret: { secretName: "canary" } }])],
        "secret beside an allowed type": [/volumes may only be/, (s) => (s.volumes = [{ name: "s", emptyDir: {}, secret: { secretName: "canary" } }])],
        "projected secret": [/projected volumes may only hold/, (s) => (s.volumes = [{ name: "p", projected: { sources: [{ secret: { name: "canary" } }] } }])],
        "configMap other than kube-root-ca.crt": [/projected volumes may only hold/, (s) => (s.volumes = [{ name: "c", configMap: { name: "agent-sandboxes-policy" } }])],
        "csi volume": [/volumes may only be/, (s) => (s.volumes = [{ name: "c", csi: { driver: "x" } }])],
        "another sandbox's claim": [/must be the sandbox's own/, (s) => (s.volumes = [{ name: "w", persistentVolumeClaim: { claimName: "workspace-sbx-other" } }])],
        "secretKeyRef env": [/may not read Secrets/, (s) => (s.containers[0].env = [{ name: "X", valueFrom: secretRef }])],
        "envFrom secretRef": [/may not read Secrets/, (s) => (s.containers[0].envFrom = [{ secretRef: { name: "canary" } }])],
        "secretKeyRef in an init container": [/may not read Secrets/, (s) => (s.initContainers = [{ ...s.containers[0], name: "i", env: [{ name: "X", valueFrom: secretRef }] }])],
        "secretKeyRef in an ephemeral container": [
          /may not read Secrets/,
          (s) => (s.ephemeralContainers = [{ name: "e", image: IMAGE, env: [{ name: "X", valueFrom: secretRef }] }]),
        ],
        "configMapKeyRef env": [/nor ConfigMaps/, (s) => (s.containers[0].env = [{ name: "X", valueFrom: { configMapKeyRef: { name: "agent-sandboxes-policy", key: "k" } } }])],
        imagePullSecrets: [/imagePullSecrets are not allowed/, (s) => (s.imagePullSecrets = [{ name: "canary" }])],
        nodeName: [/nodeName is not allowed/, (s) => (s.nodeName = "kwok-node-0")],
        "tolerate everything": [/tolerations are not allowed/, (s) => (s.tolerations = [{ operator: "Exists" }])],
        "tolerate the control plane": [/tolerations are not allowed/, (s) => (s.tolerations = [{ key: "node-role.kubernetes.io/control-plane", operator: "Exists" }])],
        priorityClassName: [/priorityClassName must be absent/, (s) => (s.priorityClassName = "system-node-critical")],
        serviceAccountName: [/ServiceAccount default/, (s) => (s.serviceAccountName = "sandbox-client")],
        "serviceAccount (deprecated)": [/ServiceAccount default/, (s) => (s.serviceAccount = "sandbox-client")],
      };
      const policy = /ValidatingAdmissionPolicy 'agent-sandboxes'/;
      for (const [what, [why, change]] of Object.entries(escapes)) {
        const spec = goodPod();
        change(spec);
        const sandbox = dryRun(asProvider, sandboxJson("escape", spec));
        assert.match(sandbox, policy, `Sandbox with ${what}`);
        assert.match(sandbox, why, `Sandbox with ${what}`);
        const template = dryRun(asAdmin, templateJson("escape", spec));
        assert.match(template, policy, `template with ${what}`);
        assert.match(template, why, `template with ${what}`);
      }
      // Pods too (Pod Security restricted allows secret and CSI volumes and Secret env).
      for (const what of ["secret volume", "secretKeyRef env", "csi volume", "imagePullSecrets", "another sandbox's claim"]) {
        const spec = goodPod();
        escapes[what][1](spec);
        assert.match(dryRun(asAdmin, podJson("escape", spec)), escapes[what][0], `pod with ${what}`);
      }
    } finally {
      asAdmin(["delete", "secret", "canary", "--ignore-not-found"]);
    }
  });

  test("the policy admits what sandboxes need: emptyDir, ephemeral, downwardAPI, kube-root-ca.crt, their own claims", () => {
    const spec = goodPod();
    spec.serviceAccountName = "default";
    spec.volumes = [
      { name: "scratch", emptyDir: {} },
      { name: "info", downwardAPI: { items: [{ path: "name", fieldRef: { fieldPath: "metadata.name" } }] } },
      { name: "ca", configMap: { name: "kube-root-ca.crt" } },
      { name: "both", projected: { sources: [{ configMap: { name: "kube-root-ca.crt" } }, { downwardAPI: { items: [{ path: "n", fieldRef: { fieldPath: "metadata.name" } }] } }] } },
      { name: "eph", ephemeral: { volumeClaimTemplate: { spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } } } } },
      { name: "workspace", persistentVolumeClaim: { claimName: "workspace-fine" } },
    ];
    spec.containers[0].env = [{ name: "CA", valueFrom: { configMapKeyRef: { name: "kube-root-ca.crt", key: "ca.crt" } } }];
    const claims = [{ metadata: { name: "workspace" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } } }];
    assert.equal(dryRun(asProvider, sandboxJson("fine", spec, claims)), "");
    assert.equal(dryRun(asAdmin, templateJson("fine", spec, claims)), "");
    // A pod's claim is `<volume>-<pod>`, as the controller names the Sandbox's.
    assert.equal(dryRun(asAdmin, podJson("fine", spec)), "");
    // Without the claim template, the volume is not the Sandbox's own.
    assert.match(dryRun(asProvider, sandboxJson("fine", spec)), /must be the sandbox's own/);
  });

  test("under Pod Security baseline, the policy itself refuses network and node volumes", async () => {
    const volumes = {
      nfs: { server: "10.0.0.1", path: "/" },
      iscsi: { targetPortal: "10.0.0.1:3260", iqn: "iqn.2001-04.com.example:x", lun: 0 },
      gitRepo: { repository: "https://example.com/x.git" },
      flexVolume: { driver: "x/y" },
      rbd: { monitors: ["10.0.0.1:6789"], image: "x" },
      cephfs: { monitors: ["10.0.0.1:6789"] },
      glusterfs: { endpoints: "x", path: "/" },
      fc: { wwids: ["x"] },
      cinder: { volumeID: "x" },
    };
    const root = goodPod();
    delete root.securityContext;
    const label = "pod-security.kubernetes.io/enforce";
    asAdmin(["label", "--overwrite", "namespace", namespace, `${label}=baseline`]);
    try {
      // Pod Security now admits a root pod: what is refused below, the policy refuses.
      await until(() => dryRun(asAdmin, podJson("root", root)) === "");
      for (const [type, source] of Object.entries(volumes)) {
        const spec = goodPod();
        spec.volumes = [{ name: "v", [type]: source }];
        for (const [who, json] of [[asAdmin, podJson], [asProvider, sandboxJson], [asAdmin, templateJson]]) {
          const err = dryRun(who, json("escape", spec));
          assert.match(err, /ValidatingAdmissionPolicy 'agent-sandboxes'.*volumes may only be/, `${type}: ${err}`);
        }
      }
    } finally {
      asAdmin(["label", "--overwrite", "namespace", namespace, `${label}=restricted`]);
    }
  });

  test("the policy's parameters: required RuntimeClasses, allowed toleration keys and PriorityClasses", async () => {
    const PARAMS = "agent-sandboxes-policy";
    const set = (data) => asAdmin(["patch", "configmap", PARAMS, "--type=merge", "-p", JSON.stringify({ data })]);
    const sandbox = (change) => {
      const spec = goodPod();
      change(spec);
      return dryRun(asProvider, sandboxJson("params", spec));
    };
    const none = () => {};
    set({ runtimeClassNames: "gvisor, kata", tolerationKeys: "sandboxes", priorityClassNames: "sandbox-low" });
    try {
      // The API server reads the parameters from its informer: wait for the change.
      await until(() => sandbox(none) !== "");
      assert.match(sandbox(none), /runtimeClassName must be one of \[gvisor, kata\]/);
      assert.match(sandbox((s) => (s.runtimeClassName = "runc")), /runtimeClassName must be one of/);
      const pod = goodPod();
      assert.match(dryRun(asAdmin, podJson("params", pod)), /runtimeClassName must be one of/);
      const allowed = (s) => {
        s.runtimeClassName = "kata";
        s.tolerations = [{ key: "sandboxes", operator: "Exists", effect: "NoSchedule" }];
        s.priorityClassName = "sandbox-low";
      };
      assert.equal(sandbox(allowed), "");
      assert.match(sandbox((s) => (allowed(s), s.tolerations.push({ operator: "Exists" }))), /tolerations are not allowed, except of the keys \[sandboxes\]/);
      assert.match(sandbox((s) => (allowed(s), (s.priorityClassName = "system-node-critical"))), /one of \[sandbox-low\]/);
    } finally {
      set({ runtimeClassNames: "", tolerationKeys: "", priorityClassNames: "" });
      await until(() => sandbox(none) === "");
    }
  });

  test("a labelled namespace without the policy's parameters admits nothing", () => {
    const ns = `agents-noparams-${process.pid}`;
    asAdmin(["create", "namespace", ns]);
    try {
      asAdmin(["label", "namespace", ns, "agent-sandbox-provider/sandbox-namespace=true"]);
      const err = refusal(() => asAdmin(["-n", ns, "create", "--dry-run=server", "-f", "-"], sandboxJson("fine", goodPod())));
      assert.match(err, /ValidatingAdmissionPolicy 'agent-sandboxes'.*no params found/);
    } finally {
      asAdmin(["delete", "namespace", ns, "--wait=false"]);
    }
  });

  test("the provider's ServiceAccount may suspend a Sandbox but not change its pod template", async () => {
    const { p } = provider({ sandbox: { image: IMAGE }, suspend: "none" });
    await withSandbox(p, "template-change", async (_ctx, id) => {
      const name = objectName(id);
      const patch = (who, body) => refusal(() => who(["patch", S, name, "--type=merge", "--dry-run=server", "-p", JSON.stringify(body)]));
      const because = /the provider's ServiceAccount may not change a Sandbox's pod template/;
      assert.match(patch(asProvider, { spec: { podTemplate: { spec: { nodeSelector: { x: "y" } } } } }), because);
      assert.match(patch(asProvider, { spec: { podTemplate: { metadata: { labels: { x: "y" } } } } }), because);
      assert.equal(patch(asProvider, { spec: { operatingMode: "Suspended" } }), "");
      assert.equal(patch(asAdmin, { spec: { podTemplate: { spec: { nodeSelector: { x: "y" } } } } }), "", "others are not the provider");
    });
  });

  // Under runc and under gVisor (RuntimeClass `gvisor`, allowed in this
  // namespace: its policy requires none).
  for (const runtimeClassName of [undefined, "gvisor"]) {
    test(`direct mode runs restricted by default${runtimeClassName ? " under gVisor" : ""}: the node applies its user, fsGroup, no_new_privs and dropped capabilities`, async () => {
      const { p } = provider({ sandbox: { image: IMAGE, volume: { size: "1Gi" }, ...(runtimeClassName && { runtimeClassName }) }, suspend: "none" });
      await withSandbox(p, `restricted${runtimeClassName ? "-gvisor" : ""}`, async (ctx, id) => {
        const spec = getObject(S, objectName(id)).spec.podTemplate.spec;
        assert.deepEqual(spec.securityContext, {
          runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, fsGroupChangePolicy: "OnRootMismatch",
          seccompProfile: { type: "RuntimeDefault" },
        });
        assert.equal(spec.enableServiceLinks, false);
        const sandbox = await p.connect(ctx, id);
        // Seccomp 2: the runtime applied RuntimeDefault (filter mode). gVisor
        // applies no filter inside its sandbox (0): the Sentry, which serves
        // every system call, runs under its own (docs/runtimes.md).
        assert.deepEqual(await status(sandbox, "Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapEff", "CapBnd"), {
          Uid: "1000\t1000\t1000\t1000", Gid: "1000\t1000\t1000\t1000", Groups: "1000", NoNewPrivs: "1", Seccomp: runtimeClassName ? "0" : "2",
          CapEff: "0000000000000000", CapBnd: "0000000000000000",
        });
        // The workspace is the fsGroup's; /tmp and /dev/shm (the provider's own records) are everyone's.
        assert.equal(await sh(sandbox, "stat -c '%a %g' /workspace /tmp /dev/shm"), "2777 1000\n1777 0\n1777 0\n");
        await sh(sandbox, "echo w > /workspace/f && echo t > /tmp/f && echo s > /dev/shm/f && mkdir -p /workspace/d/e");
        assert.equal((await sandbox.exec("touch /etc/x || touch /f", { cwd: "/" })).exitCode, 1, "nothing else is writable");
        const spawned = await sandbox.spawn("id -u");
        assert.equal((await spawned.wait()).exitCode, 0);
      });
    });
  }

  test('a "baseline" pod in a namespace that enforces restricted fails connect at once; under baseline it runs as root, capabilities cut', async () => {
    const { p } = provider({ sandbox: { image: IMAGE, securityProfile: "baseline" }, suspend: "none" });
    await withSandbox(p, "baseline-refused", async (ctx, id) => {
      await assert.rejects(p.connect(ctx, id), (err) => {
        assert.equal(err.code, "sandbox_failed", err.message);
        assert.match(err.message, /violates PodSecurity "restricted:latest"/);
        return true;
      });
    });
    const label = "pod-security.kubernetes.io/enforce";
    asAdmin(["label", "--overwrite", "namespace", namespace, `${label}=baseline`]);
    try {
      await withSandbox(p, "baseline", async (ctx, id) => {
        const sandbox = await p.connect(ctx, id);
        // Root with the runtime's default capabilities (docker's well-known set), no escalation.
        assert.deepEqual(await status(sandbox, "Uid", "NoNewPrivs", "CapEff", "CapBnd"), {
          Uid: "0\t0\t0\t0", NoNewPrivs: "1", CapEff: "00000000a80425fb", CapBnd: "00000000a80425fb",
        });
        await sh(sandbox, "echo root can > /workspace/f");
      });
    } finally {
      asAdmin(["label", "--overwrite", "namespace", namespace, `${label}=restricted`]);
    }
  });

  test("create warns, once per provider, about a warm pool's template without seccomp, RuntimeClass or NetworkPolicy", async () => {
    const template = {
      apiVersion: "extensions.agents.x-k8s.io/v1beta1",
      kind: "SandboxTemplate",
      metadata: { name: "weak" },
      spec: { networkPolicyManagement: "Unmanaged", podTemplate: { spec: { automountServiceAccountToken: false, containers: [{ name: "sandbox", image: IMAGE }] } } },
    };
    const pool = { apiVersion: "extensions.agents.x-k8s.io/v1beta1", kind: "SandboxWarmPool", metadata: { name: "pool-weak" }, spec: { replicas: 0, sandboxTemplateRef: { name: "weak" } } };
    asAdmin(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: [template, pool] }));
    const warnings = (events) => events.filter((e) => e.type === "warning").map((e) => e.message);
    try {
      const { p, events } = provider({ warmPool: "pool-weak", suspend: "none" });
      await withSandbox(p, "weak-1", async () => {
        await withSandbox(p, "weak-2", async () => {});
      });
      const given = warnings(events);
      assert.equal(given.length, 2, given.join("\n"));
      assert.match(given[0], /^SandboxTemplate "weak" \(warm pool "pool-weak" in namespace "[^"]+"\) runs container\(s\) sandbox without a seccomp profile/);
      assert.match(given[1], /names no `runtimeClassName`/);
      // Without the namespace's NetworkPolicy, an Unmanaged template is open.
      asAdmin(["delete", "networkpolicy", "agent-sandboxes"]);
      try {
        const other = provider({ warmPool: "pool-weak", suspend: "none" });
        await withSandbox(other.p, "weak-3", async () => {});
        assert.match(warnings(other.events).join("\n"), /`networkPolicyManagement: Unmanaged`, and no NetworkPolicy in the namespace restricts both ingress and egress/);
      } finally {
        asAdmin(["apply", "-f", `${manifests}network-policy.yaml`]);
      }
    } finally {
      asAdmin(["delete", "sandboxwarmpool", "pool-weak", "--ignore-not-found"]);
      asAdmin(["delete", "sandboxtemplate", "weak", "--ignore-not-found"]);
    }
  });

  test("a sandbox over the namespace's ResourceQuota waits, and its timeout names the quota", async () => {
    const { p } = provider({ sandbox: { image: IMAGE, resources: { cpu: "100000" } }, suspend: "none", readyTimeoutMs: 5000 });
    await withSandbox(p, "quota", async (ctx, id) => {
      await assert.rejects(p.connect(ctx, id), (err) => {
        assert.equal(err.code, "timeout", err.message);
        assert.match(err.message, /exceeded quota: agent-sandboxes/);
        return true;
      });
    });
  });
});
