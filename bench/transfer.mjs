// npm run bench:transfer [-- --mib=256]   (default 256; the loop rows take minutes on a loaded machine)
//
// A tree of mixed file sizes (a quarter in 32 MiB files, a quarter in
// 1 MiB files, half in 32 KiB files; random bytes) into one sandbox and back
// out: `upload(dir)` / `download(path, { to })` against a `writeFile` /
// `readFile` loop over the same files and `kubectl cp`, in one run. Each
// measurement runs in its own process (time, its CPU time, peak RSS growth
// over its baseline; for kubectl, its own CPU and peak RSS). Writes
// bench/results/transfer.{json,md}.

import { execFileSync, spawnSync } from "node:child_process";
import { randomFillSync } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { ROOT, ensureCluster } from "./lib/cluster.mjs";

const arg = (name, dflt) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? dflt;
const MiB = 2 ** 20;
/** Provider options; the namespace is known once .cluster/env is loaded. */
const options = () => ({ namespace: process.env.SANDBOX_TEST_NAMESPACE ?? "agents", warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp" });

/** The files of the tree: [relative path, size]. */
function layout(mib) {
  const total = mib * MiB;
  const files = [];
  for (let i = 0; i < total / 4 / (32 * MiB); i++) files.push([`big/f${i}.bin`, 32 * MiB]);
  for (let i = 0; i < total / 4 / MiB; i++) files.push([`mid/d${i % 8}/f${i}.bin`, MiB]);
  for (let i = 0; i < total / 2 / (32 * 1024); i++) files.push([`small/d${i % 64}/f${i}.txt`, 32 * 1024]);
  return files;
}

// ---- one measurement (a child process) ---------------------------------------

if (arg("case")) {
  const { agentSandboxProvider } = await import(`${ROOT}index.js`);
  const provider = agentSandboxProvider(options());
  const sandbox = await provider.connect({ actorId: process.env.ACTOR, client() {} }, process.env.ID);
  const [local, remote, files] = [process.env.LOCAL, process.env.REMOTE, layout(Number(arg("mib")))];
  globalThis.gc?.();
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  switch (arg("case")) {
    case "upload":
      await sandbox.upload(local, remote);
      break;
    case "download":
      await sandbox.download(remote, { to: process.env.TO, maxBytes: 2 ** 34 });
      break;
    case "writeFile loop":
      for (const dir of new Set(files.map(([f]) => path.dirname(f)))) await sandbox.mkdir(`${remote}/${dir}`);
      for (const [f] of files) await sandbox.writeFile(`${remote}/${f}`, fs.readFileSync(path.join(local, f)));
      break;
    case "readFile loop":
      for (const [f] of files) {
        fs.mkdirSync(path.dirname(path.join(process.env.TO, f)), { recursive: true });
        fs.writeFileSync(path.join(process.env.TO, f), await sandbox.readFile(`${remote}/${f}`));
      }
      break;
  }
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  clearInterval(sampler);
  process.stdout.write(JSON.stringify({ ms, cpuMs: (cpu.user + cpu.system) / 1000, rssMiB: (peak - baseline) / MiB }));
  process.exit(0);
}

// ---- the run ------------------------------------------------------------------

ensureCluster();
const mib = Number(arg("mib", "256"));
const files = layout(mib);
const work = fs.mkdtempSync(path.join(os.tmpdir(), "bench-transfer-"));
const tree = path.join(work, "tree");
const buf = Buffer.alloc(32 * MiB);
for (const [f, size] of files) {
  fs.mkdirSync(path.dirname(path.join(tree, f)), { recursive: true });
  fs.writeFileSync(path.join(tree, f), randomFillSync(buf.subarray(0, size)));
}
const { agentSandboxProvider } = await import(`${ROOT}index.js`);
const provider = agentSandboxProvider(options());
const ctx = { actorId: `bench-transfer-${Date.now().toString(36)}`, client() {} };
const id = await provider.create(ctx);
const results = [];
try {
  const measure = (name, remote, to) => {
    const r = spawnSync(process.execPath, ["--expose-gc", import.meta.filename, `--case=${name}`, `--mib=${mib}`], {
      env: { ...process.env, ACTOR: ctx.actorId, ID: id, LOCAL: tree, REMOTE: remote, TO: to ?? "" },
      encoding: "utf8",
      maxBuffer: 16 * MiB,
    });
    if (r.status !== 0) throw new Error(`${name}: ${r.stderr}`);
    const m = JSON.parse(r.stdout);
    results.push({ name, ...m });
    console.error(`${name}: ${m.ms.toFixed(0)} ms, CPU ${m.cpuMs.toFixed(0)} ms, RSS +${m.rssMiB.toFixed(1)} MiB`);
  };
  const kubectlCp = (name, from, to) => {
    const r = spawnSync("/usr/bin/time", ["-f", "%e %U %S %M", process.env.SANDBOX_TEST_KUBECTL, "--kubeconfig", process.env.KUBECONFIG, "-n", options().namespace, "cp", "-c", "sandbox", from, to], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`${name}: ${r.stderr}`);
    const [e, u, s, maxKiB] = r.stderr.trim().split("\n").pop().split(" ").map(Number);
    results.push({ name, ms: e * 1000, cpuMs: (u + s) * 1000, rssMiB: maxKiB / 1024, rssIsPeak: true });
    console.error(`${name}: ${(e * 1000).toFixed(0)} ms, CPU ${((u + s) * 1000).toFixed(0)} ms, peak RSS ${(maxKiB / 1024).toFixed(1)} MiB`);
  };
  const sandbox = await provider.connect(ctx, id);
  // A claimed pod's name is not the claim's: ask the pod (its UTS hostname).
  const pod = (await sandbox.exec("hostname")).stdout.trim();
  kubectlCp("kubectl cp (up)", tree, `${pod}:/tmp/kcp`);
  measure("upload", "/tmp/up");
  measure("writeFile loop", "/tmp/loop");
  measure("download", "/tmp/up", path.join(work, "down"));
  measure("readFile loop", "/tmp/up", path.join(work, "loop-down"));
  kubectlCp("kubectl cp (down)", `${pod}:/tmp/up`, path.join(work, "kcp-down"));
  // Every way in and out gave the same bytes.
  const sum = (dir) => execFileSync("sh", ["-c", "find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum"], { cwd: dir, encoding: "utf8" });
  const want = sum(tree);
  for (const d of ["down", "loop-down", "kcp-down"]) if (sum(path.join(work, d)) !== want) throw new Error(`${d} differs`);
  const inPod = (dir) => sandbox.exec("find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum", { cwd: dir });
  for (const d of ["/tmp/up", "/tmp/loop", "/tmp/kcp"]) if ((await inPod(d)).stdout !== want) throw new Error(`${d} differs`);
} finally {
  await provider.destroy(ctx, id);
  fs.rmSync(work, { recursive: true, force: true });
}
const base = (n) => results.find((r) => r.name === n);
const lines = [
  `# Transfer: a ${mib} MiB tree (${files.length} files of 32 MiB, 1 MiB and 32 KiB) in and out`,
  "",
  `${new Date().toISOString()}, ${os.cpus().length} cores (${os.cpus()[0]?.model}), local control plane (nodeexec). One run.`,
  "",
  "| Way | Time (ms) | Client CPU (ms) | RSS (MiB) | Time vs this package |",
  "|---|---:|---:|---:|---:|",
  ...results.map((r) => {
    const pkg = base(r.name.includes("down") || r.name.startsWith("read") || r.name === "download" ? "download" : "upload");
    return `| ${r.name} | ${r.ms.toFixed(0)} | ${r.cpuMs.toFixed(0)} | ${r.rssIsPeak ? `${r.rssMiB.toFixed(1)} (peak, kubectl)` : `+${r.rssMiB.toFixed(1)}`} | ${(r.ms / pkg.ms).toFixed(2)}× |`;
  }),
  "",
  "RSS for this package's rows is the peak growth over the measuring process's baseline (sampled every 10 ms); kubectl's is its peak RSS (`/usr/bin/time`).",
];
fs.writeFileSync(path.join(ROOT, "bench/results/transfer.json"), JSON.stringify({ mib, files: files.length, results }, null, 2) + "\n");
fs.writeFileSync(path.join(ROOT, "bench/results/transfer.md"), lines.join("\n") + "\n");
console.log(lines.join("\n"));
