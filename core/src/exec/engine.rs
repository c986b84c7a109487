//! The exec engine: user commands with cwd, env, stdin, timeout, abort and
//! process-tree kill on top of a [`Runtime`], plus the orphan sweep and the
//! per-engine concurrency cap.
//!
//! Every user command goes through the wrapper ([`super::wrapper`]); the
//! engine strips its trailers ([`super::trailer`]) and ends the exec there,
//! so a command returns when its own process exits even if a child it left
//! in the background still holds stdout open. Callers with their own use for
//! the output (the process follower) plug in a [`Sink`].
//!
//! Cancel safety: dropping an `exec` future closes its connection but does
//! not kill the command (only an explicit abort or timeout does); it keeps
//! running until it exits or the next connect's orphan sweep.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::kill;
use super::output::{HeadBuffer, OutputChunk, Stream};
use super::permits::Permits;
use super::request::{Call, ExecRequest, ExecResult};
use super::runs::{RunGuard, Runs};
use super::runtime::{Release, Runtime, Stdin, TerminalInput, TerminalSize, Tunnel};
use super::sink::{Collector, Sink, TerminalStart, Wrapped};
use super::status::Completion;
use super::websocket::PodExecRuntime;
use super::wrapper::{self, CommandSpec, CommandStdin, WrapperCall, WrapperEnd};
use super::ExecTarget;
use crate::error::{quoted, shorten, Error, ErrorCode, Result};
use crate::trace;

/// Chunks buffered between the runtime and a consumer (one WebSocket frame each).
const CHANNEL_DEPTH: usize = 16;
/// Upper bound for a kill exec (TERM, 2 s grace, KILL, plus connection setup).
const KILL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long to keep collecting output once the kill has finished.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);
/// Stderr kept for error messages of the engine's own scripts.
const MESSAGE_BYTES: usize = 16 * 1024;
/// Long-lived runs (followers, waits) in flight at once, and per sandbox.
/// They last as long as a process, so they have slots of their own and
/// cannot take the ones of calls.
const MAX_LONG_RUNS: usize = 256;
const MAX_LONG_RUNS_PER_SANDBOX: usize = 32;
/// Upper bound of the orphan sweep (it reads `/proc`, nothing that blocks).
const SWEEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs commands in pods. Cheap to clone; one per provider.
#[derive(Clone)]
pub struct ExecEngine {
    inner: Arc<Inner>,
    /// Commands also go into the exec request's URL (see
    /// [`ExecEngine::with_commands_in_audit_log`]).
    audit: bool,
}

struct Inner {
    runtime: Box<dyn Runtime>,
    /// Commands and the engine's scripts.
    calls: Permits,
    /// Followers and waits.
    long: Permits,
    runs: Arc<Runs>,
}

impl std::fmt::Debug for ExecEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecEngine").field("instance", &self.inner.runs.instance()).finish_non_exhaustive()
    }
}

/// A command for [`ExecEngine::run_command`]: an [`ExecRequest`] without the
/// output handling, which the caller's [`Sink`] does.
pub(crate) struct Command {
    pub command: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub stdin: CommandInput,
    pub timeout: Option<Duration>,
    pub cancel: CancellationToken,
    /// A follower or a wait: it lasts as long as a process, so it takes a
    /// slot of its own class instead of one of `maxConcurrentExecs`, and a
    /// few of them cannot starve every other call.
    pub long_lived: bool,
}

/// What a [`Command`] reads.
pub(crate) enum CommandInput {
    /// Nothing (`/dev/null`).
    None,
    /// These bytes, then EOF.
    Bytes(Bytes),
    /// A stream: the command reads the exec's own stdin and must know where
    /// its input ends (no EOF comes); the transfer scripts frame it.
    Stream(mpsc::Receiver<Bytes>),
    /// A terminal (see [`TerminalCommand`]).
    Terminal(TerminalCommand),
}

impl From<Option<Bytes>> for CommandInput {
    /// Empty bytes are no stdin.
    fn from(bytes: Option<Bytes>) -> Self {
        bytes.filter(|b| !b.is_empty()).map_or(CommandInput::None, CommandInput::Bytes)
    }
}

/// A command's terminal: the command runs on a TTY of `size`, its input
/// comes from `input` once it runs, and `started` gets the run id and the
/// pid of its wrapper (the terminal's session leader) then. The wrapper's handshake
/// (see [`wrapper::WRAPPER`]) is the engine's: the caller sees only the
/// command's own output.
pub(crate) struct TerminalCommand {
    pub size: TerminalSize,
    pub input: mpsc::Receiver<TerminalInput>,
    pub started: oneshot::Sender<(String, u32)>,
}

/// How [`ExecEngine::run_command`] ended.
pub(crate) enum RunEnd {
    /// The command exited with this status.
    Exited(i32),
    /// The timeout fired and the command was killed.
    TimedOut,
    /// The sink said it was done; the command may still be running.
    Released,
}

impl ExecEngine {
    /// An engine over pods/exec with at most `max_concurrent_execs` commands
    /// and file operations in flight, `per_sandbox` of them in one pod
    /// (kills are exempt, so they cannot queue behind the commands they
    /// stop). Exec bypasses API Priority and Fairness, so this cap is the
    /// only one.
    pub fn new(
        client: kube::Client,
        pods: crate::client::informer::Informer<k8s_openapi::api::core::v1::Pod>,
        max_concurrent_execs: usize,
        per_sandbox: usize,
    ) -> Self {
        Self::with_shares(Box::new(PodExecRuntime::new(client, pods)), max_concurrent_execs, per_sandbox)
    }

    /// An engine over any [`Runtime`], one sandbox may use every slot.
    pub fn with_runtime(runtime: Box<dyn Runtime>, max_concurrent_execs: usize) -> Self {
        Self::with_shares(runtime, max_concurrent_execs, max_concurrent_execs)
    }

    /// An engine over any [`Runtime`] with a per-sandbox share of the slots
    /// (see the `permits` module).
    pub fn with_shares(runtime: Box<dyn Runtime>, max_concurrent_execs: usize, per_sandbox: usize) -> Self {
        ExecEngine {
            inner: Arc::new(Inner {
                runtime,
                calls: Permits::new(max_concurrent_execs, per_sandbox),
                long: Permits::new(MAX_LONG_RUNS, MAX_LONG_RUNS_PER_SANDBOX),
                runs: Runs::new(),
            }),
            audit: false,
        }
    }

    /// Also puts each command's text (never env values) into the exec
    /// request's URL, where the API server's audit log records it; by
    /// default commands travel on stdin (see [`wrapper::WRAPPER`]).
    pub fn with_commands_in_audit_log(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// Whether commands go into the exec URL too.
    pub(crate) fn audit_commands(&self) -> bool {
        self.audit
    }

    /// Runs a user command (see [`ExecRequest`]).
    ///
    /// Invalid requests fail with `invalid_request` before anything runs. A
    /// cancelled token fails with `aborted` at once. Timeout and abort kill
    /// the command's process tree (TERM, 2 s, KILL) with a second exec and
    /// wait for it; a dropped connection does the same and fails with
    /// `connection_lost`. The result comes when the command's own process
    /// exits; children it left running keep running.
    pub async fn exec(&self, target: &ExecTarget, request: ExecRequest) -> Result<ExecResult> {
        let ExecRequest { command, cwd, env, timeout, stdin, max_output_bytes, output, cancel } = request;
        let mut collector = Collector::new(max_output_bytes, output);
        let command = Command { command, cwd, env, stdin: stdin.into(), timeout, cancel, long_lived: false };
        match self.run_command(target, command, &mut collector).await? {
            RunEnd::Exited(code) => Ok(collector.result(Some(code), false)),
            RunEnd::TimedOut => Ok(collector.result(None, true)),
            RunEnd::Released => Err(Error::internal("the exec output collector ended the session")),
        }
    }

    /// Runs a command through the wrapper, handing its output to `sink`.
    pub(crate) async fn run_command(
        &self,
        target: &ExecTarget,
        command: Command,
        sink: &mut impl Sink,
    ) -> Result<RunEnd> {
        let run = self.inner.runs.start();
        if !trace::enabled() {
            return self.run_started(target, run, command, sink).await;
        }
        let id = run.id.clone();
        let names: Vec<&str> = command.env.iter().map(|(name, _)| name.as_str()).collect();
        trace!(
            "exec {id} in {}/{}: start ({} command bytes, {} stdin bytes, env {names:?}, cwd {:?})",
            target.namespace,
            target.pod,
            command.command.len(),
            match &command.stdin {
                CommandInput::Bytes(bytes) => bytes.len(),
                _ => 0,
            },
            command.cwd
        );
        let start = Instant::now();
        let end = self.run_started(target, run, command, sink).await;
        let how = match &end {
            Ok(RunEnd::Exited(code)) => format!("exit {code}"),
            Ok(RunEnd::TimedOut) => "timed out, killed".to_owned(),
            Ok(RunEnd::Released) => "released".to_owned(),
            Err(e) => format!("failed: {}", e.code),
        };
        trace!("exec {id}: {how} after {} ms", start.elapsed().as_millis());
        end
    }

    /// [`ExecEngine::run_command`] for a run already recorded.
    async fn run_started(
        &self,
        target: &ExecTarget,
        run: RunGuard,
        command: Command,
        sink: &mut impl Sink,
    ) -> Result<RunEnd> {
        let Command { command, cwd, env, stdin, timeout, cancel, long_lived } = command;
        let spec = CommandSpec {
            command: &command,
            cwd: &cwd,
            env: &env,
            stdin: match &stdin {
                CommandInput::None => CommandStdin::None,
                CommandInput::Bytes(bytes) => CommandStdin::Bytes(bytes.len()),
                CommandInput::Stream(_) => CommandStdin::Stream,
                CommandInput::Terminal(terminal) => CommandStdin::Terminal(terminal.size),
            },
        };
        let WrapperCall { argv, mut stdin_prefix } =
            wrapper::wrapper_argv(&run.id, &run.secret, &spec, run.cleanup_bound, self.audit)?;
        // A terminal's wrapper gets its prefix once it has said it takes it
        // raw (`TerminalStart`), then the caller's input; every other
        // wrapper gets it at once, ahead of the command's bytes or stream.
        let (stdin, handshake) = match stdin {
            CommandInput::None => (Stdin::Bytes(Bytes::from(stdin_prefix)), None),
            CommandInput::Bytes(bytes) => {
                stdin_prefix.extend_from_slice(&bytes);
                (Stdin::Bytes(Bytes::from(stdin_prefix)), None)
            }
            CommandInput::Stream(rest) => (Stdin::Stream { head: Bytes::from(stdin_prefix), rest }, None),
            CommandInput::Terminal(TerminalCommand { size, input, started }) => {
                let (tx, rx) = mpsc::channel(1);
                let (ready, start) = TerminalStart::new(run.id.clone(), started);
                (Stdin::Terminal { size, input: rx }, Some((Bytes::from(stdin_prefix), input, tx, ready, start)))
            }
        };
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let permits = if long_lived { &self.inner.long } else { &self.inner.calls };
        let _slot = tokio::select! {
            slot = permits.acquire(target) => slot,
            () = cancel.cancelled() => return Err(aborted()),
            () = sleep_until(deadline) => return Ok(RunEnd::TimedOut),
        };

        let release = Release::new();
        let (mut wrapped, feed) = match handshake {
            None => (Wrapped::new(&run.secret, sink, release.clone(), None), None),
            Some((prefix, input, tx, ready, start)) => {
                (Wrapped::new(&run.secret, sink, release.clone(), Some(start)), Some(feed(prefix, input, tx, ready)))
            }
        };
        let outcome = {
            let work = self.run_with(target, argv, stdin, release, |rx| wrapped.consume(rx));
            let work = async {
                let Some(feed) = feed else { return work.await };
                tokio::select! {
                    ended = work => ended,
                    () = feed.then(|()| std::future::pending()) => unreachable!("feeding never ends the run"),
                }
            };
            tokio::pin!(work);
            let stop = tokio::select! {
                ended = &mut work => Err(ended),
                () = cancel.cancelled() => Ok(Stop::Aborted),
                () = sleep_until(deadline) => Ok(Stop::TimedOut),
            };
            match stop {
                Err(ended) => Err(ended),
                Ok(stop) => {
                    // Keep collecting while the tree dies, so the result has
                    // the output written up to the kill (the wrapper's
                    // trailer then ends the session).
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
            // A terminal whose wrapper ended before its command started,
            // without saying why (its `stty` failed, say).
            Err(Ok(_)) if wrapped.start().is_some() && wrapped.end().0.is_none() => {
                let said = String::from_utf8_lossy(wrapped.start().map_or(&[][..], TerminalStart::held)).into_owned();
                Err(Error::new(
                    ErrorCode::Unsupported,
                    format!(
                        "the sandbox could not set up a terminal (does its image have stty?): {}",
                        shorten(said.trim())
                    ),
                ))
            }
            Err(ended) => self.finish(target, &run.id, &cwd, ended, wrapped.end()).await,
            Ok(Stop::Aborted) => Err(aborted()),
            Ok(Stop::TimedOut) => Ok(RunEnd::TimedOut),
        }
    }

    /// Carries one TCP connection to `port` of `target` (see
    /// [`Runtime::port_forward`]). Not a command: it takes no exec slot.
    pub async fn port_forward(&self, target: &ExecTarget, port: u16, tunnel: Tunnel) -> Result<()> {
        self.inner.runtime.port_forward(target, port, tunnel).await
    }

    /// Kills every process tree recorded in the pod that is not a live
    /// command of this engine: left behind by a crashed or killed host
    /// process, or by a connection whose kill failed. Called on connect so a
    /// resumed session never shares the workspace with an orphan.
    pub async fn sweep_orphans(&self, target: &ExecTarget) -> Result<()> {
        let (next, live) = self.inner.runs.snapshot();
        let argv = kill::sweep_argv(self.inner.runs.instance(), next, &live);
        let (ended, stderr) = self.run_script(target, &Call::within(SWEEP_TIMEOUT), argv, None, |_| Ok(())).await?;
        script_status(ended, "the orphan sweep", stderr).map(drop)
    }

    /// Runs one of the engine's own scripts under the concurrency cap,
    /// handing stdout chunks to `on_stdout` (an `Err` from it stops the run
    /// and is returned); returns how it ended and the head of its stderr.
    /// `call` bounds it (`aborted`, `timeout`); a script stopped so has its
    /// connection closed (it is left to end by itself in the pod).
    pub(crate) async fn run_script(
        &self,
        target: &ExecTarget,
        call: &Call,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        mut on_stdout: impl FnMut(Bytes) -> Result<()> + Send,
    ) -> Result<(Completion, HeadBuffer)> {
        let mut stderr = HeadBuffer::new(MESSAGE_BYTES);
        let ended = self
            .run_script_with(target, call, argv, stdin, |OutputChunk { stream, data }| match stream {
                Stream::Stdout => on_stdout(data),
                Stream::Stderr => {
                    stderr.push(&data);
                    Ok(())
                }
            })
            .await?;
        Ok((ended, stderr))
    }

    /// Like [`ExecEngine::run_script`], with both streams going to `on_chunk`.
    pub(crate) async fn run_script_with(
        &self,
        target: &ExecTarget,
        call: &Call,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        mut on_chunk: impl FnMut(OutputChunk) -> Result<()> + Send,
    ) -> Result<Completion> {
        let work = async {
            let _slot = self.inner.calls.acquire(target).await;
            self.run_with(target, argv, stdin.into(), Release::new(), |mut rx| async move {
                while let Some(chunk) = rx.recv().await {
                    on_chunk(chunk)?;
                }
                Ok(())
            })
            .await
        };
        if call.cancel.is_cancelled() {
            return Err(aborted());
        }
        tokio::select! {
            ended = work => ended,
            () = call.cancel.cancelled() => Err(aborted()),
            () = sleep_until(call.timeout.map(|t| Instant::now() + t)) => Err(Error::new(
                ErrorCode::Timeout,
                format!(
                    "the call did not finish within {} ms (its timeoutMs, or the provider's callTimeoutMs)",
                    call.timeout.unwrap_or_default().as_millis()
                ),
            )),
        }
    }

    /// Runs `argv` while `consume` takes its output.
    fn run_with<'a, C>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        release: Release,
        consume: impl FnOnce(mpsc::Receiver<OutputChunk>) -> C,
    ) -> impl Future<Output = Result<Completion>> + Send + 'a
    where
        C: Future<Output = Result<()>> + Send + 'a,
    {
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let consumer = consume(rx);
        let ran = self.inner.runtime.run(target, argv, stdin, tx, release);
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
        end: (Option<WrapperEnd>, bool),
    ) -> Result<RunEnd> {
        let (trailer, sink_done) = end;
        match (ended, trailer) {
            (Ok(_), Some(WrapperEnd::BadCwd)) => Err(Error::new(
                ErrorCode::NotFound,
                format!("cwd {} does not exist or is not an accessible directory; nothing was run", quoted(cwd)),
            )),
            (Ok(_), Some(WrapperEnd::ShortCommand)) => Err(Error::new(
                ErrorCode::ConnectionLost,
                "the command did not arrive completely on the exec's stdin; nothing was run",
            )),
            (Ok(_), Some(WrapperEnd::NoRunDir)) => Err(Error::internal(
                "cannot create ${TMPDIR:-/tmp}/.agent-sandbox/run in the sandbox (is the filesystem read-only? \
                 set TMPDIR in the pod to a writable directory); nothing was run",
            )),
            (Ok(Completion::Released), _) if sink_done => Ok(RunEnd::Released),
            (Ok(Completion::Released), Some(WrapperEnd::Exited(code))) => Ok(RunEnd::Exited(code)),
            // The status is the authority when it comes first (a wrapper
            // killed before its trailer, say).
            (Ok(Completion::Exited(code)), _) => Ok(RunEnd::Exited(code)),
            (Ok(Completion::Failed(message)), _) => {
                self.kill(target, run).await;
                Err(Error::internal(format!("the container runtime failed the exec: {message}")))
            }
            (Ok(Completion::Released), None) => Err(Error::internal("an exec was released before its trailer")),
            (Err(e), _) if e.code == ErrorCode::ConnectionLost => {
                self.kill(target, run).await;
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Best-effort kill of one run's process tree through a second exec.
    async fn kill(&self, target: &ExecTarget, run: &str) {
        // Failure leaves an orphan for the next sweep; nothing better to do here.
        let _ = self.signal_run(target, run, kill::KillMode::Terminate).await;
    }

    /// Signals one run's process tree through a second exec (see
    /// [`kill::KillMode`]); fails when that exec does (`timeout` after
    /// [`KILL_TIMEOUT`]). Exempt from the concurrency cap, as every kill.
    pub(crate) async fn signal_run(&self, target: &ExecTarget, run: &str, mode: kill::KillMode) -> Result<()> {
        let argv = kill::kill_argv(&[run.to_owned()], mode);
        let work = self.run_with(target, argv, Stdin::None, Release::new(), drain_channel);
        let ended = tokio::time::timeout(KILL_TIMEOUT, work).await.map_err(|_| {
            Error::new(ErrorCode::Timeout, format!("the kill did not finish within {} s", KILL_TIMEOUT.as_secs()))
        })??;
        script_status(ended, "the kill", HeadBuffer::new(0)).map(drop)
    }
}

/// Why a command was stopped by the engine.
enum Stop {
    Aborted,
    TimedOut,
}

/// The `aborted` error; its message is exactly "aborted", as callers match on it.
pub(crate) fn aborted() -> Error {
    Error::new(ErrorCode::Aborted, "aborted")
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A terminal's input: once its wrapper is `ready`, the wrapper's prefix
/// (secret and fields), then the caller's input as it comes, to the
/// session's `tx`. Ends when either side is gone.
async fn feed(
    prefix: Bytes,
    mut input: mpsc::Receiver<TerminalInput>,
    tx: mpsc::Sender<TerminalInput>,
    ready: oneshot::Receiver<()>,
) {
    if ready.await.is_err() || tx.send(TerminalInput::Data(prefix)).await.is_err() {
        return;
    }
    while let Some(next) = input.recv().await {
        if tx.send(next).await.is_err() {
            return;
        }
    }
}

async fn drain_channel(mut rx: mpsc::Receiver<OutputChunk>) -> Result<()> {
    while rx.recv().await.is_some() {}
    Ok(())
}

/// Exit 0 of one of the engine's scripts, or an error naming it.
pub(crate) fn script_status(ended: Completion, what: &str, stderr: HeadBuffer) -> Result<i32> {
    match ended {
        Completion::Exited(code) => Ok(code),
        Completion::Failed(message) => {
            Err(Error::internal(format!("{what} failed in the container runtime: {message}")))
        }
        Completion::Released => Err(Error::internal(format!("{what} was released before it ended"))),
    }
    .and_then(|code| match code {
        0 => Ok(0),
        n => Err(Error::internal(format!(
            "{what} failed (exit {n}): {}",
            shorten(String::from_utf8_lossy(&stderr.into_inner()).trim())
        ))),
    })
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
