// node bench/ab-exec.mjs <checkoutA> <checkoutB> [rounds]   (with .cluster/env sourced)
//
// This package at two checkouts (each with its release addon built), on one
// sandbox of the local cluster: 100 sequential exec `true` (p50, p90) and
// 4 x 64 at once (exec/s, and CPU per exec: this process, the machine, the
// API server, the node with the pod's shells), each measurement in its own
// process, A and B alternated per round so the machine's drift hits both. For
// bisecting a regression the full benchmark's ratios show; the sandbox is
// created and destroyed by B.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
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
  // CPU per exec during the concurrent phase, steal excluded: this process
  // (user + system) and the whole machine (API server, node, pod shells
  // included), less noisy than wall time on a shared machine.
  const busy = () => {
    const [user, nice, system, , , irq, softirq] = readFileSync("/proc/stat", "utf8").split("\n")[0].split(/\s+/).slice(1).map(Number);
    return ((user + nice + system + irq + softirq) * 1000) / 100; // USER_HZ 100 → ms
  };
  // The API server's and the node's share (the node's includes the pod's
  // shells: it reaps them), when the local cluster's pid files are at hand.
  const run = `${dirname(process.env.KUBECONFIG)}/run`;
  const parts = ["kube-apiserver", "nodeexec"].filter((c) => existsSync(`${run}/${c}.pid`));
  const cpu = (c) => {
    const f = readFileSync(`/proc/${readFileSync(`${run}/${c}.pid`, "utf8").trim()}/stat`, "utf8").split(") ")[1].split(" ");
    return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / 100;
  };
  const p0 = parts.map(cpu);
  const c0 = performance.now();
  const u0 = process.cpuUsage();
  const m0 = busy();
  for (let k = 0; k < 4; k++) await Promise.all(Array.from({ length: 64 }, () => sb.exec("true", { cwd: "/" })));
  const u = process.cpuUsage(u0);
  const machineMs = (busy() - m0) / 256;
  const conc = 256 / ((performance.now() - c0) / 1000);
  const byPart = Object.fromEntries(parts.map((c, i) => [c, (cpu(c) - p0[i]) / 256]));
  console.log(JSON.stringify({ p50: t[50], p90: t[90], conc, nodeCpuMs: (u.user + u.system) / 1000 / 256, machineCpuMs: machineMs, ...byPart }));
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
for (const k of ["A", "B"]) {
  const m = (f) => med(res[k].map(f));
  console.log(k, `p50 median ${m((x) => x.p50).toFixed(1)} ms; 64 at once: ${m((x) => x.conc).toFixed(0)} exec/s, CPU per exec ${m((x) => x.nodeCpuMs).toFixed(2)} ms in Node, ${m((x) => x.machineCpuMs).toFixed(2)} ms machine-wide`);
  const parts = Object.keys(res[k][0]).filter((c) => !["p50", "p90", "conc", "nodeCpuMs", "machineCpuMs"].includes(c));
  if (parts.length) console.log(k, "  of which", parts.map((c) => `${c} ${m((x) => x[c]).toFixed(2)} ms`).join(", "));
}
