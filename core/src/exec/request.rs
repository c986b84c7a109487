//! What a caller asks of the exec engine ([`ExecRequest`]) and what it gets
//! back ([`ExecResult`]).

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
