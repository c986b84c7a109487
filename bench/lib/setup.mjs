// What a run needs besides the cluster: node_modules, the floor binary, the
// release addon, matplotlib; and the machine/version facts for the report.

import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import os from "node:os";

export const BENCH = new URL("../", import.meta.url).pathname;
export const ROOT = new URL("../../", import.meta.url).pathname;

/** Runs a command in the repo root; stdout as a trimmed string ("" when inherited). */
export const sh = (cmd, argv, opts = {}) => (execFileSync(cmd, argv, { cwd: ROOT, encoding: "utf8", ...opts }) ?? "").trim();
const loud = { stdio: "inherit" };

export function installNodeModules(log) {
  if (existsSync(`${ROOT}node_modules/@kubernetes/client-node`)) return;
  log("npm ci");
  sh("npm", ["ci", "--no-audit", "--no-fund"], loud);
}

export function buildFloor(log) {
  log("floor: cargo build --release");
  const manifest = `${BENCH}floor/Cargo.toml`;
  sh("cargo", ["build", "--release", "--quiet", "--manifest-path", manifest, "--target-dir", `${BENCH}floor/target`], loud);
}

/**
 * The release addon: `npm run build` exactly as the team runs it (any other
 * napi/cargo invocation differs in napi's env and makes cargo rebuild the
 * crate, minutes of LTO, each time the two alternate), then a copy in
 * bench/.addon loaded through NAPI_RS_NATIVE_LIBRARY_PATH, so a debug build
 * put at the repo root later cannot end up being measured.
 */
/**
 * The Rust target dir of the checkout at `dir`: one per checkout, seeded on first use
 * (scripts/lib/target-dir.sh); for this checkout CARGO_TARGET_DIR when set, as cargo-env.sh.
 */
export function checkoutTargetDir(dir) {
  if (dir === ROOT && process.env.CARGO_TARGET_DIR) return process.env.CARGO_TARGET_DIR;
  const script = 'source scripts/lib/target-dir.sh && dev_target_dir "$1"';
  return sh("bash", ["-c", script, "-", dir], { stdio: ["ignore", "pipe", "inherit"] });
}

export function buildPackage(log) {
  log("package: npm run build (release addon)");
  // This checkout's Rust target dir, the one the test and demo scripts use
  // (scripts/lib/cargo-env.sh), so a bench after the tests reuses their release build.
  const env = { ...process.env, CARGO_TARGET_DIR: checkoutTargetDir(ROOT) };
  sh("npm", ["run", "build"], { ...loud, env });
  const built = `${ROOT}agent-sandbox-provider.linux-x64-gnu.node`;
  if (statSync(built).size > 64 * 2 ** 20) throw new Error(`${built} looks like a debug build`);
  const addon = `${BENCH}.addon/agent-sandbox-provider.node`;
  mkdirSync(`${BENCH}.addon`, { recursive: true });
  copyFileSync(built, addon);
  process.env.NAPI_RS_NATIVE_LIBRARY_PATH = addon;
}

/** A python with matplotlib: bench/.venv, created from PyPI if missing. */
export function chartPython(log) {
  const py = `${BENCH}.venv/bin/python`;
  const ok = () => spawnSync(py, ["-c", "import matplotlib"]).status === 0;
  if (existsSync(py) && ok()) return py;
  log("chart: python venv + matplotlib");
  sh("python3", ["-m", "venv", `${BENCH}.venv`]);
  sh(py, ["-m", "pip", "install", "--quiet", "matplotlib"], loud);
  if (!ok()) throw new Error("matplotlib does not import");
  return py;
}

const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(" ");
export const LOAD_AT_START = loadavg();

export function machine() {
  return {
    nproc: os.availableParallelism(),
    memGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    cpu: os.cpus()[0]?.model ?? "unknown",
    loadStart: LOAD_AT_START,
    loadEnd: loadavg(),
  };
}

export async function versions(k, measuredPackage) {
  const safe = (f) => {
    try {
      return f();
    } catch (e) {
      return `unknown (${e.message.split("\n")[0]})`;
    }
  };
  const json = (path) => JSON.parse(readFileSync(path, "utf8"));
  const pkg = json(`${ROOT}package.json`);
  const dirty = sh("git", ["status", "--porcelain", "--", "core", "src", "js", "index.js", "Cargo.toml", "Cargo.lock"]) ? "+uncommitted changes" : "";
  return {
    package: `${pkg.name} ${pkg.version} (${safe(() => sh("git", ["rev-parse", "--short", "HEAD"]))}${dirty}, release addon)${measuredPackage ? "" : " — NOT MEASURED"}`,
    node: process.version,
    "kube-apiserver": await k.apiserverVersion().catch((e) => `unknown (${e.message})`),
    "@kubernetes/client-node": json(`${ROOT}node_modules/@kubernetes/client-node/package.json`).version,
    kubectl: safe(() => JSON.parse(sh(process.env.SANDBOX_TEST_KUBECTL || "kubectl", ["version", "--client", "-o", "json"])).clientVersion.gitVersion),
    "floor (kube-rs)": safe(() => readFileSync(`${BENCH}floor/Cargo.lock`, "utf8").match(/name = "kube"\nversion = "([^"]+)"/)[1]),
    "agent-sandbox controller": safe(() => readFileSync(`${ROOT}dev/cluster/thirdparty/go.mod`, "utf8").match(/sigs\.k8s\.io\/agent-sandbox (\S+)/)[1]),
  };
}
