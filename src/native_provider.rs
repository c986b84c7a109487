//! The provider binding: `NativeProvider` (create / connect / suspend /
//! destroy). `js/provider.js` wraps it into the plain provider object.

use std::sync::Arc;

use napi::bindgen_prelude::Unknown;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use sandbox_core::{parse_config, EventSink, Provider};

use crate::errors::to_napi;
use crate::native_sandbox::NativeSandbox;

/// The `onEvent` callback: weak, so it never keeps Node's event loop alive,
/// and called with the event only (no error argument).
type EventCallback = ThreadsafeFunction<serde_json::Value, Unknown<'static>, serde_json::Value, Status, false, true>;

/// One provider configuration with its Kubernetes client and exec engine.
#[napi]
pub struct NativeProvider {
    inner: Arc<Provider>,
}

#[napi]
impl NativeProvider {
    /// Validates the options (as JSON; `onEvent` replaced by its `typeof`),
    /// throwing a `config` error naming the first bad one. A `kubeConfig`
    /// path is read here; the client is built by the first call.
    #[napi(constructor, ts_args_type = "options: unknown, onEvent: ((event: unknown) => void) | null")]
    pub fn new(options: serde_json::Value, on_event: Option<EventCallback>) -> napi::Result<NativeProvider> {
        let config = parse_config(&options).map_err(to_napi)?;
        let sink: Option<EventSink> = on_event.map(|f| {
            let f = Arc::new(f);
            let sink: EventSink = Arc::new(move |event| {
                if let Ok(value) = serde_json::to_value(&event) {
                    f.call(value, ThreadsafeFunctionCallMode::NonBlocking);
                }
            });
            sink
        });
        Ok(NativeProvider { inner: Arc::new(Provider::new(config, sink)) })
    }

    /// `provider.name`.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.config().name.clone()
    }

    /// `provider.cwd`.
    #[napi(getter)]
    pub fn cwd(&self) -> String {
        self.inner.config().cwd.clone()
    }

    /// Starts provisioning a sandbox for the actor; resolves to its id.
    #[napi]
    pub async fn create(&self, actor_id: String) -> napi::Result<String> {
        let inner = self.inner.clone();
        inner.create(&actor_id).await.map_err(to_napi)
    }

    /// Waits for the sandbox (resuming it); `null` when it no longer exists.
    #[napi]
    pub async fn connect(&self, actor_id: String, id: String) -> napi::Result<Option<NativeSandbox>> {
        let inner = self.inner.clone();
        let sandbox = inner.connect(&actor_id, &id).await.map_err(to_napi)?;
        Ok(sandbox.map(|sandbox| NativeSandbox::new(sandbox, inner)))
    }

    /// Suspends the sandbox (per the `suspend` option).
    #[napi]
    pub async fn suspend(&self, actor_id: String, id: String) -> napi::Result<()> {
        let inner = self.inner.clone();
        inner.suspend(&actor_id, &id).await.map_err(to_napi)
    }

    /// Requests sent so far and the shared watches (see `Provider::stats`).
    #[napi(ts_return_type = "{ requests: Record<string, number>; watches: number; failing: number; lists: number }")]
    pub fn stats(&self) -> napi::Result<serde_json::Value> {
        serde_json::to_value(self.inner.stats()).map_err(|e| napi::Error::from_reason(e.to_string()))
    }

    /// Background tasks still running: its TTL touches and the tasks of its
    /// sandboxes (execs, follows, waits, transfers, tunnels, terminals).
    /// For tests.
    #[napi]
    pub fn background_tasks(&self) -> u32 {
        self.inner.background_tasks().try_into().unwrap_or(u32::MAX)
    }

    /// Deletes the sandbox and waits until nothing of it is left.
    #[napi]
    pub async fn destroy(&self, actor_id: String, id: String) -> napi::Result<()> {
        let inner = self.inner.clone();
        inner.destroy(&actor_id, &id).await.map_err(to_napi)
    }
}
