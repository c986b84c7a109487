// Measuring one operation in the current process: wall time, peak RSS growth
// (Linux high-water mark, reset just before the operation) and event-loop
// delay while it runs.

import { readFileSync, writeFileSync } from "node:fs";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { percentile } from "./stats.mjs";

/** VmRSS / VmHWM etc. of a process, in KiB (0 if it is gone). */
export function statusKb(key, pid = "self") {
  try {
    const m = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${key}:\\s+(\\d+) kB`, "m"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** CPU time (user + system) of another process so far, in ms (0 if it is gone). */
export function cpuMsOf(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime in USER_HZ (100)
  } catch {
    return 0;
  }
}

/** Resets this process's RSS high-water mark (Linux ≥ 4.0). */
export function resetPeakRss() {
  writeFileSync("/proc/self/clear_refs", "5");
}

// Event-loop delay histogram resolution; recorded values are the timer
// interval, so the delay is value − resolution.
const ELD_RES_MS = 1;

/**
 * Runs `op` and returns { ms, cpuMs, rssGrowthMiB, eldP99Ms, eldMaxMs, result }.
 * `helper` (optional) adds the CPU time and peak RSS growth of a helper
 * process (kubectl), so the figures cover the whole client.
 */
export async function measured(op, helper = {}) {
  global.gc?.();
  resetPeakRss();
  const base = statusKb("VmRSS");
  const cpu0 = process.cpuUsage();
  const h = monitorEventLoopDelay({ resolution: ELD_RES_MS });
  h.enable();
  const t = performance.now();
  const result = await op();
  const ms = performance.now() - t;
  h.disable();
  const cpu = process.cpuUsage(cpu0);
  const peak = statusKb("VmHWM");
  const delay = (v) => Math.max(0, v / 1e6 - ELD_RES_MS);
  return {
    ms,
    cpuMs: (cpu.user + cpu.system) / 1e3 + (helper.cpuMs?.() ?? 0),
    rssGrowthMiB: (peak - base + (helper.peakKb?.() ?? 0)) / 1024,
    eldP99Ms: h.count ? delay(h.percentile(99)) : null,
    eldMaxMs: h.count ? delay(h.max) : null,
    result,
  };
}

/** Event-loop delay p99 of the idle process over `ms` (context for the figures). */
export async function idleEld(ms = 300) {
  const h = monitorEventLoopDelay({ resolution: ELD_RES_MS });
  h.enable();
  await new Promise((r) => setTimeout(r, ms));
  h.disable();
  return Math.max(0, h.percentile(99) / 1e6 - ELD_RES_MS);
}

/** Latencies of `n` sequential calls of `fn`, in ms. */
export async function sequential(n, fn) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  return summarize({ ms });
}

/**
 * `n` calls of `fn` at once: latencies of those that succeeded, wall time,
 * successful calls/s, and how many failed (with the first error); throws
 * when none succeeded.
 */
export async function concurrent(n, fn) {
  const t0 = performance.now();
  const settled = await Promise.allSettled(
    Array.from({ length: n }, async () => {
      const t = performance.now();
      await fn();
      return performance.now() - t;
    }),
  );
  const wallMs = performance.now() - t0;
  const ms = settled.filter((s) => s.status === "fulfilled").map((s) => s.value);
  const failures = settled.filter((s) => s.status === "rejected").map((s) => s.reason);
  if (!ms.length) throw failures[0];
  const firstError = failures.length ? String(failures[0]?.message ?? failures[0]).split("\n")[0] : undefined;
  return { ...summarize({ ms, wallMs }), failed: failures.length, firstError };
}

/** p50/p99 of latencies; calls per second when the wall time is known. */
export function summarize({ ms, wallMs, failed, error }) {
  const r = { ms, p50: percentile(ms, 50), p99: percentile(ms, 99) };
  const f = failed == null ? {} : { failed, firstError: error ?? undefined };
  return wallMs == null ? { ...r, ...f } : { ...r, wallMs, perSec: (ms.length * 1000) / wallMs, ...f };
}

/** Binary test content: 1 MiB of pseudo-random bytes, repeated. */
export function testData(bytes) {
  const unit = Buffer.alloc(Math.min(bytes, 1 << 20));
  for (let i = 0; i < unit.length; i++) unit[i] = (Math.imul(i, 2654435761) >>> 13) & 0xff;
  const out = Buffer.allocUnsafe(bytes);
  for (let off = 0; off < bytes; off += unit.length) unit.copy(out, off);
  return out;
}

/**
 * A terminal whose keystrokes are timed: `open(onData)` starts one (running
 * `cat`, so the TTY's own echo answers each key) and returns `{ write, close }`;
 * `key()` types one letter and resolves once its echo came back.
 */
export async function echoer(open) {
  let waiting = null;
  const t = await open((chunk) => {
    if (waiting && Buffer.from(chunk).includes(waiting.byte)) {
      const w = waiting;
      waiting = null;
      w.resolve();
    }
  });
  let n = 0;
  return {
    key: () =>
      new Promise((resolve, reject) => {
        // Letters in turn, so an echo of the previous key cannot answer this one.
        const byte = 97 + (n++ % 26);
        waiting = { byte, resolve };
        Promise.resolve(t.write(String.fromCharCode(byte))).catch(reject);
      }),
    close: () => t.close(),
  };
}
