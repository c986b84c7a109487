// Turns raw per-repetition results into figures (median, min–max), ratios to
// the alternatives measured in the same run, target checks, and the markdown
// table.

import { MiB, mbps, percentile, round, spread } from "./stats.mjs";

export const ALTS = ["package", "client-node", "kubectl", "floor"];
const OTHERS = ALTS.slice(1);

// Below these, differences are noise (1 ms event-loop histogram resolution;
// allocator jitter): ratios use at least this value.
const NOISE = { MiB: 1, "ms delay": 1, "ms CPU": 10, calls: 1 };

const size = (b) => (b >= 1 << 30 ? `${b / (1 << 30)} GiB` : `${b / MiB} MiB`);

/** Metric definitions for the sizes measured in this run. */
export function metricDefs(cfg) {
  const defs = [
    { id: "exec.seq.p50", group: "exec `true`", label: "sequential p50", key: "exec-seq", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "exec.seq.p99", group: "exec `true`", label: "sequential p99", key: "exec-seq", get: (r) => r.p99, unit: "ms", better: "lower" },
    { id: "exec.conc.rate", group: "exec `true`", label: `${cfg.concN} concurrent: throughput`, key: "exec-conc", get: (r) => r.perSec, unit: "exec/s", better: "higher" },
    { id: "exec.conc.p99", group: "exec `true`", label: `${cfg.concN} concurrent: p99`, key: "exec-conc", get: (r) => r.p99, unit: "ms", better: "lower" },
    { id: "exec.conc.failed", group: "exec `true`", label: `${cfg.concN} concurrent: calls failed`, key: "exec-conc", get: (r) => r.failed ?? 0, unit: "calls", better: "lower" },
    { id: "exec.capped.rate", group: "exec `true`", label: `${cfg.concN} concurrent, package's default caps (8 per sandbox): throughput`, key: "exec-conc-capped", get: (r) => r.perSec, unit: "exec/s", better: "higher" },
    { id: "exec.capped.failed", group: "exec `true`", label: `${cfg.concN} concurrent, package's default caps (8 per sandbox): calls failed`, key: "exec-conc-capped", get: (r) => r.failed ?? 0, unit: "calls", better: "lower" },
    { id: "exec.capped.p99", group: "exec `true`", label: `${cfg.concN} concurrent, package's default caps (8 per sandbox): p99`, key: "exec-conc-capped", get: (r) => r.p99, unit: "ms", better: "lower" },
    { id: "proc.reattach.p50", group: "processes (package only)", label: "exec `true` with reattach, p50", key: "exec-reattach-seq", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "proc.first.p50", group: "processes (package only)", label: "spawn → first output (follow), p50", key: "spawn-first-output", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "proc.polled.p50", group: "processes (package only)", label: "spawn → exit seen by poll, p50", key: "spawn-polled", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "range.p50", group: "ranged read (package only)", label: "4 KiB at the end of a 1 GiB file, p50", key: "read-range", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "range.whole", group: "ranged read (package only)", label: "whole readFile of the same 1 GiB file", key: "read-range", get: (r) => r.wholeMs, unit: "ms", better: "lower" },
    { id: "terminal.p50", group: "terminal", label: "keystroke echo round trip, p50", key: "terminal-echo", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "terminal.p99", group: "terminal", label: "keystroke echo round trip, p99", key: "terminal-echo", get: (r) => r.p99, unit: "ms", better: "lower" },
    { id: "claim.p50", group: "create → first exec (warm pool)", label: "claim → Ready → `true` done, p50", key: "claim-exec", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "claim.p99", group: "create → first exec (warm pool)", label: "claim → Ready → `true` done, p99", key: "claim-exec", get: (r) => r.p99, unit: "ms", better: "lower" },
    { id: "usage.p50", group: "usage (package only)", label: "usage(), p50", key: "usage", get: (r) => r.p50, unit: "ms", better: "lower" },
    { id: "usage.p99", group: "usage (package only)", label: "usage(), p99", key: "usage", get: (r) => r.p99, unit: "ms", better: "lower" },
  ];
  for (const b of cfg.streams) {
    const key = `stream-${b}`;
    const group = `stdout ${size(b)}`;
    defs.push(
      { id: `${key}.mbps`, group, label: "throughput", key, get: (r) => mbps(r.bytes, r.ms), unit: "MB/s", better: "higher" },
      { id: `${key}.cpu`, group, label: "CPU time", key, get: (r) => r.cpuMs, unit: "ms CPU", better: "lower" },
      { id: `${key}.rss`, group, label: "peak RSS growth", key, get: (r) => r.rssGrowthMiB, unit: "MiB", better: "lower" },
      { id: `${key}.eld`, group, label: "event-loop delay p99", key, get: (r) => r.eldP99Ms, unit: "ms delay", better: "lower" },
    );
  }
  for (const b of cfg.files) {
    for (const op of ["write", "read"]) {
      const key = `${op}-${b}`;
      const group = `${op}File ${size(b)}`;
      defs.push(
        { id: `${key}.mbps`, group, label: "throughput", key, get: (r) => mbps(r.bytes, r.ms), unit: "MB/s", better: "higher" },
        { id: `${key}.cpu`, group, label: "CPU time", key, get: (r) => r.cpuMs, unit: "ms CPU", better: "lower" },
        { id: `${key}.rss`, group, label: "peak RSS growth", key, get: (r) => r.rssGrowthMiB, unit: "MiB", better: "lower" },
      );
    }
  }
  return defs;
}

/**
 * raw[key][alt] = array (one entry per repetition, null when it failed).
 * Ratios are package ÷ alternative, per repetition (alternatives are
 * interleaved within a repetition), then median and min–max.
 */
export function figures(defs, raw) {
  return defs.map((d) => {
    const per = Object.fromEntries(ALTS.map((a) => [a, (raw[d.key]?.[a] ?? []).map((r) => (r && !r.error ? d.get(r) : null))]));
    const values = Object.fromEntries(ALTS.map((a) => [a, spread(per[a].filter((v) => v != null))]));
    const floor = NOISE[d.unit] ?? 0;
    const ratios = {};
    for (const a of OTHERS) {
      const rs = per.package.map((v, i) => (v == null || per[a][i] == null ? null : Math.max(v, floor) / Math.max(per[a][i], floor)));
      ratios[a] = spread(rs.filter((v) => v != null && Number.isFinite(v)));
    }
    const { get, ...def } = d;
    return { ...def, values, ratios, reps: per };
  });
}

/** Lifecycle summaries (package only), p50/p99 over the sandboxes. */
export function lifecycleFigures(lc) {
  if (!lc || lc.error) return lc ?? null;
  const pct = (rows, f) => {
    const xs = rows.map(f).filter((v) => v != null);
    return xs.length ? { p50: percentile(xs, 50), p99: percentile(xs, 99), n: xs.length } : null;
  };
  const part = (rows) => ({
    total: pct(rows, (r) => r.totalMs),
    controller: pct(rows, (r) => r.controllerMs),
    overhead: pct(rows, (r) => r.overheadMs),
    toObserved: pct(rows, (r) => r.toObservedMs),
    readyToConnected: pct(rows, (r) => r.readyToConnectedMs),
    firstExec: pct(rows, (r) => r.firstExecMs),
    warm: rows.filter((r) => r.warm).length,
    timed: rows.filter((r) => r.controllerMs != null).length,
    n: rows.length,
  });
  return {
    sequential: part(lc.sequential),
    parallel: part(lc.parallel),
    suspend: pct(lc.resume, (r) => r.suspendMs),
    resumeToExec: pct(lc.resume, (r) => r.resumeToExecMs),
    destroy: pct(lc.destroySequential, (r) => r.destroyMs),
    destroyGone: pct(lc.destroySequential, (r) => r.goneMs),
    destroyParallelGone: pct(lc.destroyParallel, (r) => r.goneMs),
  };
}

/** The issue's targets, evaluated on medians; null where not measured in this run. */
export function targets(figs, life, cfg) {
  const fig = (id) => figs.find((f) => f.id === id);
  const r = (id, alt) => fig(id)?.ratios[alt]?.median ?? null;
  const v = (id) => fig(id)?.values.package?.median ?? null;
  const s = cfg.streams.length ? Math.max(...cfg.streams) : 0;
  const f = cfg.files.length ? Math.max(...cfg.files) : 0;
  const streamMbps = v(`stream-${s}.mbps`);
  const share = (id) => (streamMbps && v(id) != null ? v(id) / streamMbps : null);
  const t = (name, value, ok, unit = "×") => ({ name, value: value == null ? null : round(value), unit, met: value == null ? null : ok(value) });
  return [
    t("exec p50 ≤ 0.8× client-node", r("exec.seq.p50", "client-node"), (x) => x <= 0.8),
    t("exec p50 ≤ 1.15× floor", r("exec.seq.p50", "floor"), (x) => x <= 1.15),
    t(`${cfg.concN} concurrent execs ≥ 0.85× the floor's throughput`, r("exec.conc.rate", "floor"), (x) => x >= 0.85),
    t(`stdout ${size(s)} throughput ≥ 2× client-node`, r(`stream-${s}.mbps`, "client-node"), (x) => x >= 2),
    t(`stdout ${size(s)} throughput ≥ kubectl`, r(`stream-${s}.mbps`, "kubectl"), (x) => x >= 1),
    t(`RSS growth < 64 MiB streaming ${size(s)}`, v(`stream-${s}.rss`), (x) => x < 64, "MiB"),
    t("event-loop delay p99 < 10 ms while streaming", v(`stream-${s}.eld`), (x) => x < 10, "ms"),
    t(`writeFile ${size(f)} ≥ 80% of streaming throughput`, share(`write-${f}.mbps`), (x) => x >= 0.8),
    t(`readFile ${size(f)} ≥ 80% of streaming throughput`, share(`read-${f}.mbps`), (x) => x >= 0.8),
    t("create→first exec overhead over controller Ready ≤ 50 ms (p50, sequential)", life?.sequential?.overhead?.p50 ?? null, (x) => x <= 50, "ms"),
  ];
}

/** How the figures were taken (printed under the tables). */
const METHOD_NOTES = [
  "Each measurement runs in a fresh process (Node worker, or the floor binary), after 3 warm-up execs. RSS growth = peak RSS (VmHWM, reset through /proc/self/clear_refs before the operation) − RSS before it; for kubectl, kubectl's own peak growth over `kubectl exec true` is added. Event-loop delay: monitorEventLoopDelay at 1 ms resolution, minus the resolution.",
  "kubectl figures include starting one kubectl process per operation, as a kubectl user pays it; the floor times itself after start-up.",
  "CPU time: user + system of the client process, all threads (Node: process.cpuUsage; kubectl: /proc/<pid>/stat sampled every 5 ms, added to its Node parent's; floor: /proc/self/stat, 10 ms ticks) — what the client spends, not the API server or the node (containerd, the shim, runc or runsc, gVisor's Sentry).",
  "The floor is stock kube-rs 5.0.0 with a TCP_NODELAY connector. Its stdin path sends 4 KiB WebSocket messages (kube-client's ReaderStream uses tokio-util's default capacity), so kubectl can beat it on writeFile.",
  "The package runs with maxConcurrentExecs: 64 and maxConcurrentExecsPerSandbox: 64 (defaults 32 and 8) so the 64-concurrent figure on one sandbox measures the path, not the caps; the \"default caps\" row is the same 64 calls with the defaults (8 at a time on the sandbox, the rest queued in the client), package only.",
  "gVisor, 64 concurrent execs on one sandbox: its containerd shim (containerd-shim-runsc-v1) subscribes every exec to its process reaper, whose subscribers have 32-slot channels that an exec drains only once its `runsc exec --detach` has returned; with dozens of execs starting at once they fill, and the reaper then waits up to 1 s per exit (containerd pkg/sys/reaper; containerd/containerd#8557 is the same 1 s wait), so execs complete about one per second and some time out in containerd (\"failed to load task: context deadline exceeded\"). The runc shim has one subscriber and does not stall.",
  "Runtimes: per runtime the harness makes (not timed) copies of the shipped SandboxTemplates `ephemeral` and `workspace` with requests cpu 10m, memory 64Mi (the real node has 2 cores) and the runtime's pod settings (gVisor: runtimeClassName gvisor; runc: none, containerd's default; nodeexec: a toleration of sandbox.local/fake and a nodeSelector for kwok-node-0), and a warm pool of the ephemeral copy; all deleted afterwards. Runtimes and alternatives are interleaved within each repetition (for each operation: each runtime, each alternative).",
  "Exec, streaming and files: one sandbox per runtime, claimed from that pool (which is then scaled to 0); package options { suspend: \"none\", cwd: \"/tmp\" } (the default suspend: \"pod\" needs a volume at cwd). Files are in /tmp, the container's root filesystem (runc: overlayfs on the node's disk; gVisor: its root overlay). readFile results are kept in memory (package, client-node: Buffer.concat) or written to a local file (kubectl), so their RSS includes the file for the first two.",
  "create → first exec: the pool is refilled to as many Ready members as claims are made and each alternative, in turn, makes them one after another: package = create + connect + exec(\"true\"); client-node = POST a SandboxClaim, a watch on it (field selector, from the POST's resourceVersion) until Ready, exec in the pod its status names; kubectl = `kubectl create -f -`, `kubectl wait --for=condition=Ready`, `kubectl get -o jsonpath`, `kubectl exec` (four processes, the discovery cache warmed first); floor = the same POST, watch and exec in kube-rs. Each alternative's claims are deleted, and their pods gone, before the next. While it runs the pool controller starts replacement pods on the same node: a real user's conditions, the same for all.",
  "Lifecycle: package defaults (suspend: \"pod\", cwd /workspace) on a private warm pool of the runtime's copy of the workspace template (PVC per sandbox), deleted afterwards; \"nothing left\" = claim, Sandbox, pod and PVCs gone. A resume starts a new pod: on a real runtime that is a container start (runc create, or a gVisor sandbox boot).",
  "Controller's own Ready time = claim annotations claim-first-ready-at − controller-first-observed-at (RFC 3339 with ns digits). agent-sandbox v1.0.3 stamps claim-first-ready-at with time.Now() after the Ready status write (so it slightly overstates the controller's time), and a reconcile race often backfills it with \"unknown\" (backfillFirstReadyAnnotation); such claims are left out of the controller and overhead rows.",
];

const fmt = (s) => (s == null ? "–" : s.n > 1 ? `${round(s.median)} (${round(s.min)}–${round(s.max)})` : `${round(s.median)}`);
const fmtPct = (p) => (p == null ? "–" : `${round(p.p50)} / ${round(p.p99)}`);
const fmtRatio = (r) => (r ? `${fmt(r)}×` : "–");

function figureTable(L, figs) {
  L.push("| Operation | Metric | package | client-node | kubectl | floor | ÷ client-node | ÷ kubectl | ÷ floor |");
  L.push("|---|---|---|---|---|---|---|---|---|");
  for (const f of figs) {
    if (!ALTS.some((a) => f.values[a])) continue; // not measured in this run
    const vals = ALTS.map((a) => fmt(f.values[a]));
    L.push(`| ${f.group} | ${f.label} (${f.unit}) | ${vals.join(" | ")} | ${OTHERS.map((a) => fmtRatio(f.ratios[a])).join(" | ")} |`);
  }
}

function lifecycleSection(L, life, h) {
  if (life && !life.error) {
    L.push("", `${h} Lifecycle (this package, warm pool; p50 / p99 in ms)`, "");
    L.push("| | sequential | parallel |", "|---|---|---|");
    const row = (label, k) => L.push(`| ${label} | ${fmtPct(life.sequential[k])} | ${fmtPct(life.parallel[k])} |`);
    row("create + connect → first exec done", "total");
    row("controller's own Ready (controller-first-observed-at → claim-first-ready-at)", "controller");
    row("provider overhead (total − controller)", "overhead");
    row("create call → controller first observed", "toObserved");
    row("claim Ready → connect resolved", "readyToConnected");
    row("first exec", "firstExec");
    L.push(`| warm adoptions | ${life.sequential.warm}/${life.sequential.n} | ${life.parallel.warm}/${life.parallel.n} |`);
    L.push(`| claims with a claim-first-ready-at timestamp (others: "unknown") | ${life.sequential.timed}/${life.sequential.n} | ${life.parallel.timed}/${life.parallel.n} |`);
    L.push("", "| | p50 / p99 |", "|---|---|");
    L.push(`| suspend (returns when the pod is gone) | ${fmtPct(life.suspend)} |`);
    L.push(`| connect (resume: a new pod) → first exec done | ${fmtPct(life.resumeToExec)} |`);
    L.push(`| destroy call (one at a time) | ${fmtPct(life.destroy)} |`);
    L.push(`| destroy → claim, Sandbox, pod and PVCs gone (one at a time) | ${fmtPct(life.destroyGone)} |`);
    L.push(`| destroy → all gone, ${life.parallel.n} at once | ${fmtPct(life.destroyParallelGone)} |`);
  } else if (life?.error) {
    L.push("", `Lifecycle failed: ${life.error}`);
  }
}

function targetsSection(L, tg, h) {
  L.push("", `${h} Targets (figures, not tests)`, "", "| Target | Measured | |", "|---|---|---|");
  for (const t of tg) L.push(`| ${t.name} | ${t.value ?? "–"} ${t.value == null ? "" : t.unit} | ${t.met == null ? "not measured" : t.met ? "met" : "**missed**"} |`);
}

/** The figures of the summary table: the issue's headline operations, largest sizes. */
function headline(cfg) {
  const s = cfg.streams.length ? Math.max(...cfg.streams) : null;
  const f = cfg.files.length ? Math.max(...cfg.files) : null;
  return [
    "exec.seq.p50", "exec.seq.p99", "exec.conc.rate", "exec.conc.p99", "exec.conc.failed", "exec.capped.rate", "exec.capped.failed",
    ...(s ? [`stream-${s}.mbps`, `stream-${s}.cpu`] : []),
    ...(f ? [`write-${f}.mbps`, `read-${f}.mbps`] : []),
    "claim.p50",
  ];
}

/** The report of a run over runtimes (bench/run.mjs → results/runtimes.md). */
export function runtimesMarkdown(result) {
  const { meta, runtimes } = result;
  const names = Object.keys(runtimes);
  const L = [];
  L.push(`# Benchmark on real runtimes: ${meta.versions.package} vs @kubernetes/client-node, kubectl and the floor`, "");
  L.push(`${meta.date} · ${meta.quick ? "quick run" : "full run"} · ${meta.reps} repetition(s) · runtimes: ${names.map((n) => runtimes[n].title).join(", ") || "none"} · ${round(meta.durationS)} s`, "");
  L.push("| Machine | |", "|---|---|");
  L.push(`| CPU | ${meta.machine.cpu} × ${meta.machine.nproc} |`, `| Memory | ${meta.machine.memGiB} GiB |`);
  L.push(`| Load average (start → end) | ${meta.machine.loadStart} → ${meta.machine.loadEnd} |`);
  for (const [k, val] of Object.entries(meta.versions)) L.push(`| ${k} | ${val} |`);
  for (const n of names) {
    const p = runtimes[n].placement ?? {};
    L.push(`| ${runtimes[n].title}: sandbox | pod ${p.pod} on ${p.node} (kubelet ${p.kubelet}, ${p.containerRuntime}), RuntimeClass ${p.runtimeClassName ?? "none"}; /proc/version in it: ${p.kernel} |`);
  }
  L.push("");
  L.push("Values: median (min–max) over repetitions. Ratios: this package ÷ the alternative, per repetition (runtimes and alternatives");
  L.push("interleaved), then median (min–max); below 1 is better for times, memory and delay, above 1 is better for throughput.");
  L.push(`Ratios treat RSS growth below ${NOISE.MiB} MiB, event-loop delay below ${NOISE["ms delay"]} ms and CPU time below ${NOISE["ms CPU"]} ms as that floor (noise).`, "");

  L.push("## Summary: this package and its ratio to each alternative, per runtime", "");
  L.push(`| Figure | ${names.map((n) => `${runtimes[n].title}: package | ÷ client-node | ÷ kubectl | ÷ floor`).join(" | ")} |`);
  L.push(`|---|${names.map(() => "---|---|---|---|").join("")}`);
  for (const id of headline(meta.config)) {
    const any = runtimes[names[0]]?.figures.find((f) => f.id === id);
    if (!any) continue;
    const cells = names.map((n) => {
      const f = runtimes[n].figures.find((x) => x.id === id);
      return [fmt(f?.values.package), ...OTHERS.map((a) => fmtRatio(f?.ratios[a]))].join(" | ");
    });
    L.push(`| ${any.group}: ${any.label} (${any.unit}) | ${cells.join(" | ")} |`);
  }
  if (names.length > 1) {
    L.push("", "The same figures of each alternative across runtimes (median; what the runtime costs everyone):", "");
    L.push(`| Figure | alternative | ${names.map((n) => runtimes[n].title).join(" | ")} |`);
    L.push(`|---|---|${names.map(() => "---|").join("")}`);
    for (const id of headline(meta.config)) {
      const any = runtimes[names[0]]?.figures.find((f) => f.id === id);
      if (!any) continue;
      for (const a of ALTS) {
        const cells = names.map((n) => fmt(runtimes[n].figures.find((x) => x.id === id)?.values[a]));
        if (cells.every((c) => c === "–")) continue;
        L.push(`| ${any.group}: ${any.label} (${any.unit}) | ${a} | ${cells.join(" | ")} |`);
      }
    }
  }

  for (const n of names) {
    const r = runtimes[n];
    L.push("", `## ${r.title}`, "");
    figureTable(L, r.figures);
    lifecycleSection(L, r.lifecycle, "###");
    targetsSection(L, r.targets, "###");
  }
  if (meta.errors.length) L.push("", "## Errors", "", ...meta.errors.map((e) => `- ${e}`));
  L.push("", "## Method", "", ...METHOD_NOTES.map((n) => `- ${n}`));
  return L.join("\n") + "\n";
}
