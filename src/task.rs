//! Work that outlives the napi call that starts it (an exec, a follow or a
//! wait, a transfer, a tunnel, a terminal's output): one `Task` each, the
//! handle every such class holds, and [`NativeTask`], the class of the ones
//! JS only aborts and awaits (`js/tasks.js`).
//!
//! A task runs on napi's Tokio runtime as its provider's work
//! ([`Provider::own`]): it counts in the provider's background tasks and
//! stops with the provider. Its handle stops it too when dropped, so work
//! nobody can await or abort any more does not run on (a follow would retry
//! for minutes). The handle keeps the provider alive in turn: a provider
//! goes only once nothing JS holds can still observe its work, so an exec
//! never fails because the provider object was collected mid-run.

use std::future::Future;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{spawn, Either};
use napi_derive::napi;
use sandbox_core::{lock, Error, Provider};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::errors::{invalid, to_napi};
use crate::native_process::NativeProcessEnd;
use crate::native_sandbox::NativeExecResult;

/// A handle on one running piece of work that resolves with a `T`.
pub(crate) struct Task<T> {
    /// The owner, kept alive while this handle is.
    _provider: Arc<Provider>,
    /// Stops the work; a child of the provider's token.
    cancel: CancellationToken,
    result: Mutex<Option<oneshot::Receiver<sandbox_core::Result<T>>>>,
}

impl<T: Send + 'static> Task<T> {
    /// Spawns `work` as `provider`'s, giving it the token that
    /// [`Task::abort`], the handle's drop and the provider's drop cancel;
    /// the work must end soon after (an exec kills its tree first).
    pub(crate) fn spawn<F>(provider: &Arc<Provider>, work: impl FnOnce(CancellationToken) -> F) -> Task<T>
    where
        F: Future<Output = sandbox_core::Result<T>> + Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let (cancel, work) = provider.own(work);
        spawn(async move {
            // The handle may be gone (and the work cancelled): nobody to tell.
            let _ = done.send(work.await);
        });
        Task { _provider: provider.clone(), cancel, result: Mutex::new(Some(result)) }
    }
}

impl<T> Task<T> {
    /// The work's token (to hand to core calls started alongside it).
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Stops the work.
    pub(crate) fn abort(&self) {
        self.cancel.cancel();
    }

    /// What the work ended with, the first time; `None` after that.
    pub(crate) async fn result(&self) -> Option<napi::Result<T>> {
        let result = lock(&self.result).take()?;
        Some(match result.await {
            Ok(result) => result.map_err(to_napi),
            Err(_) => Err(to_napi(Error::internal("the task ended without a result"))),
        })
    }

    /// What the work ended with; `invalid_request` when asked again.
    pub(crate) async fn wait(&self, what: &str) -> napi::Result<T> {
        match self.result().await {
            Some(result) => result,
            None => Err(invalid(format!("wait() was already called for this {what}"))),
        }
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// What a [`NativeTask`] resolves with: an exec's result, or a followed or
/// awaited process's end.
pub(crate) type TaskEnd = Either<NativeExecResult, NativeProcessEnd>;

/// A running exec, follow or wait.
#[napi]
pub struct NativeTask {
    task: Task<TaskEnd>,
}

impl From<Task<TaskEnd>> for NativeTask {
    fn from(task: Task<TaskEnd>) -> Self {
        NativeTask { task }
    }
}

#[napi]
impl NativeTask {
    /// Stops the work (an exec's process tree is killed; a followed or
    /// awaited process goes on); `wait()` rejects with `aborted`.
    #[napi]
    pub fn abort(&self) {
        self.task.abort();
    }

    /// Resolves when the work has ended and every chunk reached the
    /// callback: an exec with its result, a follow or wait with the
    /// process's end. Callable once.
    #[napi]
    pub async fn wait(&self) -> napi::Result<Either<NativeExecResult, NativeProcessEnd>> {
        self.task.wait("task").await
    }
}
