// The adapter's contract, as in sandbox-adapter-interface.md §2 (lineage A,
// rivet-dev/agents packages/sandbox-adapter).

export interface SandboxActorContext {
  readonly actorId: string;
  client(): unknown;
}
export interface SandboxExecOptions {
  cwd: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
  onData?: (chunk: Uint8Array) => void;
}
export interface SandboxExecResult {
  exitCode: number | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
}
export interface Sandbox {
  readonly cwd: string;
  exec(command: string, options: SandboxExecOptions): Promise<SandboxExecResult>;
  readFile(path: string): Promise<Uint8Array>;
  writeFile(path: string, content: string): Promise<void>;
  mkdir(path: string): Promise<void>;
  stat(path: string): Promise<{ isDirectory: boolean }>;
  readdir(path: string): Promise<string[]>;
  exists(path: string): Promise<boolean>;
}
export interface SandboxProvider {
  readonly name: string;
  create(c: SandboxActorContext): Promise<string>;
  connect(c: SandboxActorContext, id: string): Promise<Sandbox | undefined>;
  suspend?(c: SandboxActorContext, id: string): Promise<void>;
  destroy?(c: SandboxActorContext, id: string): Promise<void>;
}
