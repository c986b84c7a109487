// The floor: bench/floor (kube-rs exec and nothing else), one process per
// measurement; it times itself, so process start-up is not counted.

import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { summarize } from "../lib/measure.mjs";

export const FLOOR_BIN = fileURLToPath(new URL("../floor/target/release/bench-floor", import.meta.url));

const ARGS = {
  "exec-seq": (p) => [p.n],
  "exec-conc": (p) => [p.n],
  stream: (p) => [p.bytes],
  write: (p) => [p.path, p.bytes],
  read: (p) => [p.path],
  "claim-exec": (p, t) => [t.pool, p.n, p.prefix],
};

/** Same result shape as bench/worker.mjs. */
export async function runFloor(op, params, t) {
  const argv = [t.pod, t.container, op, ...ARGS[op](params, t).map(String)];
  const { stdout } = await promisify(execFile)(FLOOR_BIN, argv, { maxBuffer: 1 << 20 });
  const r = JSON.parse(stdout);
  if (op.startsWith("exec-")) return summarize(r);
  if (op === "claim-exec") return { ...summarize(r), claims: r.claims };
  if (r.bytes !== params.bytes) throw new Error(`floor ${op}: ${r.bytes} bytes instead of ${params.bytes}`);
  return { ms: r.ms, cpuMs: r.cpuMs, bytes: r.bytes, rssGrowthMiB: (r.rssPeakKb - r.rssBaseKb) / 1024, eldP99Ms: null };
}
