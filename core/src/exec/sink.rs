//! Where a command's output goes: the [`Sink`] a caller plugs into
//! [`super::ExecEngine`]'s runs, the wrapper's side that strips the trailers
//! before the sink sees anything ([`Wrapped`]), and the sink of a plain exec
//! ([`Collector`]: capped result buffers plus the caller's channel).

use bytes::Bytes;
use std::future::Future;
use tokio::sync::mpsc;

use super::output::{HeadBuffer, OutputChunk, Stream};
use super::request::ExecResult;
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
/// sink is done).
pub(super) struct Wrapped<'s, K> {
    stdout: TrailerScanner,
    stderr: TrailerScanner,
    sink: &'s mut K,
    release: Release,
    sink_done: bool,
    pieces: Vec<Bytes>,
}

impl<'s, K: Sink> Wrapped<'s, K> {
    pub(super) fn new(run: &str, sink: &'s mut K, release: Release) -> Self {
        Wrapped {
            stdout: TrailerScanner::new(run),
            stderr: TrailerScanner::new(run),
            sink,
            release,
            sink_done: false,
            pieces: Vec::new(),
        }
    }

    pub(super) async fn consume(&mut self, mut rx: mpsc::Receiver<OutputChunk>) -> Result<()> {
        while let Some(OutputChunk { stream, data }) = rx.recv().await {
            if self.release.is_requested() {
                continue;
            }
            let scanner = match stream {
                Stream::Stdout => &mut self.stdout,
                Stream::Stderr => &mut self.stderr,
            };
            let pieces = &mut self.pieces;
            scanner.feed(data, |piece| pieces.push(piece));
            self.deliver(stream).await?;
            if self.stdout.status().is_some() && self.stderr.status().is_some() {
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

    /// How the wrapper said the command ended, and whether the sink ended it.
    pub(super) fn end(&self) -> (Option<WrapperEnd>, bool) {
        let status = self.stdout.status().or(self.stderr.status());
        (status.and_then(WrapperEnd::parse), self.sink_done)
    }
}

/// Collects a user command's output: keeps the capped buffers, forwards
/// every chunk to the caller's channel.
pub(super) struct Collector {
    stdout: HeadBuffer,
    stderr: HeadBuffer,
    output: Option<mpsc::Sender<OutputChunk>>,
}

impl Collector {
    pub(super) fn new(limit: usize, output: Option<mpsc::Sender<OutputChunk>>) -> Self {
        Collector { stdout: HeadBuffer::new(limit), stderr: HeadBuffer::new(limit), output }
    }

    pub(super) fn result(self, exit_code: Option<i32>, timed_out: bool) -> ExecResult {
        let truncated = self.stdout.truncated() || self.stderr.truncated();
        ExecResult {
            exit_code,
            timed_out,
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
