// agentSandboxProvider(options): a plain object satisfying the Rivet
// SandboxProvider contract. The addon's provider validates the options
// synchronously (a bad option throws here, with `code: "config"`) and builds
// its Kubernetes client on the first call, so constructing a provider never
// touches the network. Every sandbox call counts as activity for the
// `ttlSeconds` backstop inside the addon.

import { callNative, fromNative } from "./errors.js";
import { native } from "./native.js";
import { configError, optionsToJson } from "./options.js";
import { OpenPorts } from "./ports.js";
import { wrapSandbox } from "./sandbox.js";

/**
 * @param {import("../index.js").AgentSandboxProviderOptions} options
 * @returns {import("../index.js").AgentSandboxProvider}
 */
export function agentSandboxProvider(options) {
  // Plain JSON only from here on (a value napi could not convert throws
  // `config` naming the option); `onEvent` goes in as its `typeof`, and the
  // function itself to the addon separately, as a weak callback.
  const { json, onEvent } = optionsToJson(options);
  const callback = typeof onEvent === "function" ? safeCallback(onEvent) : null;
  const provider = construct(json, callback);
  // Forwards and tunnels by sandbox id, closed by suspend and destroy.
  const openPorts = new OpenPorts();
  return {
    name: provider.name,
    cwd: provider.cwd,
    create: (c) => callNative(() => provider.create(actorId(c))),
    connect: (c, id) =>
      callNative(async () => {
        const sandbox = await provider.connect(actorId(c), String(id));
        if (sandbox == null) return undefined;
        return wrapSandbox(sandbox, (thing) => openPorts.add(String(id), thing));
      }),
    suspend: (c, id) =>
      callNative(async () => {
        openPorts.closeAll(String(id));
        await provider.suspend(actorId(c), String(id));
      }),
    destroy: (c, id) =>
      callNative(async () => {
        openPorts.closeAll(String(id));
        await provider.destroy(actorId(c), String(id));
      }),
    stats: () => provider.stats(),
  };
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
