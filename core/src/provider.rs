//! [`Provider`]: the lifecycle plus the exec engine — what the binding
//! exposes as the provider object.

use std::future::Future;
use std::sync::{Arc, Weak};

use tokio::runtime::Handle;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TrackedFuture;
use tokio_util::task::TaskTracker;

use crate::client;
use crate::client::requests::Requests;
use crate::config::ProviderConfig;
use crate::error::{Error, ErrorCode, Result};
use crate::exec::ExecEngine;
use crate::lifecycle::{Connected, EventSink, Lifecycle};
use crate::sandbox::{Activity, Sandbox};
use crate::trace;

/// One provider configuration: a Kubernetes client, the lifecycle and one
/// exec engine shared by every sandbox it connects.
///
/// Built synchronously from a validated configuration; the client and what
/// hangs on it are built by the first call that needs them (so constructing
/// a provider never touches the network), and a failed build is tried again
/// by the next call.
pub struct Provider {
    config: Arc<ProviderConfig>,
    on_event: Option<EventSink>,
    parts: OnceCell<Arc<Parts>>,
    /// The provider's background work (its TTL touches, and what callers
    /// start through [`Provider::own`]); `stop` cancels it, and the shared
    /// watches, when the provider is dropped.
    background: TaskTracker,
    stop: CancellationToken,
}

/// What the first call builds.
struct Parts {
    lifecycle: Arc<Lifecycle>,
    /// What the client has sent so far.
    requests: Requests,
    engine: ExecEngine,
    /// Where background touches run: the runtime the parts were built in.
    runtime: Handle,
    background: TaskTracker,
    stop: CancellationToken,
}

impl Provider {
    /// A provider for `config`; `on_event` receives lifecycle progress
    /// events. Does no I/O and needs no runtime.
    pub fn new(config: ProviderConfig, on_event: Option<EventSink>) -> Provider {
        Provider {
            config: Arc::new(config),
            on_event,
            parts: OnceCell::new(),
            background: TaskTracker::new(),
            stop: CancellationToken::new(),
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// The client, lifecycle and engine, built once by whichever call comes
    /// first (concurrent first calls wait for the same build). Must run in
    /// Tokio.
    ///
    /// The build reads kubeconfig and token files and may run an exec
    /// credential plugin: it runs on a blocking thread, never on a runtime
    /// worker that other sandboxes' calls share.
    async fn parts(&self) -> Result<&Arc<Parts>> {
        self.parts
            .get_or_try_init(|| async {
                let (config, runtime) = (self.config.clone(), Handle::current());
                let build = runtime.clone();
                let conn = tokio::task::spawn_blocking(move || build.block_on(client::connect(&config.kube_config)))
                    .await
                    .map_err(|e| Error::internal(format!("building the Kubernetes client failed: {e}")))??;
                let lifecycle = Lifecycle::new(&conn, self.config.clone(), self.on_event.clone(), &self.stop);
                let engine = ExecEngine::new(
                    conn.client.clone(),
                    lifecycle.pod_cache(),
                    self.config.max_concurrent_execs,
                    self.config.max_concurrent_execs_per_sandbox,
                )
                .with_commands_in_audit_log(self.config.commands_in_audit_log)
                .with_tunnel_limits(self.config.tunnels);
                let lifecycle = lifecycle.with_swept_by(engine.instance());
                Ok(Arc::new(Parts {
                    lifecycle: Arc::new(lifecycle),
                    requests: conn.requests.clone(),
                    engine,
                    runtime,
                    background: self.background.clone(),
                    stop: self.stop.clone(),
                }))
            })
            .await
    }

    /// Starts provisioning a sandbox for `actor_id`; returns its id.
    ///
    /// # Cancel safety
    /// Dropping the future after the create request was sent may leave the
    /// claim or Sandbox made; calling `create` again for the same actor finds
    /// it (the name derives from the actor id) instead of making another.
    pub async fn create(&self, actor_id: &str) -> Result<String> {
        check_actor(actor_id)?;
        let parts = self.parts().await?;
        traced("create", actor_id, parts.lifecycle.create(actor_id), |id| format!("made {id}")).await
    }

    /// Waits until the sandbox is ready (resuming it if suspended), kills
    /// process trees left by execs of a previous process or by this one's
    /// lost runs (unless nothing can have been left: see
    /// [`ExecEngine::sweep_on_connect`]), and returns it.
    /// `Ok(None)` only when the sandbox no longer exists.
    ///
    /// # Cancel safety
    /// Dropping the future leaves a resume that was already requested in
    /// effect (the sandbox keeps starting); the next `connect` waits for it.
    pub async fn connect(&self, actor_id: &str, id: &str) -> Result<Option<Sandbox>> {
        check_actor(actor_id)?;
        let parts = self.parts().await?;
        // A reconnect takes the pod from the shared watch's cache, which can
        // be a moment behind a pod deleted by hand. The sweep's exec is then
        // the first to meet the going pod, and fails `connection_lost`
        // naming it; by then the watch has seen it, so one more round waits
        // for the sandbox as it now is.
        let mut rounds = 0;
        loop {
            rounds += 1;
            let connected = traced("connect", id, parts.lifecycle.connect(actor_id, id), |c| match c {
                Some(c) => {
                    format!("ready in {}/{}{}", c.target.namespace, c.target.pod, if c.fresh { " (fresh)" } else { "" })
                }
                None => "gone".to_owned(),
            });
            let Some(connected) = connected.await? else { return Ok(None) };
            let Connected { target, service, pod_uid, swept_by, fresh } = connected;
            // An exec costs as much as the rest of a warm connect: the
            // engine skips it where no process can have been left behind.
            let ours = swept_by.as_deref() == Some(parts.engine.instance());
            match parts.engine.sweep_on_connect(&target, pod_uid.as_deref(), fresh, ours).await {
                Err(e) if e.code == ErrorCode::ConnectionLost && rounds == 1 => continue,
                swept => swept?,
            };
            // Another process's next connect sees it is no longer its own
            // and sweeps. Not marked: this process's next connect sweeps
            // again, which is all a failure here costs.
            if !ours {
                if let Err(e) = parts.lifecycle.mark_swept(id).await {
                    crate::trace!("connect {id}: marking it swept failed: {}", e.message);
                }
            }
            let sandbox = Sandbox::new(parts.engine.clone(), target, self.config.cwd.clone(), self.config.limits);
            let sandbox = sandbox.with_activity(id, Parts::activity(parts)).with_service(service);
            return Ok(Some(sandbox.with_transfers(self.config.transfers.clone())));
        }
    }

    /// What a connected sandbox `id` reports on each call (see
    /// [`Parts::activity`]), building the client if needed. A test seam
    /// (`testing::report_activity`): the sandboxes `connect` returns report
    /// by themselves.
    pub(crate) async fn report_activity(&self, id: &str) -> Result<()> {
        Parts::activity(self.parts().await?).report(id);
        Ok(())
    }

    /// What this provider has cost the API server so far (for diagnostics,
    /// benchmarks and tests).
    pub fn stats(&self) -> Stats {
        let Some(parts) = self.parts.get() else { return Stats::default() };
        let (watches, failing, lists) = parts.lifecycle.watches();
        Stats {
            requests: parts.requests.snapshot(),
            connections: parts.requests.connections(),
            watches,
            failing,
            lists,
        }
    }

    /// Background tasks still running (for tests and diagnostics).
    pub fn background_tasks(&self) -> usize {
        self.background.len()
    }

    /// Makes `work` the provider's: the caller spawns the returned future
    /// (on any runtime), which counts in [`Provider::background_tasks`]
    /// while it runs. `work` gets a token of its own, also returned: a child
    /// of the provider's, so cancelling it stops this work only, and
    /// dropping the provider cancels it. `work` must end soon after its
    /// token is cancelled. For work that outlives the call that starts it
    /// (an exec, a follow, a transfer, a tunnel), so that nothing runs on
    /// for a provider nobody holds any more.
    pub fn own<F: Future>(&self, work: impl FnOnce(CancellationToken) -> F) -> (CancellationToken, TrackedFuture<F>) {
        let cancel = self.stop.child_token();
        let work = self.background.track_future(work(cancel.clone()));
        (cancel, work)
    }

    /// Suspends the sandbox (deletes its pod) or, with `suspend: "none"`,
    /// only moves the TTL.
    ///
    /// # Cancel safety
    /// Once the patch is sent, dropping the future does not stop the suspend;
    /// a later `connect` waits for it to finish and resumes.
    pub async fn suspend(&self, actor_id: &str, id: &str) -> Result<()> {
        check_actor(actor_id)?;
        let parts = self.parts().await?;
        traced("suspend", id, parts.lifecycle.suspend(actor_id, id), |()| "done".to_owned()).await
    }

    /// Deletes the sandbox and everything it owns; idempotent.
    ///
    /// # Cancel safety
    /// Once the delete is sent, dropping the future does not stop it (only
    /// the wait for it ends); calling `destroy` again finishes the wait.
    pub async fn destroy(&self, actor_id: &str, id: &str) -> Result<()> {
        check_actor(actor_id)?;
        let parts = self.parts().await?;
        traced("destroy", id, parts.lifecycle.destroy(actor_id, id), |()| "done".to_owned()).await
    }
}

/// See [`Provider::stats`]; all zero before the first call.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    /// `"verb resource"` (e.g. `"get pods"`, `"exec pods/exec"`) → requests
    /// sent, retries included.
    pub requests: std::collections::BTreeMap<String, u64>,
    /// TCP connections opened to the API server (or its proxy) so far: one
    /// per watch, exec, transfer or port-forward tunnel (HTTP/1.1), and one
    /// that every other request shares where the server speaks HTTP/2.
    pub connections: u64,
    /// Shared watches open now (one per kind in use: claims, Sandboxes, pods).
    pub watches: usize,
    /// Those of them failing now (an error since their last complete list:
    /// they list again after a backoff, and serve nothing meanwhile).
    pub failing: usize,
    /// Lists those watches have started so far (a first list, then one per
    /// recovery).
    pub lists: u64,
}

impl Parts {
    /// The activity hook of connected sandboxes: each call on one moves its
    /// TTL backstop (the lifecycle throttles the patches to about one a
    /// minute per sandbox), in the background, best effort (the next
    /// activity retries). It holds the provider's parts weakly: a sandbox
    /// kept after its provider was dropped touches nothing.
    fn activity(parts: &Arc<Parts>) -> Activity {
        let parts: Weak<Parts> = Arc::downgrade(parts);
        Activity::new(move |id| {
            let Some(parts) = parts.upgrade() else { return };
            if parts.stop.is_cancelled() {
                return;
            }
            let Some(touch) = parts.lifecycle.touch_due(id) else { return };
            let (lifecycle, stop) = (parts.lifecycle.clone(), parts.stop.clone());
            parts.background.spawn_on(
                async move {
                    let _ = stop.run_until_cancelled_owned(lifecycle.touch(touch)).await;
                },
                &parts.runtime,
            );
        })
    }
}

/// Runs one lifecycle call, tracing its start and how it ended (see [`trace`](mod@trace)).
async fn traced<T>(
    op: &str,
    subject: &str,
    call: impl Future<Output = Result<T>>,
    describe: impl FnOnce(&T) -> String,
) -> Result<T> {
    if !trace::enabled() {
        return call.await;
    }
    trace!("{op} {subject}: start");
    let start = Instant::now();
    let result = call.await;
    let how = match &result {
        Ok(value) => describe(value),
        Err(e) => format!("failed: {} ({})", e.code, e.message),
    };
    trace!("{op} {subject}: {how} after {} ms", start.elapsed().as_millis());
    result
}

fn check_actor(actor_id: &str) -> Result<()> {
    if actor_id.is_empty() {
        Err(Error::invalid_request("the actor context has no actorId"))
    } else {
        Ok(())
    }
}

impl Drop for Provider {
    /// Background work ends with its owner.
    fn drop(&mut self) {
        self.stop.cancel();
        self.background.close();
    }
}
