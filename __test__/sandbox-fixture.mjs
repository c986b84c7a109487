// A sandbox for the exec and files suites: a claim on the warm pool
// `pool-ephemeral` (no volume; pods kept on suspend) made as the
// least-privilege ServiceAccount, with cwd /tmp. Each suite gets its own
// sandbox and destroys it at the end. The suites test js/sandbox.js over the
// addon's NativeSandbox, so the fixture takes the sandbox straight from the
// native provider (the provider's own JS layer is lifecycle.test.mjs's job).

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { wrapSandbox } from "../js/sandbox.js";
import { actorId, namespace } from "./cluster.mjs";

const native = createRequire(import.meta.url)("../native.cjs");

export const POOL = "pool-ephemeral";
export const OPTIONS = { namespace, warmPool: POOL, suspend: "none", cwd: "/tmp", readyTimeoutMs: 120_000 };

/** Creates and connects a sandbox; `close()` destroys it. */
export async function openSandbox(label, options = {}) {
  const provider = new native.NativeProvider({ ...OPTIONS, ...options }, null);
  const actor = actorId(label);
  const id = await provider.create(actor);
  const connect = async () => {
    const sandbox = await provider.connect(actor, id);
    if (!sandbox) throw new Error(`connect(${id}) returned no sandbox`);
    return wrapSandbox(sandbox);
  };
  try {
    return { actor, id, sandbox: await connect(), connect, close: () => provider.destroy(actor, id) };
  } catch (err) {
    await provider.destroy(actor, id);
    throw err;
  }
}

/** Runs a command that must succeed; returns its stdout. */
export async function sh(sandbox, command, options = {}) {
  const r = await sandbox.exec(command, { cwd: sandbox.cwd, ...options });
  if (r.exitCode !== 0) throw new Error(`${command}: exit ${r.exitCode}: ${r.stderr}`);
  return r.stdout;
}

/** A directory unique to this test run, created in the sandbox. */
export async function scratchDir(sandbox, label) {
  const dir = `/tmp/${label}-${process.pid}-${Date.now().toString(36)}`;
  await sandbox.mkdir(dir);
  return dir;
}

/** Every byte value 0..255, twice, in a scrambled order. */
export function allBytes() {
  const out = new Uint8Array(512);
  for (let i = 0; i < 512; i++) out[i] = (i * 167 + 13) & 0xff;
  return out;
}

/** Starts `sandbox-child.mjs <args>` on `box`'s sandbox (stdout piped, stderr inherited). */
export function sandboxChild(box, args, dir) {
  return spawn(process.execPath, [fileURLToPath(new URL("./sandbox-child.mjs", import.meta.url)), ...args], {
    env: { ...process.env, ACTOR: box.actor, ID: box.id, DIR: dir ?? "/tmp" },
    stdio: ["ignore", "pipe", "inherit"],
  });
}

/** A provider in the test namespace recording its events. */
export function provider(options) {
  const events = [];
  const p = agentSandboxProvider({ namespace, readyTimeoutMs: 120_000, onEvent: (e) => events.push(e), ...options });
  return { p, events };
}

/** Runs `body(ctx, id)` on a fresh sandbox of `p` and always destroys it. */
export async function withSandbox(p, label, body) {
  const ctx = { actorId: actorId(label), client: () => undefined };
  let id;
  try {
    id = await p.create(ctx);
    return await body(ctx, id);
  } finally {
    if (id) await p.destroy(ctx, id);
  }
}

/**
 * Waits in the sandbox until every process `pids` (a shell word list, e.g.
 * "123 456" or "$(cat child.pid)") is gone or a zombie: negative checks of a
 * kill look only after this, so a slow machine cannot make them pass before
 * the killed tree would have acted. Bounded at 120 s, which only a survivor
 * (or a hang) reaches; then it fails.
 */
export async function waitGone(sandbox, pids, options = {}) {
  const script = `for p in ${pids}; do i=0; while s=$(cat /proc/$p/stat 2>/dev/null); do case "\${s##*) }" in Z*|X*) break;; esac; i=$((i+1)); [ $i -lt 1200 ] || { echo "pid $p still alive"; exit 1; }; sleep 0.1; done; done`;
  await sh(sandbox, script, options);
}
