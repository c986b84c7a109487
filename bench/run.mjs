// npm run bench [-- --quick] [-- --only=exec,stream,files,lifecycle]
//
// Starts the local control plane if needed, builds what is missing (release
// addon, floor, chart venv), then measures this package against
// @kubernetes/client-node, kubectl and the floor on one sandbox, each
// measurement in its own process, alternatives interleaved within each
// repetition. Writes bench/results/latest.{json,md,png}.

import { execFile, execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { promisify } from "node:util";
import { MiB, mbps, round } from "./lib/stats.mjs";

const BENCH = new URL("./", import.meta.url).pathname;
const ROOT = new URL("../", import.meta.url).pathname;
const RESULTS = `${BENCH}results/`;
const args = process.argv.slice(2);
const quick = args.includes("--quick");
const only = args.find((a) => a.startsWith("--only="))?.slice(7).split(",");
const want = (phase) => !only || only.includes(phase);

const CFG = quick
  ? { reps: 1, seqN: 20, concN: 64, streams: [64 * MiB], files: [MiB, 64 * MiB], lifecycleN: 3, resumes: 1 }
  : { reps: 3, seqN: 100, concN: 64, streams: [64 * MiB, 1024 * MiB], files: [MiB, 64 * MiB, 256 * MiB], lifecycleN: 20, resumes: 5 };
const TASK_TIMEOUT_MS = 300_000;

const log = (...a) => console.error(`[bench ${((Date.now() - t0) / 1e3).toFixed(0).padStart(4)}s]`, ...a);
const sh = (cmd, argv, opts = {}) => (execFileSync(cmd, argv, { cwd: ROOT, encoding: "utf8", ...opts }) ?? "").trim();
const t0 = Date.now();
const LOAD_START = os.loadavg().map((x) => x.toFixed(2)).join(" ");
const errors = [];
const notes = [];

// ---- setup -----------------------------------------------------------------

if (!existsSync(`${ROOT}node_modules/@kubernetes/client-node`)) {
  log("npm ci");
  sh("npm", ["ci", "--no-audit", "--no-fund"], { stdio: "inherit" });
}
const { admin, ensureCluster } = await import("./lib/cluster.mjs");
const { ALTS, figures, lifecycleFigures, markdown, metricDefs, targets } = await import("./lib/report.mjs");
const { runFloor } = await import("./alt/floor.mjs");

log("local control plane: cluster.sh up");
ensureCluster();
const k = admin();

log("floor: cargo build --release");
sh("cargo", ["build", "--release", "--quiet", "--manifest-path", `${BENCH}floor/Cargo.toml`], { stdio: "inherit" });

/** The release addon, built from this tree into the shared target dir and loaded through NAPI_RS_NATIVE_LIBRARY_PATH. */
function buildPackage() {
  try {
    if (!existsSync(`${ROOT}native.cjs`)) {
      log("package: npm run build (no native.cjs yet)");
      sh("npm", ["run", "build"], { stdio: "inherit" });
    }
    log("package: cargo build --release (release addon)");
    const triple = "x86_64-unknown-linux-gnu";
    sh("cargo", ["build", "--release", "--quiet", "--target", triple, "-p", "agent-sandbox-provider"], { stdio: "inherit" });
    mkdirSync(`${BENCH}.addon`, { recursive: true });
    const addon = `${BENCH}.addon/agent-sandbox-provider.node`;
    const targetDir = process.env.CARGO_TARGET_DIR || `${ROOT}target`;
    copyFileSync(`${targetDir}/${triple}/release/libagent_sandbox_provider.so`, addon);
    process.env.NAPI_RS_NATIVE_LIBRARY_PATH = addon;
    return true;
  } catch (e) {
    errors.push(`package build failed, package not measured: ${e.message.split("\n")[0]}`);
    return false;
  }
}
const havePackage = buildPackage();
const alts = ALTS.filter((a) => a !== "package" || havePackage);

/** matplotlib in bench/.venv (PyPI); null if it cannot be had. */
function chartPython() {
  const py = `${BENCH}.venv/bin/python`;
  const ok = () => spawnSync(py, ["-c", "import matplotlib"]).status === 0;
  if (existsSync(py) && ok()) return py;
  log("chart: python venv + matplotlib");
  try {
    sh("python3", ["-m", "venv", `${BENCH}.venv`]);
    sh(py, ["-m", "pip", "install", "--quiet", "matplotlib"], { stdio: "inherit" });
    return ok() ? py : null;
  } catch (e) {
    errors.push(`no chart: matplotlib unavailable (${e.message.split("\n")[0]})`);
    return null;
  }
}
const python = chartPython();

// ---- the sandbox everything execs into --------------------------------------

const runId = `${Date.now().toString(36)}`;
// pool-ephemeral has no volume, so the package's default `suspend: "pod"`
// (which needs a persistent cwd) is refused; suspend is not measured here.
const target = {
  namespace: k.ns,
  container: "sandbox",
  pool: "pool-ephemeral",
  options: { suspend: "none", cwd: "/tmp" },
  actorId: `bench-target-${runId}`,
};
let pkg = null;
await k.waitApiserver();
if (havePackage) {
  const { agentSandboxProvider } = await import("../index.js");
  const { providerOptions } = await import("./alt/package.mjs");
  pkg = agentSandboxProvider(providerOptions(target));
  target.id = await pkg.create({ actorId: target.actorId, client() {} });
  await pkg.connect({ actorId: target.actorId, client() {} }, target.id);
  target.claim = target.id.split("/")[1];
} else {
  target.claim = `bench-target-${runId}`;
  await k.createClaim(target.claim, target.pool);
}
target.pod = await k.waitClaimPod(target.claim);
log(`target: claim ${target.claim}, pod ${target.pod}`);

// ---- measurements -----------------------------------------------------------

const execFileP = promisify(execFile);
const raw = {};

async function task(alt, op, params) {
  if (alt === "floor") return runFloor(op, params, target);
  const payload = JSON.stringify({ alt, op, params, target });
  const { stdout } = await execFileP(process.execPath, ["--expose-gc", `${BENCH}worker.mjs`, payload], {
    maxBuffer: 16 * MiB,
    timeout: TASK_TIMEOUT_MS,
  });
  return JSON.parse(stdout.split("\n").find((l) => l.startsWith("RESULT ")).slice(7));
}

/** One task; a failure is retried once after the API server answers again. */
async function attempt(alt, op, params) {
  for (let i = 0; ; i++) {
    try {
      await k.waitApiserver();
      return await task(alt, op, params);
    } catch (e) {
      const error = (e.stderr || e.message || String(e)).trim().split("\n").slice(-3).join(" ");
      if (i > 0) return { error };
      log(`${alt} ${op}: retrying after ${error.slice(0, 160)}`);
    }
  }
}

async function measure(key, op, params, rep) {
  for (const alt of alts) {
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
  return `${round(mbps(r.bytes, r.ms))} MB/s  rss +${round(r.rssGrowthMiB)} MiB${eld}`;
}

try {
  for (let rep = 0; rep < CFG.reps; rep++) {
    log(`repetition ${rep + 1}/${CFG.reps}`);
    if (want("exec")) {
      await measure("exec-seq", "exec-seq", { n: CFG.seqN }, rep);
      await measure("exec-conc", "exec-conc", { n: CFG.concN }, rep);
    }
    if (want("stream")) for (const b of CFG.streams) await measure(`stream-${b}`, "stream", { bytes: b }, rep);
    if (want("files")) {
      for (const b of CFG.files) {
        // The alternatives write the same path in turn; reads see the last write (same size).
        const path = `/tmp/bench-${b}.bin`;
        await measure(`write-${b}`, "write", { bytes: b, path }, rep);
        await measure(`read-${b}`, "read", { bytes: b, path }, rep);
      }
    }
  }
} finally {
  if (pkg) await pkg.destroy({ actorId: target.actorId, client() {} }, target.id).catch((e) => errors.push(`destroy target: ${e.message}`));
  else await k.deleteClaim(target.claim);
}

let lifecycle = null;
if (want("lifecycle") && havePackage) {
  log(`lifecycle: ${CFG.lifecycleN} sequential + ${CFG.lifecycleN} parallel, ${CFG.resumes} resumes`);
  // A copy of pool-workspace (PVC at /workspace): the package's defaults, suspend included.
  const params = { n: CFG.lifecycleN, resumes: CFG.resumes, pool: `bench-pool-${runId}`, like: "pool-workspace", runId };
  try {
    await k.waitApiserver();
    const { stdout } = await execFileP(process.execPath, [`${BENCH}lifecycle.mjs`, JSON.stringify(params)], { timeout: 600_000, maxBuffer: 16 * MiB });
    lifecycle = JSON.parse(stdout.split("\n").find((l) => l.startsWith("RESULT ")).slice(7));
  } catch (e) {
    lifecycle = { error: (e.stderr || e.message).trim().split("\n").slice(-3).join(" ") };
    errors.push(`lifecycle: ${lifecycle.error}`);
  }
}

// ---- report -------------------------------------------------------------------

const version = (f) => {
  try {
    return f();
  } catch (e) {
    return `unknown (${e.message.split("\n")[0]})`;
  }
};
const pkgJson = JSON.parse(readFileSync(`${ROOT}package.json`, "utf8"));
const dirty = sh("git", ["status", "--porcelain", "--", "core", "src", "js", "index.js", "Cargo.toml", "Cargo.lock"]) ? "+uncommitted changes" : "";
const meta = {
  date: new Date().toISOString(),
  quick,
  reps: CFG.reps,
  config: CFG,
  durationS: (Date.now() - t0) / 1e3,
  machine: {
    nproc: os.availableParallelism(),
    memGiB: round(os.totalmem() / 2 ** 30),
    cpu: os.cpus()[0]?.model ?? "unknown",
    loadStart: LOAD_START,
    loadEnd: os.loadavg().map((x) => x.toFixed(2)).join(" "),
  },
  versions: {
    package: `${pkgJson.name} ${pkgJson.version} (${sh("git", ["rev-parse", "--short", "HEAD"])}${dirty}, release addon)${havePackage ? "" : " — NOT MEASURED"}`,
    node: process.version,
    "kube-apiserver": await k.apiserverVersion().catch((e) => `unknown (${e.message})`),
    "@kubernetes/client-node": JSON.parse(readFileSync(`${ROOT}node_modules/@kubernetes/client-node/package.json`, "utf8")).version,
    kubectl: version(() => JSON.parse(sh(process.env.SANDBOX_TEST_KUBECTL || "kubectl", ["version", "--client", "-o", "json"])).clientVersion.gitVersion),
    "floor (kube-rs)": version(() => readFileSync(`${BENCH}floor/Cargo.lock`, "utf8").match(/name = "kube"\nversion = "([^"]+)"/)[1]),
    "agent-sandbox controller": version(() => readFileSync(`${ROOT}dev/cluster/thirdparty/go.mod`, "utf8").match(/sigs\.k8s\.io\/agent-sandbox (\S+)/)[1]),
  },
  target: { claim: target.claim, pod: target.pod },
  errors,
  notes,
};
notes.push(
  "Each measurement runs in a fresh process (Node worker, or the floor binary), after 3 warm-up execs; RSS growth = peak RSS (VmHWM, reset before the operation) − RSS before it; for kubectl it adds kubectl's own peak growth over `kubectl exec true`.",
  "kubectl figures include starting one kubectl process per operation, as a user of kubectl pays it; the floor times itself after start-up.",
  "The package runs with maxConcurrentExecs: 64 (default 32) so the 64-concurrent figure measures the path, not the cap.",
  "Exec, streaming and files: one pool-ephemeral sandbox, package options { suspend: \"none\", cwd: \"/tmp\" } (the default suspend: \"pod\" needs a volume at cwd).",
  "Controller's own Ready time = claim annotations claim-first-ready-at − controller-first-observed-at (RFC 3339, ns digits). agent-sandbox v1.0.3 stamps claim-first-ready-at with time.Now() after the Ready status write (so it slightly overstates the controller's time), and a reconcile race often backfills it with \"unknown\" (backfillFirstReadyAnnotation); such claims are left out of the controller and overhead rows.",
  "Lifecycle: package defaults (suspend: \"pod\", cwd /workspace) on a private warm pool copied from pool-workspace (PVC per sandbox), deleted afterwards, so other users of the cluster keep theirs; \"nothing left\" = claim, Sandbox, pod and PVCs gone.",
);
const figs = figures(metricDefs({ ...CFG, streams: want("stream") ? CFG.streams : [], files: want("files") ? CFG.files : [] }), raw);
const life = lifecycleFigures(lifecycle);
const result = { meta, figures: figs, lifecycle: life, targets: targets(figs, life, CFG), raw: { ...raw, lifecycle } };

mkdirSync(RESULTS, { recursive: true });
writeFileSync(`${RESULTS}latest.json`, JSON.stringify(result, null, 1) + "\n");
writeFileSync(`${RESULTS}latest.md`, markdown(result));
if (python) {
  const r = spawnSync(python, [`${BENCH}chart.py`, `${RESULTS}latest.json`, `${RESULTS}latest.png`], { stdio: "inherit" });
  if (r.status !== 0) errors.push("chart.py failed");
}
log(`done in ${round((Date.now() - t0) / 1e3)} s → bench/results/latest.{json,md${python ? ",png" : ""}}`);
process.stdout.write(readFileSync(`${RESULTS}latest.md`, "utf8"));
process.exit(errors.length ? 1 : 0);
