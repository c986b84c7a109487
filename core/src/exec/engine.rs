//! The exec engine: user commands with cwd, env, stdin, timeout, abort and
//! process-group kill on top of a [`Runtime`], plus the orphan sweep and the
//! per-engine concurrency cap.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::output::{HeadBuffer, HeaderLine, OutputChunk, Stream};
use super::runs::Runs;
use super::runtime::{PodExecRuntime, Runtime};
use super::script::{self, CommandSpec, WrapperHeader};
use super::status::Completion;
use super::ExecTarget;
use crate::error::{Error, ErrorCode, Result};

/// Default cap of each result buffer (`maxOutputBytes`).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;
/// Chunks buffered between the runtime and a consumer (one WebSocket frame each).
const CHANNEL_DEPTH: usize = 16;
/// Upper bound for a kill exec (TERM, 2 s grace, KILL, plus connection setup).
const KILL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long to keep collecting output once the kill has finished.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);
/// Stderr kept for error messages of the engine's own scripts.
const MESSAGE_BYTES: usize = 4096;

/// One user command.
#[derive(Debug)]
pub struct ExecRequest {
    /// Shell command line, run by `/bin/sh -c`.
    pub command: String,
    /// Working directory in the pod; empty keeps the exec's default.
    pub cwd: String,
    /// Extra environment over the pod's own (names must be shell identifiers).
    pub env: Vec<(String, String)>,
    /// Kill the command and resolve `timed_out` after this long (includes
    /// waiting for a concurrency slot). `None`: no timeout.
    pub timeout: Option<Duration>,
    /// Bytes for the command's stdin, followed by EOF. `None` or empty: the
    /// command reads EOF at once.
    pub stdin: Option<Bytes>,
    /// Cap of each of the stdout and stderr result buffers. The command keeps
    /// running past it and [`ExecRequest::output`] still gets everything.
    pub max_output_bytes: usize,
    /// Receives every chunk of both streams in arrival order. Bounded: a slow
    /// consumer slows the command's output down instead of growing memory.
    pub output: Option<mpsc::Sender<OutputChunk>>,
    /// Cancelling kills the command and fails the exec with `aborted`.
    pub cancel: CancellationToken,
}

impl ExecRequest {
    /// A request with defaults: no env, no stdin, no timeout, 16 MiB buffers.
    pub fn new(command: impl Into<String>, cwd: impl Into<String>) -> Self {
        ExecRequest {
            command: command.into(),
            cwd: cwd.into(),
            env: Vec::new(),
            timeout: None,
            stdin: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            output: None,
            cancel: CancellationToken::new(),
        }
    }
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit status as the shell reports it (127 not found, 126 not
    /// executable, 128+n for a signal the command itself died of); `None`
    /// when the engine killed it on timeout.
    pub exit_code: Option<i32>,
    /// The timeout fired and the command was killed.
    pub timed_out: bool,
    /// Head of stdout, at most `max_output_bytes`.
    pub stdout: Vec<u8>,
    /// Head of stderr, at most `max_output_bytes`.
    pub stderr: Vec<u8>,
    /// Output beyond `max_output_bytes` was left out of a buffer.
    pub truncated: bool,
}

/// Runs commands in pods. Cheap to clone; one per provider.
#[derive(Clone)]
pub struct ExecEngine {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Box<dyn Runtime>,
    permits: Arc<Semaphore>,
    runs: Arc<Runs>,
}

impl std::fmt::Debug for ExecEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecEngine").field("instance", &self.inner.runs.instance()).finish_non_exhaustive()
    }
}

impl ExecEngine {
    /// An engine over pods/exec with at most `max_concurrent_execs` commands
    /// and file operations in flight (kills are exempt, so they cannot queue
    /// behind the commands they stop). Exec bypasses API Priority and
    /// Fairness, so this cap is the only one.
    pub fn new(client: kube::Client, max_concurrent_execs: usize) -> Self {
        Self::with_runtime(Box::new(PodExecRuntime::new(client)), max_concurrent_execs)
    }

    /// An engine over any [`Runtime`].
    pub fn with_runtime(runtime: Box<dyn Runtime>, max_concurrent_execs: usize) -> Self {
        ExecEngine {
            inner: Arc::new(Inner {
                runtime,
                permits: Arc::new(Semaphore::new(max_concurrent_execs.max(1))),
                runs: Runs::new(),
            }),
        }
    }

    /// Runs a user command (see [`ExecRequest`]).
    ///
    /// Invalid requests fail with `invalid_request` before anything runs. A
    /// cancelled token fails with `aborted` at once. Timeout and abort kill
    /// the command's process group (TERM, 2 s, KILL) with a second exec and
    /// wait for it; a dropped connection does the same and fails with
    /// `connection_lost`.
    pub async fn exec(&self, target: &ExecTarget, request: ExecRequest) -> Result<ExecResult> {
        let ExecRequest { command, cwd, env, timeout, stdin, max_output_bytes, output, cancel } = request;
        let stdin = stdin.filter(|s| !s.is_empty());
        let run = self.inner.runs.start();
        let spec = CommandSpec { command: &command, cwd: &cwd, env: &env, stdin_len: stdin.as_ref().map(Bytes::len) };
        let argv = script::wrapper_argv(&run.id, &spec)?;
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let _permit = tokio::select! {
            permit = self.inner.permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = cancel.cancelled() => return Err(aborted()),
            () = sleep_until(deadline) => return Ok(Collector::new(max_output_bytes, None).result(None, true)),
        };

        let mut collector = Collector::new(max_output_bytes, output);
        let outcome = {
            let work = self.run_with(target, argv, stdin, |rx| collector.consume(rx));
            tokio::pin!(work);
            let stop = tokio::select! {
                ended = &mut work => Err(ended),
                () = cancel.cancelled() => Ok(Stop::Aborted),
                () = sleep_until(deadline) => Ok(Stop::TimedOut),
            };
            match stop {
                Err(ended) => Err(ended),
                Ok(stop) => {
                    // Keep collecting while the group dies, so the result has
                    // the output written up to the kill.
                    let kill = self.kill(target, &run.id);
                    tokio::pin!(kill);
                    tokio::select! {
                        _ = &mut work => kill.await,
                        () = &mut kill => { let _ = tokio::time::timeout(DRAIN_AFTER_KILL, &mut work).await; }
                    }
                    Ok(stop)
                }
            }
        };
        match outcome {
            Err(ended) => self.finish(target, &run.id, &cwd, ended, collector).await,
            Ok(Stop::Aborted) => Err(aborted()),
            Ok(Stop::TimedOut) => Ok(collector.result(None, true)),
        }
    }

    /// Kills every process group recorded in the pod that is not a live
    /// command of this engine: left behind by a crashed or killed host
    /// process, or by a connection whose kill failed. Called on connect so a
    /// resumed session never shares the workspace with an orphan.
    pub async fn sweep_orphans(&self, target: &ExecTarget) -> Result<()> {
        let (next, live) = self.inner.runs.snapshot();
        let argv = script::sweep_argv(self.inner.runs.instance(), next, &live);
        let (ended, stderr) = self.run_script(target, argv, None, |_| Ok(())).await?;
        script_status(ended, "the orphan sweep", stderr).map(drop)
    }

    /// Runs one of the engine's own scripts under the concurrency cap,
    /// handing stdout chunks to `on_stdout` (an `Err` from it stops the run
    /// and is returned); returns how it ended and the head of its stderr.
    pub(crate) async fn run_script(
        &self,
        target: &ExecTarget,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        mut on_stdout: impl FnMut(Bytes) -> Result<()> + Send,
    ) -> Result<(Completion, HeadBuffer)> {
        let _permit = self.inner.permits.acquire().await.expect("the semaphore is never closed");
        let mut stderr = HeadBuffer::new(MESSAGE_BYTES);
        let ended = self
            .run_with(target, argv, stdin, |rx| {
                consume_with(rx, |OutputChunk { stream, data }| match stream {
                    Stream::Stdout => on_stdout(data),
                    Stream::Stderr => {
                        stderr.push(&data);
                        Ok(())
                    }
                })
            })
            .await?;
        Ok((ended, stderr))
    }

    /// Runs `argv` while `consume` takes its output.
    fn run_with<'a, C>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        consume: impl FnOnce(mpsc::Receiver<OutputChunk>) -> C,
    ) -> impl Future<Output = Result<Completion>> + Send + 'a
    where
        C: Future<Output = Result<()>> + Send + 'a,
    {
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let consumer = consume(rx);
        let ran = self.inner.runtime.run(target, argv, stdin, tx);
        async move {
            let (ran, consumed) = tokio::join!(ran, consumer);
            consumed?;
            ran
        }
    }

    /// Maps a finished wrapper run to the caller's result.
    async fn finish(
        &self,
        target: &ExecTarget,
        run: &str,
        cwd: &str,
        ended: Result<Completion>,
        collector: Collector,
    ) -> Result<ExecResult> {
        let header = collector.header.line().and_then(WrapperHeader::parse);
        match (ended, header) {
            (Ok(Completion::Exited(code)), Some(WrapperHeader::Started)) => Ok(collector.result(Some(code), false)),
            (Ok(Completion::Exited(_)), Some(WrapperHeader::BadCwd)) => Err(Error::new(
                ErrorCode::NotFound,
                format!("cwd {:?} does not exist or is not an accessible directory; nothing was run", cwd),
            )),
            (Ok(Completion::Exited(_)), Some(WrapperHeader::NoRunDir)) => Err(Error::internal(
                "cannot create ${TMPDIR:-/tmp}/.agent-sandbox/run in the sandbox (is the filesystem read-only? \
                 set TMPDIR in the pod to a writable directory); nothing was run",
            )),
            (Ok(Completion::Exited(code)), None) => Err(Error::internal(format!(
                "the exec wrapper failed before starting the command (exit {code}): {}",
                String::from_utf8_lossy(&collector.stderr.into_inner()).trim()
            ))),
            (Ok(Completion::Failed(message)), header) => {
                if header == Some(WrapperHeader::Started) {
                    self.kill(target, run).await;
                }
                Err(Error::internal(format!("the container runtime failed the exec: {message}")))
            }
            (Err(e), _) if e.code == ErrorCode::ConnectionLost => {
                self.kill(target, run).await;
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Best-effort kill of one run's process group through a second exec.
    async fn kill(&self, target: &ExecTarget, run: &str) {
        let argv = script::kill_argv(&[run.to_owned()]);
        let work = self.run_with(target, argv, None, |rx| consume_with(rx, |_| Ok(())));
        // Failure leaves an orphan for the next sweep; nothing better to do here.
        let _ = tokio::time::timeout(KILL_TIMEOUT, work).await;
    }
}

/// Why a command was stopped by the engine.
enum Stop {
    Aborted,
    TimedOut,
}

/// The `aborted` error; its message is exactly "aborted", as callers match on it.
fn aborted() -> Error {
    Error::new(ErrorCode::Aborted, "aborted")
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Hands chunks to `on_chunk` until the run ends or it fails.
async fn consume_with(mut rx: mpsc::Receiver<OutputChunk>, mut on_chunk: impl FnMut(OutputChunk) -> Result<()>) -> Result<()> {
    while let Some(chunk) = rx.recv().await {
        on_chunk(chunk)?;
    }
    Ok(())
}

/// Exit 0 of one of the engine's scripts, or an error naming it.
pub(crate) fn script_status(ended: Completion, what: &str, stderr: HeadBuffer) -> Result<i32> {
    match ended {
        Completion::Exited(code) => Ok(code),
        Completion::Failed(message) => Err(Error::internal(format!("{what} failed in the container runtime: {message}"))),
    }
    .and_then(|code| match code {
        0 => Ok(0),
        n => Err(Error::internal(format!(
            "{what} failed (exit {n}): {}",
            String::from_utf8_lossy(&stderr.into_inner()).trim()
        ))),
    })
}

/// Collects a user command's output: strips the wrapper's header, keeps the
/// capped buffers, forwards every chunk to the caller's channel.
struct Collector {
    header: HeaderLine,
    stdout: HeadBuffer,
    stderr: HeadBuffer,
    output: Option<mpsc::Sender<OutputChunk>>,
}

impl Collector {
    fn new(limit: usize, output: Option<mpsc::Sender<OutputChunk>>) -> Self {
        Collector {
            header: HeaderLine::default(),
            stdout: HeadBuffer::new(limit),
            stderr: HeadBuffer::new(limit),
            output,
        }
    }

    async fn consume(&mut self, mut rx: mpsc::Receiver<OutputChunk>) -> Result<()> {
        while let Some(OutputChunk { stream, data }) = rx.recv().await {
            let data = match stream {
                Stream::Stdout => match self.header.feed(data) {
                    Some(rest) => rest,
                    None => continue,
                },
                Stream::Stderr => data,
            };
            match stream {
                Stream::Stdout => self.stdout.push(&data),
                Stream::Stderr => self.stderr.push(&data),
            }
            if let Some(tx) = &self.output {
                if tx.send(OutputChunk { stream, data }).await.is_err() {
                    // The consumer is gone; the result buffers still fill.
                    self.output = None;
                }
            }
        }
        Ok(())
    }

    fn result(self, exit_code: Option<i32>, timed_out: bool) -> ExecResult {
        let truncated = self.stdout.truncated() || self.stderr.truncated();
        ExecResult { exit_code, timed_out, stdout: self.stdout.into_inner(), stderr: self.stderr.into_inner(), truncated }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_status_names_the_script() {
        let mut err = HeadBuffer::new(100);
        err.push(b"boom\n");
        let e = script_status(Completion::Exited(3), "the sweep", err).unwrap_err();
        assert_eq!(e.message, "the sweep failed (exit 3): boom");
        assert_eq!(script_status(Completion::Exited(0), "x", HeadBuffer::new(1)).unwrap(), 0);
        assert!(script_status(Completion::Failed("no".into()), "x", HeadBuffer::new(1)).is_err());
    }
}
