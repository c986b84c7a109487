// What the scale benchmark sees from outside the client process: its TCP
// connections to the API server (/proc/<pid>/fd + /proc/net/tcp), RSS and
// CPU (/proc), the CPU of every cluster component, the API server's watch
// gauge and request counters (/metrics), the client's own requests (the scale
// profile's audit log of the bench ServiceAccount), and an independent
// namespace watch that timestamps when each sandbox became Ready or went.

import { closeSync, openSync, readFileSync, readSync, readdirSync, readlinkSync, statSync } from "node:fs";
import { cpuMsOf, statusKb } from "./measure.mjs";

/**
 * Milliseconds on CLOCK_MONOTONIC, which every process of the machine shares:
 * the harness compares its watch's timestamps with its workers', and a
 * wall-clock step between their starts (29 s in one run) shifted every
 * worker started after it (`performance.timeOrigin` is wall-clock time).
 */
export const now = () => Number(process.hrtime.bigint()) / 1e6;

/** Socket inodes of a process (its fds that are `socket:[inode]`). */
function socketInodes(pid) {
  const out = new Set();
  let fds;
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return out;
  }
  for (const fd of fds) {
    try {
      const m = readlinkSync(`/proc/${pid}/fd/${fd}`).match(/^socket:\[(\d+)\]$/);
      if (m) out.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  return out;
}

/** Established TCP connections of `pid` to 127.0.0.1:`port` (IPv4 and v6 tables). */
export function apiConnections(pid, port) {
  const inodes = socketInodes(pid);
  if (inodes.size === 0) return 0;
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  let n = 0;
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      // f[2] = rem_address (ADDR:PORT), f[3] = state (01 = ESTABLISHED), f[9] = inode
      if (f.length > 9 && f[3] === "01" && f[2].endsWith(`:${hexPort}`) && inodes.has(f[9])) n++;
    }
  }
  return n;
}

/** Samples a process's API connections every `ms` while a phase runs. */
export function connectionSampler(pid, port, ms = 100) {
  const xs = [];
  const tick = () => xs.push(apiConnections(pid, port));
  tick();
  const timer = setInterval(tick, ms);
  return {
    stop() {
      clearInterval(timer);
      tick();
      return { peak: Math.max(...xs), end: xs.at(-1), samples: xs.length };
    },
  };
}

/** CPU ms so far of the client and of every cluster component (.cluster/run/<name>.pid). */
export function cpuSnapshot(clientPid, runDir) {
  const out = { client: cpuMsOf(clientPid), harness: process.cpuUsage().user / 1e3 + process.cpuUsage().system / 1e3 };
  for (const f of readdirSync(runDir).filter((f) => f.endsWith(".pid"))) {
    try {
      out[f.slice(0, -4)] = cpuMsOf(readFileSync(`${runDir}/${f}`, "utf8").trim());
    } catch {
      // component restarting
    }
  }
  return out;
}

export const cpuDelta = (a, b) => Object.fromEntries(Object.keys(b).map((k) => [k, Math.round((b[k] ?? 0) - (a[k] ?? 0))]));

export const rssKiB = (pid) => statusKb("VmRSS", pid);
/** The anonymous part of RSS: what the process allocated, without the code and files it mapped. */
export const anonKiB = (pid) => statusKb("RssAnon", pid);
export const hwmKiB = (pid) => statusKb("VmHWM", pid);

// ---- the API server's /metrics -----------------------------------------------------

const KINDS = new Set(["pods", "sandboxes", "sandboxclaims", "persistentvolumeclaims"]);

/** Watches open on the API server on the kinds the provider watches, by scope. */
export async function apiMetrics(k) {
  const text = await k.metrics();
  // A watch with a metadata.name field selector has scope "resource" (the
  // provider's per-object watches); the harness, controller, scheduler, kwok
  // and nodeexec watch cluster-wide.
  const watches = { namespace: 0, cluster: 0, resource: 0 };
  const requests = {}; // "VERB resource[/sub] code" → count (every client)
  for (const line of text.split("\n")) {
    if (line.startsWith("apiserver_longrunning_requests{")) {
      const l = labels(line);
      if (l.verb === "WATCH" && KINDS.has(l.resource) && l.scope in watches) watches[l.scope] += value(line);
    } else if (line.startsWith("apiserver_request_total{")) {
      const l = labels(line);
      if (!KINDS.has(l.resource) && l.resource !== "selfsubjectrulesreviews") continue;
      const key = `${l.verb} ${l.resource}${l.subresource ? `/${l.subresource}` : ""} ${l.scope} ${l.code}`;
      requests[key] = (requests[key] ?? 0) + value(line);
    }
  }
  return { watches, requests };
}

const labels = (line) => Object.fromEntries([...line.slice(line.indexOf("{") + 1, line.lastIndexOf("}")).matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
const value = (line) => Number(line.slice(line.lastIndexOf(" ") + 1));

/** Request counter deltas (positive only), grouped as "VERB resource scope code". */
export function requestDelta(a, b) {
  const out = {};
  for (const [key, v] of Object.entries(b.requests)) {
    const d = v - (a.requests[key] ?? 0);
    if (d > 0) out[key] = d;
  }
  return out;
}

// ---- the client's own requests: the scale profile's audit log ------------------------

/**
 * Reads the audit log from where it last stopped: the bench ServiceAccount's
 * requests by "verb resource[/subresource]" (one per request: long-running
 * ones, watches and execs, log ResponseStarted and ResponseComplete), plus
 * the peak of its watches open at once, from their start/complete events.
 */
export function auditReader(path) {
  let offset = 0;
  let rest = "";
  const openWatches = new Set();
  try {
    offset = statSync(path).size; // only what happens from now on
  } catch {
    // no audit log (not the scale profile): no counts
  }
  return {
    read() {
      const counts = {};
      let peakWatches = openWatches.size;
      let fd;
      try {
        fd = openSync(path, "r");
      } catch {
        return null;
      }
      try {
        const buf = Buffer.alloc(1 << 20);
        for (;;) {
          const n = readSync(fd, buf, 0, buf.length, offset);
          if (n === 0) break;
          offset += n;
          const lines = (rest + buf.toString("utf8", 0, n)).split("\n");
          rest = lines.pop();
          for (const line of lines) {
            if (!line) continue;
            const e = JSON.parse(line);
            const o = e.objectRef ?? {};
            const res = `${o.resource ?? e.requestURI}${o.subresource ? `/${o.subresource}` : ""}`;
            const long = e.verb === "watch" || o.subresource === "exec";
            if (e.verb === "watch") {
              if (e.stage === "ResponseStarted") openWatches.add(e.auditID);
              else openWatches.delete(e.auditID);
              peakWatches = Math.max(peakWatches, openWatches.size);
            }
            // Long-running requests: counted at ResponseStarted (a refused
            // one has only ResponseComplete, with its code).
            const counted = long ? e.stage === "ResponseStarted" || (e.stage === "ResponseComplete" && (e.responseStatus?.code ?? 200) >= 300) : e.stage === "ResponseComplete";
            if (counted) counts[`${e.verb.toUpperCase()} ${res}`] = (counts[`${e.verb.toUpperCase()} ${res}`] ?? 0) + 1;
          }
        }
      } finally {
        closeSync(fd);
      }
      return { counts, peakWatches, openWatches: openWatches.size };
    },
  };
}

// ---- the independent observer ---------------------------------------------------------

/**
 * One watch per kind over the bench namespace (cluster-scoped with a field
 * selector, so the API server's namespaced WATCH gauge holds only the
 * client's): when each claim, Sandbox and pod was first seen Ready, and what
 * exists.
 */
export async function observer(kc, ns) {
  const k8s = await import("@kubernetes/client-node");
  const w = new k8s.Watch(kc);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const co = kc.makeApiClient(k8s.CustomObjectsApi);
  const fieldSelector = `metadata.namespace=${ns}`;
  const readyAt = { sandboxes: new Map(), pods: new Map(), sandboxclaims: new Map() };
  const live = { sandboxes: new Map(), pods: new Map(), persistentvolumeclaims: new Map(), sandboxclaims: new Map() };
  const waiters = new Set();
  // The provider's rule (readiness.rs): the Sandbox's Ready condition for its
  // current generation (a warm member's adoption and a resume change its spec,
  // and its Ready stays the old generation's until the controller has caught
  // up), and its pod Running; a claim once it names its Sandbox (its Ready
  // condition is the Sandbox's, forwarded a moment later).
  const readyCondition = (o, generation) =>
    o?.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True" && (generation === undefined || c.observedGeneration === generation));
  const isReady = (o, kind) =>
    kind === "pods" ? o?.status?.phase === "Running" && Boolean(o.spec?.nodeName)
      : kind === "sandboxclaims" ? Boolean(o.status?.sandbox?.name)
        : readyCondition(o, o?.metadata?.generation);
  const seen = (kind, obj, deleted) => {
    const name = obj.metadata.name;
    if (deleted) {
      live[kind].delete(name);
      readyAt[kind]?.delete(name);
    } else {
      live[kind].set(name, obj);
      const r = readyAt[kind];
      if (r) {
        // A pod re-created (resume) or a Sandbox Ready again: a new Ready.
        const uid = obj.metadata.uid;
        const prev = r.get(name);
        if (isReady(obj, kind) && !obj.metadata.deletionTimestamp) {
          if (!prev || prev.uid !== uid || !prev.ready) r.set(name, { uid, ready: true, at: now() });
        } else if (prev?.ready) {
          r.set(name, { uid, ready: false, at: now() });
        }
      }
    }
    for (const f of waiters) f();
  };
  // client-node's ListWatch: LIST, then WATCH from its resourceVersion; a
  // re-list after a 410 reports the objects that went meanwhile as deleted.
  // It stops on other errors: start it again (from its resourceVersion).
  const informers = [];
  const follow = async (path, kind, list) => {
    const lw = new k8s.ListWatch(path, w, list, false, undefined, fieldSelector);
    lw.on("add", (o) => seen(kind, o, false));
    lw.on("update", (o) => seen(kind, o, false));
    lw.on("delete", (o) => seen(kind, o, true));
    lw.on("error", () => stopped || setTimeout(() => lw.start().catch(() => {}), 500));
    informers.push(lw);
    await lw.start();
  };
  let stopped = false;
  await follow("/apis/agents.x-k8s.io/v1beta1/sandboxes", "sandboxes", () =>
    co.listClusterCustomObject({ group: "agents.x-k8s.io", version: "v1beta1", plural: "sandboxes", fieldSelector }));
  await follow("/api/v1/pods", "pods", () => core.listPodForAllNamespaces({ fieldSelector }));
  await follow("/api/v1/persistentvolumeclaims", "persistentvolumeclaims", () => core.listPersistentVolumeClaimForAllNamespaces({ fieldSelector }));
  await follow("/apis/extensions.agents.x-k8s.io/v1beta1/sandboxclaims", "sandboxclaims", () =>
    co.listClusterCustomObject({ group: "extensions.agents.x-k8s.io", version: "v1beta1", plural: "sandboxclaims", fieldSelector }));
  /** Resolves (with the time of the event that made it true) when `done()` holds. */
  const until = (done, timeoutMs, what) => {
    if (done()) return Promise.resolve(now());
    return new Promise((resolve, reject) => {
      const f = () => {
        if (!done()) return;
        waiters.delete(f);
        clearTimeout(t);
        resolve(now());
      };
      const t = setTimeout(() => (waiters.delete(f), reject(new Error(`${what()} after ${timeoutMs} ms`))), timeoutMs);
      waiters.add(f);
    });
  };
  const count = () => ({ sandboxes: live.sandboxes.size, pods: live.pods.size, pvcs: live.persistentvolumeclaims.size, claims: live.sandboxclaims.size });
  return {
    /** When `name` was last seen Ready as a Sandbox and as a pod (the later of the two), or null. */
    readyAt(name) {
      const s = readyAt.sandboxes.get(name);
      const p = readyAt.pods.get(name);
      return s?.ready && p?.ready ? Math.max(s.at, p.at) : null;
    },
    /** When claim `name` was first seen naming its Sandbox, or null (warm-pool mode). */
    claimBoundAt: (name) => (readyAt.sandboxclaims.get(name)?.ready ? readyAt.sandboxclaims.get(name).at : null),
    /** The Sandbox claim `name` is bound to (a warm pool member's name), or null. */
    sandboxOf: (claim) => live.sandboxclaims.get(claim)?.status?.sandbox?.name ?? null,
    count,
    nodeOf: (name) => live.pods.get(name)?.spec?.nodeName ?? null,
    /** Resolves when nothing of the namespace is left (time of the event that emptied it). */
    empty: (timeoutMs) => until(() => Object.values(count()).every((c) => c === 0), timeoutMs, () => `objects left: ${JSON.stringify(count())}`),
    /**
     * Resolves when no Sandbox belongs to warm pool `pool` any more (its
     * unclaimed members gone), nor a pod or PVC of one: every Sandbox left
     * has one pod and one PVC, so the cluster's deletions are over.
     */
    poolEmptied(pool, timeoutMs) {
      const members = () => [...live.sandboxes.values()].filter((o) => o.metadata.ownerReferences?.some((r) => r.kind === "SandboxWarmPool" && r.name === pool));
      const settled = () => members().length === 0 && live.pods.size === live.sandboxes.size && live.persistentvolumeclaims.size === live.sandboxes.size;
      return until(settled, timeoutMs, () => `${members().length} Sandboxes of warm pool ${pool} left (${JSON.stringify(count())})`);
    },
    stop() {
      stopped = true;
      for (const lw of informers) lw.stop();
    },
  };
}
