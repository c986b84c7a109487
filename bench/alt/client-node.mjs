// The same operations written with @kubernetes/client-node's Exec, as a
// competent user would: WebSocket (v5 negotiated), the exit code from the
// status callback, stdin from a Readable in 64 KiB chunks, output into
// Writables.

import { CustomObjectsApi, Exec, KubeConfig, Watch } from "@kubernetes/client-node";
import { PassThrough, Readable, Writable } from "node:stream";
import { echoer } from "../lib/measure.mjs";

export async function open(t) {
  const kc = new KubeConfig();
  kc.loadFromDefault();
  const ex = new Exec(kc);
  const co = kc.makeApiClient(CustomObjectsApi);
  const CLAIMS = { group: "extensions.agents.x-k8s.io", version: "v1beta1", namespace: t.namespace, plural: "sandboxclaims" };

  /** Watches claim `name` from resource version `rv` until it is Ready; its Sandbox's name (= its pod's). */
  function readySandbox(name, rv) {
    return new Promise((resolve, reject) => {
      let req = null;
      let settled = false;
      const settle = (f, v) => {
        if (settled) return;
        settled = true;
        req?.abort();
        f(v);
      };
      const path = `/apis/${CLAIMS.group}/${CLAIMS.version}/namespaces/${t.namespace}/sandboxclaims`;
      new Watch(kc)
        .watch(path, { fieldSelector: `metadata.name=${name}`, resourceVersion: rv }, (_type, c) => {
          const ready = c.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True");
          if (ready && c.status.sandbox?.name) settle(resolve, c.status.sandbox.name);
        }, (err) => settle(reject, err ?? new Error(`watch of claim ${name} ended before it was Ready`)))
        .then((r) => (settled ? r.abort() : (req = r)), (e) => settle(reject, e));
    });
  }

  /** Runs argv; resolves { exitCode, stdout: Buffer[] } once the status arrives. */
  function run(argv, { stdin, onStdout, pod } = {}) {
    return new Promise((resolve, reject) => {
      const out = [];
      const err = [];
      const sink = (push) => new Writable({ write: (c, _e, cb) => (push(c), cb()) });
      let done = false;
      const onStatus = (s) => {
        done = true;
        const code = exitCode(s);
        if (code === null) reject(new Error(`${argv.join(" ")}: ${s.message}`));
        else resolve({ exitCode: code, stdout: out, stderr: Buffer.concat(err).toString() });
      };
      ex.exec(
        t.namespace, pod ?? t.pod, t.container, argv,
        sink(onStdout ?? ((c) => out.push(c))), sink((c) => err.push(c)),
        stdin ? Readable.from(chunks(stdin)) : null,
        false, onStatus,
      ).then((ws) => {
        ws.on("close", () => done || reject(new Error("connection closed without a status")));
        ws.on("error", (e) => done || reject(e));
      }, reject);
    });
  }
  const ok = (r) => {
    if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${r.stderr}`);
    return r;
  };

  return {
    exec: async (cmd) => Buffer.concat(ok(await run(["sh", "-c", cmd])).stdout).toString(),
    stream: async (bytes, onChunk) => {
      ok(await run(["head", "-c", String(bytes), "/dev/zero"], { onStdout: onChunk }));
    },
    writeFile: async (path, data) => {
      ok(await run(["sh", "-c", 'cat > "$1"', "sh", path], { stdin: data }));
    },
    readFile: async (path) => Buffer.concat(ok(await run(["cat", "--", path])).stdout),
    // A competent user's create → first exec: POST a claim of the warm pool,
    // watch it until Ready, exec in its pod.
    prepareClaims: () => co.listNamespacedCustomObject(CLAIMS),
    claimExec: async (name) => {
      const body = { apiVersion: `${CLAIMS.group}/${CLAIMS.version}`, kind: "SandboxClaim", metadata: { name }, spec: { warmPoolRef: { name: t.pool } } };
      const made = await co.createNamespacedCustomObject({ ...CLAIMS, body });
      const pod = await readySandbox(name, made.metadata.resourceVersion);
      ok(await run(["sh", "-c", "true"], { pod }));
      return name;
    },
    // Exec with tty=true, as client-node offers it: `cat` on the pod's TTY.
    terminal: () =>
      echoer(async (onData) => {
        const stdin = new PassThrough();
        const stdout = new Writable({ write: (c, _e, cb) => (onData(c), cb()) });
        const ws = await ex.exec(t.namespace, t.pod, t.container, ["cat"], stdout, null, stdin, true);
        return { write: (key) => void stdin.write(key), close: () => ws.close() };
      }),
  };
}

function exitCode(s) {
  if (s.status === "Success") return 0;
  const cause = s.reason === "NonZeroExitCode" && s.details?.causes?.find((c) => c.reason === "ExitCode");
  return cause ? Number(cause.message) : null;
}

function* chunks(buf, size = 64 * 1024) {
  for (let off = 0; off < buf.length; off += size) yield buf.subarray(off, off + size);
}
