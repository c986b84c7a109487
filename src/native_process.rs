//! `NativeProcess`: the napi face of a spawned process, and the sandbox
//! methods that make or find one. `js/process.js` wraps it into the
//! `SandboxProcess` object (AbortSignal, chunk objects, error codes).
//!
//! `follow` and `wait` run until the process ends, so, like exec, they are
//! split in two for abort: a sync `start…` starts the work as a task and
//! returns its `NativeTask` with `abort()` and `wait()`.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sandbox_core::{
    byte_count, sequence, timeout_ms, Kill, ProcessExit, ProcessInfo, ProcessPoll, Provider, SpawnRequest, SpawnStdin,
    DEFAULT_PROCESS_CAP,
};

use crate::calls::{promise, NativeCancel};
use crate::delivery::{delivering, stream_code, ChunkCallback};
use crate::errors::to_napi;
use crate::native_sandbox::NativeSandbox;
use crate::task::{NativeTask, Task, TaskEnd};

/// Options of `spawn`; `js/process.js` fills and checks the JS side.
#[napi(object)]
pub struct NativeSpawnOptions {
    /// Working directory; default: the sandbox's cwd.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Option<HashMap<String, String>>,
    /// Bytes for stdin, then EOF; `true`: keep stdin open for `writeStdin`.
    pub stdin: Option<Either<Buffer, bool>>,
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
    /// Owns its follow and wait tasks (see `task`).
    provider: Arc<Provider>,
    info: ProcessInfo,
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
    /// Streams chunks after `after` to `onOutput(stream, chunk, sequence)`
    /// as they are written, until the process ends. `wait()` resolves with
    /// a `NativeProcessEnd`.
    #[napi]
    pub fn start_follow(
        &self,
        after: Option<f64>,
        #[napi(ts_arg_type = "((stream: number, chunk: Buffer, sequence: number) => void) | null | undefined")]
        on_output: Option<ChunkCallback>,
    ) -> napi::Result<NativeTask> {
        let after = sequence("after", after).map_err(to_napi)?;
        let (sandbox, id) = (self.sandbox.clone(), self.info.id.clone());
        let task: Task<TaskEnd> = Task::spawn(&self.provider, move |cancel| async move {
            let followed = delivering(on_output, |output| sandbox.follow_process(&id, after, output, cancel)).await?;
            Ok(Either::B(NativeProcessEnd { exit: followed.exit.into(), truncated: followed.truncated }))
        });
        Ok(task.into())
    }

    /// Resolves when the process has exited (also long after). `wait()`
    /// resolves with a `NativeProcessEnd`.
    #[napi]
    pub fn start_wait(&self) -> NativeTask {
        let (sandbox, id) = (self.sandbox.clone(), self.info.id.clone());
        let task: Task<TaskEnd> = Task::spawn(&self.provider, move |cancel| async move {
            let exit = sandbox.wait_process(&id, cancel).await?;
            Ok(Either::B(NativeProcessEnd { exit: exit.into(), truncated: false }))
        });
        task.into()
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
        let (sandbox, provider, call) = (self.core().clone(), self.provider().clone(), cancel.call());
        promise(env, async move {
            let mut request = SpawnRequest::new(command, options.cwd.unwrap_or_default());
            request.env = options.env.unwrap_or_default().into_iter().collect();
            request.timeout = timeout_ms("timeoutMs", options.timeout_ms)?;
            request.max_output_bytes = byte_count("maxOutputBytes", options.max_output_bytes, DEFAULT_PROCESS_CAP)?;
            request.stdin = match options.stdin {
                Some(Either::A(bytes)) => SpawnStdin::Bytes(Bytes::from_owner(bytes)),
                Some(Either::B(true)) => SpawnStdin::Open,
                Some(Either::B(false)) | None => SpawnStdin::None,
            };
            let info = sandbox.spawn(request, call).await?;
            Ok(NativeProcess { sandbox, provider, info })
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
        let (sandbox, provider, call) = (self.core().clone(), self.provider().clone(), cancel.call());
        promise(env, async move {
            let info = sandbox.process(&id, call).await?;
            Ok(info.map(|info| NativeProcess { sandbox, provider, info }))
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
