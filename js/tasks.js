// Awaiting a native task handle (`abort()` + `wait()`) with an AbortSignal
// and a user callback that may throw. napi's own AbortSignal is !Send and
// misses already-aborted signals, so the signal is handled here.

import { abortError, fromNative, invalidRequest } from "./errors.js";
import { native } from "./native.js";

/**
 * Runs `start(onChunk)` and awaits the handle it returns. `deliver` is the
 * user's callback (or undefined); if it throws, the task is aborted and the
 * thrown value rejects the call. An aborted `signal` aborts the task and
 * rejects with Error("aborted").
 * @template T
 * @param {(onChunk: ((...args: any[]) => void) | null) => any} start
 * @param {((...args: any[]) => void) | undefined} deliver
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<T>}
 */
export async function runTask(start, deliver, signal) {
  if (signal?.aborted) throw abortError();
  /** @type {unknown} */
  let callbackError;
  /** @type {any} */
  let handle;
  const onChunk = deliver
    ? (...args) => {
        if (callbackError !== undefined) return;
        try {
          deliver(...args);
        } catch (err) {
          callbackError = err;
          handle?.abort();
        }
      }
    : null;
  try {
    handle = start(onChunk);
  } catch (err) {
    throw fromNative(err);
  }
  const onAbort = () => handle.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const result = await handle.wait();
    if (callbackError !== undefined) throw callbackError;
    return result;
  } catch (err) {
    if (callbackError !== undefined) throw callbackError;
    throw fromNative(err);
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * Runs a file or process call, which takes a NativeCancel as its last
 * argument, tied to `options.signal`: an abort rejects it with
 * Error("aborted") and closes its connection. `options` is what the caller
 * passed (absent, or an object); `what` names the call in errors.
 * @template T
 * @param {unknown} options
 * @param {string} what
 * @param {(cancel: any) => Promise<T>} call
 * @returns {Promise<T>}
 */
export async function callWithSignal(options, what, call) {
  const signal = callOptions(options, what).signal;
  if (!isSignal(signal)) throw invalidRequest("signal must be an AbortSignal");
  if (signal?.aborted) throw abortError();
  const cancel = new native.NativeCancel();
  const onAbort = () => cancel.cancel();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    return await call(cancel);
  } catch (err) {
    throw fromNative(err);
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * `options` as an object: the one rule for the options argument of every
 * method. Absent (undefined or null) is `{}`, as `fs.readFile(path, null)`
 * and `child_process.exec(command, null)` take it; anything else but a
 * plain object or class instance (a number, a string, an array, a function)
 * is `invalid_request` with nothing done.
 * @param {unknown} options
 * @param {string} what
 * @returns {Record<string, any>}
 */
export function callOptions(options, what) {
  if (options == null) return {};
  if (typeof options !== "object" || Array.isArray(options)) {
    throw invalidRequest(`${what} options must be an object, got ${Array.isArray(options) ? "an array" : typeof options}`);
  }
  return /** @type {Record<string, any>} */ (options);
}

/** Checks that `signal` is an AbortSignal (or absent). */
export function isSignal(signal) {
  return signal === undefined || signal === null || signal instanceof AbortSignal;
}
