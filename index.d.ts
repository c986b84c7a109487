/// <reference types="node" />
// Types of @rivet-dev/sandbox-adapter-kubernetes: a Rivet sandbox provider (the
// `SandboxProvider` contract of @rivet-dev/sandbox-adapter) that runs each
// actor's sandbox on Kubernetes with kubernetes-sigs/agent-sandbox v1beta1.

/** The part of Rivet's actor context the provider uses. */
export interface ActorContext {
  /** The owning actor; the sandbox's object name is derived from it. */
  readonly actorId: string;
}

/**
 * Builds a provider. All options are validated here, synchronously: a bad
 * value throws an `Error` with `code: "config"` naming the option. No
 * Kubernetes call is made until the first method call.
 *
 * Give exactly one of `warmPool` (claim pre-warmed sandboxes) and `sandbox`
 * (create Sandboxes directly).
 */
export function agentSandboxProvider(options: AgentSandboxProviderOptions): AgentSandboxProvider;

/** The provider object: plain, stateless per actor, shareable by every actor. */
export interface AgentSandboxProvider {
  /** The provider name Rivet persists next to the id (option `name`). */
  readonly name: string;
  /** The sandbox working directory (option `cwd`). */
  readonly cwd: string;
  /**
   * Starts provisioning the actor's sandbox and resolves to its id
   * (`namespace/name`) without waiting for readiness. Idempotent per actor:
   * a retry finds the object made before. In warm-pool mode, first checks the
   * pool (and, with `suspend: "pod"`, that its template keeps `cwd` on a
   * persistent volume; otherwise rejects with `code: "config"`).
   */
  create(c: ActorContext): Promise<string>;
  /**
   * Waits until the sandbox is ready (resuming it if suspended) and returns
   * it. Resolves `undefined` only when the sandbox no longer exists or `id`
   * cannot name one of this provider's (malformed, another namespace); rejects
   * on anything else (API server unreachable: `unavailable`; RBAC:
   * `forbidden`; pod cannot start: `sandbox_failed`; not ready within
   * `readyTimeoutMs`: `timeout`).
   */
  connect(c: ActorContext, id: string): Promise<Sandbox | undefined>;
  /**
   * `suspend: "pod"`: deletes the pod (only the volume at `cwd` survives) and
   * waits until it is gone. `suspend: "none"`: keeps it running (only the TTL
   * restarts). A sandbox that no longer exists needs no suspending.
   */
  suspend(c: ActorContext, id: string): Promise<void>;
  /** Deletes the sandbox and waits until its Sandbox, pod, Service and PVCs are gone. Idempotent. */
  destroy(c: ActorContext, id: string): Promise<void>;
  /**
   * What this provider has cost the API server so far: requests by verb and
   * resource, and its shared watches. Zeros before the first call.
   */
  stats(): ProviderStats;
}

/** See {@link AgentSandboxProvider.stats}. */
export interface ProviderStats {
  /**
   * `"verb resource"` → requests sent, retries included, e.g. `"get pods"`,
   * `"list sandboxclaims"`, `"watch pods"`, `"create sandboxclaims"`,
   * `"exec pods/exec"`, `"create selfsubjectrulesreviews"`.
   */
  requests: Record<string, number>;
  /**
   * TCP connections opened to the API server (or its proxy) so far: one per watch, exec, file
   * transfer or port-forward connection (HTTP/1.1), and one that all other requests share where
   * the server speaks HTTP/2 (every kube-apiserver).
   */
  connections: number;
  /** Shared watches open now: at most one per kind (claims, Sandboxes, pods). */
  watches: number;
  /**
   * Those of them failing now (an error since their last complete list, e.g. the API server
   * is unreachable): they list again after a backoff and serve nothing meanwhile.
   */
  failing: number;
  /** Lists those watches started: one each at first use, then one per recovery from an error. */
  lists: number;
}

/** Options of {@link agentSandboxProvider}. */
export type AgentSandboxProviderOptions = CommonOptions & (WarmPoolMode | DirectMode);

/** Claim sandboxes from a SandboxWarmPool (one SandboxClaim per actor). */
export interface WarmPoolMode {
  /** SandboxWarmPool name in `namespace`. */
  warmPool: string;
  /** Extra settings of each SandboxClaim. */
  claim?: ClaimOptions;
  sandbox?: never;
}

/** Create a Sandbox per actor directly (always a cold start). */
export interface DirectMode {
  /** The pod of each Sandbox. */
  sandbox: SandboxOptions;
  warmPool?: never;
  claim?: never;
}

export interface CommonOptions {
  /** Namespace of the claims/Sandboxes. Default: the kubeconfig context's (in cluster: the service account's), else "default". */
  namespace?: string;
  /** Working directory in the sandbox (absolute). Default "/workspace". */
  cwd?: string;
  /** Container to exec into. Default: the pod's first container. */
  container?: string;
  /** How long connect waits for readiness (also bounds suspend/destroy waits). Default 300000. */
  readyTimeoutMs?: number;
  /**
   * What `suspend` does. `"pod"` (default) deletes the pod: needs a persistent
   * volume at `cwd` (warm pool: a `volumeClaimTemplates` entry mounted there in
   * the template; direct: `sandbox.volume`). `"none"` keeps the pod running.
   */
  suspend?: "pod" | "none";
  /**
   * Inactivity backstop in seconds (at least 120): the claim/Sandbox is
   * deleted this long after the last connect or suspend
   * (`shutdownTime` + `shutdownPolicy: Delete`, moved forward at most about once a minute).
   */
  ttlSeconds?: number;
  /**
   * Credentials. Default: the in-cluster service account when
   * `KUBERNETES_SERVICE_HOST` is set, else `KUBECONFIG` / `~/.kube/config`
   * (current context; exec auth plugins work). A string is a kubeconfig path
   * or kubeconfig YAML. No credential appears in errors, events or trace
   * lines: a kubeconfig that does not parse is named with the line and column
   * of the error, a failing exec plugin by its program's name and exit status.
   * Credentials sent over plain `http://` or with TLS verification off give
   * one `warning` event (not for a loopback server reached directly).
   */
  kubeConfig?: string | KubeServerConfig;
  /** Provider name persisted by Rivet; keep it stable. Default "agent-sandbox". */
  name?: string;
  /** Concurrent execs per provider (pods/exec is not rate-limited by the API server). Default 32. */
  maxConcurrentExecs?: number;
  /**
   * Concurrent execs of one sandbox, a share of `maxConcurrentExecs` (default 8), so one
   * sandbox's never-ending calls cannot hold every slot: the others are served in turn.
   */
  maxConcurrentExecsPerSandbox?: number;
  /**
   * Port-forward tunnels open at once per provider (each `fetch`, and each connection to a
   * `forward`, is one pods/portforward connection to the API server). Slots of their own: a
   * tunnel storm leaves execs theirs. Default 256.
   */
  maxTunnels?: number;
  /**
   * Tunnels of one sandbox, a share of `maxTunnels` (default 32); beyond it a tunnel waits its
   * turn, up to `callTimeoutMs`, then fails `timeout`.
   */
  maxTunnelsPerSandbox?: number;
  /** A tunnel that moves no byte either way this long (a paused reader included) is closed: `timeout`. Default 600000. */
  tunnelIdleTimeoutMs?: number;
  /**
   * Also put each command's text (never env values or cwd) into the exec request's URL, so the
   * API server's audit log records it. Default false: commands, cwd and env travel on the
   * exec's stdin, and the URL and in-pod argv hold only a run id.
   */
  commandsInAuditLog?: boolean;
  /** Timeout of every file operation and process call (not `exec`, `follow`, `wait`), and of a `fetch`'s response head: `timeout` after it. Default 120000. */
  callTimeoutMs?: number;
  /** What one call (a model's choice) may ask for; beyond it, `invalid_request` with nothing run. */
  limits?: CallLimits;
  /**
   * Where `upload` sources and `download` targets may be on this host, and the most a transfer
   * may ask for. Without `localRoot` those local paths are the host process's authority: never
   * let a model choose them.
   */
  transfers?: TransferPolicy;
  /** Lifecycle progress (never keeps Node alive; a throwing listener only emits a warning). */
  onEvent?: (event: SandboxEvent) => void;
}

/** Bounds on what a call may ask of a sandbox. */
export interface CallLimits {
  /** Largest `timeoutMs` of `exec`/`spawn`. Default (and at most) 2147483647. */
  maxTimeoutMs?: number;
  /** Largest `maxOutputBytes` of `exec`. Default 1 GiB, at most 2^32 − 1. */
  maxOutputBytes?: number;
  /** Largest `maxBytes` of `readFile`. Default 2 GiB, at most 2^32 − 1. */
  maxReadBytes?: number;
}

/** The provider's hold on transfers' local paths and limits. */
export interface TransferPolicy {
  /**
   * An absolute path to an existing directory: an `upload` source and a `download` `to` must
   * resolve inside it (symlinks and `..` followed; for a missing `to`, its nearest existing
   * directory), else `invalid_request` with nothing read or written.
   */
  localRoot?: string;
  /** The largest `maxBytes` a transfer may ask for (beyond, `invalid_request`); also its default when below 1 GiB. */
  maxBytes?: number;
  /** The largest `maxEntries` a transfer may ask for (beyond, `invalid_request`); also its default when below 100,000. */
  maxEntries?: number;
}

/** What every file operation and process call takes besides its own options. */
export interface CallOptions {
  /** Abort: the call rejects with `Error("aborted")` (code `aborted`) and its connection is closed. */
  signal?: AbortSignal;
}

/** Options of `readFile`. */
export interface ReadFileOptions extends CallOptions {
  /** Most bytes to return; more is `too_large` with nothing read. Default 100 MiB. */
  maxBytes?: number;
  /** First byte to return (a whole number ≥ 0). Default 0. */
  offset?: number;
  /** Most bytes to return from `offset` (a whole number ≥ 0). Default: to the end. */
  length?: number;
}

/** Limits every transfer takes. */
export interface TransferOptions extends CallOptions {
  /** Most archive bytes (headers included); more is `too_large`. Default 1 GiB, or the provider's `transfers.maxBytes` if lower (over it: `invalid_request`). */
  maxBytes?: number;
  /** Most entries (files, directories, links); more is `too_large`. Default 100,000, or the provider's `transfers.maxEntries` if lower (over it: `invalid_request`). */
  maxEntries?: number;
}

/** Options of `upload`. */
export interface UploadOptions extends TransferOptions {
  /** `false`: a `dir` that is not empty is `invalid_state` with nothing extracted. Default `true` (replace). */
  overwrite?: boolean;
}

/** Options of `download`. */
export interface DownloadOptions extends TransferOptions {
  /** `tar --exclude` patterns (GNU: matched against every name, unanchored). */
  exclude?: string[];
  /**
   * A local directory to extract into (created if missing) instead of returning the stream; inside
   * the provider's `transfers.localRoot` if it has one.
   */
  to?: string;
  /** With `to`: extract into a `to` that is not empty (else `invalid_state`, nothing written). Default `false`. */
  overwrite?: boolean;
}

/** What a transfer moved. */
export interface TransferTotals {
  /** Files, symlinks and hard links. */
  files: number;
  /** Directories (not counting the target itself). */
  directories: number;
  /** Bytes of file contents. */
  bytes: number;
}

/** Options of `usage`. */
export interface UsageOptions extends CallOptions {
  /** Read CPU twice this many ms apart (a whole number from 1 to 10,000) and report `cpuPercent`. */
  sampleMs?: number;
}

/** What a sandbox uses (`usage()`). Bytes, seconds and cores; limits are `null` when there is none. */
export interface SandboxUsage {
  /** When the files were read, ms since the epoch, by the sandbox's clock. */
  timestamp: number;
  /** The cgroup version the numbers come from. */
  source: "cgroup2" | "cgroup1";
  /** CPU time used since the container started (v2 `cpu.stat` `usage_usec`, v1 `cpuacct.usage`). */
  cpuSeconds: number;
  /** CPU limit in cores (`cpu.max`, v1 `cfs_quota_us / cfs_period_us`). */
  cpuLimitCores: number | null;
  /** Only with `sampleMs`: CPU use over the sample in % of `cpuLimitCores`, of one core without a limit (so 200 = two busy cores). */
  cpuPercent?: number;
  /** Memory charged to the container, page cache included (`memory.current`, v1 `memory.usage_in_bytes`). */
  memoryBytes: number;
  /** `memoryBytes` less inactive file pages: the working set, as the kubelet computes it for eviction and `kubectl top`; `memoryBytes` where there is no `memory.stat` (gVisor). */
  memoryWorkingSetBytes: number;
  /** Memory limit (`memory.max`, v1 `memory.limit_in_bytes`). */
  memoryLimitBytes: number | null;
  /** Processes the kernel's OOM killer ended in the container (`memory.events`, v1 `memory.oom_control` `oom_kill`); null where the runtime does not count them (gVisor). */
  oomKills: number | null;
  /** Tasks (processes and threads) now, this call's own included (`pids.current`). */
  pids: number;
  /** Pid limit (`pids.max`). */
  pidsLimit: number | null;
  /** Bytes used on the filesystem holding `cwd` (as `df` counts them); absent when it cannot be read (cwd gone). */
  diskBytes?: number;
  /** Size of the filesystem holding `cwd`; absent with `diskBytes`. */
  diskTotalBytes?: number;
}

/** `kubeConfig` as an explicit server and bearer token. */
export interface KubeServerConfig {
  /** API server URL, e.g. "https://10.0.0.1:6443". */
  server: string;
  /** Bearer token (give this or `tokenFile`). */
  token?: string;
  /** File with the bearer token, re-read as it rotates. */
  tokenFile?: string;
  /** Base64-encoded PEM CA bundle (as kubeconfig `certificate-authority-data`). */
  caData?: string;
  /** CA bundle file. */
  caFile?: string;
  /** Skip TLS verification (testing only: the token goes to whoever answers; a `warning` event says so). */
  insecureSkipTlsVerify?: boolean;
}

/**
 * SandboxClaim settings. `env` and `volumeClaimTemplates` make the claim skip
 * the warm pool (a cold start, as slow as direct mode) and are rejected
 * unless the template allows them (`envVarsInjectionPolicy` /
 * `volumeClaimTemplatesPolicy`: Allowed or Overrides).
 */
export interface ClaimOptions {
  /** Labels of the claim object. */
  labels?: Record<string, string>;
  /** Labels added to the pod (`additionalPodMetadata`; keys need a domain the controller allows, default `sandbox.users.io/`). */
  podLabels?: Record<string, string>;
  /** Annotations of the claim object. */
  annotations?: Record<string, string>;
  /** Container environment. Forces a cold start; needs the template's `envVarsInjectionPolicy`. */
  env?: Record<string, string>;
  /** Extra PVCs (`{ metadata: { name }, spec }`). Forces a cold start; needs the template's `volumeClaimTemplatesPolicy`. */
  volumeClaimTemplates?: Array<{ metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> }; spec: Record<string, unknown> }>;
  /** Delete the claim this many seconds after its sandbox finished (`lifecycle.ttlSecondsAfterFinished`). */
  shutdownAfterSeconds?: number;
}

/**
 * The pod of a directly created Sandbox. The entrypoint is replaced by a keep-alive process; the
 * service account token is never mounted; the pod meets the Pod Security Standard of `securityProfile`.
 */
export interface SandboxOptions {
  /** Container image (needs `/bin/sh`, GNU coreutils). */
  image: string;
  /**
   * Requests = limits, as Kubernetes quantities. A number is cores (whole millicores) or bytes
   * (whole), from 0 to 2^53 - 1; anything else is `config`: write larger ones as strings (`"64Gi"`).
   */
  resources?: { cpu?: string | number; memory?: string | number; ephemeralStorage?: string | number };
  /** Pod runtime class (e.g. gVisor, Kata). */
  runtimeClassName?: string;
  /** A PVC per sandbox mounted at `path` (default: `cwd`); survives suspend. */
  volume?: { size: string; path?: string; storageClassName?: string };
  /** Pod service account (its token is not mounted). */
  serviceAccountName?: string;
  /** Container environment. */
  env?: Record<string, string>;
  /** Labels of the Sandbox and its pod. */
  labels?: Record<string, string>;
  /** Annotations of the Sandbox and its pod. */
  annotations?: Record<string, string>;
  /**
   * `"restricted"` (default): runs as uid/gid 1000 (`runAsNonRoot`, `fsGroup` 1000 so the volume at
   * `cwd` is writable), every capability dropped. `"baseline"`: runs as the image's user (root for
   * most images, e.g. to install packages) with the runtime's default capabilities; needs a namespace
   * whose Pod Security enforces no more than baseline. Both: seccomp `RuntimeDefault`, no privilege
   * escalation, no service links, no API token.
   */
  securityProfile?: "restricted" | "baseline";
  /**
   * Give the Sandbox a headless Service (`spec.service: true`), so its pod has a cluster DNS
   * name: see {@link Sandbox.url}. Default: no Service.
   */
  service?: boolean;
  /** Merged over the generated pod template as a JSON merge patch (objects merge, arrays replace). */
  podTemplate?: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec?: Record<string, unknown> };
}

/** A lifecycle progress event. */
export interface SandboxEvent {
  /**
   * `claimed` (claim created), `adopted` (bound to a warm sandbox),
   * `cold_start` (a new pod is being started), `waiting` (`message` says for
   * what), `scheduled` (`node`), `ready`, `suspended`, `resumed`, `deleted`,
   * `warning` (`message` says what to fix, the call goes on: credentials sent over
   * plain `http://` or without TLS verification, first in the provider's first call
   * that names a sandbox; a warm pool whose template has no seccomp profile or
   * RuntimeClass; each once per provider).
   */
  type: "claimed" | "adopted" | "cold_start" | "waiting" | "scheduled" | "ready" | "suspended" | "resumed" | "deleted" | "warning";
  /** Sandbox id. */
  id: string;
  actorId: string;
  /** Milliseconds since the start of the create/connect/suspend/destroy call. */
  elapsedMs: number;
  /** Sandbox (and pod) name, when known. */
  sandbox?: string;
  node?: string;
  message?: string;
}

/**
 * The stable error codes (`error.code`) by name, e.g.
 * `err.code === ErrorCode.NotFound` (`"not_found"`).
 */
export const ErrorCode: {
  readonly Config: "config";
  readonly InvalidRequest: "invalid_request";
  readonly NotFound: "not_found";
  readonly InvalidState: "invalid_state";
  readonly Forbidden: "forbidden";
  readonly Timeout: "timeout";
  readonly Unavailable: "unavailable";
  readonly SandboxFailed: "sandbox_failed";
  readonly ConnectionLost: "connection_lost";
  readonly Aborted: "aborted";
  readonly TooLarge: "too_large";
  readonly IsDirectory: "is_directory";
  readonly Unsupported: "unsupported";
  readonly Internal: "internal";
};

/** One of the stable error codes. */
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Errors thrown by the provider and sandboxes carry a stable `code`. */
export interface SandboxError extends Error {
  code: ErrorCode;
}

/**
 * A connected sandbox: commands and files in the pod, over pods/exec. Every method's `options`
 * (here and on {@link SandboxProcess}) may also be `null`, meaning none; a non-object is `invalid_request`.
 */
export interface Sandbox {
  /** Working directory (absolute). */
  readonly cwd: string;
  /**
   * Runs `command` with `/bin/sh -c` and resolves when the command's own
   * process exits, with everything it wrote; children it left in the
   * background (`server &`) keep running. A non-zero exit resolves; a timeout
   * kills the process tree and resolves with `exitCode: null, timedOut: true`;
   * an abort kills it and rejects with `Error("aborted")`.
   */
  exec(command: string, options: ExecOptions & { encoding: "buffer" }): Promise<ExecResult<Buffer>>;
  exec(command: string, options?: ExecOptions): Promise<ExecResult<string>>;
  /**
   * A regular file, whole or the range `[offset, offset + length)` (empty at or past the end,
   * shorter at the end; the bytes before `offset` are not read, so a page deep into a large or
   * sparse file costs one exec); rejects with `not_found`, `is_directory`, `invalid_request` for a FIFO,
   * socket or device, or `too_large` (default limit 100 MiB; `maxBytes` at most the provider's
   * `limits.maxReadBytes`). Memory grows with the bytes that arrive, never with the size the
   * sandbox reports. Every file call rejects a path over 4095 bytes, or with a name over 255
   * bytes, as `invalid_request`, and times out after `callTimeoutMs` (`timeout`).
   */
  readFile(path: string, options?: ReadFileOptions): Promise<Uint8Array>;
  /** Creates or truncates the file (strings as UTF-8), atomically. */
  writeFile(path: string, content: string | Uint8Array, options?: CallOptions): Promise<void>;
  /** `mkdir -p`: recursive, idempotent. */
  mkdir(path: string, options?: CallOptions): Promise<void>;
  /** File information, symlinks followed. */
  stat(path: string, options?: CallOptions): Promise<FileStat>;
  /** Entry names (no `.`/`..`); non-UTF-8 bytes become U+FFFD; `too_large` past 100,000 names or 16 MiB of them. */
  readdir(path: string, options?: CallOptions): Promise<string[]>;
  /** Entry names as exact bytes. */
  readdirBytes(path: string, options?: CallOptions): Promise<Uint8Array[]>;
  /** Never throws for a missing path. */
  exists(path: string, options?: CallOptions): Promise<boolean>;
  /** Like `fs.rm`. */
  remove(path: string, options?: { recursive?: boolean; force?: boolean } & CallOptions): Promise<void>;
  /**
   * Extracts a tar archive into the directory `dir` (created if missing) with the image's `tar`,
   * in one exec, streamed with bounded memory on both ends. `source` is a local directory (its
   * tree is archived as it is read), the bytes of a tar archive, or an `AsyncIterable` of them
   * (a Node `Readable` is one; a directory must be inside the provider's `transfers.localRoot` if it
   * has one). Every entry is checked first: absolute paths, `..`, symlinks
   * resolving out of the tree (through other symlinks too), hard links out, anything under a symlink the archive made, device
   * nodes, FIFOs and sockets are refused with `invalid_request` (for a directory or bytes, before
   * anything runs; for an iterable, as they come, with what came before extracted). Modes are
   * kept without setuid/setgid; ownership is not. Not atomic: a failure or abort leaves what
   * was extracted before it. `unsupported` when the image has no `tar`.
   */
  upload(source: string | Uint8Array | AsyncIterable<Uint8Array>, dir: string, options?: UploadOptions): Promise<TransferTotals>;
  /**
   * The tree under the directory `path` as a tar stream (a Node `Readable`, backpressured: a slow
   * reader slows the sandbox's `tar`), or with `to`, extracted into that local directory as a
   * hostile archive (refusals are `invalid_state`; nothing is written outside `to`, no symlink is
   * followed, every symlink left under `to` resolves inside it, modes are under the umask; a `to`
   * that is not empty needs `overwrite: true`). A transfer cut short fails (`connection_lost`), never as a shorter tree; an abort
   * (or destroying the stream) kills the sandbox's `tar`.
   */
  download(path: string, options: DownloadOptions & { to: string }): Promise<TransferTotals>;
  download(path: string, options?: DownloadOptions): Promise<import("node:stream").Readable>;
  /**
   * What the sandbox uses, read in one exec from the container's own cgroup files (cgroup v2, or
   * v1 where the node runs it; never `/proc/meminfo`, which describes the node) and `stat -f` of
   * the filesystem holding `cwd`. Counters are cumulative; pass `sampleMs` for `cpuPercent`.
   * Rejects with `invalid_request` for a bad `sampleMs` (nothing run), `unsupported` when the image
   * lacks `date`, `stat` or `sleep`, or the runtime shows no cgroup file the result needs
   * (the message names it), `internal` naming a file that holds what no kernel writes.
   */
  usage(options?: UsageOptions): Promise<SandboxUsage>;
  /**
   * Starts `command` with `/bin/sh -c` in the background and resolves once it
   * runs. Its output and exit status are kept in the sandbox, so it outlives
   * this connection, this provider object and this Node process: find it
   * again with {@link Sandbox.process}. It ends with its pod (`suspend`,
   * `destroy`, deletion).
   */
  spawn(command: string, options?: SpawnOptions & CallOptions): Promise<SandboxProcess>;
  /** The process with this id, or `undefined` if the sandbox does not know it (never existed, removed after its retention, or its pod was replaced). */
  process(id: string, options?: CallOptions): Promise<SandboxProcess | undefined>;
  /**
   * Every process the sandbox keeps (running, or exited within the last hour; at most 64 exited
   * ones), in start order, with at most 16 KiB of each command; `too_large` past 1,000.
   */
  processes(options?: CallOptions): Promise<ProcessInfo[]>;
  /**
   * The TCP ports listening in the sandbox's network, read from `/proc/net/tcp{,6}` (no tool
   * needed in the image): poll it to wait for a dev server; one entry per port and address.
   * `too_large` past 16 MiB of socket tables or 4,096 entries.
   */
  listeningPorts(options?: CallOptions): Promise<ListeningPort[]>;
  /**
   * One HTTP/1.1 exchange with `port` in the sandbox through its own pods/portforward tunnel, as
   * a WHATWG `Response`; `input` and `init` as for `fetch` (only the path and query of a URL are
   * used; `Host` is `localhost:<port>` unless given). Request and response bodies stream with
   * backpressure; `init.signal` aborts (`aborted`, also for a body being read). `invalid_request`
   * for a port outside 1..65535 or an upgrade (WebSocket, CONNECT: use {@link Sandbox.forward});
   * `not_found` when nothing listens; `forbidden` without `pods/portforward`; `unsupported` on a
   * runtime that cannot port-forward; `connection_lost` when the exchange breaks; `timeout` when
   * no response head came within `callTimeoutMs` (a tunnel slot waited for included);
   * `unavailable` when the server answers `101` (switching protocols).
   */
  fetch(port: number, input: string | URL | Request, init?: RequestInit): Promise<Response>;
  /**
   * A local listener (`host`, default `127.0.0.1`; `localPort`, default a free one) whose every
   * accepted connection is tunnelled to `port` in the sandbox through its own pods/portforward
   * connection (so a resumed sandbox is reached again). With `verify` (default), `not_found`
   * before resolving when nothing listens on `port`. A tunnel that fails resets only its own
   * connection and calls `onError`. `signal`, `close()`, and the provider's `suspend`/`destroy`
   * close the listener and every connection. Any local process can connect to it, as with
   * `kubectl port-forward`.
   */
  forward(port: number, options?: ForwardOptions): Promise<PortForward>;
  /**
   * Where `port` is reached from inside the cluster: the Sandbox's headless Service
   * (`status.serviceFQDN`, resolving to the pod's IP, so every port answers). No request is made:
   * the name is the one `connect` saw. Throws `unsupported` when the sandbox has no Service (give
   * it one with `sandbox.service: true`, or `service: true` in a warm pool's SandboxTemplate),
   * `invalid_request` for a port outside 1..65535. Reaching it also needs a NetworkPolicy that
   * admits the client (the shipped one admits no ingress) and a server bound to a non-loopback
   * address (see {@link ListeningPort.loopbackOnly}); from outside the cluster use `forward`.
   */
  url(port: number): ServiceUrl;
  /**
   * Starts a terminal: a command on a TTY (pods/exec with `tty=true` and the
   * resize channel) over one connection, and resolves once the command runs,
   * its size applied. It lives as long as that connection: a cut or stalled
   * connection rejects `wait()` with `connection_lost` and kills its process
   * tree; there is no reattaching (use `spawn` for work that must outlive a
   * connection). Counts against `maxConcurrentExecs` while it runs. Errors:
   * `invalid_request` (bad options, nothing run), `not_found` (cwd),
   * `unsupported` (no `stty` in the image), `aborted`, `connection_lost`.
   */
  terminal(options: TerminalOptions): Promise<SandboxTerminal>;
}

/** A port of the sandbox as clients inside the cluster reach it. */
export interface ServiceUrl {
  /** `http://<host>:<port>`. */
  url: string;
  /** The Service's cluster DNS name, `<sandbox>.<namespace>.svc.<cluster domain>`. */
  host: string;
  port: number;
}

/** A TCP port a sandbox listens on. */
export interface ListeningPort {
  port: number;
  /** The bound address; `0.0.0.0` or `::` for every address. */
  address: string;
  family: "IPv4" | "IPv6";
  /** Bound to loopback only: reachable by `fetch`/`forward`, not through a Service. */
  loopbackOnly: boolean;
}

export interface ForwardOptions {
  /** Local port to listen on, 1..65535; default: a free one. */
  localPort?: number;
  /**
   * Local address to listen on; default `127.0.0.1`. Only loopback (`localhost`, 127.0.0.0/8,
   * `::1`) unless `allowRemote`: `invalid_request`.
   */
  host?: string;
  /** Allows a `host` other machines can reach (`0.0.0.0`, `::`, an interface's address); default false. */
  allowRemote?: boolean;
  /**
   * Connections at once, 1..4096; default 32. One more is reset and `onError` gets
   * `unavailable`.
   */
  maxConnections?: number;
  /**
   * HTTP only: a connection's first request must name the listener as its `Host` (its own
   * `host:port`, and for a loopback listener `localhost`, `127.0.0.1` or `[::1]` with its port),
   * else it gets `421 Misdirected Request`, no tunnel opens and `onError` gets `invalid_request`.
   * Stops a web page that reaches the listener through DNS rebinding. Default false (any bytes
   * pass, for protocols other than HTTP).
   */
  checkHost?: boolean;
  /** Reject with `not_found` when nothing listens on the port; default true. */
  verify?: boolean;
  /** Closes the forward when aborted. */
  signal?: AbortSignal;
  /** Called with the error of each connection whose tunnel failed, that was over `maxConnections` (that connection is reset), or that `checkHost` refused. */
  onError?: (error: SandboxError) => void;
}

/** An open `forward`. */
export interface PortForward {
  /** The local port. */
  readonly localPort: number;
  /** `http://<host>:<localPort>`. */
  readonly url: string;
  /** Connections open now. */
  readonly connections: number;
  /** Closes the listener and every connection; idempotent. */
  close(): Promise<void>;
  /** Resolves once closed (by `close`, the signal, or suspend/destroy). */
  readonly closed: Promise<void>;
}

export interface TerminalOptions {
  /** Shell command line (`/bin/sh -c`). Default: an interactive login shell, bash when the image has it, else sh. */
  command?: string;
  /** Working directory; default the sandbox's cwd. */
  cwd?: string;
  /** Extra environment, as for {@link ExecOptions.env}; `TERM` defaults to `xterm-256color`. */
  env?: Record<string, string | number | boolean | undefined>;
  /** Initial size, 1..4096 each (default 80 x 24), applied before the program reads its first byte. */
  cols?: number;
  rows?: number;
  /**
   * Every chunk of output: stdout and stderr merged as a PTY does, CRLF line ends, echoed input.
   * If it throws, the terminal is closed and `wait()` rejects with what it threw.
   */
  onData: (chunk: Uint8Array) => void;
  /** Kill the terminal's process tree after this long; `wait()` then resolves `{ exitCode: null, timedOut: true }`. 0 or absent: never. */
  timeoutMs?: number;
  /** Aborting kills the terminal's process tree; `wait()` rejects `aborted`. */
  signal?: AbortSignal;
}

export interface TerminalExit {
  /** Exit status of the command (128 + n when a signal ended it); null when the timeout killed it. */
  exitCode: number | null;
  timedOut: boolean;
}

export interface SandboxTerminal {
  /** Pid in the sandbox of the terminal's session leader (the shell running the command), the root of its process tree. */
  readonly pid: number;
  /** Types bytes (a string as UTF-8): "\x03" is Ctrl-C, "\x04" Ctrl-D. Resolves once they are on their way; writes keep their order. `invalid_state` after the terminal ended. */
  write(data: string | Uint8Array): Promise<void>;
  /** A new size, 1..4096 each (else `invalid_request`); the foreground program gets SIGWINCH. `invalid_state` after the terminal ended. */
  resize(cols: number, rows: number): Promise<void>;
  /** Sends a signal (HUP, INT, QUIT, TERM, KILL, USR1, USR2, WINCH, STOP, CONT; default HUP) to every process of the terminal's tree. */
  kill(signal?: string): Promise<void>;
  /** HUP to the tree, KILL after 2 s to what is left; resolves once the terminal has ended. Idempotent. */
  close(): Promise<void>;
  /** Resolves how the terminal ended; rejects `connection_lost`, `aborted`, or what `onData` threw. */
  wait(): Promise<TerminalExit>;
}

export interface ExecOptions {
  /** Working directory; relative to the sandbox's `cwd`. Default: the sandbox's `cwd`. */
  cwd?: string;
  /** Extra environment (the host's is never passed): every other shell identifier reaches the command exactly, also as its child processes' environment; `AGENT_SANDBOX_*` names are the provider's and `IFS`, `LINENO`, `OPTIND`, `PPID`, `PWD` the shell's own (it sets them when it starts; `cwd` chooses the directory): `invalid_request`. */
  env?: Record<string, string>;
  /** Kill after this many ms (at most the provider's `limits.maxTimeoutMs`); 0 or undefined: no timeout. */
  timeoutMs?: number;
  /** Abort: kills the command and rejects with `Error("aborted")`. */
  signal?: AbortSignal;
  /** Every stdout and stderr chunk as it arrives. */
  onData?: (chunk: Uint8Array) => void;
  /** Every stdout chunk. */
  onStdout?: (chunk: Uint8Array) => void;
  /** Every stderr chunk. */
  onStderr?: (chunk: Uint8Array) => void;
  /** Bytes for stdin, then EOF. */
  stdin?: string | Uint8Array;
  /** Cap of each of `stdout`/`stderr` in the result (default 16 MiB); callbacks still get everything. */
  maxOutputBytes?: number;
  /** `"buffer"`: `stdout`/`stderr` as Buffers. Default UTF-8 strings. */
  encoding?: "utf8" | "utf-8" | "buffer";
  /**
   * Run as a spawned process followed to its end: a dropped connection or an
   * API server restart in the middle resumes the reading instead of failing
   * with `connection_lost`, and the timeout is enforced in the sandbox. Same
   * result as a plain exec (output beyond 64 MiB per stream is not kept, for
   * the callbacks too); costs two or three execs instead of one.
   */
  reattach?: boolean;
}

export interface SpawnOptions {
  /** Working directory; relative to the sandbox's `cwd`. Default: the sandbox's `cwd`. */
  cwd?: string;
  /** Extra environment, as for {@link ExecOptions.env}. */
  env?: Record<string, string>;
  /** Bytes for stdin, then EOF; or `true` to keep stdin open for {@link SandboxProcess.writeStdin}. Default: EOF at once. */
  stdin?: string | Uint8Array | true;
  /** Kill the process tree (TERM, then KILL after 2 s) after this many ms, enforced in the sandbox whether or not anyone is connected. */
  timeoutMs?: number;
  /** Bytes kept of each of stdout and stderr (default 32 MiB, at most 64 MiB); later output is dropped and reads report `truncated`. */
  maxOutputBytes?: number;
}

/** A piece of a process's output. */
export interface ProcessOutputChunk {
  /** Increasing; pass the last one you saw as `after` to get every later byte exactly once. */
  sequence: number;
  stream: "stdout" | "stderr";
  data: Uint8Array;
}

/** How a process ended. */
export interface ProcessExit {
  /**
   * Exit status (128 + n for a signal the process died of by itself); `null` when the provider
   * killed it (`kill()`, its timeout) or it was lost, as the sandbox-adapter's types specify.
   */
  exitCode: number | null;
  /** The signal the provider killed it with (`"SIGTERM"`, `"SIGKILL"`, ...); `null` otherwise. */
  signal: string | null;
  /** The process's timeout killed it. */
  timedOut: boolean;
  /** It ended with its pod (suspend, deletion) or its supervisor was killed: the exit status is unknown. */
  lost: boolean;
}

/** What {@link SandboxProcess.poll} resolves with (the shape of the sandbox-adapter's `RemoteProcessPoll`). */
export interface ProcessPoll {
  /** Every chunk with a sequence greater than `after`, in order. */
  chunks: ProcessOutputChunk[];
  /** Set once the process has exited and every chunk is in `chunks`. */
  exit?: ProcessExit;
  /** Output past `maxOutputBytes` was dropped. */
  truncated: boolean;
}

/** A background process in the sandbox. */
export interface SandboxProcess {
  /** Stable id: `sandbox.process(id)` finds it from any connection or host. */
  readonly id: string;
  /** Pid of the command's shell in the sandbox. */
  readonly pid: number;
  readonly command: string;
  /** Start time, ms since the epoch. */
  readonly startedAt: number;
  /**
   * The output after `after` that the sandbox has now (one exec), at most 8 MiB of each stream
   * (the rest on the next poll), and the exit once it has exited and all output is in.
   */
  poll(after?: number, options?: CallOptions): Promise<ProcessPoll>;
  /**
   * Streams the output after `after` to `onOutput` as it is written and
   * resolves with the exit once the process has exited and every chunk was
   * delivered. A dropped connection resumes where it stopped. Aborting
   * `signal` stops following (the process goes on) and rejects with
   * `Error("aborted")`; a throwing `onOutput` stops following and rejects with
   * what it threw.
   */
  follow(options?: { after?: number; onOutput?: (chunk: ProcessOutputChunk) => void; signal?: AbortSignal }): Promise<ProcessExit & { truncated: boolean }>;
  /** Resolves with the exit once the process has ended, also long after it did. Aborting `signal` stops waiting. */
  wait(options?: { signal?: AbortSignal }): Promise<ProcessExit>;
  /** Writes to stdin (spawned with `stdin: true`); waits while the process does not read. `invalid_state` once stdin was closed or the process exited. */
  writeStdin(data: string | Uint8Array, options?: CallOptions): Promise<void>;
  /** Closes stdin: the process reads EOF after what was written. */
  closeStdin(options?: CallOptions): Promise<void>;
  /**
   * Without a signal: ends the process and every process it started for sure (TERM, 2 s of
   * grace, then KILL) and resolves once they are gone, as Rivet's `runRemoteProcess` expects of
   * `kill()`. With one: sends just it to the whole tree (grandchildren whose parent died
   * included) and resolves once sent. A death this causes reports `exitCode: null` and `signal`.
   */
  kill(signal?: ProcessSignal, options?: CallOptions): Promise<void>;
}

/** A signal {@link SandboxProcess.kill} sends (with or without the `SIG` prefix). */
export type ProcessSignal =
  | "TERM" | "KILL" | "INT" | "HUP" | "QUIT" | "USR1" | "USR2" | "STOP" | "CONT"
  | "SIGTERM" | "SIGKILL" | "SIGINT" | "SIGHUP" | "SIGQUIT" | "SIGUSR1" | "SIGUSR2" | "SIGSTOP" | "SIGCONT";

/** A process as {@link Sandbox.processes} lists it. */
export interface ProcessInfo {
  id: string;
  pid: number;
  command: string;
  /** Start time, ms since the epoch. */
  startedAt: number;
  exited: boolean;
  /** `null` while running, when the provider killed it (timeout, `kill()`), or lost. */
  exitCode: number | null;
  /** The signal the provider killed it with; `null` otherwise. */
  signal: string | null;
  timedOut: boolean;
  lost: boolean;
}

export interface ExecResult<T = string> {
  /** Exit code; `null` when killed (timeout). */
  exitCode: number | null;
  timedOut: boolean;
  stdout: T;
  stderr: T;
  /** Output beyond `maxOutputBytes` was left out of `stdout`/`stderr`. */
  truncated: boolean;
}

export interface FileStat {
  isDirectory: boolean;
  isFile: boolean;
  isSymbolicLink: boolean;
  size: number;
  mtimeMs: number;
  /** `st_mode` including the file type bits. */
  mode: number;
  type: "file" | "directory" | "symlink" | "other";
}
