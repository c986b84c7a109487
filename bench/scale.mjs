// npm run bench -- --scale [--quick] [--sizes=10,100] [--reps=3 | --reps=3,3,1] [--compare=<git-rev>]
//                          [--pool] [--no-baseline] [--exec-group=100] [--out=scale]
//
// One client serving N sandboxes (issue 19): N = 10, 100, 300, 1000 (--quick:
// 10 and 100, one repetition). Each run is one client in its own process
// (scale-worker.mjs) that the harness samples from outside; phases:
//   create     create+connect all, 50 at a time (the exec group first, see below)
//   connect    connect all again (Ready; the provider's orphan-sweep exec included)
//   reconnect  connect all once more (Ready, the steady state)
//   cold       a second client, new, connects to one sandbox among the N
//   exec       exec `true` on the exec group, all at once
//   exec-seq   50 exec `true` one after another on one sandbox
//   suspend    suspend then resume (connect) a subset, 50 at a time
//   idle       35 s without calls (what stays open)
//   destroy    destroy all, 50 at a time, until the namespace is empty
// Clients, interleaved within each repetition: this checkout's addon, the addon of
// --compare=<rev> (built in a temporary worktree), and a minimal
// @kubernetes/client-node client doing the same storm (the cluster's share).
// The package clients create Sandboxes directly; --pool runs each of them a
// second time in warm-pool mode (keys pool, compare-pool): `create` claims
// from a SandboxWarmPool of N members warmed before the run (the warming is
// the controller's, not timed), scaled to 0 after the create phase so that
// its replenished members are gone before the next phase.
//
// The cluster runs with the scale profile (`cluster.sh up --scale`, started if
// needed) in namespace agents-scale. The exec group (min(N, 100) sandboxes)
// runs on kwok-node-0, whose pods are real processes (nodeexec); the rest on
// the tainted scale node kwok-node-1, whose pods are API objects only. One
// provider has one pod template, so the split is made by scheduling: the
// template tolerates the scale node's taint and prefers it, and the harness
// cordons the scale node while the exec group is created.
//
// Writes bench/results/scale.{json,md,png} (scale-quick.* with --quick, <out>.* with --out).

import { execFileSync, fork } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { BENCH, ROOT, buildPackage, chartPython, checkoutTargetDir, installNodeModules, machine, sh } from "./lib/setup.mjs";
import { percentile, round } from "./lib/stats.mjs";

const args = process.argv.slice(2);
const opt = (name) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const quick = args.includes("--quick");
const SIZES = opt("sizes")?.split(",").map(Number) ?? (quick ? [10, 100] : [10, 100, 300, 1000]);
// --reps=3 or one count per size (--sizes=10,100,300,1000 --reps=3,3,3,1).
const REPS_LIST = (opt("reps") ?? (quick ? "1" : "3")).split(",").map(Number);
const repsOf = (n) => REPS_LIST[SIZES.indexOf(n)] ?? REPS_LIST.at(-1);
const COMPARE = opt("compare");
const POOL = args.includes("--pool");
const BASELINE = !args.includes("--no-baseline");
const EXEC_GROUP = Number(opt("exec-group") ?? 100); // real pods on kwok-node-0 (500-pod capacity, shared)
const SUSPEND_SUBSET = 20;
const CONCURRENCY = 50;
const IDLE_MS = 35_000; // the pod watches' 30 s linger, and then some
const SCALE_NODE = "kwok-node-1";
const REAL_NODE = "kwok-node-0"; // nodeexec's node: real processes, no container runtime
// kwok-node-1's taint, and kwok-node-0's (sandboxes go to the real node
// real-node-0 unless they tolerate it): both tolerated, and the pods held to
// the two fake nodes, so the exec group lands on kwok-node-0 as before the
// real node (1,000 pods cannot run on 2 cores).
const TAINTS = ["sandbox.local/scale", "sandbox.local/fake"];
const OUT = `${BENCH}results/${opt("out") ?? (quick ? "scale-quick" : "scale")}`;

const t0 = Date.now();
const log = (...a) => console.error(`[scale ${((Date.now() - t0) / 1e3).toFixed(0).padStart(5)}s]`, ...a);
const errors = [];

// ---- setup ----------------------------------------------------------------------

installNodeModules(log);
const { admin, ensureCluster } = await import("./lib/cluster.mjs");
const obsLib = await import("./lib/scale-observe.mjs");

log("local control plane: cluster.sh up --scale");
ensureCluster(["--scale"]);
const NS = process.env.SANDBOX_SCALE_NAMESPACE;
const KUBECONFIG = process.env.SANDBOX_SCALE_KUBECONFIG;
const AUDIT = process.env.SANDBOX_SCALE_AUDIT_LOG;
if (!NS || !KUBECONFIG) throw new Error("the cluster has no scale profile (SANDBOX_SCALE_* missing from .cluster/env)");
const STATE = process.env.SANDBOX_CLUSTER_STATE || `${ROOT}.cluster`;
const API_PORT = Number(new URL(readFileSync(KUBECONFIG, "utf8").match(/server: (\S+)/)[1]).port);
const k = admin(NS);
// The namespace's admission policy allows no toleration unless its
// parameters list the key: the scale node's and kwok-node-0's taints.
await k.setPolicyParams({ tolerationKeys: TAINTS.join(",") });

const rev = (r) => sh("git", ["rev-parse", "--short", r]);
const clients = [];
const thisRev = `${rev("HEAD")}${sh("git", ["status", "--porcelain", "--", "core", "src", "Cargo.toml", "Cargo.lock"]) ? "+dirty" : ""}`;
// Skip `npm run build` when bench/.addon was built from these very sources
// (their git tree ids, and no uncommitted change).
const sources = sh("git", ["rev-parse", "HEAD:core", "HEAD:src", "HEAD:Cargo.lock"]).replace(/\n/g, " ");
const stamp = `${BENCH}.addon/sources`;
if (!thisRev.endsWith("+dirty") && existsSync(`${BENCH}.addon/agent-sandbox-provider.node`) && existsSync(stamp) && readFileSync(stamp, "utf8") === sources) {
  process.env.NAPI_RS_NATIVE_LIBRARY_PATH = `${BENCH}.addon/agent-sandbox-provider.node`;
  log("package: bench/.addon is this commit's build");
} else {
  buildPackage(log); // this checkout → bench/.addon, NAPI_RS_NATIVE_LIBRARY_PATH
  writeFileSync(stamp, thisRev.endsWith("+dirty") ? "" : sources);
}
clients.push({ key: "package", label: `package ${thisRev}`, mode: "package", addon: process.env.NAPI_RS_NATIVE_LIBRARY_PATH, dir: ROOT });
if (COMPARE) clients.push({ key: "compare", label: `package ${rev(COMPARE)}`, mode: "package", ...buildRev(COMPARE) });
if (POOL) for (const c of [...clients]) clients.push({ ...c, key: c.key === "package" ? "pool" : `${c.key}-pool`, label: `${c.label}, warm pool`, pool: true });
if (BASELINE) clients.push({ key: "baseline", label: "minimal client (client-node)", mode: "baseline", addon: null });

/**
 * Another commit's package: its JavaScript (index.js, js/, native.cjs,
 * package.json: `git archive`, since the JS side changes with the addon's API)
 * and its release addon, built once in a temporary worktree with `npm run
 * build` (node_modules linked from this checkout); both kept in
 * bench/.addon-<sha>/. The worker imports that index.js, whose native.cjs
 * loads the addon NAPI_RS_NATIVE_LIBRARY_PATH names, as for bench/.addon.
 */
function buildRev(r) {
  const sha = sh("git", ["rev-parse", r]);
  const home = `${BENCH}.addon-${sha.slice(0, 12)}`;
  const addon = `${home}/agent-sandbox-provider.node`;
  if (!existsSync(`${home}/package/index.js`)) {
    mkdirSync(`${home}/package`, { recursive: true });
    execFileSync("bash", ["-c", 'git archive "$1" index.js native.cjs package.json js | tar -x -C "$2"', "-", sha, `${home}/package`], { cwd: ROOT });
  }
  const out = { addon, dir: `${home}/package/` };
  if (existsSync(addon)) return out;
  const dir = `${os.tmpdir()}/scale-bench-${sha.slice(0, 12)}`;
  log(`--compare=${r}: building ${sha.slice(0, 12)}'s release addon in ${dir}`);
  rmSync(dir, { recursive: true, force: true });
  sh("git", ["worktree", "prune"]);
  sh("git", ["worktree", "add", "--detach", dir, sha]);
  try {
    symlinkSync(`${ROOT}node_modules`, `${dir}/node_modules`);
    // The worktree's own target dir (never this checkout's), seeded from the last used one.
    const env = { ...process.env, CARGO_TARGET_DIR: checkoutTargetDir(dir) };
    execFileSync("npm", ["run", "build"], { cwd: dir, stdio: "inherit", env });
    mkdirSync(`${BENCH}.addon-${sha.slice(0, 12)}`, { recursive: true });
    copyFileSync(`${dir}/agent-sandbox-provider.linux-x64-gnu.node`, addon);
  } finally {
    sh("git", ["worktree", "remove", "--force", dir]);
  }
  return out;
}

let python = null;
try {
  python = chartPython(log);
} catch (e) {
  errors.push(`no chart (matplotlib unavailable): ${e.message.split("\n")[0]}`);
}

// The provider's direct-mode pod, for the minimal client (manifest.rs: restricted
// profile, keep-alive shell, the volume at /workspace).
const IMAGE = "docker.io/library/debian:bookworm-slim";
const BASELINE_POD = {
  spec: {
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    securityContext: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, seccompProfile: { type: "RuntimeDefault" } },
    containers: [{
      name: "sandbox", image: IMAGE, workingDir: "/workspace",
      command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"],
      securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
      volumeMounts: [{ name: "workspace", mountPath: "/workspace" }],
    }],
  },
};
// Tolerate the fake nodes' taints, stay on the fake nodes (label type=kwok), and
// prefer the scale node: pods go there unless it is cordoned, then to kwok-node-0.
const POD_TEMPLATE = {
  spec: {
    tolerations: TAINTS.map((key) => ({ key, operator: "Exists", effect: "NoSchedule" })),
    affinity: { nodeAffinity: {
      requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: "type", operator: "In", values: ["kwok"] }] }] },
      preferredDuringSchedulingIgnoredDuringExecution: [
        { weight: 100, preference: { matchExpressions: [{ key: "sandbox.local/node", operator: "In", values: ["scale"] }] } },
      ],
    } },
  },
};

// ---- one run: one client, N sandboxes -------------------------------------------------

const observer = await obsLib.observer(k.kc, NS);
await cleanNamespace();

/**
 * Deletes what a failed run left in the namespace (warm pools and claims
 * first: they would make Sandboxes again) and waits until it is empty.
 */
async function cleanNamespace() {
  const left = observer.count();
  if (Object.values(left).every((c) => c === 0)) return;
  log(`cleaning ${JSON.stringify(left)} left in ${NS}`);
  await k.cordon(SCALE_NODE, false);
  const { CustomObjectsApi } = await import("@kubernetes/client-node");
  const co = k.kc.makeApiClient(CustomObjectsApi);
  const ext = { group: "extensions.agents.x-k8s.io", version: "v1beta1", namespace: NS };
  await co.deleteCollectionNamespacedCustomObject({ ...ext, plural: "sandboxwarmpools" });
  await co.deleteCollectionNamespacedCustomObject({ ...ext, plural: "sandboxclaims" });
  await co.deleteCollectionNamespacedCustomObject({ group: "agents.x-k8s.io", version: "v1beta1", namespace: NS, plural: "sandboxes" });
  await observer.empty(600_000);
}

/**
 * Warm pool `name` of n members of the scale template, made before a
 * warm-pool run and not timed: the first e with the scale node cordoned (so
 * on the real node: the exec group), the rest on the scale node.
 */
async function warmPool(name, n, e) {
  const pod = structuredClone(BASELINE_POD);
  pod.spec.tolerations = POD_TEMPLATE.spec.tolerations;
  pod.spec.affinity = POD_TEMPLATE.spec.affinity;
  await k.applyTemplate("scale", {
    networkPolicyManagement: "Unmanaged",
    podTemplate: pod,
    volumeClaimTemplates: [{ metadata: { name: "workspace" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } } }],
  });
  log(`warm pool ${name}: ${e} members on ${REAL_NODE}, ${n - e} on ${SCALE_NODE}`);
  await k.cordon(SCALE_NODE, true);
  try {
    await k.createPool(name, { template: "scale" }, e);
    await k.waitPoolReady(name, e, 600_000);
  } finally {
    await k.cordon(SCALE_NODE, false);
  }
  if (n > e) {
    await k.scalePool(name, n);
    await k.waitPoolReady(name, n, 1_200_000);
  }
}

function startWorker(client) {
  const env = { ...process.env };
  if (client.addon) env.NAPI_RS_NATIVE_LIBRARY_PATH = client.addon;
  if (client.dir) env.SCALE_BENCH_PACKAGE = `${client.dir}index.js`;
  const child = fork(`${BENCH}scale-worker.mjs`, [], { env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let pending = null;
  child.on("message", (m) => pending?.(m));
  child.on("exit", (code) => pending?.({ ok: false, error: `worker exited (${code})` }));
  return {
    pid: child.pid,
    call(cmd, a) {
      return new Promise((resolve, reject) => {
        pending = (m) => ((pending = null), m.ok ? resolve(m.result) : reject(new Error(m.error)));
        child.send({ cmd, args: a });
      });
    },
    stop: () => child.kill(),
  };
}

async function run(client, n, rep) {
  const runId = `${Date.now().toString(36)}`;
  const E = Math.min(n, EXEC_GROUP);
  const pool = client.pool ? `scale-${runId}` : undefined;
  if (pool) await warmPool(pool, n, E);
  const w = startWorker(client);
  const audit = obsLib.auditReader(AUDIT);
  const m0 = await obsLib.apiMetrics(k);
  const init = { mode: client.mode, ns: NS, kubeconfig: KUBECONFIG, image: IMAGE, volumeSize: "1Mi", podTemplate: POD_TEMPLATE, baselinePod: BASELINE_POD, pool };
  await w.call("init", init);
  audit.read(); // the client's start-up requests are not a phase's
  const rss0 = obsLib.rssKiB(w.pid);
  const anon0 = obsLib.anonKiB(w.pid);
  const items = Array.from({ length: n }, (_, i) => ({ actor: `scale-${runId}-${i}` }));
  const phases = {};
  const phasesExtra = {};

  /** Runs one phase, sampling `worker` (default the run's) from outside; the worker's calls are `body`'s. */
  async function phase(name, body, { readyFrom, worker = w } = {}) {
    const conns = obsLib.connectionSampler(worker.pid, API_PORT);
    const cpu0 = obsLib.cpuSnapshot(worker.pid, `${STATE}/run`);
    const ma = await obsLib.apiMetrics(k);
    audit.read();
    const started = obsLib.now();
    const rs = await body();
    const ended = obsLib.now();
    const c = conns.stop();
    const cpu = obsLib.cpuDelta(cpu0, obsLib.cpuSnapshot(worker.pid, `${STATE}/run`));
    const mb = await obsLib.apiMetrics(k);
    const au = audit.read();
    const results = rs.flatMap((r) => r?.results ?? []);
    const ok = results.filter((r) => !r.error);
    const failed = results.filter((r) => r.error);
    if (failed.length) errors.push(`${client.key} N=${n} rep ${rep + 1} ${name}: ${failed.length} failed, e.g. ${failed[0].error}`);
    const lat = (f) => ok.map(f).filter(Number.isFinite);
    const p = (xs) => ({ p50: percentile(xs, 50), p99: percentile(xs, 99), max: xs.length ? Math.max(...xs) : null });
    const overhead = readyFrom ? p(lat((r) => (r.ready ? readyFrom(r) - r.ready : NaN))) : null;
    const rss = obsLib.rssKiB(worker.pid);
    const anon = obsLib.anonKiB(worker.pid);
    const requests = au?.counts ?? null;
    const out = {
      calls: results.length,
      failed: failed.length,
      wallMs: ended - started,
      latencyMs: p(lat((r) => (r.t2 ?? r.t1) - r.t0)),
      overheadMs: overhead,
      connections: { peak: c.peak, end: c.end },
      watches: { gaugeStart: ma.watches.namespace + ma.watches.resource - m0.watches.namespace - m0.watches.resource, gaugeEnd: mb.watches.namespace + mb.watches.resource - m0.watches.namespace - m0.watches.resource, auditPeak: au?.peakWatches ?? null, auditEnd: au?.openWatches ?? null },
      requests,
      requestsTotal: requests ? Object.values(requests).reduce((a, b) => a + b, 0) : null,
      lists: requests ? Object.entries(requests).filter(([key]) => key.startsWith("LIST ")).reduce((a, [, v]) => a + v, 0) : null,
      allClients: obsLib.requestDelta(ma, mb),
      throttled: Object.entries(obsLib.requestDelta(ma, mb)).filter(([key]) => key.endsWith(" 429")).reduce((a, [, v]) => a + v, 0),
      rssKiB: rss,
      rssPerSandboxKiB: worker === w ? (rss - rss0) / n : null,
      // RSS also grows by the addon's code as it first runs (file-backed,
      // shared, reclaimable): the anonymous part is what the client allocated.
      anonPerSandboxKiB: worker === w ? (anon - anon0) / n : null,
      eldMs: rs.at(-1)?.eld ?? null,
      // The provider's own counter (stats(), where the build has it), summed over the phase's calls.
      providerStats: rs.some((r) => r?.providerStats) ? sumStats(rs.map((r) => r?.providerStats).filter(Boolean)) : null,
      cpuMs: cpu,
    };
    phases[name] = out;
    const f = (x) => (x == null ? "–" : round(x));
    log(`${client.key.padEnd(8)} N=${String(n).padEnd(4)} ${name.padEnd(9)} ${f(out.wallMs / 1e3)} s  p50 ${f(out.latencyMs.p50)} p99 ${f(out.latencyMs.p99)} ms` +
      `${overhead ? `  overhead p50 ${f(overhead.p50)} p99 ${f(overhead.p99)} ms` : ""}  conns ${c.peak}/${c.end}  watches ${out.watches.auditPeak ?? "–"} (gauge ${out.watches.gaugeEnd})` +
      `  requests ${f(out.requestsTotal)} (LIST ${f(out.lists)})  rss/sbx ${f(out.rssPerSandboxKiB)} KiB${failed.length ? `  FAILED ${failed.length}: ${failed[0].error}` : ""}`);
    return rs;
  }
  // Ready as the harness saw it: the Sandbox (for its current generation)
  // and its pod; for a claim, also the claim naming it.
  const readyOf = (name) => {
    if (!pool) return observer.readyAt(name);
    const [bound, ready] = [observer.claimBoundAt(name), observer.readyAt(observer.sandboxOf(name))];
    return bound && ready ? Math.max(bound, ready) : null;
  };
  const markReady = (list) => {
    for (const r of list) if (!r.error) r.ready = readyOf(r.name);
  };
  const placement = {};

  try {
    // create: the exec group with the scale node cordoned (so on kwok-node-0),
    // then the rest; or claims from the warm pool, whose members are placed so.
    const created = await phase("create", async () => {
      if (pool) {
        const r = await w.call("create", { items, concurrency: CONCURRENCY });
        markReady(r.results);
        return [r];
      }
      await k.cordon(SCALE_NODE, true);
      let a;
      try {
        a = await w.call("create", { items: items.slice(0, E), concurrency: CONCURRENCY });
      } finally {
        await k.cordon(SCALE_NODE, false);
      }
      const rs = [a];
      if (n > E) rs.push(await w.call("create", { items: items.slice(E), concurrency: CONCURRENCY }));
      for (const r of rs) markReady(r.results);
      return rs;
    }, { readyFrom: (r) => r.t2 });
    created.flatMap((r) => r.results).forEach((r, i) =>
      Object.assign(items[i], { id: r.id, name: r.name, sandbox: pool ? observer.sandboxOf(r.name) : r.name, failed: Boolean(r.error) }));
    const live = items.filter((it) => !it.failed);
    const execGroup = live.filter((it) => observer.nodeOf(it.sandbox) === REAL_NODE).slice(0, E);
    for (const it of live) placement[observer.nodeOf(it.sandbox)] = (placement[observer.nodeOf(it.sandbox)] ?? 0) + 1;
    if (pool) {
      // The members the pool made for the claimed ones go before the next phase.
      await k.scalePool(pool, 0);
      await observer.poolEmptied(pool, 600_000);
    }

    await phase("connect", async () => [await w.call("connect", { items: live, concurrency: CONCURRENCY })]);
    await phase("reconnect", async () => [await w.call("connect", { items: live, concurrency: CONCURRENCY })]);
    // cold: a second client, new to the namespace, connects to one Ready
    // sandbox; wall time includes its construction (not the loading of its
    // module). The package reads what it needs by GET while its watches list
    // the N objects; the baseline lists them first.
    const cold = startWorker(client);
    try {
      await cold.call("load", init);
      await phase("cold", async () => {
        await cold.call("init", init);
        return [await cold.call("connect", { items: execGroup.slice(0, 1), concurrency: 1 })];
      }, { worker: cold });
    } finally {
      cold.stop();
    }
    await phase("exec", async () => [await w.call("exec", { items: execGroup })]);
    // exec-seq: 50 execs one after another on one sandbox, with N objects cached.
    await phase("exec-seq", async () => [await w.call("exec", { items: Array(50).fill(execGroup[0]), concurrency: 1 })]);
    // Suspend+resume the last ones (on the scale node when N > the exec group).
    const subset = live.slice(-Math.min(SUSPEND_SUBSET, live.length));
    await phase("suspend", async () => {
      const r = await w.call("suspend", { items: subset, concurrency: CONCURRENCY });
      r.results.forEach((x, i) => Object.assign(x, { name: subset[i].name }));
      markReady(r.results);
      return [r];
    }, { readyFrom: (r) => r.t2 });
    // Nothing runs: what the client keeps open when idle (the pod watches linger 30 s).
    await phase("idle", async () => {
      await sleep(IDLE_MS);
      return [];
    });
    await phase("destroy", async () => {
      const r = await w.call("destroy", { items: live, concurrency: CONCURRENCY });
      const emptyAt = await observer.empty(900_000);
      phasesExtra.destroyAllMs = emptyAt - r.t0;
      return [r];
    });
  } finally {
    w.stop();
    if (pool) await k.deletePool(pool).catch((e) => errors.push(`delete warm pool ${pool}: ${e.message}`));
    await cleanNamespace().catch((e) => errors.push(`clean ${NS}: ${e.message}`));
  }
  return { client: client.key, n, rep, execGroup: E, placement, destroyAllMs: phasesExtra.destroyAllMs, phases };
}

/** Sums the provider-counter deltas of a phase's worker calls. */
function sumStats(list) {
  const requests = {};
  for (const st of list) for (const [k, v] of Object.entries(st.requests)) requests[k] = (requests[k] ?? 0) + v;
  return { requests, lists: list.reduce((a, st) => a + st.lists, 0), watchesAtEnd: list.at(-1).watches };
}

// ---- the runs ----------------------------------------------------------------------------

const raw = [];
for (const n of SIZES) {
  for (let rep = 0; rep < repsOf(n); rep++) {
    // Clients interleaved within a repetition: drift of the machine hits all alike.
    for (const client of clients) {
      log(`N=${n} repetition ${rep + 1}/${repsOf(n)}: ${client.label}`);
      try {
        raw.push(await run(client, n, rep));
      } catch (e) {
        errors.push(`${client.key} N=${n} rep ${rep + 1}: ${e.message.split("\n")[0]}`);
        log(`FAILED: ${e.message}`);
      }
    }
  }
}
observer.stop();

// ---- report ---------------------------------------------------------------------------------

const { scaleFigures, scaleMarkdown } = await import("./lib/scale-report.mjs");
const result = {
  meta: {
    date: new Date().toISOString(),
    quick,
    sizes: SIZES,
    reps: Object.fromEntries(SIZES.map((n) => [n, repsOf(n)])),
    concurrency: CONCURRENCY,
    execGroup: EXEC_GROUP,
    suspendSubset: SUSPEND_SUBSET,
    idleMs: IDLE_MS,
    clients: clients.map(({ key, label }) => ({ key, label })),
    durationS: (Date.now() - t0) / 1e3,
    machine: machine(),
    profile: "scale",
    errors,
  },
  figures: scaleFigures(raw, clients.map((c) => c.key), SIZES),
  raw,
};
mkdirSync(`${BENCH}results`, { recursive: true });
writeFileSync(`${OUT}.json`, JSON.stringify(result, null, 1) + "\n");
writeFileSync(`${OUT}.md`, scaleMarkdown(result));
if (python) {
  try {
    execFileSync(python, [`${BENCH}scale_chart.py`, `${OUT}.json`, `${OUT}.png`], { stdio: "inherit" });
  } catch {
    errors.push("scale_chart.py failed");
  }
}
log(`done in ${round((Date.now() - t0) / 1e3)} s → ${OUT.slice(ROOT.length)}.{json,md${python ? ",png" : ""}}`);
process.stdout.write(readFileSync(`${OUT}.md`, "utf8"));
process.exit(errors.length ? 1 : 0);
