// agentSandboxProvider(options): a plain object satisfying the Rivet
// SandboxProvider contract. The addon's provider validates the options
// synchronously (a bad option throws here, with `code: "config"`) and builds
// its Kubernetes client on the first call, so constructing a provider never
// touches the network. Every sandbox call counts as activity for the
// `ttlSeconds` backstop inside the addon.

import { callNative, fromNative, invalidRequest } from "./errors.js";
import { native } from "./native.js";
import { configError, optionsToJson } from "./options.js";
import { OpenPorts } from "./ports.js";
import { wrapSandbox } from "./sandbox.js";
import { providerTracing } from "./tracing.js";

/**
 * @param {import("../index.js").AgentSandboxProviderOptions} options
 * @returns {import("../index.js").AgentSandboxProvider}
 */
export function agentSandboxProvider(options) {
  // Plain JSON only from here on (a value napi could not convert throws
  // `config` naming the option); `onEvent` goes in as its `typeof`, and the
  // function itself to the addon separately, as a weak callback.
  const { json, onEvent } = optionsToJson(options);
  // With @opentelemetry/api installed, calls are spans, and the addon's
  // events also go to the span of the call they belong to (js/tracing.js).
  const tracing = providerTracing(json);
  const listener = tracing ? tracing.listen(onEvent) : onEvent;
  const callback = typeof listener === "function" ? safeCallback(listener) : null;
  const provider = construct(json, callback);
  // Forwards and tunnels by actor and sandbox id, closed by suspend and
  // destroy. Only a connect the addon accepted (the id is the actor's)
  // records any, so an actor's suspend or destroy closes only what the same
  // actor opened: another actor's id finds nothing here, and the addon then
  // refuses it (`invalid_state`).
  const openPorts = new OpenPorts();
  const methods = {
    name: provider.name,
    cwd: provider.cwd,
    create: (c) => callNative(() => provider.create(actorId(c))),
    connect: (c, id) =>
      callNative(async () => {
        const actor = actorId(c);
        const sandbox = await provider.connect(actor, sandboxId(id));
        if (sandbox == null) return undefined;
        return wrapSandbox(sandbox, (thing) => openPorts.add(actor, id, thing));
      }),
    suspend: (c, id) =>
      callNative(async () => {
        const actor = actorId(c);
        openPorts.closeAll(actor, sandboxId(id));
        await provider.suspend(actor, id);
      }),
    destroy: (c, id) =>
      callNative(async () => {
        const actor = actorId(c);
        openPorts.closeAll(actor, sandboxId(id));
        await provider.destroy(actor, id);
      }),
    stats: () => provider.stats(),
  };
  return tracing ? tracing.wrap(methods) : methods;
}

/** `id` if it is a string (a malformed one is the addon's to judge), else `invalid_request`. */
function sandboxId(id) {
  if (typeof id !== "string") {
    throw invalidRequest(`the sandbox id must be a string (as create returned it), got ${describe(id)}; nothing was done`);
  }
  return id;
}

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : typeof value;
}

function construct(json, callback) {
  try {
    return new native.NativeProvider(json, callback);
  } catch (err) {
    const e = fromNative(err);
    if (/** @type {any} */ (e)?.code === "config") throw e;
    // The JSON is plain, so napi should convert all of it; should it still
    // fail, its text names no option and means nothing to the caller: still
    // a bad option, said without napi's words (the original is the `cause`).
    throw configError("", "could not be converted for the addon (see the error's `cause`)", err);
  }
}

function actorId(c) {
  return typeof c?.actorId === "string" ? c.actorId : "";
}

// A throwing listener must not take the process down (the addon calls it
// from a thread-safe function, where an exception would be fatal).
function safeCallback(onEvent) {
  return (event) => {
    try {
      onEvent(event);
    } catch (/** @type {any} */ err) {
      process.emitWarning(`agent-sandbox-provider: onEvent threw: ${err?.stack ?? err}`);
    }
  };
}
