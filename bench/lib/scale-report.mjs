// Figures and the markdown report of the scale benchmark (bench/scale.mjs):
// every figure is the median over repetitions (min–max kept in the JSON).

import { round, spread } from "./stats.mjs";

export const PHASES = ["create", "connect", "reconnect", "cold", "exec", "exec-seq", "suspend", "idle", "destroy"];
const COMPONENTS = ["kube-apiserver", "etcd", "agent-sandbox-controller", "kube-controller-manager", "kube-scheduler", "kwok", "nodeexec"];

/** Per-phase metrics: name → how to read it from a phase record. */
const METRICS = {
  wallS: (p) => p.wallMs / 1e3,
  latencyP50Ms: (p) => p.latencyMs?.p50,
  latencyP99Ms: (p) => p.latencyMs?.p99,
  overheadP50Ms: (p) => p.overheadMs?.p50,
  overheadP99Ms: (p) => p.overheadMs?.p99,
  connPeak: (p) => p.connections.peak,
  connEnd: (p) => p.connections.end,
  watchesPeak: (p) => p.watches.auditPeak,
  watchesEnd: (p) => p.watches.auditEnd,
  watchGaugeEnd: (p) => p.watches.gaugeEnd,
  requests: (p) => p.requestsTotal,
  lists: (p) => p.lists,
  requestsPerCall: (p) => (p.calls ? p.requestsTotal / p.calls : null),
  rssPerSandboxKiB: (p) => p.rssPerSandboxKiB,
  anonPerSandboxKiB: (p) => p.anonPerSandboxKiB,
  rssMiB: (p) => p.rssKiB / 1024,
  eldP99Ms: (p) => p.eldMs?.p99,
  eldMaxMs: (p) => p.eldMs?.max,
  cpuClientMs: (p) => p.cpuMs.client,
  cpuClientMsPerCall: (p) => (p.calls ? p.cpuMs.client / p.calls : null),
  ...Object.fromEntries(COMPONENTS.map((c) => [`cpu:${c}`, (p) => p.cpuMs[c]])),
  throttled: (p) => p.throttled,
  failed: (p) => p.failed,
};

/** figures[client][N][phase][metric] = spread over repetitions; plus per-verb request medians. */
export function scaleFigures(raw, clients, sizes) {
  const out = {};
  for (const c of clients) {
    for (const n of sizes) {
      const runs = raw.filter((r) => r.client === c && r.n === n);
      if (!runs.length) continue;
      const f = ((out[c] ??= {})[n] = { destroyAllS: spread(runs.map((r) => r.destroyAllMs / 1e3)), placement: runs[0].placement, phases: {} });
      for (const ph of PHASES) {
        const recs = runs.map((r) => r.phases[ph]).filter(Boolean);
        if (!recs.length) continue;
        const m = Object.fromEntries(Object.entries(METRICS).map(([k, get]) => [k, spread(recs.map((p) => get(p)))]));
        const verbs = new Set(recs.flatMap((p) => Object.keys(p.requests ?? {})));
        m.requestsByVerb = Object.fromEntries([...verbs].sort().map((v) => [v, spread(recs.map((p) => p.requests?.[v] ?? 0))?.median]));
        const counted = recs.filter((p) => p.providerStats);
        if (counted.length) {
          const keys = new Set(counted.flatMap((p) => Object.keys(p.providerStats.requests)));
          m.providerCounter = Object.fromEntries([...keys].sort().map((v) => [v, spread(counted.map((p) => p.providerStats.requests[v] ?? 0))?.median]));
          m.providerWatches = spread(counted.map((p) => p.providerStats.watchesAtEnd));
        }
        f.phases[ph] = m;
      }
    }
  }
  return out;
}

const med = (s) => s?.median;
const fmt = (x) => (x == null || !Number.isFinite(x) ? "–" : String(round(x)));

export function scaleMarkdown(result) {
  const { meta, figures } = result;
  const L = [];
  L.push(`# Scale benchmark (${meta.date.slice(0, 10)})`, "");
  L.push(`One client serving N sandboxes in namespace agents-scale of the local control plane (scale profile); repetitions by N: ${Object.entries(meta.reps).map(([n, r]) => `${n}: ${r}`).join(", ")}; median shown. ` +
    `Calls ${meta.concurrency} at a time; exec group = min(N, ${meta.execGroup}) sandboxes on the real node, the rest on the scale node (API objects only); ` +
    `suspend/resume on ${meta.suspendSubset}; idle ${meta.idleMs / 1e3} s. Machine: ${meta.machine.nproc} cores, ${meta.machine.memGiB} GiB, load ${meta.machine.loadStart} → ${meta.machine.loadEnd}. Run took ${round(meta.durationS / 60)} min.`, "");
  L.push("Clients: " + meta.clients.map((c) => `**${c.key}** = ${c.label}`).join("; ") + ".", "");
  L.push("Columns: wall = phase wall time; p50/p99 = per-call latency (create: create+connect; suspend: suspend+resume); overhead = call resolved − Ready seen by the harness's own watch; " +
    "conns = the client's TCP connections to the API server (peak during the phase / at its end); watches = the client's watches open on the API server (peak / end; from the audit log); " +
    "requests = the client's API requests in the phase (audit log; LISTs apart); RSS/sbx = client RSS growth since start-up ÷ N (in brackets its anonymous part, without the addon's code as it is first read in); ELD = event-loop delay p99; CPU = client / kube-apiserver / agent-sandbox controller, ms.", "");
  for (const [client, byN] of Object.entries(figures)) {
    L.push(`## ${meta.clients.find((c) => c.key === client)?.label ?? client}`, "");
    L.push("| N | phase | wall s | p50 ms | p99 ms | overhead p50/p99 ms | conns peak/end | watches peak/end | requests (LIST) | RSS/sbx KiB | ELD p99 ms | CPU client/apiserver/controller ms |");
    L.push("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (const [n, f] of Object.entries(byN)) {
      for (const [ph, m] of Object.entries(f.phases)) {
        L.push(`| ${n} | ${ph} | ${fmt(med(m.wallS))} | ${fmt(med(m.latencyP50Ms))} | ${fmt(med(m.latencyP99Ms))} | ${m.overheadP50Ms ? `${fmt(med(m.overheadP50Ms))} / ${fmt(med(m.overheadP99Ms))}` : ""} | ` +
          `${fmt(med(m.connPeak))} / ${fmt(med(m.connEnd))} | ${fmt(med(m.watchesPeak))} / ${fmt(med(m.watchesEnd))} | ${fmt(med(m.requests))} (${fmt(med(m.lists))}) | ` +
          `${fmt(med(m.rssPerSandboxKiB))}${med(m.anonPerSandboxKiB) == null ? "" : ` (${fmt(med(m.anonPerSandboxKiB))})`} | ${fmt(med(m.eldP99Ms))} | ${fmt(med(m.cpuClientMs))} / ${fmt(med(m["cpu:kube-apiserver"]))} / ${fmt(med(m["cpu:agent-sandbox-controller"]))} |` +
          (med(m.failed) ? ` **${fmt(med(m.failed))} failed**` : ""));
      }
      L.push(`| ${n} | destroy-all (until nothing left) | ${fmt(med(f.destroyAllS))} s | | | | | | | | | |`);
    }
    L.push("");
    L.push("Requests by verb and resource (median per phase):", "");
    for (const [n, f] of Object.entries(byN)) {
      for (const [ph, m] of Object.entries(f.phases)) {
        const v = Object.entries(m.requestsByVerb).filter(([, x]) => x).map(([k, x]) => `${k} ${fmt(x)}`).join(", ");
        if (v) L.push(`- N=${n} ${ph}: ${v}`);
        if (m.providerCounter) {
          const c = Object.entries(m.providerCounter).filter(([, x]) => x).map(([k, x]) => `${k} ${fmt(x)}`).join(", ");
          L.push(`  - the provider's own counter (stats()): ${c || "none"}; shared watches at the end: ${fmt(med(m.providerWatches))}`);
        }
      }
    }
    L.push("");
  }
  L.push("## Growth with N", "");
  L.push("Exponent b of a fit y ∝ N^b over the sizes measured (0 = flat, 1 = linear), for the figures that must not grow with N:", "");
  const growth = [
    ["connections peak, connect", "connect", "connPeak"],
    ["connections at end, reconnect", "reconnect", "connEnd"],
    ["connections at end of idle", "idle", "connEnd"],
    ["watches peak, create", "create", "watchesPeak"],
    ["watches peak, exec", "exec", "watchesPeak"],
    ["LISTs, create", "create", "lists"],
    ["LISTs, destroy", "destroy", "lists"],
    ["requests per call, reconnect", "reconnect", "requestsPerCall"],
    ["RSS per sandbox, reconnect", "reconnect", "rssPerSandboxKiB"],
    ["anonymous RSS per sandbox, reconnect", "reconnect", "anonPerSandboxKiB"],
    ["overhead p50, create", "create", "overheadP50Ms"],
    ["overhead p99, create", "create", "overheadP99Ms"],
    ["reconnect p50", "reconnect", "latencyP50Ms"],
    ["sequential exec p50", "exec-seq", "latencyP50Ms"],
    ["cold client's first connect, wall incl. construction", "cold", "wallS"],
    ["LISTs, cold", "cold", "lists"],
    ["wall time, destroy (GC-bound)", "destroy", "wallS"],
  ];
  const clientKeys = Object.keys(figures);
  L.push(`| figure | ${clientKeys.map((c) => `${c}: values by N → b`).join(" | ")} |`);
  L.push(`|---|${clientKeys.map(() => "---").join("|")}|`);
  for (const [label, ph, metric] of growth) {
    const cells = clientKeys.map((c) => {
      const pts = Object.entries(figures[c]).map(([n, f]) => [Number(n), med(f.phases[ph]?.[metric])]).filter(([, y]) => Number.isFinite(y));
      return `${pts.map(([, y]) => fmt(y)).join(" / ")} → ${fmt(exponent(pts))}`;
    });
    L.push(`| ${label} | ${cells.join(" | ")} |`);
  }
  L.push("");
  // What a sandbox costs in memory apart from what the client costs at all:
  // RSS at the end of reconnect (everything connected) fitted as a + b·N.
  L.push("RSS at the end of reconnect (all N connected), least-squares fit RSS = fixed + per-sandbox × N:", "");
  for (const c of clientKeys) {
    const pts = Object.entries(figures[c]).map(([n, f]) => [Number(n), med(f.phases.reconnect?.rssMiB)]).filter(([, y]) => Number.isFinite(y));
    const fit = linearFit(pts);
    if (fit) L.push(`- ${c}: ${fmt(fit.slope * 1024)} KiB per sandbox, ${fmt(fit.intercept)} MiB fixed (${pts.map(([n, y]) => `N=${n}: ${fmt(y)} MiB`).join(", ")})`);
  }
  L.push("");
  if (meta.errors.length) L.push("## Errors", "", ...meta.errors.map((e) => `- ${e}`), "");
  return L.join("\n") + "\n";
}

/** Least-squares slope of log y over log N (points with y > 0). */
export function exponent(pts) {
  return linearFit(pts.filter(([n, y]) => n > 0 && y > 0).map(([n, y]) => [Math.log(n), Math.log(y)]))?.slope ?? null;
}

/** Least-squares line y = intercept + slope·x through [x, y] points, or null. */
export function linearFit(p) {
  if (p.length < 2) return null;
  const mx = p.reduce((a, [x]) => a + x, 0) / p.length;
  const my = p.reduce((a, [, y]) => a + y, 0) / p.length;
  const sxx = p.reduce((a, [x]) => a + (x - mx) ** 2, 0);
  if (!sxx) return null;
  const slope = p.reduce((a, [x, y]) => a + (x - mx) * (y - my), 0) / sxx;
  return { slope, intercept: my - slope * mx };
}
