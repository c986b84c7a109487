// agentSandboxProvider(options): a plain object satisfying the Rivet
// SandboxProvider contract. Options are validated synchronously by the addon
// (a bad option throws here, with `code: "config"`); the Kubernetes client is
// built lazily on the first call, so constructing a provider never touches the
// network.

import { callNative, fromNative } from "./errors.js";
import { native } from "./native.js";
import { wrapSandbox } from "./sandbox.js";

/**
 * @param {import("../index.js").AgentSandboxProviderOptions} options
 * @returns {import("../index.js").AgentSandboxProvider}
 */
export function agentSandboxProvider(options) {
  const { onEvent, ...rest } = isObject(options) ? options : {};
  // A function cannot cross into Rust as JSON: send its `typeof` so the addon
  // can validate it with the other options; the function itself goes to the
  // addon separately, as a weak callback. Non-objects go as they are, to be
  // rejected with the other option errors.
  const json = !isObject(options) ? (options ?? null) : onEvent === undefined ? rest : { ...rest, onEvent: typeof onEvent };
  const { name, cwd } = validate(json);
  const callback = typeof onEvent === "function" ? safeCallback(onEvent) : null;

  /** @type {Promise<any> | undefined} */
  let opening;
  // The native provider (client + exec engine), built on first use and shared
  // by every actor; a failed build is retried by the next call.
  const open = () => {
    opening ??= native.NativeProvider.open(json, callback).catch((err) => {
      opening = undefined;
      throw err;
    });
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
        return sandbox == null ? undefined : withActivity(wrapSandbox(sandbox), () => provider.touch(String(id)));
      }),
    suspend: (c, id) => callNative(async () => void (await (await open()).suspend(actorId(c), String(id)))),
    destroy: (c, id) => callNative(async () => void (await (await open()).destroy(actorId(c), String(id)))),
  };
}

function validate(json) {
  try {
    return native.validateOptions(json);
  } catch (err) {
    throw fromNative(err);
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

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
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
