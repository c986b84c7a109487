// openTerminal(native, options): the `SandboxTerminal` object over a
// NativeTerminal. What cannot live in Rust: the AbortSignal, an `onData`
// that throws (it closes the terminal, and wait() rejects with what it
// threw), string input, and keeping writes and resizes in call order (each
// native call is its own task on the runtime's threads).

import { abortError, fromNative, invalidRequest } from "./errors.js";
import { native } from "./native.js";
import { toBuffer } from "./process.js";
import { isSignal } from "./tasks.js";

/**
 * @param {any} sandbox a NativeSandbox
 * @param {Record<string, any>} options from a caller, an object (callOptions); its env already checked
 */
export async function openTerminal(sandbox, options) {
  const { command, cwd, env, cols, rows, onData, timeoutMs, signal } = options;
  if (typeof onData !== "function") throw invalidRequest("onData must be a function");
  for (const [name, value] of [["command", command], ["cwd", cwd]]) {
    if (value != null && typeof value !== "string") throw invalidRequest(`${name} must be a string; nothing was run`);
  }
  for (const [name, value] of [["cols", cols], ["rows", rows], ["timeoutMs", timeoutMs]]) {
    if (value != null && typeof value !== "number") throw invalidRequest(`${name} must be a number, got ${typeof value}; nothing was run`);
  }
  if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
  if (signal?.aborted) throw abortError();

  /** @type {unknown} */
  let callbackError;
  /** @type {any} */
  let handle;
  const onChunk = (/** @type {number} */ _stream, /** @type {Buffer} */ chunk) => {
    if (callbackError !== undefined) return;
    try {
      onData(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    } catch (err) {
      callbackError = err;
      handle?.close().catch(() => {});
    }
  };
  const cancel = new native.NativeCancel();
  const onAbort = () => cancel.cancel();
  signal?.addEventListener("abort", onAbort, { once: true });
  const nativeOptions = {
    command: command ?? undefined,
    cwd: cwd ?? undefined,
    env: env ?? undefined,
    cols: cols ?? undefined,
    rows: rows ?? undefined,
    timeoutMs: timeoutMs ?? undefined,
  };
  try {
    handle = await sandbox.terminal(nativeOptions, onChunk, cancel);
  } catch (err) {
    signal?.removeEventListener("abort", onAbort);
    throw fromNative(err);
  }
  // onData threw while the terminal was starting.
  if (callbackError !== undefined) handle.close().catch(() => {});

  const exit = handle.wait().then(
    (/** @type {any} */ e) => {
      if (callbackError !== undefined) throw callbackError;
      return { exitCode: e.exitCode ?? null, timedOut: e.timedOut };
    },
    (/** @type {unknown} */ err) => {
      throw callbackError !== undefined ? callbackError : fromNative(err);
    },
  );
  exit.catch(() => {}).finally(() => signal?.removeEventListener("abort", onAbort));

  // Writes and resizes reach the terminal in call order.
  /** @type {Promise<unknown>} */
  let queue = Promise.resolve();
  const inOrder = (/** @type {() => Promise<void>} */ call) => {
    const done = queue.then(call).catch((err) => {
      throw fromNative(err);
    });
    queue = done.catch(() => {});
    return done;
  };

  return {
    pid: handle.pid,

    /** Bytes (a string as UTF-8) typed into the terminal: "\x03" is Ctrl-C, "\x04" Ctrl-D. */
    write(/** @type {unknown} */ data) {
      const bytes = toBuffer(data, "data");
      return inOrder(() => handle.write(bytes));
    },

    /** A new size, 1..4096 columns and rows. */
    resize(/** @type {unknown} */ newCols, /** @type {unknown} */ newRows) {
      if (typeof newCols !== "number" || typeof newRows !== "number") {
        return Promise.reject(invalidRequest("cols and rows must be numbers from 1 to 4096"));
      }
      return inOrder(() => handle.resize(newCols, newRows));
    },

    /** Sends a signal (default HUP) to every process of the terminal's tree. */
    async kill(/** @type {unknown} */ name = "HUP") {
      if (typeof name !== "string") throw invalidRequest('signal must be a signal name such as "HUP"');
      try {
        await handle.kill(name);
      } catch (err) {
        throw fromNative(err);
      }
    },

    /** HUP, then KILL after 2 s; resolves once the terminal has ended. Idempotent. */
    async close() {
      try {
        await handle.close();
      } catch (err) {
        throw fromNative(err);
      }
    },

    /** How it ended: { exitCode, timedOut }. */
    wait() {
      return exit;
    },
  };
}
