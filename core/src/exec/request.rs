//! What a caller asks of the exec engine ([`ExecRequest`]) and what it gets
//! back ([`ExecResult`]; every run of the engine ends in an [`Exit`]).

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::output::OutputChunk;

/// Default cap of each result buffer (`maxOutputBytes`).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;

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
    /// Run the command as a spawned process and follow it to its end, so a
    /// dropped connection or an API server restart resumes the reading
    /// instead of failing (see `Sandbox::exec`; [`super::ExecEngine::exec`]
    /// cannot, and refuses it).
    pub reattach: bool,
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
            reattach: false,
        }
    }
}

/// How long one of the engine's own scripts (a file operation, a process
/// call) may take, and how its caller stops it.
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// Cancelling fails the call with `aborted` at once and closes its
    /// connection.
    pub cancel: CancellationToken,
    /// The call fails with `timeout` after this long, waiting for a
    /// concurrency slot included. `None`: no limit.
    pub timeout: Option<Duration>,
}

impl Call {
    /// A call with a timeout and no way to cancel it (the engine's own
    /// housekeeping).
    pub fn within(timeout: Duration) -> Self {
        Call { cancel: CancellationToken::new(), timeout: Some(timeout) }
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

/// How a run of the engine ended: a command's exit status, or why it has
/// none. What a terminal's `wait` resolves with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit status as the shell reports it (128 + n for a signal); `None`
    /// when the engine killed it on timeout (`timed_out`), or when the
    /// caller's sink ended the session before it said.
    pub exit_code: Option<i32>,
    /// The timeout fired and the command's tree was killed.
    pub timed_out: bool,
}

impl Exit {
    /// Exited with `code`.
    pub(crate) fn code(code: i32) -> Self {
        Exit { exit_code: Some(code), timed_out: false }
    }

    /// Killed by the engine on timeout.
    pub(crate) const TIMED_OUT: Exit = Exit { exit_code: None, timed_out: true };

    /// Ended by the caller's sink before its exit status came.
    pub(crate) const RELEASED: Exit = Exit { exit_code: None, timed_out: false };

    /// The exit status of a run that must have one (one of the engine's
    /// scripts, a transfer), or an error naming it (`what`).
    pub(crate) fn status(self, what: &str) -> crate::error::Result<i32> {
        self.exit_code.ok_or_else(|| crate::error::Error::internal(format!("{what} ended without an exit status")))
    }
}
