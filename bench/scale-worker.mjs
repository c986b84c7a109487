// The client side of the scale benchmark (bench/scale.mjs), in a process of
// its own so that the harness can sample its sockets, RSS and CPU from
// outside (/proc). It holds ONE client for the whole run and executes the
// phases the harness sends over IPC:
//   - "package": one agentSandboxProvider, in direct mode or (with `pool`)
//     claiming from that warm pool — the package is the one
//     SCALE_BENCH_PACKAGE names and its addon the one
//     NAPI_RS_NATIVE_LIBRARY_PATH names, so two commits can be measured;
//   - "baseline": a minimal client doing the same storm with
//     @kubernetes/client-node: one POST/PATCH/DELETE per operation and ONE
//     namespace informer (LIST+WATCH) per kind for every wait. What it costs is the cluster's share; the package's figures
//     minus these are the provider's.
// Replies carry per-call timestamps (CLOCK_MONOTONIC ms, the clock of the
// harness's observer), the event-loop delay and this process's CPU time.

import { monitorEventLoopDelay } from "node:perf_hooks";
import { Writable } from "node:stream";
import { now } from "./lib/scale-observe.mjs";
import { percentile } from "./lib/stats.mjs";

let client = null;

/** Runs fn over items, at most `limit` at a time; per-item { ok | error }. */
async function bounded(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i], i);
      } catch (e) {
        out[i] = { error: String(e?.message ?? e).split("\n")[0], code: e?.code };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

const ctx = (actorId) => ({ actorId, client() {} });

// ---- the package -------------------------------------------------------------

async function packageClient(o) {
  // This checkout's package, or the --compare commit's (bench/.addon-<sha>/package/).
  const { agentSandboxProvider } = await import(process.env.SCALE_BENCH_PACKAGE ?? "../index.js");
  const p = agentSandboxProvider({
    kubeConfig: o.kubeconfig,
    namespace: o.ns,
    // Execs at once are measured (the exec group, the sweeps of 50 connects
    // at once): the default cap of 32 would be what is measured.
    maxConcurrentExecs: 256,
    ...(o.pool ? { warmPool: o.pool } : { sandbox: { image: o.image, volume: { size: o.volumeSize }, podTemplate: o.podTemplate } }),
  });
  const sandboxes = new Map(); // id → Sandbox from the last connect
  return {
    // The provider's own request counter, where the build has one (stats(), issue 19).
    stats: () => (typeof p.stats === "function" ? p.stats() : null),
    async create(it) {
      const t0 = now();
      const id = await p.create(ctx(it.actor));
      const t1 = now();
      sandboxes.set(id, await p.connect(ctx(it.actor), id));
      return { id, name: id.split("/")[1], t0, t1, t2: now() };
    },
    async connect(it) {
      const t0 = now();
      const sb = await p.connect(ctx(it.actor), it.id);
      if (!sb) throw new Error(`${it.id} is gone`);
      sandboxes.set(it.id, sb);
      return { t0, t1: now() };
    },
    async exec(it) {
      const sb = sandboxes.get(it.id);
      const t0 = now();
      const r = await sb.exec("true", { cwd: "/" });
      if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${r.stderr}`);
      return { t0, t1: now() };
    },
    async suspend(it) {
      const t0 = now();
      await p.suspend(ctx(it.actor), it.id);
      const t1 = now();
      sandboxes.set(it.id, await p.connect(ctx(it.actor), it.id));
      return { t0, t1, t2: now() };
    },
    async destroy(it) {
      const t0 = now();
      await p.destroy(ctx(it.actor), it.id);
      sandboxes.delete(it.id);
      return { t0, t1: now() };
    },
  };
}

// ---- the minimal client ---------------------------------------------------------

async function baselineClient(o) {
  const k8s = await import("@kubernetes/client-node");
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(o.kubeconfig);
  const co = kc.makeApiClient(k8s.CustomObjectsApi);
  const ex = new k8s.Exec(kc);
  const G = { group: "agents.x-k8s.io", version: "v1beta1", namespace: o.ns, plural: "sandboxes" };
  // One watch per kind for every waiter, started once: the cache.
  const objs = { sandboxes: new Map(), pods: new Map() };
  const waiters = new Set();
  const poke = () => {
    for (const w of waiters) if (w.check()) waiters.delete(w);
  };
  const until = (check) => (check() ? Promise.resolve() : new Promise((resolve) => waiters.add({ check: () => check() && (resolve(), true) })));
  // client-node's informer (ListWatch: LIST, then WATCH from its
  // resourceVersion, re-list after a 410), started again after other errors.
  const watch = new k8s.Watch(kc);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  async function follow(path, map, list) {
    const lw = new k8s.ListWatch(path, watch, list, false);
    const set = (o) => (map.set(o.metadata.name, o), poke());
    lw.on("add", set);
    lw.on("update", set);
    lw.on("delete", (o) => (map.delete(o.metadata.name), poke()));
    lw.on("error", () => setTimeout(() => lw.start().catch(() => {}), 500));
    await lw.start();
  }
  await follow(`/apis/agents.x-k8s.io/v1beta1/namespaces/${o.ns}/sandboxes`, objs.sandboxes, () => co.listNamespacedCustomObject({ ...G }));
  await follow(`/api/v1/namespaces/${o.ns}/pods`, objs.pods, () => core.listNamespacedPod({ namespace: o.ns }));
  const ready = (name) => {
    const s = objs.sandboxes.get(name);
    const p = objs.pods.get(name);
    const cond = (x) => x?.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
    return cond(s) && cond(p) && !p.metadata.deletionTimestamp;
  };
  const name = (actor) => `bl-${actor.replace(/[^a-z0-9-]/g, "").slice(-40)}`;
  const pod = structuredClone(o.baselinePod);
  const merge = (a, b) => {
    for (const [k, v] of Object.entries(b ?? {})) a[k] = v && typeof v === "object" && !Array.isArray(v) && a[k] ? merge(a[k], v) : v;
    return a;
  };
  merge(pod, o.podTemplate);
  function execTrue(n) {
    return new Promise((resolve, reject) => {
      const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
      ex.exec(o.ns, n, "sandbox", ["true"], sink(), sink(), null, false, (s) =>
        s.status === "Success" ? resolve() : reject(new Error(s.message)),
      ).then((ws) => ws.on("error", reject), reject);
    });
  }
  return {
    async create(it) {
      const n = name(it.actor);
      const body = {
        apiVersion: "agents.x-k8s.io/v1beta1", kind: "Sandbox", metadata: { name: n },
        spec: {
          operatingMode: "Running",
          podTemplate: pod,
          volumeClaimTemplates: [{ metadata: { name: "workspace" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: o.volumeSize } } } }],
        },
      };
      const t0 = now();
      await co.createNamespacedCustomObject({ ...G, body });
      const t1 = now();
      await until(() => ready(n));
      return { id: `${o.ns}/${n}`, name: n, t0, t1, t2: now() };
    },
    async connect(it) {
      const t0 = now();
      await until(() => ready(it.name));
      return { t0, t1: now() };
    },
    async exec(it) {
      const t0 = now();
      await execTrue(it.name);
      return { t0, t1: now() };
    },
    async suspend(it) {
      const mode = (m) => co.patchNamespacedCustomObject({ ...G, name: it.name, body: [{ op: "add", path: "/spec/operatingMode", value: m }] });
      const t0 = now();
      await mode("Suspended");
      await until(() => !objs.pods.has(it.name));
      const t1 = now();
      await mode("Running");
      await until(() => ready(it.name));
      return { t0, t1, t2: now() };
    },
    async destroy(it) {
      const t0 = now();
      await co.deleteNamespacedCustomObject({ ...G, name: it.name, propagationPolicy: "Background" });
      await until(() => !objs.sandboxes.has(it.name) && !objs.pods.has(it.name));
      return { t0, t1: now() };
    },
  };
}

// ---- the phase loop ---------------------------------------------------------------

process.on("message", async ({ cmd, args }) => {
  try {
    if (cmd === "load") {
      // The client's module, before a phase that times the construction.
      await import(args.mode === "baseline" ? "@kubernetes/client-node" : (process.env.SCALE_BENCH_PACKAGE ?? "../index.js"));
      process.send({ ok: true, result: {} });
      return;
    }
    if (cmd === "init") {
      client = args.mode === "baseline" ? await baselineClient(args) : await packageClient(args);
      process.send({ ok: true, result: { pid: process.pid } });
      return;
    }
    const eld = monitorEventLoopDelay({ resolution: 1 });
    eld.enable();
    const cpu0 = process.cpuUsage();
    const stats0 = client.stats?.() ?? null;
    const t0 = now();
    const results = await bounded(args.items, args.concurrency ?? args.items.length, (it) => client[cmd](it));
    const t1 = now();
    eld.disable();
    const cpu = process.cpuUsage(cpu0);
    const stats1 = client.stats?.() ?? null;
    const counted = stats1 && Object.fromEntries(
      Object.entries(stats1.requests).map(([k, v]) => [k, v - (stats0?.requests?.[k] ?? 0)]).filter(([, v]) => v > 0));
    const delay = (v) => Math.max(0, v / 1e6 - 1); // recorded values are the 1 ms timer interval
    process.send({
      ok: true,
      result: {
        results,
        t0,
        t1,
        cpuMs: (cpu.user + cpu.system) / 1e3,
        eld: { p50: delay(eld.percentile(50)), p99: delay(eld.percentile(99)), max: delay(eld.max) },
        rssKiB: Math.round(process.memoryUsage().rss / 1024),
        providerStats: stats1 && { requests: counted, watches: stats1.watches, lists: stats1.lists - (stats0?.lists ?? 0) },
        latencyP50: percentile(results.filter((r) => !r.error).map((r) => r.t1 - r.t0), 50),
      },
    });
  } catch (e) {
    process.send({ ok: false, error: String(e?.stack ?? e) });
  }
});
process.on("disconnect", () => process.exit(0));
