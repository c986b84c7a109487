//! Delivering output (of an exec, a followed process, a terminal or a
//! tunnel) to a JS callback, with backpressure: one [`deliver`] for all.
//!
//! At most [`IN_FLIGHT`] calls are queued to the JS thread; each returns its
//! slot when the JS callback has run. A slow JS consumer therefore stops
//! this loop, which stops the engine's bounded channel, which stops reading
//! the socket: memory stays bounded however fast the command writes. Keeping
//! a few calls queued (rather than awaiting each) lets one wake-up of the JS
//! thread run several calls, and chunks that arrive while the slots are
//! taken are merged into one call (up to 1 MiB).
//!
//! Chunks reach JS as V8-owned `Buffer` copies, not external views of Rust
//! memory: V8 accounts for them and collects them promptly, where external
//! buffers (a 64 KiB allocation each, unseen by the GC) let RSS grow by
//! hundreds of MiB on bulk output. The copy is also where merging happens.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use napi::bindgen_prelude::{FnArgs, ToNapiValue};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{check_status, sys, Status};
use sandbox_core::{OutputChunk, ProcessChunk, Stream};
use tokio::sync::{mpsc, Semaphore};

/// Largest merged batch handed to JS in one call.
const COALESCE_BYTES: usize = 1024 * 1024;
/// Calls queued to the JS thread at once.
const IN_FLIGHT: usize = 4;
/// Chunks queued between the core and delivery.
const DEPTH: usize = 16;

/// What the output callback gets: the stream (1 stdout, 2 stderr), the
/// bytes, and for a followed process the last merged chunk's sequence
/// (`null` for other output).
type ChunkArgs = FnArgs<(u32, JsChunk, Option<f64>)>;

/// The output callback `(stream, chunk, sequence) => void`, weak (it never
/// keeps Node alive) and called without a Node-style error argument.
pub(crate) type ChunkCallback = ThreadsafeFunction<ChunkArgs, (), ChunkArgs, Status, false, true>;

/// Pieces of one stream, copied into a single new `Buffer` on the JS thread.
pub struct JsChunk(Vec<Bytes>);

// The one hand-written unsafe code: one copy into a Buffer napi allocates,
// instead of a Vec concatenation followed by a second copy.
#[allow(unsafe_code)]
impl ToNapiValue for JsChunk {
    unsafe fn to_napi_value(env: sys::napi_env, chunk: Self) -> napi::Result<sys::napi_value> {
        let len = chunk.0.iter().map(Bytes::len).sum();
        let mut data = std::ptr::null_mut();
        let mut buffer = std::ptr::null_mut();
        // SAFETY: called on the JS thread with a live env; napi allocates
        // `len` writable bytes at `data`, which we fill completely.
        unsafe {
            check_status!(sys::napi_create_buffer(env, len, &mut data, &mut buffer), "allocating an output Buffer")?;
            let mut at = data.cast::<u8>();
            for piece in &chunk.0 {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), at, piece.len());
                at = at.add(piece.len());
            }
        }
        Ok(buffer)
    }
}

/// A chunk of output as delivery sees it.
pub(crate) struct Part {
    stream: Stream,
    data: Bytes,
    /// Where a reader resumes after it, for output that has one.
    sequence: Option<u64>,
}

/// A chunk that can be merged with the next ones of its stream.
pub(crate) trait Piece: Send + 'static {
    /// What delivery needs of it.
    fn into_part(self) -> Part;
}

impl Piece for OutputChunk {
    fn into_part(self) -> Part {
        Part { stream: self.stream, data: self.data, sequence: None }
    }
}

impl Piece for ProcessChunk {
    fn into_part(self) -> Part {
        Part { stream: self.stream, data: self.data, sequence: Some(self.sequence) }
    }
}

/// A stream as JS numbers it: 1 stdout, 2 stderr.
pub(crate) fn stream_code(stream: Stream) -> u32 {
    match stream {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    }
}

/// The bounded channel from the core to [`deliver`].
pub(crate) fn channel<P: Piece>() -> (mpsc::Sender<P>, mpsc::Receiver<P>) {
    mpsc::channel(DEPTH)
}

/// Runs `work` with an output channel to `callback`, or with none when
/// there is no callback; returns once `work` has returned and every chunk
/// reached JS. `work` drops its sender when it returns, which ends the
/// delivery.
pub(crate) async fn delivering<P, T, F>(
    callback: Option<ChunkCallback>,
    work: impl FnOnce(Option<mpsc::Sender<P>>) -> F,
) -> T
where
    P: Piece,
    F: Future<Output = T>,
{
    match callback {
        None => work(None).await,
        Some(callback) => {
            let (tx, rx) = channel();
            let (result, ()) = tokio::join!(work(Some(tx)), deliver(rx, callback));
            result
        }
    }
}

/// Hands chunks to JS (consecutive chunks of one stream merged; a merged
/// call carries the last chunk's sequence, which is where a reader resumes
/// after it) until the channel closes, then waits until JS has run every
/// call. Stops early if the JS side is gone (then `rx` is dropped and the
/// producer carries on without it).
pub(crate) async fn deliver<P: Piece>(mut rx: mpsc::Receiver<P>, callback: ChunkCallback) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut next: Option<Part> = None;
    loop {
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let first = match next.take() {
            Some(part) => part,
            None => match rx.recv().await {
                Some(chunk) => chunk.into_part(),
                None => break,
            },
        };
        let (stream, mut sequence) = (first.stream, first.sequence);
        let mut size = first.data.len();
        let mut pieces = vec![first.data];
        while size < COALESCE_BYTES {
            match rx.try_recv().map(Piece::into_part) {
                Ok(part) if part.stream == stream => {
                    size += part.data.len();
                    sequence = part.sequence;
                    pieces.push(part.data);
                }
                Ok(other) => {
                    next = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        // The slot is released when the JS call has returned (or thrown: the
        // JS wrapper catches user errors, and the callback ignores the result).
        let status = callback.call_with_return_value(
            FnArgs::from((stream_code(stream), JsChunk(pieces), sequence.map(|s| s as f64))),
            ThreadsafeFunctionCallMode::NonBlocking,
            move |_, _| {
                drop(slot);
                Ok(())
            },
        );
        if status != Status::Ok {
            return;
        }
    }
    // Settle only after the last chunk reached JS.
    let _ = slots.acquire_many(IN_FLIGHT as u32).await;
}
