// The local control plane: start it, load its env, and the few admin-side
// object operations the benchmark needs (claims, a private warm pool,
// leftovers, versions). Everything talks to 127.0.0.1 only.

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { CoreV1Api, CustomObjectsApi, KubeConfig, VersionApi } from "@kubernetes/client-node";

export const ROOT = new URL("../../", import.meta.url).pathname;
const EXT = { group: "extensions.agents.x-k8s.io", version: "v1beta1" };
const CORE = { group: "agents.x-k8s.io", version: "v1beta1" };

/** `cluster.sh up [ARGS]` (idempotent), then the exports of .cluster/env into process.env. */
export function ensureCluster(args = []) {
  execFileSync("bash", [`${ROOT}dev/cluster/cluster.sh`, "up", ...args], { stdio: ["ignore", "ignore", "inherit"] });
  const state = process.env.SANDBOX_CLUSTER_STATE || `${ROOT}.cluster`; // as cluster.sh
  for (const m of readFileSync(`${state}/env`, "utf8").matchAll(/^export (\w+)=(.*)$/gm)) {
    process.env[m[1]] = m[2].replace(/^["']|["']$/g, "");
  }
}

/** Admin-side API clients (setup and inspection only; measurements use the least-privilege SA). */
export function admin(ns = process.env.SANDBOX_TEST_NAMESPACE || "agents") {
  const kc = new KubeConfig();
  kc.loadFromFile(process.env.SANDBOX_TEST_ADMIN_KUBECONFIG);
  const co = kc.makeApiClient(CustomObjectsApi);
  const core = kc.makeApiClient(CoreV1Api);
  const get = (api, plural, name) =>
    co.getNamespacedCustomObject({ ...api, namespace: ns, plural, name }).catch((e) => (e.code === 404 ? null : Promise.reject(e)));
  return {
    ns,
    kc,
    /** The API server's /metrics text. */
    async metrics() {
      const https = await import("node:https");
      const opts = { method: "GET" };
      await kc.applyToHTTPSOptions(opts);
      const url = new URL("/metrics", kc.getCurrentCluster().server);
      return new Promise((resolve, reject) => {
        https.get(url, opts, (res) => {
          let body = "";
          res.setEncoding("utf8").on("data", (c) => (body += c)).on("end", () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`/metrics: ${res.statusCode}`))));
        }).on("error", reject);
      });
    },
    /** Sets parameters of the namespace's admission policy (its ConfigMap agent-sandboxes-policy, examples/manifests/admission-policy.yaml). */
    setPolicyParams: (data) =>
      core.patchNamespacedConfigMap({ namespace: ns, name: "agent-sandboxes-policy", body: Object.entries(data).map(([key, value]) => ({ op: "add", path: `/data/${key}`, value })) }),
    /** Marks a node (un)schedulable, as `kubectl cordon/uncordon` does. */
    cordon: (name, unschedulable) =>
      core.patchNode({ name, body: [{ op: "add", path: "/spec/unschedulable", value: unschedulable }] }),
    claim: (name) => get(EXT, "sandboxclaims", name),
    sandbox: (name) => get(CORE, "sandboxes", name),
    pool: (name) => get(EXT, "sandboxwarmpools", name),
    /** PVCs made for a Sandbox from its template's volumeClaimTemplates (`<vct>-<sandbox>`). */
    pvcsOf: async (sandbox) =>
      (await core.listNamespacedPersistentVolumeClaim({ namespace: ns })).items.filter((p) => p.metadata.name.endsWith(`-${sandbox}`)),
    pod: (name) => core.readNamespacedPod({ namespace: ns, name }).catch((e) => (e.code === 404 ? null : Promise.reject(e))),
    nodes: async () => (await core.listNode()).items,
    node: (name) => core.readNode({ name }).catch((e) => (e.code === 404 ? null : Promise.reject(e))),
    template: (name) => get(EXT, "sandboxtemplates", name),
    deleteTemplate: (name) =>
      co.deleteNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxtemplates", name }).catch((e) => (e.code === 404 ? null : Promise.reject(e))),

    /** A claim made without the package (when the package is not built). */
    async createClaim(name, pool) {
      const body = { apiVersion: `${EXT.group}/${EXT.version}`, kind: "SandboxClaim", metadata: { name }, spec: { warmPoolRef: { name: pool } } };
      await co.createNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxclaims", body });
    },
    deleteClaim: (name) =>
      co.deleteNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxclaims", name }).catch((e) => (e.code === 404 ? null : Promise.reject(e))),
    /** Names of the claims of warm pool `pool` (and, with `prefix`, of those named so). */
    async claimsOfPool(pool, prefix) {
      const list = await co.listNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxclaims" });
      const ours = (c) => c.spec?.warmPoolRef?.name === pool || (prefix && c.metadata.name.startsWith(prefix));
      return list.items.filter(ours).map((c) => c.metadata.name);
    },
    /** Deletes claims and waits until their claim, Sandbox and pod are gone (so the next measurement has the node to itself). */
    async deleteClaimsAndWait(names, timeoutMs = 120_000) {
      const sandboxes = (await Promise.all(names.map((n) => this.claim(n)))).map((c) => c?.status?.sandbox?.name).filter(Boolean);
      await Promise.all(names.map((n) => this.deleteClaim(n)));
      const left = async () =>
        (await Promise.all([...names.map((n) => this.claim(n)), ...sandboxes.flatMap((s) => [this.sandbox(s), this.pod(s)])])).some(Boolean);
      for (const end = Date.now() + timeoutMs; await left(); await sleep(200)) {
        if (Date.now() > end) throw new Error(`claims ${names.join(", ")}: not all gone after ${timeoutMs} ms`);
      }
    },

    /** Pod of a claim once it is Ready. */
    async waitClaimPod(name, timeoutMs = 120_000) {
      for (const end = Date.now() + timeoutMs; Date.now() < end; await sleep(200)) {
        const c = await this.claim(name);
        const ready = c?.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True");
        if (ready && c.status.sandbox?.name) return c.status.sandbox.name;
      }
      throw new Error(`claim ${name} not Ready after ${timeoutMs} ms`);
    },

    /** A private warm pool with the template of `like`, so others' pools are left alone. */
    /** A warm pool like pool `like` (a name), or of template `like.template`. */
    async createPool(name, like, replicas) {
      const spec = typeof like === "string" ? (await this.pool(like))?.spec : { sandboxTemplateRef: { name: like.template } };
      if (!spec) throw new Error(`warm pool ${like} not found`);
      const body = { apiVersion: `${EXT.group}/${EXT.version}`, kind: "SandboxWarmPool", metadata: { name }, spec: { ...spec, replicas } };
      if (await this.pool(name)) await this.scalePool(name, replicas);
      else await co.createNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxwarmpools", body });
    },
    /** Creates SandboxTemplate `name`, or replaces its spec. */
    async applyTemplate(name, spec) {
      const api = { ...EXT, namespace: ns, plural: "sandboxtemplates" };
      const old = await get(EXT, "sandboxtemplates", name);
      const body = { apiVersion: `${EXT.group}/${EXT.version}`, kind: "SandboxTemplate", metadata: { name, resourceVersion: old?.metadata.resourceVersion }, spec };
      await (old ? co.replaceNamespacedCustomObject({ ...api, name, body }) : co.createNamespacedCustomObject({ ...api, body }));
    },
    scalePool: (name, replicas) =>
      co.patchNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxwarmpools", name, body: [{ op: "replace", path: "/spec/replicas", value: replicas }] }),
    deletePool: (name) =>
      co.deleteNamespacedCustomObject({ ...EXT, namespace: ns, plural: "sandboxwarmpools", name }).catch((e) => (e.code === 404 ? null : Promise.reject(e))),
    async waitPoolReady(name, n, timeoutMs = 180_000) {
      for (const end = Date.now() + timeoutMs; Date.now() < end; await sleep(250)) {
        // Status of the current spec (a scale just made is not yet in it).
        const p = await this.pool(name);
        if (p && (p.status?.observedGeneration ?? 0) >= p.metadata.generation && (p.status?.readyReplicas ?? 0) >= n) return;
      }
      throw new Error(`warm pool ${name}: fewer than ${n} ready after ${timeoutMs} ms`);
    },
    /** Waits out API-server restarts (other users of the cluster run outage tests). */
    async waitApiserver(timeoutMs = 180_000) {
      for (const end = Date.now() + timeoutMs; ; await sleep(500)) {
        try {
          return await this.apiserverVersion();
        } catch (e) {
          if (Date.now() > end) throw new Error(`API server unreachable for ${timeoutMs} ms: ${e.message}`);
        }
      }
    },
    async apiserverVersion() {
      return (await kc.makeApiClient(VersionApi).getCode()).gitVersion;
    },
  };
}
