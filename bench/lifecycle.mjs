// Lifecycle of this package against a private warm pool: create+connect to
// the first exec (sequential and all at once), suspend → connect (resume) →
// first exec, destroy → nothing left. The controller's own Ready latency is
// read from the claim annotations (RFC 3339 with nanoseconds) so the
// provider's share is visible. Same-host clocks: our timestamps and the
// controller's are comparable.
//   node bench/lifecycle.mjs '{"n":20,"resumes":3,"pool":"bench-pool","like":"pool-workspace","runId":"x"}'

import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { agentSandboxProvider } from "../index.js";
import { providerOptions } from "./alt/package.mjs";
import { admin } from "./lib/cluster.mjs";

const { n, resumes, pool, like, runId } = JSON.parse(process.argv[2]);
const k = admin();
const p = agentSandboxProvider(providerOptions({ pool, namespace: k.ns }));
const now = () => performance.timeOrigin + performance.now();
const ctx = (actorId) => ({ actorId, client() {} });
const A = "agents.x-k8s.io/";

/** RFC 3339 with up to nanoseconds → epoch ms (fractional). */
function parseTime(s) {
  const m = s?.match(/^(.*?)(?:\.(\d+))?Z$/);
  return m ? Date.parse(`${m[1]}Z`) + Number(`0.${m[2] ?? 0}`) * 1e3 : null;
}

const undestroyed = new Set(); // claims to delete if the run fails half-way

async function createToExec(actorId) {
  const t0 = now();
  const id = await p.create(ctx(actorId));
  const t1 = now();
  undestroyed.add(id.split("/")[1]);
  const sb = await p.connect(ctx(actorId), id);
  const t2 = now();
  await sb.exec("true", { cwd: "/" });
  const t3 = now();
  const claim = await k.claim(id.split("/")[1]);
  const ann = claim?.metadata?.annotations ?? {};
  const observed = parseTime(ann[`${A}controller-first-observed-at`]);
  const ready = parseTime(ann[`${A}claim-first-ready-at`]);
  const controllerMs = observed && ready ? ready - observed : null;
  return {
    id,
    actorId,
    sandbox: claim?.status?.sandbox?.name,
    warm: Boolean(ann[`${A}sandbox-name`]),
    totalMs: t3 - t0,
    createMs: t1 - t0,
    connectMs: t2 - t1,
    firstExecMs: t3 - t2,
    controllerMs, // controller-first-observed-at → claim-first-ready-at
    toObservedMs: observed ? observed - t0 : null, // our create call → the controller sees the claim
    readyToConnectedMs: ready ? t2 - ready : null, // claim Ready → connect resolved
    overheadMs: controllerMs == null ? null : t3 - t0 - controllerMs,
  };
}

async function suspendResume(r) {
  const c = ctx(r.actorId);
  let t = now();
  await p.suspend(c, r.id);
  const suspendMs = now() - t;
  t = now();
  const sb = await p.connect(c, r.id);
  const connectMs = now() - t;
  await sb.exec("true", { cwd: "/" });
  return { suspendMs, resumeConnectMs: connectMs, resumeToExecMs: now() - t };
}

async function destroy(r) {
  const t = now();
  await p.destroy(ctx(r.actorId), r.id);
  const destroyMs = now() - t;
  const claim = r.id.split("/")[1];
  undestroyed.delete(claim);
  const anyLeft = async () =>
    (await k.claim(claim)) || (await k.sandbox(r.sandbox)) || (await k.pod(r.sandbox)) || (await k.pvcsOf(r.sandbox)).length;
  while (await anyLeft()) await sleep(50);
  return { destroyMs, goneMs: now() - t };
}

const out = { sequential: [], parallel: [], resume: [], destroySequential: [], destroyParallel: [] };
try {
  await k.createPool(pool, like, n);
  await k.waitPoolReady(pool, n);
  for (let i = 0; i < n; i++) out.sequential.push(await createToExec(`bench-${runId}-s${i}`));
  await k.waitPoolReady(pool, n);
  out.parallel = await Promise.all(Array.from({ length: n }, (_, i) => createToExec(`bench-${runId}-p${i}`)));
  for (const r of out.sequential.slice(0, resumes)) out.resume.push(await suspendResume(r));
  for (const r of out.sequential) out.destroySequential.push(await destroy(r));
  out.destroyParallel = await Promise.all(out.parallel.map(destroy));
} finally {
  await Promise.all([...undestroyed].map((name) => k.deleteClaim(name)));
  await k.deletePool(pool);
}
process.stdout.write(`RESULT ${JSON.stringify(out)}\n`);
process.exit(0);
