//! `NativeProcess`: the napi face of a spawned process, and the sandbox
//! methods that make or find one. `js/process.js` wraps it into the
//! `SandboxProcess` object (AbortSignal, chunk objects, error codes).
//!
//! `follow` and `wait` run until the process ends, so, like exec, they are
//! split in two for abort: a sync `start…` spawns the work on napi's Tokio
//! runtime and returns a `NativeProcessTask` with `abort()` and `wait()`.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use napi::bindgen_prelude::{spawn, Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sandbox_core::exec::Stream;
use sandbox_core::process::{Kill, ProcessExit, ProcessInfo, ProcessPoll, SpawnRequest, SpawnStdin, DEFAULT_CAP};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::calls::{promise, NativeCancel};
use crate::delivery::{deliver_sequenced, SequencedCallback};
use crate::errors::{invalid, to_napi};
use crate::native_sandbox::NativeSandbox;
use sandbox_core::args::{byte_count, sequence, timeout_ms};

/// Chunks queued between a follower and the JS callback.
const DELIVERY_DEPTH: usize = 16;

/// Options of `spawn`; `js/process.js` fills and checks the JS side.
#[napi(object)]
pub struct NativeSpawnOptions {
    /// Working directory; default: the sandbox's cwd.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Option<HashMap<String, String>>,
    /// Bytes for stdin, then EOF.
    pub stdin: Option<Buffer>,
    /// Keep stdin open for `writeStdin`.
    pub stdin_open: Option<bool>,
    /// Kill after this many ms (enforced in the sandbox).
    pub timeout_ms: Option<f64>,
    /// Bytes kept of each of stdout and stderr; default 32 MiB, at most 64 MiB.
    pub max_output_bytes: Option<f64>,
}

/// How a process ended.
#[napi(object)]
pub struct NativeProcessExit {
    /// Exit status; null when the provider killed it (kill, timeout) or it
    /// was lost.
    pub exit_code: Option<i32>,
    /// The signal the provider killed it with (`"SIGKILL"`, …).
    pub signal: Option<String>,
    /// The timeout killed it.
    pub timed_out: bool,
    /// It ended with its pod (or its waiter was killed): status unknown.
    pub lost: bool,
}

impl From<ProcessExit> for NativeProcessExit {
    fn from(e: ProcessExit) -> Self {
        NativeProcessExit { exit_code: e.exit_code, signal: e.signal_name(), timed_out: e.timed_out, lost: e.lost }
    }
}

/// What a follow or wait task resolves with.
#[napi(object)]
pub struct NativeProcessEnd {
    /// How the process ended.
    pub exit: NativeProcessExit,
    /// Output past the cap was not kept (follow only).
    pub truncated: bool,
}

/// One chunk of a poll.
#[napi(object)]
pub struct NativeProcessChunk {
    /// Pass the last one seen to resume after it.
    pub sequence: f64,
    /// 1 stdout, 2 stderr.
    pub stream: u32,
    /// The bytes.
    pub data: Buffer,
}

/// What `poll` resolves with.
#[napi(object)]
pub struct NativeProcessPoll {
    /// Every chunk after the requested sequence.
    pub chunks: Vec<NativeProcessChunk>,
    /// Set once exited and every chunk delivered.
    pub exit: Option<NativeProcessExit>,
    /// Output past the cap was not kept.
    pub truncated: bool,
}

/// A process as listed.
#[napi(object)]
pub struct NativeProcessInfo {
    /// Id.
    pub id: String,
    /// Pid in the sandbox.
    pub pid: u32,
    /// Command line.
    pub command: String,
    /// Start time, ms since the epoch.
    pub started_at: f64,
    /// How it ended, once it has.
    pub exit: Option<NativeProcessExit>,
}

impl From<&ProcessInfo> for NativeProcessInfo {
    fn from(p: &ProcessInfo) -> Self {
        NativeProcessInfo {
            id: p.id.clone(),
            pid: p.pid,
            command: p.command.clone(),
            started_at: p.started_at_ms as f64,
            exit: p.exit.map(Into::into),
        }
    }
}

/// A spawned process.
#[napi]
pub struct NativeProcess {
    sandbox: sandbox_core::Sandbox,
    info: ProcessInfo,
}

/// A running follow or wait.
#[napi]
pub struct NativeProcessTask {
    cancel: CancellationToken,
    result: Mutex<Option<oneshot::Receiver<sandbox_core::Result<NativeProcessEnd>>>>,
}

#[napi]
impl NativeProcessTask {
    /// Stops following or waiting (the process goes on); `wait()` rejects
    /// with `aborted`.
    #[napi]
    pub fn abort(&self) {
        self.cancel.cancel();
    }

    /// Resolves when the process has ended (and, for follow, every chunk
    /// reached the callback). Callable once.
    #[napi]
    pub async fn wait(&self) -> napi::Result<NativeProcessEnd> {
        let result = self.result.lock().expect("task handle poisoned").take();
        let result = result.ok_or_else(|| invalid("wait() was already called for this task"))?;
        let result =
            result.await.map_err(|_| to_napi(sandbox_core::Error::internal("the task ended without a result")))?;
        result.map_err(to_napi)
    }
}

/// A core poll as JS sees it.
fn poll_result(poll: ProcessPoll) -> NativeProcessPoll {
    NativeProcessPoll {
        chunks: poll
            .chunks
            .into_iter()
            .map(|c| NativeProcessChunk {
                sequence: c.sequence as f64,
                stream: stream_code(c.stream),
                data: c.data.to_vec().into(),
            })
            .collect(),
        exit: poll.exit.map(Into::into),
        truncated: poll.truncated,
    }
}

fn stream_code(stream: Stream) -> u32 {
    match stream {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    }
}

#[napi]
impl NativeProcess {
    /// Process id (pass to `sandbox.process(id)` to find it again).
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.info.id.clone()
    }

    /// Pid of the command's shell in the sandbox.
    #[napi(getter)]
    pub fn pid(&self) -> u32 {
        self.info.pid
    }

    /// The command line.
    #[napi(getter)]
    pub fn command(&self) -> String {
        self.info.command.clone()
    }

    /// Start time, ms since the epoch.
    #[napi(getter)]
    pub fn started_at(&self) -> f64 {
        self.info.started_at_ms as f64
    }

    /// The chunks after `after` the sandbox has now (at most 8 MiB of each
    /// stream); `exit` once exited and all output delivered.
    #[napi(ts_return_type = "Promise<NativeProcessPoll>")]
    pub fn poll<'env>(
        &self,
        env: &'env Env,
        after: Option<f64>,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeProcessPoll>> {
        let (sandbox, id, call) = (self.sandbox.clone(), self.info.id.clone(), cancel.call());
        promise(env, async move {
            let poll = sandbox.poll_process(&id, sequence("after", after)?, call).await?;
            Ok(poll_result(poll))
        })
    }
    /// Streams chunks after `after` to `onOutput(sequence, stream, chunk)` as
    /// they are written, until the process ends.
    #[napi]
    pub fn start_follow(
        &self,
        after: Option<f64>,
        #[napi(ts_arg_type = "((sequence: number, stream: number, chunk: Buffer) => void) | null | undefined")]
        on_output: Option<SequencedCallback>,
    ) -> napi::Result<NativeProcessTask> {
        let after = sequence("after", after).map_err(to_napi)?;
        let (sandbox, id) = (self.sandbox.clone(), self.info.id.clone());
        Ok(start(move |cancel| async move {
            let followed = match on_output {
                None => sandbox.follow_process(&id, after, None, cancel).await,
                Some(callback) => {
                    let (tx, rx) = mpsc::channel(DELIVERY_DEPTH);
                    let (followed, ()) = tokio::join!(
                        sandbox.follow_process(&id, after, Some(tx), cancel),
                        deliver_sequenced(rx, callback)
                    );
                    followed
                }
            }?;
            Ok(NativeProcessEnd { exit: followed.exit.into(), truncated: followed.truncated })
        }))
    }

    /// Resolves when the process has exited (also long after).
    #[napi]
    pub fn start_wait(&self) -> NativeProcessTask {
        let (sandbox, id) = (self.sandbox.clone(), self.info.id.clone());
        start(move |cancel| async move {
            let exit = sandbox.wait_process(&id, cancel).await?;
            Ok(NativeProcessEnd { exit: exit.into(), truncated: false })
        })
    }

    /// Writes to the process's stdin (spawned with `stdin: true`).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn write_stdin<'env>(
        &self,
        env: &'env Env,
        data: Buffer,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (sandbox, id, call, data) =
            (self.sandbox.clone(), self.info.id.clone(), cancel.call(), Bytes::from_owner(data));
        promise(env, async move { sandbox.write_stdin(&id, data, call).await })
    }

    /// Closes the process's stdin.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close_stdin<'env>(&self, env: &'env Env, cancel: &NativeCancel) -> napi::Result<PromiseRaw<'env, ()>> {
        let (sandbox, id, call) = (self.sandbox.clone(), self.info.id.clone(), cancel.call());
        promise(env, async move { sandbox.close_stdin(&id, call).await })
    }

    /// Signals the process and every process it started; without a signal,
    /// ends them for sure (TERM, 2 s of grace, KILL).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn kill<'env>(
        &self,
        env: &'env Env,
        signal: Option<String>,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (sandbox, id, call) = (self.sandbox.clone(), self.info.id.clone(), cancel.call());
        promise(env, async move {
            let kill = signal.as_deref().map(Kill::signal).transpose()?.unwrap_or(Kill::Terminate);
            sandbox.kill_process(&id, kill, call).await
        })
    }
}

/// Spawns `work` with a fresh cancel token; the handle aborts and awaits it.
fn start<F, Fut>(work: F) -> NativeProcessTask
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: std::future::Future<Output = sandbox_core::Result<NativeProcessEnd>> + Send + 'static,
{
    let cancel = CancellationToken::new();
    let (done, result) = oneshot::channel();
    let fut = work(cancel.clone());
    spawn(async move {
        // The handle may have been dropped without wait(): nobody to tell.
        let _ = done.send(fut.await);
    });
    NativeProcessTask { cancel, result: Mutex::new(Some(result)) }
}

#[napi]
impl NativeSandbox {
    /// Starts `command` in the background; resolves once it runs.
    #[napi(ts_return_type = "Promise<NativeProcess>")]
    pub fn spawn<'env>(
        &self,
        env: &'env Env,
        command: String,
        options: NativeSpawnOptions,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeProcess>> {
        let (sandbox, call) = (self.core().clone(), cancel.call());
        promise(env, async move {
            let mut request = SpawnRequest::new(command, options.cwd.unwrap_or_default());
            request.env = options.env.unwrap_or_default().into_iter().collect();
            request.timeout = timeout_ms("timeoutMs", options.timeout_ms)?;
            request.max_output_bytes = byte_count("maxOutputBytes", options.max_output_bytes, DEFAULT_CAP)?;
            request.stdin = match (options.stdin, options.stdin_open.unwrap_or(false)) {
                (Some(_), true) => {
                    return Err(sandbox_core::Error::invalid_request("stdin is either bytes or true, not both"))
                }
                (Some(bytes), false) => SpawnStdin::Bytes(Bytes::from_owner(bytes)),
                (None, true) => SpawnStdin::Open,
                (None, false) => SpawnStdin::None,
            };
            let info = sandbox.spawn(request, call).await?;
            Ok(NativeProcess { sandbox, info })
        })
    }

    /// The process with this id, or null if the sandbox does not know it.
    #[napi(ts_return_type = "Promise<NativeProcess | null>")]
    pub fn process<'env>(
        &self,
        env: &'env Env,
        id: String,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, Option<NativeProcess>>> {
        let (sandbox, call) = (self.core().clone(), cancel.call());
        promise(env, async move {
            let info = sandbox.process(&id, call).await?;
            Ok(info.map(|info| NativeProcess { sandbox, info }))
        })
    }

    /// Every process the sandbox keeps, in start order.
    #[napi(ts_return_type = "Promise<Array<NativeProcessInfo>>")]
    pub fn processes<'env>(
        &self,
        env: &'env Env,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, Vec<NativeProcessInfo>>> {
        let (sandbox, call) = (self.core().clone(), cancel.call());
        promise(env, async move { Ok(sandbox.processes(call).await?.iter().map(Into::into).collect()) })
    }
}
