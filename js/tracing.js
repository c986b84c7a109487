// OpenTelemetry spans for the calls of a provider, its sandboxes and their
// background processes, through the optional peer dependency
// `@opentelemetry/api`. It is looked up once, when the first provider is
// made; without it nothing is wrapped, so calls cost what they did. With it
// but no SDK registered, the API hands out non-recording spans and the
// attribute functions below are skipped.
//
// Span names: `sandbox.provider.<method>`, `sandbox.<method>` and
// `sandbox.process.<method>`, after the object the caller calls; each span
// is a child of the caller's active context. Attributes are ids, counts,
// exit and error codes, as AGENT_SANDBOX_LOG's lines are: never a command,
// a path, file content, an env value or a credential, since what a model
// passes may carry a secret. docs/api.md#tracing lists them.

import { Buffer } from "node:buffer";
import { createRequire } from "node:module";
import { setImmediate } from "node:timers/promises";

const require = createRequire(import.meta.url);
const { name: NAME, version: VERSION } = require("../package.json");

/** @type {any} `@opentelemetry/api`: null when it cannot be loaded, undefined until first looked up */
let api;

/** The API module, or null: loaded synchronously (so the provider stays synchronous to make), once. */
function otel() {
  if (api === undefined) {
    try {
      // The CommonJS build is fine next to an application's ESM import: the
      // API keeps its registered providers on a process-wide global.
      api = require("@opentelemetry/api");
    } catch {
      api = null; // not installed: tracing is off, silently
    }
  }
  return api;
}

/**
 * @typedef {Record<string, string | number | boolean>} Attributes
 * @typedef {object} Call what one traced method's span records (all optional)
 * @property {(...args: any[]) => Record<string, unknown>} [args] attributes from the arguments,
 *   before the call (null and undefined ones are left out)
 * @property {(result: any, args: any[]) => Record<string, unknown>} [result] attributes from what it resolved
 * @property {(result: any, args: any[], base: Attributes) => any} [wrap] what the caller gets
 *   instead of `result` (a traced sandbox or process)
 * @property {boolean} [events] the addon's lifecycle events of this call become span events
 */

/** @type {Record<string, Call>} */
const PROCESS = {
  poll: {},
  follow: { result: exitAttributes },
  wait: { result: exitAttributes },
  writeStdin: { args: (data) => ({ "sandbox.stdin.bytes": byteLength(data) }) },
  closeStdin: {},
  // A signal name ("TERM", "SIGUSR1"), and nothing else the caller might have put there.
  kill: { args: (signal) => ({ "sandbox.process.signal": typeof signal === "string" && /^[A-Z0-9+-]{1,12}$/i.test(signal) ? signal : undefined }) },
};

const processAttributes = (/** @type {any} */ p) => (p ? { "sandbox.process.id": p.id, "process.pid": p.pid } : {});
/** A SandboxProcess whose calls are spans, with its sandbox's attributes and its own. */
const traceProcess = (/** @type {any} */ p, /** @type {Attributes} */ base) =>
  traced(p, "sandbox.process", { ...base, "sandbox.process.id": p.id, "process.pid": p.pid }, PROCESS);

/**
 * The sandbox's calls. `url` is not here: it is synchronous and sends nothing.
 * @type {Record<string, Call>}
 */
const SANDBOX = {
  exec: {
    args: (command) => ({ "sandbox.exec.command_bytes": byteLength(command) }),
    result: (r) => ({
      ...exitAttributes(r),
      "sandbox.exec.stdout_bytes": byteLength(r.stdout),
      "sandbox.exec.stderr_bytes": byteLength(r.stderr),
      "sandbox.exec.truncated": r.truncated,
    }),
  },
  terminal: {},
  spawn: { result: processAttributes, wrap: (p, _, base) => traceProcess(p, base) },
  // The id as the sandbox knows it, not as the caller wrote it.
  process: { result: processAttributes, wrap: (p, _, base) => p && traceProcess(p, base) },
  processes: { result: (list) => ({ "sandbox.process.count": list.length }) },
  readFile: { result: (bytes) => ({ "sandbox.file.bytes": bytes.byteLength }) },
  writeFile: { args: (_path, content) => ({ "sandbox.file.bytes": byteLength(content) }) },
  mkdir: {},
  stat: {},
  readdir: {},
  readdirBytes: {},
  exists: {},
  remove: {},
  usage: {},
  // upload, and download with `to`, resolve counts; a download stream's span ends once it opened.
  upload: { result: transferAttributes },
  download: { result: transferAttributes },
  listeningPorts: {},
  forward: { args: (port) => portAttributes(port) },
  // The span ends at the response head; the body streams after it.
  fetch: { args: (port) => portAttributes(port), result: (response) => ({ "http.response.status_code": response.status }) },
};

/**
 * Lifecycle calls `(c, id)`; their events are the addon's `onEvent` events for the same actor and id.
 * @type {Record<string, Call>}
 */
const PROVIDER = {
  create: { events: true, result: (id) => idAttributes(id) },
  connect: {
    events: true,
    args: (_c, id) => idAttributes(id),
    wrap: (sandbox, [, id], base) => sandbox && traced(sandbox, "sandbox", { ...base, ...idAttributes(id) }, SANDBOX),
  },
  suspend: { events: true, args: (_c, id) => idAttributes(id) },
  destroy: { events: true, args: (_c, id) => idAttributes(id) },
};

/**
 * Tracing for one provider, or null when `@opentelemetry/api` is not installed.
 * `listen(onEvent)` is the event callback to give the addon (it also calls the
 * user's `onEvent`); `wrap(provider)` returns the provider with traced methods.
 * @param {{ warmPool?: unknown }} options
 */
export function providerTracing(options) {
  if (!otel()) return null;
  /** Lifecycle calls in flight: their span, actor and sandbox id (none yet for create). */
  const inFlight = new Set();
  /** @param {any} e */
  const route = (e) => {
    for (const call of inFlight) {
      if (call.actor !== e.actorId || (call.id !== undefined && call.id !== e.id)) continue;
      call.span.addEvent(
        e.type,
        defined({ "sandbox.event.elapsed_ms": e.elapsedMs, "k8s.pod.name": e.sandbox, "k8s.node.name": e.node, "sandbox.event.message": e.message }),
      );
    }
  };
  const base = { "sandbox.mode": options.warmPool !== undefined ? "warm_pool" : "direct" };
  return {
    /** @param {unknown} onEvent */
    listen: (onEvent) => (/** @type {any} */ e) => {
      route(e);
      if (typeof onEvent === "function") onEvent(e);
    },
    /**
     * @template T
     * @param {T} provider
     * @returns {T}
     */
    wrap: (provider) =>
      traced(provider, "sandbox.provider", base, PROVIDER, (span, [c, id]) => {
        const call = { span, actor: typeof c?.actorId === "string" ? c.actorId : "", id: typeof id === "string" ? id : undefined };
        inFlight.add(call);
        return () => inFlight.delete(call);
      }),
  };
}

/**
 * A copy of `target` whose methods named in `calls` each run in a span
 * `<prefix>.<method>`, the active one while it runs (so it parents what the
 * call itself traces, and is the child of the caller's).
 * @template T
 * @param {T} target
 * @param {string} prefix
 * @param {Attributes} base attributes of every span
 * @param {Record<string, Call>} calls
 * @param {(span: any, args: any[]) => () => void} [follow] starts routing events to the span; returns what stops it
 * @returns {T}
 */
function traced(target, prefix, base, calls, follow) {
  const { trace, SpanKind, SpanStatusCode } = api;
  const out = /** @type {any} */ ({ ...target });
  for (const [method, call] of Object.entries(calls)) {
    const original = out[method];
    if (typeof original !== "function") continue;
    const name = `${prefix}.${method}`;
    out[method] = function (/** @type {any[]} */ ...args) {
      // Looked up per call, not kept: a provider registered (or replaced) later is used.
      const tracer = trace.getTracer(NAME, VERSION);
      return tracer.startActiveSpan(name, { kind: SpanKind.CLIENT, attributes: base }, async (/** @type {any} */ span) => {
        const recording = span.isRecording();
        const unfollow = recording && call.events && follow ? follow(span, args) : undefined;
        try {
          if (recording && call.args) span.setAttributes(defined(call.args(...args)));
          const result = await original.apply(this, args);
          if (recording && call.result) span.setAttributes(defined(call.result(result, args)));
          // Success leaves the status unset: OK is the application's to
          // set, as OpenTelemetry's conventions ask of libraries.
          return call.wrap ? call.wrap(result, args, base) : result;
        } catch (err) {
          const type = errorType(err);
          span.setAttribute("error.type", type);
          span.setStatus({ code: SpanStatusCode.ERROR, message: type });
          throw err;
        } finally {
          if (unfollow) {
            // The addon's events and its result come back on separate queues:
            // one turn of the event loop lets those sent before the result in.
            await setImmediate();
            unfollow();
          }
          span.end();
        }
      });
    };
  }
  return out;
}

/** The documented `code` of our errors; else the error's name (a caller's callback threw it). */
function errorType(/** @type {any} */ err) {
  if (typeof err?.code === "string") return err.code;
  return typeof err?.name === "string" ? err.name : "_OTHER";
}

/**
 * `sandbox.id` and `k8s.namespace.name` of an id `namespace/name`.
 * @param {unknown} id
 * @returns {Attributes}
 */
function idAttributes(id) {
  if (typeof id !== "string") return {};
  const slash = id.indexOf("/");
  return slash > 0 ? { "sandbox.id": id, "k8s.namespace.name": id.slice(0, slash) } : { "sandbox.id": id };
}

/** An exit `{ exitCode, signal, timedOut }` (exec's result, a process's). */
function exitAttributes(/** @type {any} */ r) {
  return { "process.exit.code": r.exitCode, "sandbox.process.signal": r.signal, "sandbox.timed_out": r.timedOut };
}

/** `server.port`: only a number (the call checks it after; a caller's string is not recorded). */
function portAttributes(/** @type {unknown} */ port) {
  return { "server.port": typeof port === "number" ? port : undefined };
}

function transferAttributes(/** @type {any} */ r) {
  return typeof r?.bytes === "number" ? { "sandbox.transfer.bytes": r.bytes, "sandbox.transfer.files": r.files } : {};
}

/** Bytes of a string (as UTF-8) or a Uint8Array; undefined for anything else. */
function byteLength(/** @type {unknown} */ v) {
  if (typeof v === "string") return Buffer.byteLength(v);
  return v instanceof Uint8Array ? v.byteLength : undefined;
}

/** `attributes` without null and undefined values, which are not attribute values. */
function defined(/** @type {Record<string, unknown>} */ attributes) {
  return /** @type {Attributes} */ (Object.fromEntries(Object.entries(attributes).filter(([, v]) => v != null)));
}
