//! Delivering exec output to a JS callback, with backpressure.
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

use std::sync::Arc;

use bytes::Bytes;
use napi::bindgen_prelude::{FnArgs, ToNapiValue};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{check_status, sys, Status};
use sandbox_core::exec::{OutputChunk, Stream};
use tokio::sync::{mpsc, Semaphore};

/// Largest merged batch handed to JS in one call.
const COALESCE_BYTES: usize = 1024 * 1024;
/// Calls queued to the JS thread at once.
const IN_FLIGHT: usize = 4;

/// The JS callback `(stream: 1 | 2, chunk: Buffer) => void`, weak (it never
/// keeps Node alive) and called without a Node-style error argument.
pub type ChunkCallback = ThreadsafeFunction<FnArgs<(u32, JsChunk)>, (), FnArgs<(u32, JsChunk)>, Status, false, true>;

/// Pieces of one stream, copied into a single new `Buffer` on the JS thread.
pub struct JsChunk(Vec<Bytes>);

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

/// Hands chunks to JS until the engine closes the channel, then waits until
/// JS has run every call. Stops early if the JS side is gone (then `rx` is
/// dropped and the engine carries on without it).
pub async fn deliver(mut rx: mpsc::Receiver<OutputChunk>, callback: ChunkCallback) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut next: Option<OutputChunk> = None;
    loop {
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let first = match next.take() {
            Some(chunk) => chunk,
            None => match rx.recv().await {
                Some(chunk) => chunk,
                None => break,
            },
        };
        let stream = first.stream;
        let mut size = first.data.len();
        let mut pieces = vec![first.data];
        while size < COALESCE_BYTES {
            match rx.try_recv() {
                Ok(chunk) if chunk.stream == stream => {
                    size += chunk.data.len();
                    pieces.push(chunk.data);
                }
                Ok(other) => {
                    next = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let code = match stream {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        };
        // The slot is released when the JS call has returned (or thrown: the
        // JS wrapper catches user errors, and this callback ignores the result).
        let status = callback.call_with_return_value(
            FnArgs::from((code, JsChunk(pieces))),
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
