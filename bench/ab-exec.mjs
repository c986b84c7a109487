// node bench/ab-exec.mjs <checkoutA> <checkoutB> [rounds]   (with .cluster/env sourced)
//
// This package at two checkouts (each with its release addon built), on one
// sandbox of the local cluster: 100 sequential exec `true` (p50, p90) and 64
// at once (exec/s), each measurement in its own process, A and B alternated
// per round so the machine's drift hits both. For bisecting a regression the
// full benchmark's ratios show; the sandbox is created and destroyed by B.
import { execFileSync } from "node:child_process";
const [, , A, B, roundsArg] = process.argv;
if (process.env.CHILD) {
  const { agentSandboxProvider } = await import(`${process.env.CHILD}/index.js`);
  const base = { warmPool: "pool-ephemeral", namespace: process.env.SANDBOX_TEST_NAMESPACE, suspend: "none", cwd: "/tmp", maxConcurrentExecs: 64 };
  let p;
  try {
    p = agentSandboxProvider({ ...base, maxConcurrentExecsPerSandbox: 64 });
  } catch {
    p = agentSandboxProvider(base); // before the per-sandbox share existed
  }
  const ctx = { actorId: process.env.ACTOR, client() {} };
  if (process.env.CREATE) {
    console.log(await p.create(ctx));
    process.exit(0);
  }
  if (process.env.DESTROY) {
    await p.destroy(ctx, process.env.ID);
    process.exit(0);
  }
  const sb = await p.connect(ctx, process.env.ID);
  for (let i = 0; i < 10; i++) await sb.exec("true", { cwd: "/" });
  const t = [];
  for (let i = 0; i < 100; i++) {
    const t0 = performance.now();
    await sb.exec("true", { cwd: "/" });
    t.push(performance.now() - t0);
  }
  t.sort((a, b) => a - b);
  const c0 = performance.now();
  await Promise.all(Array.from({ length: 64 }, () => sb.exec("true", { cwd: "/" })));
  const conc = 64 / ((performance.now() - c0) / 1000);
  console.log(JSON.stringify({ p50: t[50], p90: t[90], conc }));
  process.exit(0);
}
const env = { ...process.env, ACTOR: `ab-${process.pid}` };
const id = execFileSync("node", [process.argv[1]], { env: { ...env, CHILD: B, CREATE: "1" } }).toString().trim();
const res = { A: [], B: [] };
for (let r = 0; r < Number(roundsArg ?? 5); r++) {
  for (const [k, root] of r % 2 ? [["B", B], ["A", A]] : [["A", A], ["B", B]]) {
    const out = JSON.parse(execFileSync("node", [process.argv[1]], { env: { ...env, CHILD: root, ID: id } }).toString().trim().split("\n").pop());
    res[k].push(out);
    console.log(k, JSON.stringify(out));
  }
}
execFileSync("node", [process.argv[1]], { env: { ...env, CHILD: B, DESTROY: "1", ID: id } });
const med = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const k of ["A", "B"]) console.log(k, "p50 median", med(res[k].map((x) => x.p50)).toFixed(1), "ms; 64 conc median", med(res[k].map((x) => x.conc)).toFixed(0), "/s");
