// The same operations with `kubectl exec` (one kubectl process each; files go
// through local files as a shell user would: `kubectl exec -i … < file`,
// `kubectl exec … cat > file`). kubectl's own peak RSS and CPU time are
// sampled from /proc and added to this Node process's.

import { spawn } from "node:child_process";
import { mkdtempSync, openSync, closeSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpuMsOf, statusKb } from "../lib/measure.mjs";

export async function open(t) {
  const kubectl = process.env.SANDBOX_TEST_KUBECTL || "kubectl";
  const dir = mkdtempSync(join(tmpdir(), "bench-kubectl-"));
  let basePeakKb = 0;
  let last = { peakKb: 0, cpuMs: 0 }; // of the last kubectl run, sampled from /proc

  /** Runs kubectl exec; stdin/stdout are "pipe" or file descriptors. */
  function run(argv, { stdin = "ignore", stdout = "pipe", onStdout, pod = t.pod } = {}) {
    return kubectlRun(["exec", "-n", t.namespace, pod, "-c", t.container, ...(stdin === "ignore" ? [] : ["-i"]), "--", ...argv], { stdin, stdout, onStdout });
  }
  /** Runs kubectl ARGV; stdin/stdout are "pipe" or file descriptors, or `input` is written to its stdin. */
  function kubectlRun(argv, { stdin = "ignore", stdout = "pipe", onStdout, input } = {}) {
    return new Promise((resolve, reject) => {
      const child = spawn(kubectl, argv, { stdio: [input == null ? stdin : "pipe", stdout, "pipe"] });
      if (input != null) child.stdin.end(input);
      const seen = { peakKb: 0, cpuMs: 0 };
      const sample = () => {
        seen.peakKb = Math.max(seen.peakKb, statusKb("VmHWM", child.pid));
        seen.cpuMs = Math.max(seen.cpuMs, cpuMsOf(child.pid));
      };
      const timer = setInterval(sample, 5);
      const out = [];
      const err = [];
      child.stdout?.on("data", onStdout ?? ((c) => out.push(c)));
      child.stderr.on("data", (c) => err.push(c));
      child.on("error", reject);
      child.on("close", (code) => {
        clearInterval(timer);
        last = seen;
        if (code === 0) resolve(Buffer.concat(out));
        else reject(new Error(`kubectl exited ${code}: ${Buffer.concat(err)}`));
      });
    });
  }
  const withFd = async (path, flags, fn) => {
    const fd = openSync(path, flags);
    try {
      return await fn(fd);
    } finally {
      closeSync(fd);
    }
  };

  await run(["true"]);
  basePeakKb = last.peakKb; // kubectl's own footprint, to turn peaks into growth

  return {
    exec: async (cmd) => (await run(["sh", "-c", cmd])).toString(),
    stream: (bytes, onChunk) => run(["head", "-c", String(bytes), "/dev/zero"], { onStdout: onChunk }),
    // The local file is written before the clock starts (prepareWrite).
    prepareWrite: (data) => {
      const file = join(dir, "upload.bin");
      writeFileSync(file, data);
      return file;
    },
    writeFile: (path, file) => withFd(file, "r", (fd) => run(["sh", "-c", 'cat > "$1"', "sh", path], { stdin: fd })),
    readFile: async (path) => {
      const file = join(dir, "download.bin");
      await withFd(file, "w", (fd) => run(["cat", "--", path], { stdout: fd }));
      const { size } = statSync(file);
      rmSync(file);
      return { length: size };
    },
    // A shell user's create → first exec: create the claim, wait for Ready,
    // read its Sandbox's name, exec there (four kubectl processes).
    prepareClaims: () => kubectlRun(["get", "sandboxclaims", "-n", t.namespace, "-o", "name"]), // discovery cache
    claimExec: async (name) => {
      const claim = { apiVersion: "extensions.agents.x-k8s.io/v1beta1", kind: "SandboxClaim", metadata: { name }, spec: { warmPoolRef: { name: t.pool } } };
      await kubectlRun(["create", "-n", t.namespace, "-f", "-"], { input: JSON.stringify(claim) });
      await kubectlRun(["wait", "-n", t.namespace, "--for=condition=Ready", `sandboxclaim/${name}`, "--timeout=120s"]);
      const pod = (await kubectlRun(["get", "-n", t.namespace, `sandboxclaim/${name}`, "-o", "jsonpath={.status.sandbox.name}"])).toString();
      await run(["sh", "-c", "true"], { pod });
      return name;
    },
    helper: { peakKb: () => Math.max(0, last.peakKb - basePeakKb), cpuMs: () => last.cpuMs },
    close: () => rmSync(dir, { recursive: true, force: true }),
  };
}
