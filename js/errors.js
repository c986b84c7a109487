// Native errors → JS errors with a stable `code`, and the `ErrorCode` object.
//
// The addon rejects with messages of the form "[code] message" (napi-rs can
// only attach its own status names as `code`; see src/errors.rs). fromNative
// turns such an error into an Error whose message is the core message and
// whose `code` is the core code; "aborted" becomes an AbortError.

import { native } from "./native.js";

/**
 * The codes the addon rejects with (the core's ErrorCode), by name:
 * `ErrorCode.NotFound === "not_found"`.
 * @type {Readonly<Record<string, string>>}
 */
export const ErrorCode = Object.freeze(
  Object.fromEntries(
    native.errorCodes().map((/** @type {string} */ code) => [code.replace(/(?:^|_)([a-z])/g, (_, c) => c.toUpperCase()), code]),
  ),
);
const KNOWN = new Set(Object.values(ErrorCode));

const PREFIX = /^\[([a-z_]+)\] ([\s\S]*)$/;

// napi-rs's own statuses for a JS value it could not convert to the Rust
// parameter type: the argument is wrong, and the call never started.
const CONVERSION = new Set([
  "InvalidArg",
  "ObjectExpected",
  "StringExpected",
  "NameExpected",
  "FunctionExpected",
  "NumberExpected",
  "BooleanExpected",
  "ArrayExpected",
  "BigintExpected",
  "DateExpected",
  "ArrayBufferExpected",
  "DetachableArraybufferExpected",
]);

/** @param {unknown} err */
export function fromNative(err) {
  if (!(err instanceof Error)) return err;
  const m = PREFIX.exec(err.message);
  if (!m) {
    const status = /** @type {any} */ (err).code;
    if (CONVERSION.has(status)) return invalidRequest(`invalid argument (${status}): ${err.message}`);
    if (status === "GenericFailure") return withCode(new Error(err.message), "internal");
    return err;
  }
  const [, code, message] = m;
  if (!KNOWN.has(code)) return withCode(new Error(err.message), "internal");
  return code === "aborted" ? abortError() : withCode(new Error(message), code);
}

/** Error("aborted") with `name` "AbortError" and `code` "aborted", as callers match on the message. */
export function abortError() {
  const err = withCode(new Error("aborted"), "aborted");
  err.name = "AbortError";
  return err;
}

/** An `invalid_request` error for bad arguments caught in JS. */
export function invalidRequest(message) {
  return withCode(new TypeError(message), "invalid_request");
}

/**
 * Awaits a native call, rethrowing its error with `code`.
 * @template T
 * @param {() => Promise<T> | T} call
 * @returns {Promise<T>}
 */
export async function callNative(call) {
  try {
    return await call();
  } catch (err) {
    throw fromNative(err);
  }
}

/**
 * `call()`, a synchronous native call, with its error turned into a JS error with a `code`.
 * @template T
 * @param {() => T} call
 * @returns {T}
 */
export function callNativeSync(call) {
  try {
    return call();
  } catch (err) {
    throw fromNative(err);
  }
}

/** Sets `err.code` (enumerable, as Node's own errors have it); returns `err`. */
export function withCode(err, code) {
  Object.defineProperty(err, "code", { value: code, enumerable: true, writable: true, configurable: true });
  return err;
}
