// The runtime dimension of the benchmark: where a sandbox's pod runs. Per
// runtime the harness makes, before measuring and not timed, private
// SandboxTemplates (copies of the shipped `ephemeral` and `workspace` ones
// with the runtime's pod settings and small requests) and a warm pool of the
// ephemeral one, and deletes them afterwards.

import { readFileSync } from "node:fs";

export const ROOT = new URL("../../", import.meta.url).pathname;

/**
 * runc: containerd's default runtime on the real node (no RuntimeClass).
 * gvisor: RuntimeClass `gvisor` (handler runsc, platform systrap) on the same node.
 * nodeexec: the fake node kwok-node-0 (commands in namespaces over the host's
 * /usr), the node of the figures before issue 32; tainted, so its pods must
 * tolerate sandbox.local/fake, which the shipped admission policy refuses
 * unless its parameter tolerationKeys lists the key.
 */
export const RUNTIMES = {
  runc: { title: "runc", pod: {} },
  gvisor: { title: "gVisor", pod: { runtimeClassName: "gvisor" } },
  nodeexec: {
    title: "nodeexec (fake node)",
    pod: {
      tolerations: [{ key: "sandbox.local/fake", operator: "Exists", effect: "NoSchedule" }],
      nodeSelector: { "kubernetes.io/hostname": "kwok-node-0" },
    },
  },
};
export const DEFAULT_RUNTIMES = ["runc", "gvisor"];

/** The requests of every benchmark sandbox: the real node has 2 cores. */
const REQUESTS = { cpu: "10m", memory: "64Mi" };

/** `base` (a SandboxTemplate spec) with the runtime's pod settings and small requests. */
export function templateSpec(base, runtime) {
  const spec = structuredClone(base);
  const pod = spec.podTemplate.spec;
  Object.assign(pod, structuredClone(RUNTIMES[runtime].pod));
  for (const c of pod.containers) {
    c.resources = { ...c.resources, requests: { ...c.resources?.requests, ...REQUESTS } };
  }
  return spec;
}

/**
 * Makes runtime `rt`'s objects: templates `bench-<rt>-ephemeral-<runId>` and
 * `bench-<rt>-workspace-<runId>`, and the warm pool `bench-<rt>-<runId>` of
 * the ephemeral one with `replicas` members. Returns their names.
 */
export async function setupRuntime(k, rt, runId, replicas) {
  const names = {
    ephemeral: `bench-${rt}-ephemeral-${runId}`,
    workspace: `bench-${rt}-workspace-${runId}`,
    pool: `bench-${rt}-${runId}`,
    lifecyclePool: `bench-${rt}-life-${runId}`,
  };
  try {
    for (const like of ["ephemeral", "workspace"]) {
      const base = (await k.template(like))?.spec;
      if (!base) throw new Error(`SandboxTemplate ${like} not found in ${k.ns}`);
      await k.applyTemplate(names[like], templateSpec(base, rt));
    }
    await k.createPool(names.pool, { template: names.ephemeral }, replicas);
  } catch (e) {
    await teardownRuntime(k, names).catch(() => {});
    throw new Error(apiMessage(e));
  }
  return names;
}

/** The API server's message of a failed client-node call (its Status body), else the error's. */
export function apiMessage(e) {
  try {
    const status = typeof e.body === "string" ? JSON.parse(e.body) : e.body;
    if (status?.message) return `${e.code ?? status.code}: ${status.message}`;
  } catch {}
  return String(e?.message ?? e).split("\n")[0];
}

/** Deletes what setupRuntime made (and the lifecycle's pool, if a failure left it). */
export async function teardownRuntime(k, names) {
  await Promise.all([k.deletePool(names.pool), k.deletePool(names.lifecyclePool)]);
  await Promise.all([k.deleteTemplate(names.ephemeral), k.deleteTemplate(names.workspace)]);
}

/** Where a pod runs: node, RuntimeClass, and the kernel its commands see. */
export async function placement(k, podName, exec) {
  const pod = await k.pod(podName);
  const node = pod?.spec?.nodeName ? await k.node(pod.spec.nodeName) : null;
  let kernel = null;
  try {
    kernel = (await exec("cat /proc/version")).trim();
  } catch (e) {
    kernel = `unknown (${String(e.message).split("\n")[0]})`;
  }
  return {
    pod: podName,
    node: pod?.spec?.nodeName ?? null,
    runtimeClassName: pod?.spec?.runtimeClassName ?? null,
    image: pod?.spec?.containers?.find((c) => c.name === "sandbox")?.image ?? null,
    containerRuntime: node?.status?.nodeInfo?.containerRuntimeVersion ?? null,
    kubelet: node?.status?.nodeInfo?.kubeletVersion ?? null,
    kernel,
  };
}

/** Versions of the real node's runtimes, from their pinned modules (dev/cluster/node/*\/go.mod). */
export function runtimeVersions() {
  const mod = (dir, re) => {
    try {
      return readFileSync(`${ROOT}dev/cluster/node/${dir}/go.mod`, "utf8").match(re)[1];
    } catch {
      return "unknown";
    }
  };
  let platform = "unknown";
  try {
    platform = readFileSync(`${ROOT}dev/cluster/node/realnode.sh`, "utf8").match(/platform = "(\w+)"/)[1];
  } catch {}
  return {
    containerd: mod("containerd", /github\.com\/containerd\/containerd\/v2 (\S+)/),
    runc: mod("runc", /github\.com\/opencontainers\/runc (\S+)/),
    [`gVisor (runsc, platform ${platform})`]: mod("gvisor", /gvisor\.dev\/gvisor (\S+)/),
  };
}
