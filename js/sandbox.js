// wrapSandbox(native): the adapter's `Sandbox` object over a NativeSandbox.
//
// Handles what cannot live in Rust: AbortSignal (napi's is !Send, and misses
// already-aborted signals), user callbacks that throw, string encoding and
// decoding, and error codes (js/errors.js).

import { Buffer } from "node:buffer";
import { abortError, callNative, fromNative, invalidRequest } from "./errors.js";

/**
 * @param {any} native a NativeSandbox from the addon
 */
export function wrapSandbox(native) {
  const cwd = native.cwd;
  return {
    cwd,

    /**
     * Runs `command` with `/bin/sh -c` in the sandbox.
     * Resolves { exitCode, timedOut, stdout, stderr, truncated }: a non-zero
     * exit resolves; a timeout kills the process group and resolves with
     * exitCode null and timedOut true; an abort kills it and rejects with
     * Error("aborted"). stdout/stderr keep the first `maxOutputBytes` bytes
     * each (default 16 MiB; `truncated` says bytes were left out) while the
     * command keeps running and onData/onStdout/onStderr get everything.
     * `encoding: "buffer"` returns stdout/stderr as Buffers.
     */
    async exec(command, options = {}) {
      const { signal, onData, onStdout, onStderr, encoding } = options;
      if (typeof command !== "string") throw invalidRequest("command must be a string");
      if (encoding !== undefined && encoding !== "utf8" && encoding !== "utf-8" && encoding !== "buffer") {
        throw invalidRequest(`encoding must be "utf8" or "buffer", got ${String(encoding)}`);
      }
      if (signal?.aborted) throw abortError();

      /** @type {unknown} */
      let callbackError;
      /** @type {any} */
      let handle;
      const onChunk =
        onData || onStdout || onStderr
          ? (stream, chunk) => {
              if (callbackError !== undefined) return;
              try {
                onData?.(chunk);
                (stream === 1 ? onStdout : onStderr)?.(chunk);
              } catch (err) {
                // A throwing callback stops the command; exec rejects with it.
                callbackError = err;
                handle?.abort();
              }
            }
          : null;
      try {
        handle = native.startExec(command, nativeExecOptions(options), onChunk);
      } catch (err) {
        throw fromNative(err);
      }
      const onAbort = () => handle.abort();
      signal?.addEventListener("abort", onAbort, { once: true });
      try {
        const r = await handle.wait();
        if (callbackError !== undefined) throw callbackError;
        const decode = encoding === "buffer" ? (b) => b : (b) => b.toString("utf8");
        return {
          exitCode: r.exitCode ?? null,
          timedOut: r.timedOut,
          stdout: decode(r.stdout),
          stderr: decode(r.stderr),
          truncated: r.truncated,
        };
      } catch (err) {
        if (callbackError !== undefined) throw callbackError;
        throw fromNative(err);
      } finally {
        signal?.removeEventListener("abort", onAbort);
      }
    },

    /** Whole file as bytes; `not_found`, `is_directory`, `too_large` (default limit 100 MiB). */
    async readFile(path, options = {}) {
      const buf = await callNative(() => native.readFile(path, options.maxBytes));
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    },

    /** Creates or truncates `path` with `content` (string as UTF-8, or bytes), atomically. */
    async writeFile(path, content) {
      await callNative(() => native.writeFile(path, toBuffer(content, "content")));
    },

    /** `mkdir -p`: recursive and idempotent. */
    async mkdir(path) {
      await callNative(() => native.mkdir(path));
    },

    /** { isDirectory, isFile, isSymbolicLink, size, mtimeMs, mode, type }, symlinks followed. */
    async stat(path) {
      return callNative(() => native.stat(path));
    },

    /** Entry names (no . or ..); non-UTF-8 bytes become U+FFFD — see readdirBytes. */
    async readdir(path) {
      return callNative(() => native.readdir(path));
    },

    /** Entry names as exact bytes. */
    async readdirBytes(path) {
      const names = await callNative(() => native.readdirBytes(path));
      return names.map((b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
    },

    /** true / false; throws only when the sandbox cannot be asked. */
    async exists(path) {
      return callNative(() => native.exists(path));
    },

    /** `fs.rm`: `{ recursive, force }`. */
    async remove(path, options = {}) {
      await callNative(() => native.remove(path, options.recursive === true, options.force === true));
    },
  };
}

function nativeExecOptions(options) {
  const { cwd, env, timeoutMs, stdin, maxOutputBytes } = options;
  return {
    cwd: cwd ?? undefined,
    env: env == null ? undefined : stringEnv(env),
    timeoutMs: timeoutMs ?? undefined,
    stdin: stdin == null ? undefined : toBuffer(stdin, "stdin"),
    maxOutputBytes: maxOutputBytes ?? undefined,
  };
}

function stringEnv(env) {
  if (typeof env !== "object") throw invalidRequest("env must be an object of strings");
  /** @type {Record<string, string>} */
  const out = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    out[name] = String(value);
  }
  return out;
}

function toBuffer(value, what) {
  if (typeof value === "string") return Buffer.from(value, "utf8");
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw invalidRequest(`${what} must be a string or a Uint8Array`);
}
