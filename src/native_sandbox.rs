//! `NativeSandbox`: the napi face of `sandbox_core::Sandbox`. `js/sandbox.js`
//! wraps it into the adapter's `Sandbox` object (AbortSignal, string
//! decoding, error codes).
//!
//! Exec is split in two so JS can abort it: the sync `startExec` spawns the
//! command on napi's Tokio runtime and returns a `NativeExec` handle with
//! `abort()` and `wait()` (napi's `AbortSignal` is `!Send` and cannot reach an
//! async fn). Output reaches JS through one weak thread-safe callback
//! `(stream, chunk)` with backpressure (see `delivery`).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use napi::bindgen_prelude::{spawn, Buffer};
use napi_derive::napi;
use sandbox_core::args::{byte_count, timeout_ms};
use sandbox_core::exec::{ExecRequest, ExecResult, DEFAULT_MAX_OUTPUT_BYTES};
use sandbox_core::files::{FileStat, RemoveOptions, DEFAULT_MAX_READ_BYTES};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::delivery::{deliver, ChunkCallback};
use crate::errors::{invalid, to_napi};

/// Chunks queued between the engine and the JS callback.
const DELIVERY_DEPTH: usize = 16;

/// A connected sandbox.
#[napi]
pub struct NativeSandbox {
    inner: sandbox_core::Sandbox,
}

impl NativeSandbox {
    /// Wraps a sandbox returned by the lifecycle's `connect`.
    pub fn from_core(inner: sandbox_core::Sandbox) -> NativeSandbox {
        NativeSandbox { inner }
    }

    /// The core sandbox.
    pub(crate) fn core(&self) -> &sandbox_core::Sandbox {
        &self.inner
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

/// A running command.
#[napi]
pub struct NativeExec {
    cancel: CancellationToken,
    result: Mutex<Option<oneshot::Receiver<sandbox_core::Result<ExecResult>>>>,
}

#[napi]
impl NativeExec {
    /// Kills the command (its process tree) and makes `wait()` reject with `aborted`.
    #[napi]
    pub fn abort(&self) {
        self.cancel.cancel();
    }

    /// Resolves when the command ends and every chunk has been delivered.
    /// Callable once.
    #[napi]
    pub async fn wait(&self) -> napi::Result<NativeExecResult> {
        let result = self.result.lock().expect("exec handle poisoned").take();
        let result = result.ok_or_else(|| invalid("wait() was already called for this exec"))?;
        let result =
            result.await.map_err(|_| to_napi(sandbox_core::Error::internal("the exec task ended without a result")))?;
        let r = result.map_err(to_napi)?;
        Ok(NativeExecResult {
            exit_code: r.exit_code,
            timed_out: r.timed_out,
            stdout: r.stdout.into(),
            stderr: r.stderr.into(),
            truncated: r.truncated,
        })
    }
}

#[napi]
impl NativeSandbox {
    /// Default working directory (absolute).
    #[napi(getter)]
    pub fn cwd(&self) -> String {
        self.inner.cwd().to_owned()
    }

    /// Starts a command. `onChunk(stream, chunk)` gets stdout (1) and stderr
    /// (2) chunks in arrival order; it must not throw.
    #[napi]
    pub fn start_exec(
        &self,
        command: String,
        options: NativeExecOptions,
        #[napi(ts_arg_type = "((stream: number, chunk: Buffer) => void) | null | undefined")] on_chunk: Option<
            ChunkCallback,
        >,
    ) -> napi::Result<NativeExec> {
        let mut request = ExecRequest::new(command, options.cwd.unwrap_or_default());
        request.env = options.env.unwrap_or_default().into_iter().collect();
        request.timeout = timeout_ms("timeoutMs", options.timeout_ms).map_err(to_napi)?;
        request.max_output_bytes =
            byte_count("maxOutputBytes", options.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES as u64)
                .map_err(to_napi)?
                .try_into()
                .unwrap_or(usize::MAX);
        request.stdin = options.stdin.map(Bytes::from_owner);
        let reattach = options.reattach.unwrap_or(false);
        let cancel = request.cancel.clone();
        let sandbox = self.inner.clone();
        let (done, result) = oneshot::channel();
        spawn(async move {
            let result = match on_chunk {
                None => sandbox.exec(request, reattach).await,
                Some(callback) => {
                    let (tx, rx) = mpsc::channel(DELIVERY_DEPTH);
                    request.output = Some(tx);
                    // `exec` drops its sender when it returns; delivery then
                    // drains what is left, so the promise settles after the
                    // last chunk reached JS.
                    let (result, ()) = tokio::join!(sandbox.exec(request, reattach), deliver(rx, callback));
                    result
                }
            };
            // The handle may have been dropped without wait(): nobody to tell.
            let _ = done.send(result);
        });
        Ok(NativeExec { cancel, result: Mutex::new(Some(result)) })
    }

    /// Reads a whole file (binary). `maxBytes` defaults to 100 MiB.
    #[napi]
    pub async fn read_file(&self, path: String, max_bytes: Option<f64>) -> napi::Result<Buffer> {
        let max = byte_count("maxBytes", max_bytes, DEFAULT_MAX_READ_BYTES).map_err(to_napi)?;
        self.inner.read_file(&path, max).await.map(Buffer::from).map_err(to_napi)
    }

    /// Creates or truncates a file with exactly these bytes, atomically.
    #[napi]
    pub async fn write_file(&self, path: String, content: Buffer) -> napi::Result<()> {
        self.inner.write_file(&path, Bytes::from_owner(content)).await.map_err(to_napi)
    }

    /// `mkdir -p`.
    #[napi]
    pub async fn mkdir(&self, path: String) -> napi::Result<()> {
        self.inner.mkdir(&path).await.map_err(to_napi)
    }

    /// Type, size, mode and mtime (symlinks followed).
    #[napi]
    pub async fn stat(&self, path: String) -> napi::Result<NativeFileStat> {
        let s: FileStat = self.inner.stat(&path).await.map_err(to_napi)?;
        Ok(NativeFileStat {
            is_directory: s.is_directory,
            is_file: s.is_file,
            is_symbolic_link: s.is_symbolic_link,
            size: s.size as f64,
            mtime_ms: s.mtime_ms,
            mode: s.mode,
            kind: s.kind.to_owned(),
        })
    }

    /// Entry names; bytes that are not UTF-8 become U+FFFD (use
    /// `readdirBytes` for exact names).
    #[napi]
    pub async fn readdir(&self, path: String) -> napi::Result<Vec<String>> {
        let names = self.inner.readdir(&path).await.map_err(to_napi)?;
        Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
    }

    /// Entry names as raw bytes.
    #[napi]
    pub async fn readdir_bytes(&self, path: String) -> napi::Result<Vec<Buffer>> {
        let names = self.inner.readdir(&path).await.map_err(to_napi)?;
        Ok(names.into_iter().map(Buffer::from).collect())
    }

    /// Whether the path exists.
    #[napi]
    pub async fn exists(&self, path: String) -> napi::Result<bool> {
        self.inner.exists(&path).await.map_err(to_napi)
    }

    /// Removes a path (`fs.rm` semantics).
    #[napi]
    pub async fn remove(&self, path: String, recursive: bool, force: bool) -> napi::Result<()> {
        self.inner.remove(&path, RemoveOptions { recursive, force }).await.map_err(to_napi)
    }
}
