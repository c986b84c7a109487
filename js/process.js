// wrapProcess(native): the `SandboxProcess` object over a NativeProcess, and
// the conversions of process results (chunk objects, exits, listings).

import { Buffer } from "node:buffer";
import { callNative, invalidRequest } from "./errors.js";
import { isSignal, runTask } from "./tasks.js";

const STREAMS = { 1: "stdout", 2: "stderr" };

/** @param {any} native a NativeProcess from the addon */
export function wrapProcess(native) {
  return {
    id: native.id,
    pid: native.pid,
    command: native.command,
    startedAt: native.startedAt,

    /** Every chunk after `after` (a chunk's sequence) the sandbox has now; `exit` once it exited and all output is in. */
    async poll(after) {
      checkSequence(after);
      const r = await callNative(() => native.poll(after ?? undefined));
      return { chunks: r.chunks.map((c) => chunk(c.sequence, c.stream, c.data)), exit: r.exit ? exit(r.exit) : undefined, truncated: r.truncated };
    },

    /**
     * Streams chunks after `after` to `onOutput` as they are written; resolves the exit.
     * @param {any} [options] anything from a caller; checked here
     */
    async follow(options = {}) {
      if (options === null || typeof options !== "object") throw invalidRequest("follow options must be an object");
      const { after, onOutput, signal } = options;
      checkSequence(after);
      if (onOutput !== undefined && typeof onOutput !== "function") throw invalidRequest("onOutput must be a function");
      if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
      const deliver = onOutput ? (sequence, stream, data) => onOutput(chunk(sequence, stream, data)) : undefined;
      const end = await runTask((onChunk) => native.startFollow(after ?? undefined, onChunk), deliver, signal ?? undefined);
      return { ...exit(end.exit), truncated: end.truncated };
    },

    /**
     * Resolves the exit once the process has ended, also long after.
     * @param {any} [options]
     */
    async wait(options = {}) {
      if (options === null || typeof options !== "object") throw invalidRequest("wait options must be an object");
      if (!isSignal(options.signal)) throw invalidRequest("signal must be an AbortSignal");
      const end = await runTask(() => native.startWait(), undefined, options.signal ?? undefined);
      return exit(end.exit);
    },

    /** Writes to stdin (spawned with `stdin: true`). */
    async writeStdin(data) {
      await callNative(() => native.writeStdin(toBuffer(data, "data")));
    },

    /** Closes stdin: the process reads EOF after what was written. */
    async closeStdin() {
      await callNative(() => native.closeStdin());
    },

    /** Signals the process and everything it started (default TERM). */
    async kill(signal = "TERM") {
      if (typeof signal !== "string") throw invalidRequest("signal must be a signal name such as \"TERM\"");
      await callNative(() => native.kill(signal.replace(/^SIG/, "")));
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
    timedOut: p.exit?.timedOut ?? false,
    lost: p.exit?.lost ?? false,
  };
}

function chunk(sequence, stream, data) {
  return { sequence, stream: STREAMS[stream], data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
}

function exit(e) {
  return { exitCode: e.exitCode ?? null, timedOut: e.timedOut, lost: e.lost };
}

function checkSequence(after) {
  if (after !== undefined && after !== null && !(Number.isSafeInteger(after) && after >= 0)) {
    throw invalidRequest(`after must be the sequence of a chunk (a non-negative integer), got ${String(after)}`);
  }
}

export function toBuffer(value, what) {
  if (typeof value === "string") return Buffer.from(value, "utf8");
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw invalidRequest(`${what} must be a string or a Uint8Array`);
}
