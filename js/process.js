// wrapProcess(native): the `SandboxProcess` object over a NativeProcess, and
// the conversions of process results (chunk objects, exits, listings).

import { Buffer } from "node:buffer";
import { invalidRequest } from "./errors.js";
import { callOptions, callWithSignal, isSignal, runTask } from "./tasks.js";

const STREAMS = { 1: "stdout", 2: "stderr" };

/** @param {any} native a NativeProcess from the addon */
export function wrapProcess(native) {
  return {
    id: native.id,
    pid: native.pid,
    command: native.command,
    startedAt: native.startedAt,

    /**
     * The chunks after `after` (a chunk's sequence) the sandbox has now, at most 8 MiB of each
     * stream (the rest on the next poll); `exit` once it exited and all output is in.
     * @param {unknown} [after]
     * @param {unknown} [options] `{ signal }`
     */
    async poll(after, options) {
      checkSequence(after);
      const r = await callWithSignal(options, "poll", (cancel) => native.poll(after ?? undefined, cancel));
      return { chunks: r.chunks.map((c) => chunk(c.sequence, c.stream, c.data)), exit: r.exit ? exit(r.exit) : undefined, truncated: r.truncated };
    },

    /**
     * Streams chunks after `after` to `onOutput` as they are written; resolves the exit.
     * @param {any} [options] anything from a caller; checked here
     */
    async follow(options) {
      const { after, onOutput, signal } = callOptions(options, "follow");
      checkSequence(after);
      if (onOutput !== undefined && typeof onOutput !== "function") throw invalidRequest("onOutput must be a function");
      if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
      const deliver = onOutput ? (stream, data, sequence) => onOutput(chunk(sequence, stream, data)) : undefined;
      const end = await runTask((onChunk) => native.startFollow(after ?? undefined, onChunk), deliver, signal ?? undefined);
      return { ...exit(end.exit), truncated: end.truncated };
    },

    /**
     * Resolves the exit once the process has ended, also long after.
     * @param {any} [options]
     */
    async wait(options) {
      const { signal } = callOptions(options, "wait");
      if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
      const end = await runTask(() => native.startWait(), undefined, signal ?? undefined);
      return exit(end.exit);
    },

    /** Writes to stdin (spawned with `stdin: true`). */
    async writeStdin(data, options) {
      await callWithSignal(options, "writeStdin", (cancel) => native.writeStdin(toBuffer(data, "data"), cancel));
    },

    /** Closes stdin: the process reads EOF after what was written. */
    async closeStdin(options) {
      await callWithSignal(options, "closeStdin", (cancel) => native.closeStdin(cancel));
    },

    /**
     * Without a signal, ends the process and everything it started for sure: TERM, 2 s of grace,
     * then KILL (resolves once they are gone). With one ("INT", "SIGUSR1", ...), sends just that
     * to the whole tree.
     * @param {unknown} [signal]
     * @param {unknown} [options] `{ signal: AbortSignal }`
     */
    async kill(signal, options) {
      if (signal != null && typeof signal !== "string") throw invalidRequest("signal must be a signal name such as \"TERM\"");
      await callWithSignal(options, "kill", (cancel) => native.kill(signal ?? undefined, cancel));
    },
  };
}

/** A listing entry from a NativeProcessInfo. */
export function processInfo(p) {
  return {
    id: p.id,
    pid: p.pid,
    command: p.command,
    startedAt: p.startedAt,
    exited: p.exit != null,
    exitCode: p.exit?.exitCode ?? null,
    signal: p.exit?.signal ?? null,
    timedOut: p.exit?.timedOut ?? false,
    lost: p.exit?.lost ?? false,
  };
}

function chunk(sequence, stream, data) {
  return { sequence, stream: STREAMS[stream], data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
}

function exit(e) {
  return { exitCode: e.exitCode ?? null, signal: e.signal ?? null, timedOut: e.timedOut, lost: e.lost };
}

// Only the type: the addon checks the number (sandbox_core::args::sequence).
function checkSequence(after) {
  if (after !== undefined && after !== null && typeof after !== "number") {
    throw invalidRequest(`after must be the sequence of a chunk (a non-negative integer), got ${String(after)}`);
  }
}

export function toBuffer(value, what) {
  if (typeof value === "string") return Buffer.from(value, "utf8");
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw invalidRequest(`${what} must be a string or a Uint8Array`);
}
