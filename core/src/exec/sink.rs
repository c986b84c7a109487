//! Where a run's output goes: the [`Sink`] a caller plugs into
//! [`super::ExecEngine`]'s runs, the wrapper's side that strips the trailers
//! before the sink sees anything ([`Wrapped`]), the sink of an exec
//! ([`Collector`]: capped result buffers plus the caller's channel; also
//! behind `exec({ reattach })`) and of the engine's scripts
//! ([`ScriptOutput`]).

use bytes::Bytes;
use std::future::Future;
use tokio::sync::{mpsc, oneshot};

use super::engine::TerminalStarted;
use super::output::{HeadBuffer, OutputChunk, Stream};
use super::request::{ExecResult, Exit};
use super::runtime::Release;
use super::trailer::TrailerScanner;
use super::wrapper::WrapperEnd;
use crate::error::Result;

/// Takes a command's output as it arrives (the wrapper's trailer removed).
pub(crate) trait Sink: Send {
    /// One piece of output; [`Flow::Done`] ends the session at once, closing
    /// its connection without killing the command.
    fn output(&mut self, chunk: OutputChunk) -> impl Future<Output = Result<Flow>> + Send;
}

/// Whether a [`Sink`] wants more.
pub(crate) enum Flow {
    More,
    Done,
}

/// The wrapper's side of a run's output: strips the trailers, hands the rest
/// to the sink, and releases the session once both trailers are in (or the
/// sink is done). On a terminal there is one stream, so one trailer (the
/// wrapper's second lands after it, where nothing is output), and the
/// wrapper's start ([`TerminalStart`]) comes first.
pub(super) struct Wrapped<'s, K> {
    stdout: TrailerScanner,
    stderr: TrailerScanner,
    sink: &'s mut K,
    release: Release,
    sink_done: bool,
    pieces: Vec<Bytes>,
    terminal: bool,
    /// A terminal's start, until its command runs.
    start: Option<TerminalStart>,
}

/// What a terminal's wrapper prints before its command runs (see the
/// wrapper): the line saying it takes its prefix raw, then the line with
/// its pid. What comes before each is the wrapper's own (a failing `stty`),
/// never the command's output: held, at most [`START_HELD_BYTES`].
pub(super) struct TerminalStart {
    ready: Option<oneshot::Sender<()>>,
    started: Option<oneshot::Sender<TerminalStarted>>,
    run: String,
    held: Vec<u8>,
}

/// Most bytes a terminal's start holds (the wrapper prints a few dozen).
const START_HELD_BYTES: usize = 64 * 1024;
const READY_LINE: &[u8] = b"\x1easb ready\n";
const STARTED: &[u8] = b"\x1easb started ";

impl TerminalStart {
    /// A start of run `run` that reports the run id and the pid to
    /// `started`; the receiver resolves when the wrapper takes its prefix.
    pub(super) fn new(run: String, started: oneshot::Sender<TerminalStarted>) -> (oneshot::Receiver<()>, Self) {
        let (ready, rx) = oneshot::channel();
        (rx, TerminalStart { ready: Some(ready), started: Some(started), run, held: Vec::new() })
    }

    /// Takes raw output before the ready line; returns what follows it.
    fn before_ready(&mut self, data: &[u8]) -> Option<Bytes> {
        self.hold(data);
        let at = memchr::memmem::find(&self.held, READY_LINE)?;
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(());
        }
        let rest = Bytes::copy_from_slice(&self.held[at + READY_LINE.len()..]);
        self.held.clear();
        Some(rest)
    }

    /// Takes output (trailers stripped) before the started line; returns
    /// what follows it, the command's first output, once it has come.
    fn before_start(&mut self, data: &[u8]) -> Option<Bytes> {
        self.hold(data);
        let at = memchr::memmem::find(&self.held, STARTED)?;
        let line = &self.held[at + STARTED.len()..];
        let end = memchr::memchr(b'\n', line)?;
        // The terminal's mode is back: the newline may be CRLF.
        let pid = std::str::from_utf8(&line[..end]).ok().and_then(|p| p.trim_end_matches('\r').parse().ok());
        if let (Some(pid), Some(started)) = (pid, self.started.take()) {
            let _ = started.send(TerminalStarted { run: std::mem::take(&mut self.run), pid });
        }
        Some(Bytes::copy_from_slice(&line[end + 1..]))
    }

    fn hold(&mut self, data: &[u8]) {
        let room = START_HELD_BYTES.saturating_sub(self.held.len());
        self.held.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// What the wrapper printed before it failed to start the command.
    pub(super) fn held(&self) -> &[u8] {
        &self.held
    }
}

impl<'s, K: Sink> Wrapped<'s, K> {
    pub(super) fn new(run: &str, sink: &'s mut K, release: Release, start: Option<TerminalStart>) -> Self {
        Wrapped {
            stdout: TrailerScanner::new(run),
            stderr: TrailerScanner::new(run),
            sink,
            release,
            sink_done: false,
            pieces: Vec::new(),
            terminal: start.is_some(),
            start,
        }
    }

    pub(super) async fn consume(&mut self, mut rx: mpsc::Receiver<OutputChunk>) -> Result<()> {
        while let Some(OutputChunk { stream, mut data }) = rx.recv().await {
            if self.release.is_requested() {
                continue;
            }
            if let Some(start) = &mut self.start {
                if start.ready.is_some() {
                    match start.before_ready(&data) {
                        Some(rest) => data = rest,
                        None => continue,
                    }
                }
            }
            let scanner = match stream {
                Stream::Stdout => &mut self.stdout,
                Stream::Stderr => &mut self.stderr,
            };
            let pieces = &mut self.pieces;
            scanner.feed(data, |piece| pieces.push(piece));
            if let Some(start) = &mut self.start {
                let held: Vec<u8> = std::mem::take(&mut self.pieces).concat();
                if let Some(first) = start.before_start(&held) {
                    self.start = None;
                    self.pieces.push(first);
                }
            }
            self.deliver(stream).await?;
            if self.stdout.status().is_some() && (self.terminal || self.stderr.status().is_some()) {
                self.release.drain();
            }
        }
        if !self.release.is_requested() {
            // The session ended without trailers: what was held back is output.
            for stream in [Stream::Stdout, Stream::Stderr] {
                let scanner = match stream {
                    Stream::Stdout => &mut self.stdout,
                    Stream::Stderr => &mut self.stderr,
                };
                self.pieces.extend(scanner.finish());
                if let Some(start) = &mut self.start {
                    // Still the wrapper's own.
                    self.pieces.drain(..).for_each(|piece| start.hold(&piece));
                }
                self.deliver(stream).await?;
            }
        }
        Ok(())
    }

    async fn deliver(&mut self, stream: Stream) -> Result<()> {
        for data in std::mem::take(&mut self.pieces) {
            if self.sink_done {
                break;
            }
            if let Flow::Done = self.sink.output(OutputChunk { stream, data }).await? {
                self.sink_done = true;
                self.release.close();
            }
        }
        Ok(())
    }

    /// A terminal's start, while its command has not started.
    pub(super) fn start(&self) -> Option<&TerminalStart> {
        self.start.as_ref()
    }

    /// How the wrapper said the command ended, if it has.
    pub(super) fn said(&self) -> Option<WrapperEnd> {
        self.stdout.status().or(self.stderr.status()).and_then(WrapperEnd::parse)
    }

    /// Whether the sink ended the session.
    pub(super) fn sink_done(&self) -> bool {
        self.sink_done
    }
}

/// Collects a user command's output: keeps the capped buffers, forwards
/// every chunk to the caller's channel.
pub(crate) struct Collector {
    stdout: HeadBuffer,
    stderr: HeadBuffer,
    output: Option<mpsc::Sender<OutputChunk>>,
}

impl Collector {
    /// Buffers of at most `limit` bytes each; every chunk to `output` too.
    pub(crate) fn new(limit: usize, output: Option<mpsc::Sender<OutputChunk>>) -> Self {
        Collector { stdout: HeadBuffer::new(limit), stderr: HeadBuffer::new(limit), output }
    }

    /// The exec's result once it ended so.
    pub(crate) fn result(self, exit: Exit) -> ExecResult {
        let truncated = self.stdout.truncated() || self.stderr.truncated();
        ExecResult {
            exit_code: exit.exit_code,
            timed_out: exit.timed_out,
            stdout: self.stdout.into_inner(),
            stderr: self.stderr.into_inner(),
            truncated,
        }
    }
}

impl Sink for Collector {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        match chunk.stream {
            Stream::Stdout => self.stdout.push(&chunk.data),
            Stream::Stderr => self.stderr.push(&chunk.data),
        }
        if let Some(tx) = &self.output {
            if tx.send(chunk).await.is_err() {
                // The consumer is gone; the result buffers still fill.
                self.output = None;
            }
        }
        Ok(Flow::More)
    }
}

/// Stderr kept for the error messages of the engine's scripts.
const MESSAGE_BYTES: usize = 16 * 1024;

/// The output of one of the engine's scripts: stdout to `on_stdout` (an
/// `Err` from it stops the run and is its error), the head of stderr kept
/// for an error message.
pub(crate) struct ScriptOutput<F> {
    on_stdout: F,
    stderr: HeadBuffer,
}

impl<F: FnMut(Bytes) -> Result<()> + Send> ScriptOutput<F> {
    pub(crate) fn new(on_stdout: F) -> Self {
        ScriptOutput { on_stdout, stderr: HeadBuffer::new(MESSAGE_BYTES) }
    }

    /// The head of stderr, once the run is over.
    pub(crate) fn into_stderr(self) -> HeadBuffer {
        self.stderr
    }
}

impl<F: FnMut(Bytes) -> Result<()> + Send> Sink for ScriptOutput<F> {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        match chunk.stream {
            Stream::Stdout => (self.on_stdout)(chunk.data)?,
            Stream::Stderr => self.stderr.push(&chunk.data),
        }
        Ok(Flow::More)
    }
}
