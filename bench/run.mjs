// npm run bench [-- --quick] [-- --only=exec,processes,ranges,usage,terminal,stream,files,lifecycle]
// npm run bench -- --scale [--quick] [--compare=<git-rev>]   (bench/scale.mjs)
// npm run bench -- --ports [--quick]   (bench/ports.mjs)
//
// Starts the local control plane if needed, builds what is missing (release
// addon, floor, chart venv), then measures this package against
// @kubernetes/client-node, kubectl and the floor on one sandbox, each
// measurement in its own process, alternatives interleaved within each
// repetition. Writes bench/results/latest.{json,md,png} (partial.* with --only).

import { execFile, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { BENCH, ROOT, buildFloor, buildPackage, chartPython, installNodeModules, machine, versions } from "./lib/setup.mjs";
import { MiB, mbps, round } from "./lib/stats.mjs";

const args = process.argv.slice(2);
// --scale: one client serving 10–1,000 sandboxes (bench/scale.mjs, issue 19).
if (args.includes("--scale")) {
  await import("./scale.mjs");
  await new Promise(() => {}); // scale.mjs exits when done
}
// --ports: fetch and forward against kubectl port-forward + curl (bench/ports.mjs, issue 20).
if (args.includes("--ports")) {
  await import("./ports.mjs");
  await new Promise(() => {}); // ports.mjs exits when done
}
const quick = args.includes("--quick");
const only = args.find((a) => a.startsWith("--only="))?.slice(7).split(",");
const want = (phase) => !only || only.includes(phase);
const CFG = quick
  ? { reps: 1, seqN: 20, concN: 64, procN: 10, streams: [64 * MiB], files: [MiB, 64 * MiB], lifecycleN: 3, resumes: 1 }
  : { reps: 3, seqN: 100, concN: 64, procN: 30, streams: [64 * MiB, 1024 * MiB], files: [MiB, 64 * MiB, 256 * MiB], lifecycleN: 20, resumes: 5 };
if (!want("stream")) CFG.streams = [];
if (!want("files")) CFG.files = [];

const t0 = Date.now();
const log = (...a) => console.error(`[bench ${((Date.now() - t0) / 1e3).toFixed(0).padStart(4)}s]`, ...a);
const errors = [];
const firstLine = (e) => String(e?.message ?? e).split("\n")[0];
/** The error lines of a failed child (its stack frames dropped), else its last lines. */
function errorText(e) {
  const lines = String(e.stderr || e.message || e).split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("at "));
  const i = lines.findIndex((l) => /^(\w*Error|Error)\b/.test(l));
  return (i >= 0 ? lines.slice(i, i + 3) : lines.slice(-3)).join(" ");
}

// ---- setup -----------------------------------------------------------------

installNodeModules(log);
const { admin, ensureCluster } = await import("./lib/cluster.mjs");
const { ALTS, figures, lifecycleFigures, markdown, metricDefs, targets } = await import("./lib/report.mjs");
const { runFloor } = await import("./alt/floor.mjs");

log("local control plane: cluster.sh up");
ensureCluster();
const k = admin();
buildFloor(log);
let havePackage = true;
try {
  buildPackage(log);
} catch (e) {
  havePackage = false;
  errors.push(`package build failed, package not measured: ${firstLine(e)}`);
}
const alts = ALTS.filter((a) => a !== "package" || havePackage);
let python = null;
try {
  python = chartPython(log);
} catch (e) {
  errors.push(`no chart (matplotlib unavailable): ${firstLine(e)}`);
}

// ---- the sandbox everything execs into --------------------------------------

const runId = Date.now().toString(36);
// pool-ephemeral has no volume, so the package's default `suspend: "pod"`
// (which needs a persistent cwd) is refused; suspend is not measured here.
const target = {
  namespace: k.ns,
  container: "sandbox",
  pool: "pool-ephemeral",
  options: { suspend: "none", cwd: "/tmp" },
  actorId: `bench-target-${runId}`,
};
const ctx = { actorId: target.actorId, client() {} };
let pkg = null;
await k.waitApiserver();
if (havePackage) {
  const { agentSandboxProvider } = await import("../index.js");
  const { providerOptions } = await import("./alt/package.mjs");
  pkg = agentSandboxProvider(providerOptions(target));
  target.id = await pkg.create(ctx);
  await pkg.connect(ctx, target.id);
  target.claim = target.id.split("/")[1];
} else {
  target.claim = `bench-target-${runId}`;
  await k.createClaim(target.claim, target.pool);
}
target.pod = await k.waitClaimPod(target.claim);
log(`target: claim ${target.claim}, pod ${target.pod}`);

// ---- measurements -----------------------------------------------------------

const execFileP = promisify(execFile);

/** Runs a bench script in a fresh Node process; its `RESULT <json>` line. */
async function node(script, arg, timeout) {
  const { stdout } = await execFileP(process.execPath, ["--expose-gc", `${BENCH}${script}`, JSON.stringify(arg)], { maxBuffer: 16 * MiB, timeout });
  return JSON.parse(stdout.split("\n").find((l) => l.startsWith("RESULT ")).slice(7));
}

/** One measurement; a failure is retried once after the API server answers again. */
async function attempt(alt, op, params) {
  for (let i = 0; ; i++) {
    try {
      await k.waitApiserver();
      return alt === "floor" ? await runFloor(op, params, target) : await node("worker.mjs", { alt, op, params, target }, 300_000);
    } catch (e) {
      const error = errorText(e);
      if (i > 0) return { error };
      log(`${alt} ${op}: retrying after ${error.slice(0, 160)}`);
    }
  }
}

const raw = {};
async function measure(key, op, params, rep, only = alts) {
  for (const alt of only) {
    const r = await attempt(alt, op, params);
    if (r.error) errors.push(`${key} ${alt} rep ${rep + 1}: ${r.error}`);
    ((raw[key] ??= {})[alt] ??= []).push(r);
    log(`${key.padEnd(18)} ${alt.padEnd(12)} ${summary(r)}`);
  }
}

function summary(r) {
  if (r.error) return `ERROR ${r.error.slice(0, 200)}`;
  if (r.p50 != null) return `p50 ${round(r.p50)} ms  p99 ${round(r.p99)} ms${r.perSec ? `  ${round(r.perSec)}/s` : ""}`;
  const eld = r.eldP99Ms == null ? "" : `  eld p99 ${round(r.eldP99Ms)} ms`;
  return `${round(mbps(r.bytes, r.ms))} MB/s  cpu ${round(r.cpuMs)} ms  rss +${round(r.rssGrowthMiB)} MiB${eld}`;
}

try {
  for (let rep = 0; rep < CFG.reps; rep++) {
    log(`repetition ${rep + 1}/${CFG.reps}`);
    if (want("exec")) {
      await measure("exec-seq", "exec-seq", { n: CFG.seqN }, rep);
      await measure("exec-conc", "exec-conc", { n: CFG.concN }, rep);
    }
    if (want("processes") && havePackage) {
      // Package only: no alternative has background processes.
      for (const op of ["exec-reattach-seq", "spawn-first-output", "spawn-polled"]) {
        await measure(op, op, { n: CFG.procN }, rep, ["package"]);
      }
    }
    if (want("ranges") && havePackage) {
      // Package only: a 4 KiB page at the end of 1 GiB vs the whole file, in one worker.
      await measure("read-range", "read-range", { n: CFG.procN, bytes: 1 << 30, path: "/tmp/bench-range.bin" }, rep, ["package"]);
    }
    if (want("usage") && havePackage) await measure("usage", "usage", { n: CFG.procN }, rep, ["package"]);
    // A keystroke's round trip through a TTY exec (the kernel's echo), against client-node's tty exec.
    if (want("terminal")) {
      await measure("terminal-echo", "terminal-echo", { n: CFG.seqN }, rep, alts.filter((a) => a === "package" || a === "client-node"));
    }
    for (const b of CFG.streams) await measure(`stream-${b}`, "stream", { bytes: b }, rep);
    for (const b of CFG.files) {
      // The alternatives write the same path in turn; reads see the last write (same size).
      const path = `/tmp/bench-${b}.bin`;
      await measure(`write-${b}`, "write", { bytes: b, path }, rep);
      await measure(`read-${b}`, "read", { bytes: b, path }, rep);
    }
  }
} finally {
  if (pkg) await pkg.destroy(ctx, target.id).catch((e) => errors.push(`destroy target: ${firstLine(e)}`));
  else await k.deleteClaim(target.claim);
}

let lifecycle = null;
if (want("lifecycle") && havePackage) {
  log(`lifecycle: ${CFG.lifecycleN} sequential + ${CFG.lifecycleN} parallel, ${CFG.resumes} resumes`);
  // A copy of pool-workspace (PVC at /workspace): the package's defaults, suspend included.
  const params = { n: CFG.lifecycleN, resumes: CFG.resumes, pool: `bench-pool-${runId}`, like: "pool-workspace", runId };
  try {
    await k.waitApiserver();
    lifecycle = await node("lifecycle.mjs", params, 600_000);
  } catch (e) {
    lifecycle = { error: errorText(e) };
    errors.push(`lifecycle: ${lifecycle.error}`);
  }
}

// ---- report -------------------------------------------------------------------

const meta = {
  date: new Date().toISOString(),
  quick,
  reps: CFG.reps,
  config: CFG,
  durationS: (Date.now() - t0) / 1e3,
  machine: machine(),
  versions: await versions(k, havePackage),
  target: { claim: target.claim, pod: target.pod },
  errors,
};
const figs = figures(metricDefs(CFG), raw);
const life = lifecycleFigures(lifecycle);
const result = { meta, figures: figs, lifecycle: life, targets: targets(figs, life, CFG), raw: { ...raw, lifecycle } };

// A run restricted with --only does not replace the complete latest.* results.
const out = `${BENCH}results/${only ? "partial" : "latest"}`;
mkdirSync(`${BENCH}results`, { recursive: true });
writeFileSync(`${out}.json`, JSON.stringify(result, null, 1) + "\n");
writeFileSync(`${out}.md`, markdown(result));
if (python && spawnSync(python, [`${BENCH}chart.py`, `${out}.json`, `${out}.png`], { stdio: "inherit" }).status !== 0) {
  errors.push("chart.py failed");
}
log(`done in ${round((Date.now() - t0) / 1e3)} s → ${out.slice(ROOT.length)}.{json,md${python ? ",png" : ""}}`);
process.stdout.write(readFileSync(`${out}.md`, "utf8"));
process.exit(errors.length ? 1 : 0);
