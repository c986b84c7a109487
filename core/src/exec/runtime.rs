//! The one seam between the exec engine and a transport: [`Runtime`] runs
//! one process in a target and reports how it ended. The engine's timeout,
//! kill, trailer and drain logic sit above it, so they are tested with
//! in-memory runtimes (`core/tests/scripted_runtime.rs`) and local processes
//! (`core/tests/common`) as well as over the real pods/exec
//! ([`super::websocket`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::output::OutputChunk;
use super::status::Completion;
use super::ExecTarget;
#[cfg(doc)]
use crate::error::ErrorCode;
use crate::error::Result;

/// What a session's stdin gets. No EOF follows any of them (see
/// [`super::PodExecRuntime`]): the reader knows where its input ends.
#[derive(Debug)]
pub enum Stdin {
    /// Nothing: the session has no stdin.
    None,
    /// These bytes, written while output is read.
    Bytes(Bytes),
    /// `head` at once, then the pieces of `rest` as they come (a bounded
    /// channel: a slow connection slows the producer), until its sender is
    /// dropped.
    Stream {
        /// Bytes sent first.
        head: Bytes,
        /// More bytes, until the sender is dropped.
        rest: mpsc::Receiver<Bytes>,
    },
    /// A terminal: the process runs on a TTY (its stderr merged into
    /// stdout, as a PTY does) whose size is `size` before anything else is
    /// sent, then `input` as it comes; a full socket slows `input` down.
    Terminal {
        /// The first size.
        size: TerminalSize,
        /// Keystrokes and resizes.
        input: mpsc::Receiver<TerminalInput>,
    },
}

impl From<Option<Bytes>> for Stdin {
    fn from(bytes: Option<Bytes>) -> Self {
        bytes.map_or(Stdin::None, Stdin::Bytes)
    }
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// What a terminal's session sends after its first size.
#[derive(Debug)]
pub enum TerminalInput {
    /// Bytes typed (or pasted) into the terminal.
    Data(Bytes),
    /// A new size (the foreground program gets SIGWINCH).
    Resize(TerminalSize),
}

/// Runs one process in a target and reports how it ended.
///
/// Output chunks go to `output` in the order they were read; a full channel
/// pauses reading, so backpressure reaches the socket. `stdin` (see
/// [`Stdin`]) is written while output is read. `Err` with [`ErrorCode::ConnectionLost`]
/// means the process may still be running; any other `Err` means it never
/// started. Once `release` is requested the run stops delivering output and
/// returns [`Completion::Released`].
pub trait Runtime: Send + Sync + 'static {
    /// Starts `argv` in `target` and waits for it to end or be released.
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        output: mpsc::Sender<OutputChunk>,
        release: Release,
    ) -> BoxFuture<'a, Result<Completion>>;

    /// Carries one TCP connection to `port` of `target` until either side
    /// ends it (see [`Tunnel`]). Runtimes without port-forwarding say
    /// [`ErrorCode::Unsupported`].
    fn port_forward<'a>(&'a self, target: &'a ExecTarget, port: u16, tunnel: Tunnel) -> BoxFuture<'a, Result<()>> {
        let _ = (target, tunnel);
        Box::pin(async move {
            Err(crate::error::Error::new(
                crate::error::ErrorCode::Unsupported,
                format!("this runtime cannot forward port {port}"),
            ))
        })
    }
}

/// The local side of one forwarded connection.
#[derive(Debug)]
pub struct Tunnel {
    /// Bytes for the port, in order. The pods/portforward WebSocket has no
    /// half-close: the channel closing does not end the connection.
    pub input: mpsc::Receiver<Bytes>,
    /// Bytes from the port (as [`Stream::Stdout`](super::Stream::Stdout)
    /// chunks); a full channel pauses reading, so backpressure reaches the
    /// socket.
    pub output: mpsc::Sender<OutputChunk>,
    /// `true` pauses reading as a full `output` does, for a consumer whose
    /// own buffer is full; a paused tunnel is never a stall.
    pub paused: watch::Receiver<bool>,
}

/// Lets the consumer of a session end it before the server's exit status.
#[derive(Debug, Clone, Default)]
pub struct Release {
    token: CancellationToken,
    drain: Arc<AtomicBool>,
}

impl Release {
    /// A release nobody has requested yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends the session and keeps reading it in the background, discarding
    /// what arrives, until the server ends it (children left running keep
    /// working stdout and stderr).
    pub fn drain(&self) {
        self.drain.store(true, Ordering::Release);
        self.token.cancel();
    }

    /// Ends the session and closes the connection.
    pub fn close(&self) {
        self.token.cancel();
    }

    /// Whether either was requested.
    pub fn is_requested(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once requested; `true` means drain. Cancel safe.
    pub async fn requested(&self) -> bool {
        self.token.cancelled().await;
        self.drain.load(Ordering::Acquire)
    }
}
