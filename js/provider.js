// agentSandboxProvider(options): a plain object satisfying the Rivet
// SandboxProvider contract. Options are validated synchronously by the addon
// (a bad option throws here, with `code: "config"`); the Kubernetes client is
// built lazily on the first call, so constructing a provider never touches the
// network.

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
  const { name, cwd } = validate(json);
  const callback = typeof onEvent === "function" ? safeCallback(onEvent) : null;

  // Forwards and tunnels by sandbox id, closed by suspend and destroy.
  const openPorts = new OpenPorts();
  /** @type {Promise<any> | undefined} */
  let opening;
  /** @type {any} */
  let opened;
  // The native provider (client + exec engine), built on first use and shared
  // by every actor; a failed build is retried by the next call.
  const open = () => {
    opening ??= native.NativeProvider.open(json, callback).then(
      (provider) => (opened = provider),
      (err) => {
        opening = undefined;
        throw err;
      },
    );
    return opening;
  };

  return {
    name,
    cwd,
    create: (c) => callNative(async () => (await open()).create(actorId(c))),
    connect: (c, id) =>
      callNative(async () => {
        const provider = await open();
        const sandbox = await provider.connect(actorId(c), String(id));
        if (sandbox == null) return undefined;
        const wrapped = wrapSandbox(sandbox, (thing) => openPorts.add(String(id), thing));
        return withActivity(wrapped, () => provider.touch(String(id)));
      }),
    suspend: (c, id) =>
      callNative(async () => {
        openPorts.closeAll(String(id));
        await (await open()).suspend(actorId(c), String(id));
      }),
    destroy: (c, id) =>
      callNative(async () => {
        openPorts.closeAll(String(id));
        await (await open()).destroy(actorId(c), String(id));
      }),
    stats: () => opened?.stats() ?? { requests: {}, watches: 0, failing: 0, lists: 0 },
  };
}

function validate(json) {
  try {
    return native.validateOptions(json);
  } catch (err) {
    const e = fromNative(err);
    if (/** @type {any} */ (e)?.code === "config") throw e;
    // The JSON is plain, so napi should convert all of it; should it still
    // fail, its text names no option and means nothing to the caller: still
    // a bad option, said without napi's words (the original is the `cause`).
    throw configError("", "could not be converted for the addon (see the error's `cause`)", err);
  }
}

// Each exec and spawn counts as activity for the `ttlSeconds` backstop (the
// addon throttles the resulting patches to about one a minute per sandbox).
function withActivity(sandbox, touch) {
  for (const name of ["exec", "spawn"]) {
    const call = sandbox[name];
    sandbox[name] = (...args) => {
      touch();
      return call.apply(sandbox, args);
    };
  }
  return sandbox;
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
