// Small statistics helpers shared by the harness and the workers.

/** Percentile p (0–100) of a list of numbers, linear interpolation. */
export function percentile(values, p) {
  const xs = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (xs.length === 0) return null;
  const i = ((xs.length - 1) * p) / 100;
  const lo = Math.floor(i);
  const hi = Math.ceil(i);
  return xs[lo] + (xs[hi] - xs[lo]) * (i - lo);
}

/** Median with min/max: how one figure is reported over repetitions. */
export function spread(values) {
  const xs = values.filter(Number.isFinite);
  if (xs.length === 0) return null;
  return { median: percentile(xs, 50), min: Math.min(...xs), max: Math.max(...xs), n: xs.length };
}

/** Ratio of two spreads (medians; min/max pair the extremes). */
export function ratio(a, b) {
  if (!a || !b || !b.median) return null;
  return {
    median: a.median / b.median,
    min: b.max ? a.min / b.max : null,
    max: b.min ? a.max / b.min : null,
  };
}

/** Megabytes (10^6) per second. */
export const mbps = (bytes, ms) => bytes / 1e3 / ms;

export const MiB = 1 << 20;

/** Rounds for display; keeps null. */
export function round(x, digits = 3) {
  if (x == null || !Number.isFinite(x)) return x ?? null;
  const f = 10 ** Math.max(0, digits - Math.ceil(Math.log10(Math.abs(x) + 1e-12)));
  return Math.round(x * f) / f;
}
