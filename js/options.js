// Provider options → plain JSON, before they reach the addon.
//
// napi converts the options to serde_json by itself and fails on what JSON
// cannot hold (NaN, a symbol, `undefined` in an array...) with its own text
// ("Failed to convert js number to serde_json") and no option name. So the
// options are copied here into plain JSON first, and anything else throws a
// `config` error naming the option's path (`sandbox.resources.cpu`,
// `claim.labels["a b"]`); the core then checks the values themselves.
//
// Each own enumerable string-keyed property is read exactly once (getters and
// Proxy traps run once, and the addon only ever sees the copy); a throwing
// getter or trap becomes a `config` error for that path. Symbol keys are
// ignored, as JSON.stringify does: no option is named by a symbol.

import { withCode } from "./errors.js";

// Far deeper than any real option (a pod template's deepest fields are about
// a dozen levels down); it also keeps a hostile depth from overflowing the
// stack here or in the addon's conversion.
const MAX_DEPTH = 32;

const PLAIN = "plain JSON (an object, array, string, finite number, boolean or null)";

/**
 * The options as plain JSON, and the raw `onEvent` value. A function cannot
 * cross as JSON: `onEvent` is sent as its `typeof` for the core to check with
 * the other options, and the function goes to the addon separately.
 * @param {unknown} options
 * @returns {{ json: Record<string, unknown>, onEvent: unknown }}
 */
export function optionsToJson(options) {
  const what = guard("", () => describe(options));
  if (what !== "an object") throw configError("", `must be an object, got ${what}`);
  /** @type {unknown} */
  let onEvent;
  /** @type {[string, unknown][]} */
  const entries = [];
  const ancestors = new Set([options]);
  for (const [key, path, value] of ownEntries(/** @type {object} */ (options), "")) {
    if (key === "onEvent") {
      onEvent = value;
      if (value !== undefined) entries.push([key, typeof value]);
    } else if (value !== undefined) {
      entries.push([key, copy(value, path, 1, ancestors)]);
    }
  }
  // fromEntries defines own properties, so even a "__proto__" key stays data
  // (and reaches the core as an unknown option).
  return { json: Object.fromEntries(entries), onEvent };
}

/**
 * A JSON copy of `value` at `path`, or a `config` error naming the path.
 * @param {any} value
 * @param {string} path
 * @param {number} depth
 * @param {Set<unknown>} ancestors the objects `value` is inside (a cycle is one of them again)
 * @returns {unknown}
 */
function copy(value, path, depth, ancestors) {
  const what = guard(path, () => describe(value));
  if (what === "null" || what === "a string" || what === "a boolean") return value;
  if (what === "a number") {
    if (Number.isFinite(value)) return value;
    throw configError(path, `must be a finite number, got ${value}`);
  }
  if (what !== "an object" && what !== "an array") throw configError(path, `must be ${PLAIN}, got ${what}`);
  if (ancestors.has(value)) throw configError(path, "refers back to an object that contains it (a cycle)");
  if (depth > MAX_DEPTH) throw configError(path, `is nested more than ${MAX_DEPTH} levels deep`);
  ancestors.add(value);
  try {
    if (what === "an array") {
      const length = guard(path, () => value.length);
      const out = [];
      for (let i = 0; i < length; i++) {
        const p = `${path}[${i}]`;
        const item = guard(p, () => value[i]);
        // JSON has no undefined inside an array; a hole reads as undefined.
        if (item === undefined) throw configError(p, "is undefined (or a hole in a sparse array)");
        out.push(copy(item, p, depth + 1, ancestors));
      }
      return out;
    }
    /** @type {[string, unknown][]} */
    const entries = [];
    // An undefined property means "not set", as in the options' types.
    for (const [key, p, v] of ownEntries(value, path)) if (v !== undefined) entries.push([key, copy(v, p, depth + 1, ancestors)]);
    return Object.fromEntries(entries);
  } finally {
    ancestors.delete(value);
  }
}

/**
 * Each own enumerable string key of `obj` with its path and its value, read once.
 * @param {any} obj
 * @param {string} path
 * @returns {[string, string, unknown][]}
 */
function ownEntries(obj, path) {
  const keys = guard(path, () => Object.keys(obj));
  return keys.map((key) => {
    const p = join(path, key);
    return [key, p, guard(p, () => obj[key])];
  });
}

/**
 * What `v` is, for messages and for the copy ("an object" only for plain
 * objects). Throws for a revoked Proxy; callers go through guard().
 * @param {unknown} v
 */
function describe(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "undefined") return "undefined";
  if (typeof v !== "object") return `a ${typeof v}`;
  const proto = Object.getPrototypeOf(v);
  // A prototype that is a root (Object.prototype, also another realm's) or
  // none: a plain object. Anything else (Date, Map, Buffer, a class instance)
  // would lose its state or meaning as JSON.
  if (proto === null || Object.getPrototypeOf(proto) === null) return "an object";
  const name = typeof proto.constructor === "function" && proto.constructor.name ? proto.constructor.name : "non-plain object";
  return `${/^[aeiou]/i.test(name) ? "an" : "a"} ${name}`;
}

/**
 * Runs a read of the caller's value (a getter, a Proxy trap); a throw becomes
 * a `config` error for `path`, with what was thrown as its `cause`.
 * @template T
 * @param {string} path
 * @param {() => T} read
 * @returns {T}
 */
function guard(path, read) {
  try {
    return read();
  } catch (cause) {
    throw configError(path, "could not be read: a getter or Proxy trap threw (see the error's `cause`)", cause);
  }
}

/** `a.b`, `a[0]`, or `a["not an identifier"]`. */
function join(path, key) {
  if (!/^[A-Za-z_$][\w$]*$/.test(key)) return `${path}[${JSON.stringify(key)}]`;
  return path ? `${path}.${key}` : key;
}

/**
 * A `config` error in the core's wording: "option `path`: reason", or
 * "the options reason" for the whole object.
 * @param {string} path
 * @param {string} reason
 * @param {unknown} [cause]
 */
export function configError(path, reason, cause) {
  const message = path ? `option \`${path}\`: ${reason}` : `the options ${reason}`;
  return withCode(new Error(message, cause === undefined ? undefined : { cause }), "config");
}
