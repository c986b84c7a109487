// Type-level test (`tsc -p __test__/tsconfig.json`): the package's types
// satisfy the @rivet-dev/sandbox-adapter contract. That package is not on the
// registry here: its interfaces come from the stand-in package
// (stand-in-sandbox-adapter/index.d.ts, exactly as in
// sandbox-adapter-interface.md §2, lineage A, rivet-dev/agents).

import {
  agentSandboxProvider,
  ErrorCode,
  type AgentSandboxProvider,
  type SandboxError,
  type SandboxEvent,
  type TransferTotals,
  type SandboxTerminal,
  type TerminalExit,
  type ServiceUrl,
} from "@rivet-dev/sandbox-adapter-kubernetes";

import type {
  Sandbox,
  SandboxActorContext,
  SandboxExecResult,
  SandboxProvider,
} from "./stand-in-sandbox-adapter/index.js";

/** The newest runtime also reads a static `cwd` (interface doc §3.5). */
type SandboxProviderWithCwd = SandboxProvider & { readonly cwd?: string };

// Both modes produce a provider that satisfies the contract.
const warm: SandboxProviderWithCwd = agentSandboxProvider({
  warmPool: "pool-workspace",
  claim: { labels: { team: "a" }, env: { A: "1" }, shutdownAfterSeconds: 60 },
  ttlSeconds: 600,
  onEvent: (e: SandboxEvent) => void e.elapsedMs,
});
const direct: SandboxProvider = agentSandboxProvider({
  sandbox: { image: "busybox", resources: { cpu: "500m", memory: "1Gi" }, volume: { size: "10Gi" }, securityProfile: "baseline" },
  kubeConfig: { server: "https://k8s:6443", tokenFile: "/var/run/token" },
  suspend: "pod",
  transfers: { localRoot: "/srv/agent-files", maxBytes: 1 << 28, maxEntries: 10_000 },
});
const full: AgentSandboxProvider = agentSandboxProvider({ warmPool: "p", kubeConfig: "/path/kubeconfig" });

// A connected sandbox is the adapter's Sandbox.
async function use(p: AgentSandboxProvider, c: SandboxActorContext): Promise<Sandbox | undefined> {
  const s = await p.connect(c, await p.create(c));
  if (s) {
    const r: SandboxExecResult = await s.exec("ls", { cwd: s.cwd });
    const bytes = await s.exec("ls", { encoding: "buffer" });
    const b: Buffer = bytes.stdout;
    void r, b;
  }
  return s;
}
void warm, direct, full, use;

// Misuse is a type error.
// @ts-expect-error exactly one mode: not both
agentSandboxProvider({ warmPool: "p", sandbox: { image: "i" } });
// @ts-expect-error exactly one mode: not none
agentSandboxProvider({ namespace: "n" });
// @ts-expect-error claim options only in warm-pool mode
agentSandboxProvider({ sandbox: { image: "i" }, claim: {} });
// @ts-expect-error suspend is "pod" or "none"
agentSandboxProvider({ warmPool: "p", suspend: "pause" });
// @ts-expect-error direct mode needs an image
agentSandboxProvider({ sandbox: {} });
// @ts-expect-error securityProfile is "restricted" or "baseline"
agentSandboxProvider({ sandbox: { image: "i", securityProfile: "privileged" }, suspend: "none" });

// A SandboxProcess is the sandbox-adapter's RemoteProcess (remote-process.ts,
// interface doc §2.1), so its `runRemoteProcess` can drive it.
interface RemoteOutputChunk {
  sequence: number;
  stream: "stdout" | "stderr";
  data: Uint8Array;
}
interface RemoteProcessPoll {
  chunks: RemoteOutputChunk[];
  exit?: { exitCode: number | null; timedOut: boolean };
}
interface RemoteProcess {
  poll(after: number | undefined): Promise<RemoteProcessPoll>;
  kill(): Promise<void>;
}
async function processes(p: AgentSandboxProvider, c: SandboxActorContext): Promise<RemoteProcess | undefined> {
  const s = await p.connect(c, "ns/x");
  if (!s) return undefined;
  const proc = await s.spawn("npm run dev", { cwd: "/workspace", stdin: true, timeoutMs: 60_000 });
  const end = await proc.follow({ after: 0, onOutput: (chunk) => void chunk.sequence, signal: AbortSignal.timeout(10) });
  const t: boolean = end.truncated;
  const again = await s.process(proc.id);
  const list = await s.processes();
  const r = await s.exec("make", { reattach: true });
  void t, again, list, r;
  // @ts-expect-error kill takes a signal name
  await proc.kill(9);
  // @ts-expect-error stdin is bytes, a string or true
  await s.spawn("cat", { stdin: false });
  return proc;
}
void processes;

// Transfers: a Readable without `to`, totals with it; sources of three kinds.
async function transfers(p: AgentSandboxProvider, c: SandboxActorContext): Promise<void> {
  const s = await p.connect(c, "ns/x");
  if (!s) return;
  const tar: import("node:stream").Readable = await s.download("/workspace", { exclude: ["node_modules"], maxBytes: 1 << 30 });
  const into: TransferTotals = await s.download("/workspace/coverage", { to: "./coverage", overwrite: true, signal: AbortSignal.timeout(1000) });
  const fromDir: TransferTotals = await s.upload("./repo", "/workspace", { overwrite: false, maxEntries: 10 });
  const fromBytes = await s.upload(new Uint8Array(1024), "/workspace");
  const fromStream = await s.upload(tar, "/copy");
  const n: number = fromBytes.files + fromStream.bytes + fromDir.directories + into.bytes;
  void n;
  // @ts-expect-error exclude is a list of patterns
  await s.download("/w", { exclude: "node_modules" });
  // @ts-expect-error a source is a path, bytes or an iterable of bytes
  await s.upload(42, "/w");
}
void transfers;
// usage(): limits are number | null, the sample and disk figures optional.
async function usage(p: AgentSandboxProvider, c: SandboxActorContext): Promise<number | undefined> {
  const s = await p.connect(c, "ns/x");
  if (!s) return undefined;
  const u = await s.usage({ sampleMs: 1000, signal: AbortSignal.timeout(5000) });
  const source: "cgroup2" | "cgroup1" = u.source;
  const limit: number | null = u.memoryLimitBytes;
  const cores: number | null = u.cpuLimitCores;
  const pids: number | null = u.pidsLimit;
  const pct: number | undefined = u.cpuPercent;
  const disk: number | undefined = u.diskBytes;
  void source, limit, cores, pids, pct, disk, (await s.usage()).oomKills;
  // @ts-expect-error a limit may be null
  const always: number = u.memoryLimitBytes;
  // @ts-expect-error sampleMs is a number of milliseconds
  await s.usage({ sampleMs: "1000" });
  void always;
  return u.memoryWorkingSetBytes + u.cpuSeconds;
}
void usage;
// A terminal: write, resize, kill, close, wait; onData is required.
async function terminals(p: AgentSandboxProvider, c: SandboxActorContext): Promise<number | null> {
  const s = await p.connect(c, "ns/x");
  if (!s) return null;
  const t: SandboxTerminal = await s.terminal({ cols: 120, rows: 40, onData: (chunk: Uint8Array) => void chunk.byteLength, signal: AbortSignal.timeout(10) });
  const pid: number = t.pid;
  await t.write("ls\r");
  await t.write(new Uint8Array([3]));
  await t.resize(100, 30);
  await t.kill();
  await t.kill("INT");
  await t.close();
  const exit: TerminalExit = await t.wait();
  const code: number | null = exit.exitCode;
  const timedOut: boolean = exit.timedOut;
  await s.terminal({ command: "vi", cwd: "/workspace", env: { TERM: "xterm" }, timeoutMs: 1000, onData() {} });
  // @ts-expect-error onData is required
  await s.terminal({ cols: 80 });
  // @ts-expect-error resize takes columns and rows
  await t.resize(80);
  void pid, timedOut;
  return code;
}
void terminals;

// ErrorCode is both the object of codes by name and their union type.
function isMissing(err: SandboxError): boolean {
  const code: ErrorCode = ErrorCode.NotFound;
  // @ts-expect-error not a code
  const wrong: ErrorCode = "not-found";
  void wrong;
  return err.code === code;
}
void isMissing;

// Ports: a dev server awaited, fetched and forwarded.
async function ports(p: AgentSandboxProvider, c: SandboxActorContext): Promise<number> {
  const s = await p.connect(c, "id");
  if (!s) return 0;
  const open: boolean = (await s.listeningPorts()).some((x) => x.port === 3000 && x.family === "IPv4" && !x.loopbackOnly);
  const r: Response = await s.fetch(3000, "/health", { method: "POST", body: "{}", signal: AbortSignal.timeout(1000) });
  const f = await s.forward(3000, { localPort: 8080, host: "::1", verify: false, onError: (e) => void e.code });
  const n: number = f.connections + f.localPort;
  const u: string = f.url;
  await f.close();
  await f.closed;
  const { url, host, port }: ServiceUrl = s.url(3000);
  void [url, host, port];
  // @ts-expect-error url is synchronous
  await s.url(3000).then(() => 0);
  // @ts-expect-error ports are numbers
  await s.fetch("3000", "/");
  // @ts-expect-error verify is a boolean
  await s.forward(3000, { verify: "yes" });
  return open && r.ok ? n + u.length : 0;
}
void ports;
