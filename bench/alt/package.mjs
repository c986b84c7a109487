// This package: exec and files through agentSandboxProvider().connect().
// The addon is the release build that bench/run.mjs points
// NAPI_RS_NATIVE_LIBRARY_PATH at.

import { agentSandboxProvider } from "../../index.js";
import { echoer } from "../lib/measure.mjs";

/** Provider options of a measurement: defaults, plus the target's own. */
export function providerOptions(t) {
  // 64 concurrent execs are measured: lift the default caps (32, 8 per
  // sandbox) so the figure is the path's, not the caps' (unless t.defaultCaps).
  const caps = t.defaultCaps ? {} : { maxConcurrentExecs: 64, maxConcurrentExecsPerSandbox: 64 };
  return { warmPool: t.pool, namespace: t.namespace, ...caps, ...t.options };
}

export async function open(t) {
  const p = agentSandboxProvider(providerOptions(t));
  const sb = await p.connect({ actorId: t.actorId, client() {} }, t.id);
  if (!sb) throw new Error(`sandbox ${t.id} not found`);
  const ok = (r) => {
    if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${r.stderr}`);
    return r;
  };
  return {
    exec: async (cmd) => ok(await sb.exec(cmd, { cwd: "/" })).stdout,
    // Streaming to a callback: keep (almost) nothing in the result.
    stream: async (bytes, onChunk) => {
      ok(await sb.exec(`head -c ${bytes} /dev/zero`, { cwd: "/", onData: onChunk, maxOutputBytes: 1024 }));
    },
    writeFile: (path, data) => sb.writeFile(path, data),
    readFile: (path) => sb.readFile(path, { maxBytes: 1 << 30 }),
    readRange: (path, offset, length) => sb.readFile(path, { offset, length, maxBytes: length }),
    usage: () => sb.usage(),
    /** create (a claim of the target's warm pool) + connect → `true` done; the claim's name. */
    claimExec: async (name) => {
      const c = { actorId: name, client() {} };
      const id = await p.create(c);
      const fresh = await p.connect(c, id);
      ok(await fresh.exec("true", { cwd: "/" }));
      return id.split("/")[1];
    },
    terminal: () => echoer(async (onData) => {
      const t = await sb.terminal({ command: "cat", cwd: "/", onData });
      return { write: (key) => t.write(key), close: () => t.close() };
    }),
    // Package-only operations (background processes).
    execReattach: async (cmd) => ok(await sb.exec(cmd, { cwd: "/", reattach: true })).stdout,
    /** spawn → the first chunk of its output reaches onOutput. */
    spawnFirstOutput: async () => {
      const proc = await sb.spawn("echo ready", { cwd: "/" });
      const first = new AbortController();
      await proc.follow({ signal: first.signal, onOutput: () => first.abort() }).catch((e) => {
        if (e.name !== "AbortError") throw e;
      });
    },
    /** spawn, then poll until the exit is in: the RemoteProcess loop without its 100 ms sleeps. */
    spawnPolled: async () => {
      const proc = await sb.spawn("echo ready", { cwd: "/" });
      while (!(await proc.poll()).exit);
    },
  };
}
