//! Terminals: a command on a TTY over one pods/exec connection, with
//! keystrokes, resizes, signals and close.
//!
//! A terminal is an exec of the engine like any other (the wrapper, the
//! concurrency cap, timeout, abort, the kill on a lost connection and the
//! orphan sweep), run with [`Stdin::Terminal`](super::Stdin): the node gives
//! it a TTY, the first size goes before any input, and the wrapper's
//! handshake keeps its own prefix out of the terminal's echo. It lives as
//! long as its connection: pods/exec cannot reattach, and the kubelet sends
//! no SIGHUP when the stream drops, so a lost connection kills the
//! terminal's tree (TERM, 2 s, KILL) before `wait` rejects `connection_lost`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_util::sync::CancellationToken;

use super::engine::{Input, Program, RunOptions, Slots, TerminalCommand, TerminalStarted};
use super::kill::{KillMode, SIGNALS};
use super::output::OutputChunk;
use super::request::Exit;
use super::sink::{Flow, Sink};
use super::wrapper::Shell;
use super::{ExecEngine, ExecTarget, TerminalInput, TerminalSize};
use crate::error::{Error, ErrorCode, Result};

/// The command of a terminal that does not name one: an interactive login
/// shell, bash when the image has it.
pub(crate) const LOGIN_SHELL: &str = "if command -v bash >/dev/null 2>&1; then exec bash -l -i; else exec sh -l -i; fi";

/// `TERM` unless the caller's env sets it.
pub(crate) const DEFAULT_TERM: &str = "xterm-256color";

/// Keystrokes or resizes queued for a terminal's connection: a caller that
/// writes faster than the socket takes them waits.
const INPUT_DEPTH: usize = 4;

/// How long `close` waits for the run to end after its tree was killed
/// before it closes the connection.
const CLOSE_WAIT: Duration = Duration::from_secs(15);

/// What a caller asks for.
#[derive(Debug)]
pub struct TerminalRequest {
    /// Shell command line; `None`: `LOGIN_SHELL`.
    pub command: Option<String>,
    /// Working directory; empty: the exec's default.
    pub cwd: String,
    /// Extra environment (`TERM` defaults to `DEFAULT_TERM`).
    pub env: Vec<(String, String)>,
    /// The first size.
    pub size: TerminalSize,
    /// Kill the tree after this long; `wait` then resolves `timed_out`.
    pub timeout: Option<Duration>,
    /// Cancelling kills the tree; `wait` rejects `aborted`.
    pub cancel: CancellationToken,
    /// Every output chunk (stdout, stderr merged); bounded: a slow consumer
    /// slows the terminal down.
    pub output: mpsc::Sender<OutputChunk>,
}

/// A running terminal.
pub struct Terminal {
    pid: u32,
    run: String,
    engine: ExecEngine,
    target: ExecTarget,
    input: mpsc::Sender<TerminalInput>,
    /// Cancelled when the run has ended.
    ended: CancellationToken,
    /// Closes the connection (after `close` killed the tree).
    stop: CancellationToken,
    result: Mutex<Option<oneshot::Receiver<Result<Exit>>>>,
    closing: Arc<Mutex<bool>>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").field("pid", &self.pid).field("run", &self.run).finish_non_exhaustive()
    }
}

/// Output to the caller's channel.
struct Forward(mpsc::Sender<OutputChunk>);

impl Sink for Forward {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        // The caller gone (its terminal handle dropped) leaves the terminal
        // running until it ends, as a closed window's tab would not.
        let _ = self.0.send(chunk).await;
        Ok(Flow::More)
    }
}

impl ExecEngine {
    /// Starts a terminal and resolves once its command runs (the wrapper's
    /// handshake done, the size applied). Fails like an exec that could not
    /// start: `invalid_request` (env, NUL), `not_found` (cwd), `aborted`,
    /// `connection_lost`, …, and `unsupported` when the image cannot set up
    /// a terminal. Counts against the concurrency cap while it runs.
    pub async fn terminal(&self, target: &ExecTarget, request: TerminalRequest) -> Result<Terminal> {
        let TerminalRequest { command, cwd, mut env, size, timeout, cancel, output } = request;
        if !env.iter().any(|(name, _)| name == "TERM") {
            env.push(("TERM".to_owned(), DEFAULT_TERM.to_owned()));
        }
        let (input, input_rx) = mpsc::channel(INPUT_DEPTH);
        let (started_tx, started) = oneshot::channel();
        let (done, result) = oneshot::channel();
        let ended = CancellationToken::new();
        let stop = CancellationToken::new();
        let command = command.unwrap_or_else(|| LOGIN_SHELL.to_owned());
        let options = RunOptions {
            stdin: Input::Terminal(TerminalCommand { size, input: input_rx, started: started_tx }),
            timeout,
            // `close` ends the connection through `stop` once the tree is
            // gone; a caller's cancel also kills the tree first.
            cancel: cancel.clone(),
            slots: Slots::Calls,
        };
        let (engine, run_target, run_ended, run_stop) = (self.clone(), target.clone(), ended.clone(), stop.clone());
        tokio::spawn(async move {
            let mut sink = Forward(output);
            let program = Program::Shell(Shell { command: &command, cwd: &cwd, env: &env });
            let run = engine.run(&run_target, program, options, &mut sink);
            let end = tokio::select! {
                end = run => end,
                () = run_stop.cancelled() => Err(Error::new(ErrorCode::ConnectionLost,
                    "the terminal's connection was closed after its process tree outlived close()")),
            };
            run_ended.cancel();
            let _ = done.send(end);
        });
        match started.await {
            Ok(TerminalStarted { run, pid }) => Ok(Terminal {
                pid,
                run,
                engine: self.clone(),
                target: target.clone(),
                input,
                ended,
                stop,
                result: Mutex::new(Some(result)),
                closing: Arc::default(),
            }),
            // The run ended before the command started: its error says why.
            Err(_) => match result.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(_)) | Err(_) => Err(Error::internal("the terminal's wrapper ended before its command started")),
            },
        }
    }
}

impl Terminal {
    /// Pid (in the sandbox) of the terminal's session leader, the shell
    /// that runs the command: the root of its process tree.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Types `data` into the terminal; resolves once it is on its way (a
    /// full connection makes it wait). `invalid_state` once it has ended.
    pub async fn write(&self, data: Bytes) -> Result<()> {
        self.send(TerminalInput::Data(data)).await
    }

    /// Resizes the terminal (the foreground program gets SIGWINCH).
    pub async fn resize(&self, size: TerminalSize) -> Result<()> {
        self.send(TerminalInput::Resize(size)).await
    }

    async fn send(&self, input: TerminalInput) -> Result<()> {
        let gone = || Error::new(ErrorCode::InvalidState, "the terminal has ended");
        if self.ended.is_cancelled() {
            return Err(gone());
        }
        tokio::select! {
            sent = self.input.send(input) => sent.map_err(|_| gone()),
            () = self.ended.cancelled() => Err(gone()),
        }
    }

    /// Sends `signal` (a name of `SIGNALS`, with or without `SIG`) to
    /// every process of the terminal's tree; `invalid_state` once it has
    /// ended.
    pub async fn kill(&self, signal: &str) -> Result<()> {
        let name = signal.strip_prefix("SIG").unwrap_or(signal);
        let Some(name) = SIGNALS.iter().copied().find(|s| *s == name) else {
            return Err(Error::invalid_request(format!(
                "signal must be one of {}, got {signal:?}",
                SIGNALS.join(", ")
            )));
        };
        if self.ended.is_cancelled() {
            return Err(Error::new(ErrorCode::InvalidState, "the terminal has ended"));
        }
        self.engine.signal_run(&self.target, &self.run, KillMode::Signal(name)).await
    }

    /// Ends the terminal: HUP to its tree, KILL after 2 s to what is left,
    /// then waits for the run to end (closing its connection if the tree
    /// outlives that). Idempotent; resolves at once once it has ended.
    pub async fn close(&self) -> Result<()> {
        let mut closing = self.closing.lock().await;
        if self.ended.is_cancelled() || *closing {
            return Ok(());
        }
        self.engine.signal_run(&self.target, &self.run, KillMode::Hangup).await?;
        *closing = true;
        if tokio::time::timeout(CLOSE_WAIT, self.ended.cancelled()).await.is_err() {
            self.stop.cancel();
            self.ended.cancelled().await;
        }
        Ok(())
    }

    /// Resolves how the terminal ended. `connection_lost` when its
    /// connection broke (its tree has then been killed), `aborted` when
    /// cancelled. Callable once.
    pub async fn wait(&self) -> Result<Exit> {
        let result = self.result.lock().await.take();
        let result =
            result.ok_or_else(|| Error::new(ErrorCode::InvalidState, "wait() was already called for this terminal"))?;
        result.await.map_err(|_| Error::internal("the terminal's task ended without a result"))?
    }
}
