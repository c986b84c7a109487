// npm run bench [-- --quick] [-- --runtime=runc,gvisor]
//               [-- --only=exec,processes,ranges,usage,terminal,stream,files,claim,lifecycle]
// npm run bench -- --scale [--quick] [--compare=<git-rev>]   (bench/scale.mjs)
// npm run bench -- --ports [--quick]   (bench/ports.mjs)
//
// Starts the local control plane if needed, builds what is missing (release
// addon, floor, chart venv), then measures this package against
// @kubernetes/client-node, kubectl and the floor on one sandbox per runtime
// (runc and gVisor on the real node; nodeexec, the fake node, on request),
// each measurement in its own process, runtimes and alternatives interleaved
// within each repetition. Writes bench/results/runtimes.{json,md,png}
// (runtimes-quick.* with --quick, partial.* with --only, <out>.* with --out=).

import { execFile, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { BENCH, ROOT, buildFloor, buildPackage, chartPython, installNodeModules, machine, versions } from "./lib/setup.mjs";
import { DEFAULT_RUNTIMES, RUNTIMES, placement, runtimeVersions, setupRuntime, teardownRuntime } from "./lib/runtimes.mjs";
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
const opt = (name) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const quick = args.includes("--quick");
const only = opt("only")?.split(",");
const want = (phase) => !only || only.includes(phase);
const runtimeNames = (opt("runtime") ?? DEFAULT_RUNTIMES.join(",")).split(",").filter(Boolean);
for (const r of runtimeNames) {
  if (!RUNTIMES[r]) {
    console.error(`unknown runtime ${r} (known: ${Object.keys(RUNTIMES).join(", ")})`);
    process.exit(2);
  }
}
const CFG = quick
  ? { reps: 1, seqN: 20, concN: 64, procN: 10, streams: [64 * MiB], files: [MiB, 64 * MiB], claimN: 3, lifecycleN: 3, resumes: 1 }
  : { reps: 3, seqN: 100, concN: 64, procN: 30, streams: [64 * MiB, 1024 * MiB], files: [MiB, 64 * MiB, 256 * MiB], claimN: 10, lifecycleN: 10, resumes: 5 };
if (!want("stream")) CFG.streams = [];
if (!want("files")) CFG.files = [];
CFG.runtimes = runtimeNames;

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
const { ALTS, figures, lifecycleFigures, metricDefs, runtimesMarkdown, targets } = await import("./lib/report.mjs");
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

const execFileP = promisify(execFile);
const kubectl = process.env.SANDBOX_TEST_KUBECTL || "kubectl";

// ---- per runtime: templates, a warm pool, the sandbox everything execs into --

const runId = Date.now().toString(36);
let pkg = null;
await k.waitApiserver();
if (havePackage) {
  const { agentSandboxProvider } = await import("../index.js");
  const { providerOptions } = await import("./alt/package.mjs");
  pkg = (t) => agentSandboxProvider(providerOptions(t));
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, async () => {
    log(`${signal}: deleting this run's sandboxes, pools and templates`);
    await cleanup().catch(() => {});
    process.exit(130);
  });
}

/** Runtimes measured: { name, title, objs, target, placement }. */
const rts = [];
/** Objects made per runtime, all deleted at the end (also of runtimes that failed to set up). */
const made = [];

async function setUp(name) {
  log(`${name}: templates and warm pool (not timed)`);
  const objs = await setupRuntime(k, name, runId, 1);
  made.push(objs);
  try {
    await k.waitPoolReady(objs.pool, 1, 300_000);
  } catch (e) {
    throw new Error(`${e.message}${await nodePressure()}`);
  }
  // pool-ephemeral's template has no volume, so the package's default
  // `suspend: "pod"` (which needs a persistent cwd) is refused; suspend is
  // measured by the lifecycle, on the workspace template.
  const target = {
    namespace: k.ns,
    container: "sandbox",
    pool: objs.pool,
    options: { suspend: "none", cwd: "/tmp" },
    actorId: `bench-target-${name}-${runId}`,
  };
  if (pkg) {
    const p = pkg(target);
    const ctx = { actorId: target.actorId, client() {} };
    target.id = await p.create(ctx);
    await p.connect(ctx, target.id);
    target.claim = target.id.split("/")[1];
  } else {
    target.claim = `bench-target-${name}-${runId}`;
    await k.createClaim(target.claim, target.pool);
  }
  target.pod = await k.waitClaimPod(target.claim);
  // The pool is refilled to measure claims (claim phase); until then no idle member.
  await k.scalePool(objs.pool, 0);
  const exec = async (cmd) =>
    (await execFileP(kubectl, ["exec", "-n", k.ns, target.pod, "-c", target.container, "--", "sh", "-c", cmd])).stdout;
  const where = await placement(k, target.pod, exec);
  log(`${name}: claim ${target.claim}, pod ${target.pod} on ${where.node}, RuntimeClass ${where.runtimeClassName ?? "none"}; ${where.kernel}`);
  return { name, title: RUNTIMES[name].title, objs, target, placement: where };
}

/** The nodes' pressure conditions (a real node evicts every pod under DiskPressure), as a sentence; "" if none. */
async function nodePressure() {
  const nodes = await k.nodes().catch(() => []);
  const bad = nodes.flatMap((n) =>
    (n.status?.conditions ?? []).filter((c) => c.type.endsWith("Pressure") && c.status === "True").map((c) => `${n.metadata.name}: ${c.type} (${c.message})`));
  return bad.length ? `; ${bad.join("; ")}` : "";
}

const pressure = await nodePressure();
if (pressure) {
  log(`warning${pressure}: pods there are evicted or not admitted`);
  errors.push(`at start${pressure}`);
}
for (const name of runtimeNames) {
  try {
    rts.push(await setUp(name));
  } catch (e) {
    errors.push(`${name}: not measured, set-up failed: ${firstLine(e)}`);
    log(`${name}: not measured: ${firstLine(e)}`);
  }
}

// ---- measurements -----------------------------------------------------------

/** Runs a bench script in a fresh Node process; its `RESULT <json>` line. */
async function node(script, arg, timeout) {
  const { stdout } = await execFileP(process.execPath, ["--expose-gc", `${BENCH}${script}`, JSON.stringify(arg)], { maxBuffer: 16 * MiB, timeout });
  return JSON.parse(stdout.split("\n").find((l) => l.startsWith("RESULT ")).slice(7));
}

/** One measurement; a failure is retried once after the API server answers again. */
async function attempt(alt, op, params, target, retry = true) {
  for (let i = 0; ; i++) {
    try {
      await k.waitApiserver();
      return alt === "floor" ? await runFloor(op, params, target) : await node("worker.mjs", { alt, op, params, target }, 300_000);
    } catch (e) {
      const error = errorText(e);
      if (i > 0 || !retry) return { error };
      log(`${alt} ${op}: retrying after ${error.slice(0, 160)}`);
    }
  }
}

const raw = Object.fromEntries(rts.map((rt) => [rt.name, {}]));
function record(rt, key, alt, rep, r) {
  if (r.error) errors.push(`${rt.name} ${key} ${alt} rep ${rep + 1}: ${r.error}`);
  if (r.failed) errors.push(`${rt.name} ${key} ${alt} rep ${rep + 1}: ${r.failed} of ${r.failed + r.ms.length} calls failed, e.g. ${r.firstError}`);
  ((raw[rt.name][key] ??= {})[alt] ??= []).push(r);
  log(`${rt.name.padEnd(8)} ${key.padEnd(18)} ${alt.padEnd(12)} ${summary(r)}`);
}

/** One operation on every runtime, every alternative in turn. */
async function measure(key, op, params, rep, only = alts, targetOf = (rt) => rt.target, { settle = false } = {}) {
  for (const rt of rts) {
    for (const alt of only) {
      const r = await attempt(alt, op, params, targetOf(rt));
      if (settle) r.settleMs = await settled(rt);
      record(rt, key, alt, rep, r);
    }
  }
}

/**
 * Waits until the runtime's sandbox answers one exec within 2 s (at most 3 min): after a
 * storm of concurrent execs gVisor's shim stays busy for a while, and the next
 * measurement should not pay for the last one's. How long it took.
 */
async function settled(rt) {
  const t0 = Date.now();
  for (;;) {
    const t = Date.now();
    const ok = await execFileP(kubectl, ["exec", "-n", k.ns, rt.target.pod, "-c", rt.target.container, "--", "true"], { timeout: 30_000 })
      .then(() => true, () => false);
    if (ok && Date.now() - t < 2000) break;
    if (Date.now() - t0 > 180_000) {
      errors.push(`${rt.name}: the sandbox did not answer an exec within 2 s for 3 min after a concurrent burst`);
      break;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  const ms = Date.now() - t0;
  if (ms > 3000) log(`${rt.name}: the sandbox answers execs again after ${round(ms / 1e3)} s`);
  return ms;
}

function summary(r) {
  if (r.error) return `ERROR ${r.error.slice(0, 200)}`;
  const warm = r.warm == null ? "" : `  warm ${r.warm}/${r.ms.length}`;
  const failed = r.failed ? `  ${r.failed} FAILED` : "";
  if (r.p50 != null) return `p50 ${round(r.p50)} ms  p99 ${round(r.p99)} ms${r.perSec ? `  ${round(r.perSec)}/s` : ""}${warm}${failed}`;
  const eld = r.eldP99Ms == null ? "" : `  eld p99 ${round(r.eldP99Ms)} ms`;
  return `${round(mbps(r.bytes, r.ms))} MB/s  cpu ${round(r.cpuMs)} ms  rss +${round(r.rssGrowthMiB)} MiB${eld}`;
}

/**
 * create → first exec of every alternative on the runtime's warm pool, refilled
 * to claimN Ready members before each alternative; each one's claims deleted
 * (and their pods gone) before the next. Not retried: a retry would find the
 * pool half used.
 */
async function claimPhase(rt, rep) {
  const { pool } = rt.objs;
  const n = CFG.claimN;
  await k.scalePool(pool, n);
  try {
    for (const alt of alts) {
      await k.waitPoolReady(pool, n, 300_000);
      const prefix = `bench-${runId}-${rt.name}-${alt}-${rep}`;
      const r = await attempt(alt, "claim-exec", { n, prefix }, rt.target, false);
      const claims = (await k.claimsOfPool(pool, prefix)).filter((c) => c !== rt.target.claim);
      if (!r.error) {
        // Adopted a warm member (the controller names the Sandbox it gave the claim).
        const cs = await Promise.all(claims.map((c) => k.claim(c)));
        r.warm = cs.filter((c) => c?.metadata?.annotations?.["agents.x-k8s.io/sandbox-name"]).length;
      }
      record(rt, "claim-exec", alt, rep, r);
      await k.deleteClaimsAndWait(claims);
    }
  } finally {
    await k.scalePool(pool, 0);
  }
}

const lifecycle = {};
try {
  for (let rep = 0; rep < CFG.reps; rep++) {
    log(`repetition ${rep + 1}/${CFG.reps}`);
    if (want("exec")) {
      await measure("exec-seq", "exec-seq", { n: CFG.seqN }, rep);
      await measure("exec-conc", "exec-conc", { n: CFG.concN }, rep, alts, undefined, { settle: true });
      // The same with the package's default caps (8 at once per sandbox, the rest queued):
      // what a user gets without tuning.
      if (havePackage) {
        const capped = (rt) => ({ ...rt.target, defaultCaps: true });
        await measure("exec-conc-capped", "exec-conc", { n: CFG.concN }, rep, ["package"], capped, { settle: true });
      }
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
    if (want("claim")) {
      for (const rt of rts) {
        try {
          await claimPhase(rt, rep);
        } catch (e) {
          errors.push(`${rt.name} claim phase rep ${rep + 1}: ${firstLine(e)}`);
        }
      }
    }
  }

  if (want("lifecycle") && havePackage) {
    for (const rt of rts) {
      log(`${rt.name} lifecycle: ${CFG.lifecycleN} sequential + ${CFG.lifecycleN} parallel, ${CFG.resumes} resumes`);
      // A private warm pool of the runtime's copy of the workspace template
      // (PVC at /workspace): the package's defaults, suspend included.
      const { lifecyclePool: pool, workspace: template } = rt.objs;
      const params = { n: CFG.lifecycleN, resumes: CFG.resumes, pool, like: { template }, runId: `${runId}-${rt.name}` };
      try {
        await k.waitApiserver();
        lifecycle[rt.name] = await node("lifecycle.mjs", params, 900_000);
      } catch (e) {
        lifecycle[rt.name] = { error: errorText(e) };
        errors.push(`${rt.name} lifecycle: ${lifecycle[rt.name].error}`);
      }
    }
  }
} finally {
  await cleanup();
}

/** Destroys the targets and deletes every object the run made (once; also on SIGINT/SIGTERM). */
async function cleanup() {
  if (cleanup.done) return cleanup.done;
  cleanup.done = (async () => {
    for (const rt of rts) {
      const { target } = rt;
      if (pkg) {
        const ctx = { actorId: target.actorId, client() {} };
        await pkg(target).destroy(ctx, target.id).catch((e) => errors.push(`destroy ${rt.name} target: ${firstLine(e)}`));
      } else {
        await k.deleteClaim(target.claim);
      }
    }
    for (const objs of made) {
      const left = await k.claimsOfPool(objs.pool, `bench-${runId}-`).catch(() => []);
      await Promise.all(left.map((c) => k.deleteClaim(c)));
      await teardownRuntime(k, objs).catch((e) => errors.push(`deleting ${objs.pool}: ${firstLine(e)}`));
    }
  })();
  return cleanup.done;
}

// ---- report -------------------------------------------------------------------

const pressureEnd = await nodePressure();
if (pressureEnd) errors.push(`at the end${pressureEnd}`);

const meta = {
  date: new Date().toISOString(),
  quick,
  reps: CFG.reps,
  config: CFG,
  durationS: (Date.now() - t0) / 1e3,
  machine: machine(),
  versions: {
    ...(await versions(k, havePackage)),
    ...runtimeVersions(),
    "sandbox image": [...new Set(rts.map((rt) => rt.placement.image))].join(", ") || "–",
  },
  errors,
};

const defs = metricDefs(CFG);
const runtimes = {};
for (const rt of rts) {
  const figs = figures(defs, raw[rt.name]);
  const life = lifecycleFigures(lifecycle[rt.name] ?? null);
  runtimes[rt.name] = {
    title: rt.title,
    placement: rt.placement,
    target: { claim: rt.target.claim, pod: rt.target.pod },
    figures: figs,
    lifecycle: life,
    targets: targets(figs, life, CFG),
  };
}
const result = { meta, runtimes, raw: Object.fromEntries(rts.map((rt) => [rt.name, { ...raw[rt.name], lifecycle: lifecycle[rt.name] ?? null }])) };

// A run restricted with --only does not replace the complete results.
const out = `${BENCH}results/${only ? "partial" : (opt("out") ?? (quick ? "runtimes-quick" : "runtimes"))}`;
mkdirSync(`${BENCH}results`, { recursive: true });
writeFileSync(`${out}.json`, JSON.stringify(result, null, 1) + "\n");
writeFileSync(`${out}.md`, runtimesMarkdown(result));
if (python && spawnSync(python, [`${BENCH}chart.py`, `${out}.json`, `${out}.png`], { stdio: "inherit" }).status !== 0) {
  errors.push("chart.py failed");
}
log(`done in ${round((Date.now() - t0) / 1e3)} s → ${out.slice(ROOT.length)}.{json,md${python ? ",png" : ""}}`);
process.stdout.write(readFileSync(`${out}.md`, "utf8"));
process.exit(errors.length ? 1 : 0);
