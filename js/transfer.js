// upload and download: the argument checks, the Node Readable over a
// NativeDownload (pulled one chunk at a time, so a slow reader slows the
// sandbox's tar) and the AsyncIterable source pushed into a NativeUpload
// (each write awaits room). The archive checks all live in the Rust core.

import { Readable } from "node:stream";

import { abortError, fromNative, invalidRequest } from "./errors.js";
import { toBuffer } from "./process.js";
import { callOptions, callWithSignal, isSignal } from "./tasks.js";

/**
 * The transfer calls of a sandbox over its NativeSandbox.
 * @param {any} native
 */
export function transferCalls(native) {
  return {
    /**
     * Extracts `source` (a local directory path, tar bytes, or an AsyncIterable of tar bytes) into
     * `dir` in the sandbox; resolves { files, directories, bytes }.
     * @param {unknown} source
     * @param {unknown} dir
     * @param {unknown} [given]
     */
    async upload(source, dir, given) {
      const options = callOptions(given, "upload");
      const opts = transferOptions(options, "upload", ["signal", "maxBytes", "maxEntries", "overwrite"]);
      if (typeof dir !== "string") throw invalidRequest("upload: dir must be a string");
      if (typeof source === "string" || source instanceof Uint8Array) {
        const from = typeof source === "string" ? source : toBuffer(source, "source");
        return callWithSignal(options, "upload", (cancel) => native.upload(from, dir, opts, cancel));
      }
      if (source === null || typeof source !== "object" || typeof (/** @type {any} */ (source)[Symbol.asyncIterator]) !== "function") {
        throw invalidRequest("upload: source must be a directory path, a Uint8Array or an AsyncIterable<Uint8Array> of a tar archive");
      }
      return uploadStream(native, /** @type {AsyncIterable<unknown>} */ (source), dir, opts, options.signal ?? undefined);
    },

    /**
     * The tree under `path` as a tar stream (a Readable), or with `to`, extracted into that local
     * directory (one that is not empty only with `overwrite: true`); resolves { files, directories,
     * bytes } then.
     * @param {unknown} path
     * @param {unknown} [given]
     */
    async download(path, given) {
      const options = callOptions(given, "download");
      const opts = transferOptions(options, "download", ["signal", "maxBytes", "maxEntries", "exclude", "to", "overwrite"]);
      if (typeof path !== "string") throw invalidRequest("download: path must be a string");
      const { exclude, to } = options;
      if (exclude !== undefined && (!Array.isArray(exclude) || exclude.some((p) => typeof p !== "string"))) {
        throw invalidRequest("download: exclude must be an array of strings");
      }
      if (to !== undefined && (typeof to !== "string" || to === "")) throw invalidRequest("download: to must be a non-empty string");
      if (to === undefined && opts.overwrite !== undefined) throw invalidRequest("download: overwrite applies only with `to`");
      opts.exclude = exclude;
      if (to !== undefined) return callWithSignal(options, "download", (cancel) => native.downloadTo(path, to, opts, cancel));
      const signal = options.signal ?? undefined;
      if (signal?.aborted) throw abortError();
      /** @type {any} */
      let handle;
      try {
        handle = native.startDownload(path, opts);
      } catch (err) {
        throw fromNative(err);
      }
      const stream = new Readable({
        read() {
          handle.next().then(
            (/** @type {Buffer | null} */ chunk) => this.push(chunk),
            (/** @type {unknown} */ err) => this.destroy(/** @type {Error} */ (fromNative(err))),
          );
        },
        destroy(err, callback) {
          // Kills the sandbox's tar unless it already ended.
          handle.abort();
          signal?.removeEventListener("abort", onAbort);
          callback(err);
        },
      });
      const onAbort = () => stream.destroy(abortError());
      signal?.addEventListener("abort", onAbort, { once: true });
      return stream;
    },
  };
}

/**
 * Checks a transfer's options object (callOptions made it one) and returns the native options.
 * @param {Record<string, any>} options
 * @param {string} what
 * @param {string[]} known
 */
function transferOptions(options, what, known) {
  const o = /** @type {Record<string, unknown>} */ (options);
  for (const key of Object.keys(o)) {
    if (!known.includes(key)) throw invalidRequest(`${what}: unknown option ${JSON.stringify(key)}`);
  }
  if (!isSignal(o.signal)) throw invalidRequest(`${what}: signal must be an AbortSignal`);
  for (const name of ["maxBytes", "maxEntries"]) {
    if (o[name] !== undefined && typeof o[name] !== "number") throw invalidRequest(`${what}: ${name} must be a number`);
  }
  if (o.overwrite !== undefined && typeof o.overwrite !== "boolean") throw invalidRequest(`${what}: overwrite must be a boolean`);
  return {
    maxBytes: /** @type {number | undefined} */ (o.maxBytes),
    maxEntries: /** @type {number | undefined} */ (o.maxEntries),
    overwrite: /** @type {boolean | undefined} */ (o.overwrite),
    /** @type {string[] | undefined} */
    exclude: undefined,
  };
}

/**
 * Pushes an AsyncIterable's chunks into a NativeUpload, each write awaiting room.
 * @param {any} native
 * @param {AsyncIterable<unknown>} source
 * @param {string} dir
 * @param {any} opts
 * @param {AbortSignal | undefined} signal
 */
async function uploadStream(native, source, dir, opts, signal) {
  if (signal?.aborted) throw abortError();
  /** @type {any} */
  let handle;
  try {
    handle = native.startUpload(dir, opts);
  } catch (err) {
    throw fromNative(err);
  }
  // An abort rejects at once, even while the source is stalled in next().
  /** @type {() => void} */
  let onAbort = () => {};
  /** @type {Promise<never>} */
  const aborted = new Promise((_, reject) => {
    onAbort = () => {
      handle.abort();
      reject(abortError());
    };
  });
  aborted.catch(() => {});
  signal?.addEventListener("abort", onAbort, { once: true });
  const it = source[Symbol.asyncIterator]();
  try {
    try {
      for (;;) {
        const next = await Promise.race([it.next(), aborted]);
        if (next.done) break;
        const chunk = next.value;
        if (!(chunk instanceof Uint8Array)) throw invalidRequest("upload: the source yielded something that is not a Uint8Array");
        if (!(await Promise.race([handle.write(toBuffer(chunk, "chunk")), aborted]))) break;
      }
    } catch (err) {
      // The caller's iterable failed, or the call was aborted: stop the
      // upload (its tar is killed), and the iterable (not awaited: it may be stalled).
      handle.abort();
      it.return?.()?.catch?.(() => {});
      await handle.end().catch(() => {});
      throw err;
    }
    return await handle.end();
  } catch (err) {
    throw fromNative(err);
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}
