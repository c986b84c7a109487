// wrapSandbox(native): the adapter's `Sandbox` object over a NativeSandbox.
//
// Handles what cannot live in Rust: AbortSignal (napi's is !Send, and misses
// already-aborted signals), user callbacks that throw, string encoding and
// decoding, and error codes (js/errors.js).

import { invalidRequest } from "./errors.js";
import { portMethods } from "./ports.js";
import { processInfo, toBuffer, wrapProcess } from "./process.js";
import { callOptions, callWithSignal, isSignal, runTask } from "./tasks.js";
import { openTerminal } from "./terminal.js";
import { transferCalls } from "./transfer.js";

/**
 * @param {any} native a NativeSandbox from the addon
 * @param {(thing: { close(): void }) => () => void} [track] records forwards and
 *   tunnels for the provider's suspend/destroy to close; returns what forgets one
 */
export function wrapSandbox(native, track = () => () => {}) {
  const cwd = native.cwd;
  return {
    cwd,
    ...portMethods(native, track),

    /**
     * Runs `command` with `/bin/sh -c` in the sandbox.
     * Resolves { exitCode, timedOut, stdout, stderr, truncated }: a non-zero
     * exit resolves; a timeout kills the process tree and resolves with
     * exitCode null and timedOut true; an abort kills it and rejects with
     * Error("aborted"). stdout/stderr keep the first `maxOutputBytes` bytes
     * each (default 16 MiB; `truncated` says bytes were left out) while the
     * command keeps running and onData/onStdout/onStderr get everything.
     * `encoding: "buffer"` returns stdout/stderr as Buffers.
     * @param {unknown} command
     * @param {any} [options] anything from a caller; checked here
     */
    async exec(command, options) {
      if (typeof command !== "string") throw invalidRequest("command must be a string");
      const o = callOptions(options, "exec");
      const { signal, onData, onStdout, onStderr, encoding } = o;
      if (encoding !== undefined && encoding !== "utf8" && encoding !== "utf-8" && encoding !== "buffer") {
        throw invalidRequest(`encoding must be "utf8" or "buffer", got ${String(encoding)}`);
      }
      for (const [name, f] of [["onData", onData], ["onStdout", onStdout], ["onStderr", onStderr]]) {
        if (f !== undefined && f !== null && typeof f !== "function") throw invalidRequest(`${name} must be a function`);
      }
      if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
      const deliver =
        onData || onStdout || onStderr
          ? (stream, chunk) => {
              onData?.(chunk);
              (stream === 1 ? onStdout : onStderr)?.(chunk);
            }
          : undefined;
      const native_options = nativeExecOptions(o);
      const r = await runTask((onChunk) => native.startExec(command, native_options, onChunk), deliver, signal ?? undefined);
      const decode = encoding === "buffer" ? (b) => b : (b) => b.toString("utf8");
      return {
        exitCode: r.exitCode ?? null,
        timedOut: r.timedOut,
        stdout: decode(r.stdout),
        stderr: decode(r.stderr),
        truncated: r.truncated,
      };
    },

    /**
     * Starts a terminal (a TTY over one exec connection) and resolves once its command runs:
     * { pid, write, resize, kill, close, wait }. Default command: an interactive login shell.
     * @param {any} options anything from a caller; checked here
     */
    async terminal(options) {
      const o = callOptions(options, "terminal");
      return openTerminal(native, { ...o, env: o.env == null ? undefined : stringEnv(o.env) });
    },

    /**
     * Starts `command` in the background and resolves once it runs, with a
     * SandboxProcess: follow its output by sequence, wait for its exit, write
     * its stdin, kill it; find it again with `process(id)` from anywhere.
     * @param {unknown} command
     * @param {any} [options]
     */
    async spawn(command, options) {
      if (typeof command !== "string") throw invalidRequest("command must be a string");
      const { cwd, env, stdin, timeoutMs, maxOutputBytes } = callOptions(options, "spawn");
      const native_options = {
        cwd: cwd ?? undefined,
        env: env == null ? undefined : stringEnv(env),
        stdin: stdin == null ? undefined : stdin === true ? true : toBuffer(stdin, "stdin"),
        timeoutMs: timeoutMs ?? undefined,
        maxOutputBytes: maxOutputBytes ?? undefined,
      };
      return wrapProcess(await callWithSignal(options, "spawn", (cancel) => native.spawn(command, native_options, cancel)));
    },

    /** The process with this id (from `spawn` or `processes()`), or undefined if the sandbox does not know it. */
    async process(id, options) {
      if (typeof id !== "string") throw invalidRequest("process id must be a string");
      const p = await callWithSignal(options, "process", (cancel) => native.process(id, cancel));
      return p == null ? undefined : wrapProcess(p);
    },

    /** Every process the sandbox keeps (running, or exited within the last hour), in start order. */
    async processes(options) {
      const list = await callWithSignal(options, "processes", (cancel) => native.processes(cancel));
      return list.map(processInfo);
    },

    /**
     * A regular file as bytes, whole or `length` bytes from `offset`; `not_found`, `is_directory`,
     * `too_large` (default limit 100 MiB).
     */
    async readFile(path, options) {
      const { maxBytes, offset, length } = callOptions(options, "readFile");
      const buf = await callWithSignal(options, "readFile", (cancel) =>
        native.readFile(path, maxBytes, offset, length, cancel),
      );
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    },

    /** Creates or truncates `path` with `content` (string as UTF-8, or bytes), atomically. */
    async writeFile(path, content, options) {
      await callWithSignal(options, "writeFile", (cancel) => native.writeFile(path, toBuffer(content, "content"), cancel));
    },

    /** `mkdir -p`: recursive and idempotent. */
    async mkdir(path, options) {
      await callWithSignal(options, "mkdir", (cancel) => native.mkdir(path, cancel));
    },

    /** { isDirectory, isFile, isSymbolicLink, size, mtimeMs, mode, type }, symlinks followed. */
    async stat(path, options) {
      return callWithSignal(options, "stat", (cancel) => native.stat(path, cancel));
    },

    /** Entry names (no . or ..); non-UTF-8 bytes become U+FFFD — see readdirBytes. */
    async readdir(path, options) {
      return callWithSignal(options, "readdir", (cancel) => native.readdir(path, cancel));
    },

    /** Entry names as exact bytes. */
    async readdirBytes(path, options) {
      const names = await callWithSignal(options, "readdirBytes", (cancel) => native.readdirBytes(path, cancel));
      return names.map((/** @type {Buffer} */ b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
    },

    /** true / false; throws only when the sandbox cannot be asked. */
    async exists(path, options) {
      return callWithSignal(options, "exists", (cancel) => native.exists(path, cancel));
    },

    /**
     * What the sandbox uses, from its cgroup files in one exec: CPU seconds, memory (and working set),
     * OOM kills, pids, limits (null: none), disk of the filesystem holding cwd. `sampleMs` (1..10000)
     * reads CPU twice that far apart for `cpuPercent`.
     */
    async usage(options) {
      const { sampleMs } = callOptions(options, "usage");
      return callWithSignal(options, "usage", (cancel) => native.usage(sampleMs ?? undefined, cancel));
    },

    /** `fs.rm`: `{ recursive, force }`. */
    async remove(path, options) {
      const { recursive, force } = callOptions(options, "remove");
      await callWithSignal(options, "remove", (cancel) => native.remove(path, recursive === true, force === true, cancel));
    },

    ...transferCalls(native),
  };
}

function nativeExecOptions(options) {
  const { cwd, env, timeoutMs, stdin, maxOutputBytes, reattach } = options;
  if (reattach !== undefined && typeof reattach !== "boolean") throw invalidRequest("reattach must be a boolean");
  return {
    cwd: cwd ?? undefined,
    env: env == null ? undefined : stringEnv(env),
    timeoutMs: timeoutMs ?? undefined,
    stdin: stdin == null ? undefined : toBuffer(stdin, "stdin"),
    maxOutputBytes: maxOutputBytes ?? undefined,
    reattach: reattach === true,
  };
}

function stringEnv(env) {
  if (typeof env !== "object" || Array.isArray(env)) throw invalidRequest("env must be an object of strings");
  /** @type {Record<string, string>} */
  const out = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    // Numbers and booleans read as their text, as child_process takes them.
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
      throw invalidRequest(`env variable ${JSON.stringify(name)} must be a string, got ${typeof value}; nothing was run`);
    }
    out[name] = String(value);
  }
  return out;
}

