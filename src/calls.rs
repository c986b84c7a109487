//! What file and process calls share on their way from JS: the caller's
//! abort handle, and the promise they resolve through.
//!
//! napi's `AbortSignal` is `!Send` and misses signals aborted before the
//! call, so `js/` makes a `NativeCancel` for every call, cancels it when the
//! call's signal aborts, and passes it in; the call runs on napi's Tokio
//! runtime as a [`sandbox_core::Call`] with that token (the core adds
//! the provider's default timeout).

use std::future::Future;

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::Env;
use napi_derive::napi;
use sandbox_core::Call;
use tokio_util::sync::CancellationToken;

use crate::errors::to_napi;

/// Stops one call: cancelling makes it reject with `aborted`.
#[napi]
#[derive(Default)]
pub struct NativeCancel {
    token: CancellationToken,
}

#[napi]
impl NativeCancel {
    /// A handle nobody has cancelled yet.
    #[napi(constructor)]
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the call (its connection is closed); idempotent.
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

impl NativeCancel {
    /// The core's call for this handle, with the provider's default timeout.
    pub(crate) fn call(&self) -> Call {
        Call { cancel: self.token.clone(), timeout: None }
    }
}

/// Runs `work` on napi's Tokio runtime; the promise settles with its result.
pub(crate) fn promise<T, F>(env: &Env, work: F) -> napi::Result<PromiseRaw<'_, T>>
where
    T: 'static + Send + ToNapiValue,
    F: 'static + Send + Future<Output = sandbox_core::Result<T>>,
{
    env.spawn_future(async move { work.await.map_err(to_napi) })
}
