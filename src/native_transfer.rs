//! Transfers (`upload`, `download`) on a `NativeSandbox`. `js/transfer.js`
//! turns them into the public calls: a Node `Readable` over
//! [`NativeDownload::next`] (pulled, so a slow reader slows the sandbox's
//! `tar`), and an `AsyncIterable` source pushed through
//! [`NativeUpload::write`] (each write resolves once the chunk has room).

use std::path::PathBuf;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sandbox_core::transfer::{self, Requested, Source, Totals};
use sandbox_core::{byte_count, lock};
use tokio::sync::{mpsc, Mutex};

use crate::calls::{promise, NativeCancel};
use crate::errors::{invalid, to_napi};
use crate::native_sandbox::NativeSandbox;
use crate::task::Task;

/// Chunks queued between the transfer and JS (each one WebSocket frame,
/// or one upload write).
const DEPTH: usize = 4;

/// Options of every transfer; `js/transfer.js` checks their types.
#[napi(object)]
pub struct NativeTransferOptions {
    /// Archive bytes; default 1 GiB (or the provider's `transfers.maxBytes`, if lower).
    pub max_bytes: Option<f64>,
    /// Entries; default 100,000 (or the provider's `transfers.maxEntries`, if lower).
    pub max_entries: Option<f64>,
    /// Download: `tar --exclude` patterns.
    pub exclude: Option<Vec<String>>,
    /// Upload: replace what `dir` holds (default true). Download with `to`:
    /// extract into a `to` that is not empty (default false).
    pub overwrite: Option<bool>,
}

/// What a transfer moved.
#[napi(object)]
pub struct NativeTotals {
    /// Files, symlinks and hard links.
    pub files: f64,
    /// Directories.
    pub directories: f64,
    /// Bytes of file contents.
    pub bytes: f64,
}

impl From<Totals> for NativeTotals {
    fn from(t: Totals) -> Self {
        NativeTotals { files: t.files as f64, directories: t.directories as f64, bytes: t.bytes as f64 }
    }
}

/// The limits the caller asked for; the sandbox holds them to the provider's.
fn requested(options: &NativeTransferOptions) -> sandbox_core::Result<Requested> {
    let count = |name, value: Option<f64>| value.map(|v| byte_count(name, Some(v), 0)).transpose();
    Ok(Requested {
        max_bytes: count("maxBytes", options.max_bytes)?,
        max_entries: count("maxEntries", options.max_entries)?,
    })
}

/// A download being read.
#[napi]
pub struct NativeDownload {
    chunks: Mutex<mpsc::Receiver<Bytes>>,
    task: Task<Totals>,
}

#[napi]
impl NativeDownload {
    /// The next chunk of the archive; `null` once it ended properly;
    /// rejects with the transfer's error.
    #[napi]
    pub async fn next(&self) -> napi::Result<Option<Buffer>> {
        if let Some(chunk) = self.chunks.lock().await.recv().await {
            return Ok(Some(chunk.to_vec().into()));
        }
        match self.task.result().await {
            Some(Err(e)) => Err(e),
            // Ended properly, now or at an earlier call.
            Some(Ok(_)) | None => Ok(None),
        }
    }

    /// Stops the download and kills the sandbox's `tar`.
    #[napi]
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// An upload from a stream being written.
#[napi]
pub struct NativeUpload {
    chunks: std::sync::Mutex<Option<mpsc::Sender<Bytes>>>,
    task: Task<Totals>,
}

#[napi]
impl NativeUpload {
    /// Queues a chunk of the archive; resolves once it has room. `false`
    /// when the upload already ended (`end()` says how).
    #[napi]
    pub async fn write(&self, chunk: Buffer) -> bool {
        let tx = lock(&self.chunks).clone();
        match tx {
            Some(tx) => tx.send(Bytes::from_owner(chunk)).await.is_ok(),
            None => false,
        }
    }

    /// Ends the archive and resolves with what was moved.
    #[napi]
    pub async fn end(&self) -> napi::Result<NativeTotals> {
        lock(&self.chunks).take();
        let result = self.task.result().await.ok_or_else(|| invalid("end() was already called for this upload"))?;
        result.map(NativeTotals::from)
    }

    /// Stops the upload and kills the sandbox's `tar`.
    #[napi]
    pub fn abort(&self) {
        self.task.abort();
    }
}

#[napi]
impl NativeSandbox {
    /// Starts streaming the tree under `path` as a tar archive.
    #[napi]
    pub fn start_download(&self, path: String, options: NativeTransferOptions) -> napi::Result<NativeDownload> {
        let requested = requested(&options).map_err(to_napi)?;
        let exclude = options.exclude.unwrap_or_default();
        // Refused before a stream exists, so the call rejects instead.
        self.core().transfer_limits(requested).map_err(to_napi)?;
        transfer::check_args(&path, &exclude).map_err(to_napi)?;
        let (tx, rx) = mpsc::channel(DEPTH);
        let sandbox = self.core().clone();
        let task =
            self.start(move |cancel| async move { sandbox.download(&path, &exclude, requested, cancel, tx).await });
        Ok(NativeDownload { chunks: Mutex::new(rx), task })
    }

    /// Downloads the tree under `path` into the local directory `to`.
    #[napi(ts_return_type = "Promise<NativeTotals>")]
    pub fn download_to<'env>(
        &self,
        env: &'env Env,
        path: String,
        to: String,
        options: NativeTransferOptions,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeTotals>> {
        let (sandbox, token) = (self.core().clone(), cancel.call().cancel);
        promise(env, async move {
            let requested = requested(&options)?;
            let exclude = options.exclude.unwrap_or_default();
            let overwrite = options.overwrite.unwrap_or(false);
            let to = PathBuf::from(to);
            sandbox.download_to(&path, &exclude, requested, token, &to, overwrite).await.map(NativeTotals::from)
        })
    }

    /// Uploads a local directory (a path) or whole archive bytes into `dir`.
    #[napi(ts_return_type = "Promise<NativeTotals>")]
    pub fn upload<'env>(
        &self,
        env: &'env Env,
        source: Either<String, Buffer>,
        dir: String,
        options: NativeTransferOptions,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeTotals>> {
        let (sandbox, token) = (self.core().clone(), cancel.call().cancel);
        let source = match source {
            Either::A(d) => Source::Directory(PathBuf::from(d)),
            Either::B(b) => Source::Bytes(Bytes::from_owner(b)),
        };
        promise(env, async move {
            let requested = requested(&options)?;
            let overwrite = options.overwrite.unwrap_or(true);
            sandbox.upload(source, &dir, overwrite, requested, token).await.map(NativeTotals::from)
        })
    }

    /// Starts an upload whose archive comes through `write()`.
    #[napi]
    pub fn start_upload(&self, dir: String, options: NativeTransferOptions) -> napi::Result<NativeUpload> {
        let requested = requested(&options).map_err(to_napi)?;
        let overwrite = options.overwrite.unwrap_or(true);
        self.core().transfer_limits(requested).map_err(to_napi)?;
        transfer::check_args(&dir, &[]).map_err(to_napi)?;
        // One write in flight: the caller sizes the chunks.
        let (tx, rx) = mpsc::channel(1);
        let sandbox = self.core().clone();
        let task = self.start(move |cancel| async move {
            sandbox.upload(Source::Stream(rx), &dir, overwrite, requested, cancel).await
        });
        Ok(NativeUpload { chunks: std::sync::Mutex::new(Some(tx)), task })
    }
}
