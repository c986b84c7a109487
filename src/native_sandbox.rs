//! `NativeSandbox`: the napi face of `sandbox_core::Sandbox`. `js/sandbox.js`
//! wraps it into the adapter's `Sandbox` object (AbortSignal, string
//! decoding, error codes).
//!
//! Exec is split in two so JS can abort it: the sync `startExec` starts the
//! command as a `Task` and returns its `NativeTask` handle with `abort()`
//! and `wait()` (napi's `AbortSignal` is `!Send` and cannot reach an async
//! fn). Output reaches JS through one weak thread-safe callback with
//! backpressure (see `delivery`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, Either, Null, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sandbox_core::{
    byte_count, byte_range, sample_ms as sample, timeout_ms, ExecRequest, FileStat, Provider, RemoveOptions, Usage,
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_READ_BYTES,
};
use tokio_util::sync::CancellationToken;

use crate::calls::{promise, NativeCancel};
use crate::delivery::{delivering, ChunkCallback};
use crate::errors::to_napi;
use crate::task::{NativeTask, Task, TaskEnd};

/// A connected sandbox.
#[napi]
pub struct NativeSandbox {
    inner: sandbox_core::Sandbox,
    /// The provider that connected it: owns its tasks (see `task`).
    provider: Arc<Provider>,
}

impl NativeSandbox {
    /// Wraps a sandbox that `provider`'s `connect` returned.
    pub fn new(inner: sandbox_core::Sandbox, provider: Arc<Provider>) -> NativeSandbox {
        NativeSandbox { inner, provider }
    }

    /// The core sandbox.
    pub(crate) fn core(&self) -> &sandbox_core::Sandbox {
        &self.inner
    }

    /// The provider that owns this sandbox's tasks.
    pub(crate) fn provider(&self) -> &Arc<Provider> {
        &self.provider
    }

    /// Starts `work` as a task of this sandbox's provider.
    pub(crate) fn start<T, F>(&self, work: impl FnOnce(CancellationToken) -> F) -> Task<T>
    where
        T: Send + 'static,
        F: Future<Output = sandbox_core::Result<T>> + Send + 'static,
    {
        Task::spawn(&self.provider, work)
    }
}

/// Options of `startExec`; `js/sandbox.js` fills and checks the JS side.
#[napi(object)]
pub struct NativeExecOptions {
    /// Working directory; default: the sandbox's cwd.
    pub cwd: Option<String>,
    /// Extra environment variables (values are strings).
    pub env: Option<HashMap<String, String>>,
    /// Timeout in ms; 0 or absent: none.
    pub timeout_ms: Option<f64>,
    /// Bytes for stdin, then EOF.
    pub stdin: Option<Buffer>,
    /// Cap of each result buffer in bytes; default 16 MiB.
    pub max_output_bytes: Option<f64>,
    /// Run as a spawned process followed to its end, so a dropped connection
    /// resumes instead of failing.
    pub reattach: Option<bool>,
}

/// What `wait()` resolves with. Output comes as bytes; JS decodes.
#[napi(object)]
pub struct NativeExecResult {
    /// Exit code; null when killed on timeout.
    pub exit_code: Option<i32>,
    /// The timeout fired.
    pub timed_out: bool,
    /// Head of stdout.
    pub stdout: Buffer,
    /// Head of stderr.
    pub stderr: Buffer,
    /// A buffer hit `maxOutputBytes`.
    pub truncated: bool,
}

/// What `stat` resolves with.
#[napi(object)]
pub struct NativeFileStat {
    /// The target is a directory.
    pub is_directory: bool,
    /// The target is a regular file.
    pub is_file: bool,
    /// The path itself is a symbolic link.
    pub is_symbolic_link: bool,
    /// Size in bytes.
    pub size: f64,
    /// Modification time in ms since the epoch.
    pub mtime_ms: f64,
    /// `st_mode` including the file type bits.
    pub mode: u32,
    /// `file`, `directory`, `symlink` or `other`.
    #[napi(js_name = "type")]
    pub kind: String,
}

/// What the sandbox uses (`usage()`); see `SandboxUsage` in index.d.ts.
#[napi(object)]
pub struct NativeUsage {
    /// When the files were read, ms since the epoch (the sandbox's clock).
    pub timestamp: f64,
    /// `cgroup2` or `cgroup1`.
    #[napi(ts_type = "\"cgroup2\" | \"cgroup1\"")]
    pub source: String,
    /// CPU time used since the container started.
    pub cpu_seconds: f64,
    /// CPU limit in cores; null: none.
    pub cpu_limit_cores: Either<f64, Null>,
    /// % of the CPU limit (of one core without one) over `sampleMs`.
    pub cpu_percent: Option<f64>,
    /// Memory charged, page cache included.
    pub memory_bytes: f64,
    /// `memoryBytes` less inactive file pages (the kubelet's working set).
    pub memory_working_set_bytes: f64,
    /// Memory limit; null: none.
    pub memory_limit_bytes: Either<f64, Null>,
    /// Processes the OOM killer ended; null: the runtime does not count them.
    pub oom_kills: Either<f64, Null>,
    /// Tasks now.
    pub pids: f64,
    /// Pid limit; null: none.
    pub pids_limit: Either<f64, Null>,
    /// Bytes used on the filesystem holding cwd.
    pub disk_bytes: Option<f64>,
    /// Size of the filesystem holding cwd.
    pub disk_total_bytes: Option<f64>,
}

impl From<sandbox_core::ExecResult> for NativeExecResult {
    fn from(r: sandbox_core::ExecResult) -> Self {
        NativeExecResult {
            exit_code: r.exit_code,
            timed_out: r.timed_out,
            stdout: r.stdout.into(),
            stderr: r.stderr.into(),
            truncated: r.truncated,
        }
    }
}

#[napi]
impl NativeSandbox {
    /// Default working directory (absolute).
    #[napi(getter)]
    pub fn cwd(&self) -> String {
        self.inner.cwd().to_owned()
    }

    /// The provider's `callTimeoutMs` (what bounds a `fetch`'s wait for its
    /// response head in `js/ports.js`).
    #[napi(getter)]
    pub fn call_timeout_ms(&self) -> f64 {
        self.inner.call_timeout().as_millis() as f64
    }

    /// Starts a command. `onChunk(stream, chunk)` gets stdout (1) and stderr
    /// (2) chunks in arrival order; it must not throw. `wait()` resolves
    /// with a `NativeExecResult`.
    #[napi]
    pub fn start_exec(
        &self,
        command: String,
        options: NativeExecOptions,
        #[napi(ts_arg_type = "((stream: number, chunk: Buffer) => void) | null | undefined")] on_chunk: Option<
            ChunkCallback,
        >,
    ) -> napi::Result<NativeTask> {
        let mut request = ExecRequest::new(command, options.cwd.unwrap_or_default());
        request.env = options.env.unwrap_or_default().into_iter().collect();
        request.timeout = timeout_ms("timeoutMs", options.timeout_ms).map_err(to_napi)?;
        request.max_output_bytes =
            byte_count("maxOutputBytes", options.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES as u64)
                .map_err(to_napi)?
                .try_into()
                .unwrap_or(usize::MAX);
        request.stdin = options.stdin.map(Bytes::from_owner);
        request.reattach = options.reattach.unwrap_or(false);
        let sandbox = self.inner.clone();
        let task: Task<TaskEnd> = self.start(move |cancel| async move {
            request.cancel = cancel;
            let result = delivering(on_chunk, |output| {
                request.output = output;
                sandbox.exec(request)
            });
            Ok(Either::A(result.await?.into()))
        });
        Ok(task.into())
    }

    /// Reads a regular file (binary), whole or from `offset`, at most
    /// `length` bytes. `maxBytes` defaults to 100 MiB.
    #[napi(ts_return_type = "Promise<Buffer>")]
    pub fn read_file<'env>(
        &self,
        env: &'env Env,
        path: String,
        max_bytes: Option<f64>,
        offset: Option<f64>,
        length: Option<f64>,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, Buffer>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move {
            let max = byte_count("maxBytes", max_bytes, DEFAULT_MAX_READ_BYTES)?;
            let range = byte_range(offset, length)?;
            sandbox.read_file(&path, max, range, call).await.map(Buffer::from)
        })
    }

    /// Creates or truncates a file with exactly these bytes, atomically.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn write_file<'env>(
        &self,
        env: &'env Env,
        path: String,
        content: Buffer,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (sandbox, call, content) = (self.inner.clone(), cancel.call(), Bytes::from_owner(content));
        promise(env, async move { sandbox.write_file(&path, content, call).await })
    }

    /// `mkdir -p`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn mkdir<'env>(
        &self,
        env: &'env Env,
        path: String,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move { sandbox.mkdir(&path, call).await })
    }

    /// Type, size, mode and mtime (symlinks followed).
    #[napi(ts_return_type = "Promise<NativeFileStat>")]
    pub fn stat<'env>(
        &self,
        env: &'env Env,
        path: String,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeFileStat>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move {
            let s: FileStat = sandbox.stat(&path, call).await?;
            Ok(NativeFileStat {
                is_directory: s.is_directory,
                is_file: s.is_file,
                is_symbolic_link: s.is_symbolic_link,
                size: s.size as f64,
                mtime_ms: s.mtime_ms,
                mode: s.mode,
                kind: s.kind.to_owned(),
            })
        })
    }

    /// What the sandbox uses, from its cgroup files in one exec; with
    /// `sampleMs`, CPU is read twice that far apart for `cpuPercent`.
    #[napi(ts_return_type = "Promise<NativeUsage>")]
    pub fn usage<'env>(
        &self,
        env: &'env Env,
        sample_ms: Option<f64>,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeUsage>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move {
            let u: Usage = sandbox.usage(sample(sample_ms)?, call).await?;
            let nullable = |v: Option<f64>| v.map_or(Either::B(Null), Either::A);
            Ok(NativeUsage {
                timestamp: u.timestamp_ms,
                source: u.source.as_str().to_owned(),
                cpu_seconds: u.cpu_seconds,
                cpu_limit_cores: nullable(u.cpu_limit_cores),
                cpu_percent: u.cpu_percent,
                memory_bytes: u.memory_bytes as f64,
                memory_working_set_bytes: u.memory_working_set_bytes as f64,
                memory_limit_bytes: nullable(u.memory_limit_bytes.map(|b| b as f64)),
                oom_kills: nullable(u.oom_kills.map(|n| n as f64)),
                pids: u.pids as f64,
                pids_limit: nullable(u.pids_limit.map(|p| p as f64)),
                disk_bytes: u.disk.map(|(used, _)| used as f64),
                disk_total_bytes: u.disk.map(|(_, total)| total as f64),
            })
        })
    }

    /// Entry names; bytes that are not UTF-8 become U+FFFD (use
    /// `readdirBytes` for exact names).
    #[napi(ts_return_type = "Promise<Array<string>>")]
    pub fn readdir<'env>(
        &self,
        env: &'env Env,
        path: String,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, Vec<String>>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move {
            let names = sandbox.readdir(&path, call).await?;
            Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
        })
    }

    /// Entry names as raw bytes.
    #[napi(ts_return_type = "Promise<Array<Buffer>>")]
    pub fn readdir_bytes<'env>(
        &self,
        env: &'env Env,
        path: String,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, Vec<Buffer>>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move { Ok(sandbox.readdir(&path, call).await?.into_iter().map(Buffer::from).collect()) })
    }

    /// Whether the path exists.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn exists<'env>(
        &self,
        env: &'env Env,
        path: String,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move { sandbox.exists(&path, call).await })
    }

    /// Removes a path (`fs.rm` semantics).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn remove<'env>(
        &self,
        env: &'env Env,
        path: String,
        recursive: bool,
        force: bool,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (sandbox, call) = (self.inner.clone(), cancel.call());
        promise(env, async move { sandbox.remove(&path, RemoveOptions { recursive, force }, call).await })
    }
}
