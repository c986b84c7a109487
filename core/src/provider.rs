//! [`Provider`]: the lifecycle plus the exec engine — what the binding
//! exposes as the provider object.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client;
use crate::client::requests::Requests;
use crate::config::ProviderConfig;
use crate::error::{Error, ErrorCode, Result};
use crate::exec::ExecEngine;
use crate::lifecycle::{EventSink, Lifecycle};
use crate::sandbox::Sandbox;
use crate::trace;

/// One provider configuration: a Kubernetes client, the lifecycle and one
/// exec engine shared by every sandbox it connects.
pub struct Provider {
    lifecycle: Arc<Lifecycle>,
    /// What the client has sent so far.
    requests: Requests,
    engine: ExecEngine,
    config: Arc<ProviderConfig>,
    /// The provider's own background work (TTL touches), on the runtime it
    /// was built in; `stop` cancels it, and the shared watches, when the
    /// provider is dropped.
    background: TaskTracker,
    stop: CancellationToken,
    runtime: Handle,
}

impl Provider {
    /// Builds the client from `config.kube_config` (must run in Tokio).
    /// `on_event` receives lifecycle progress events.
    pub async fn new(config: ProviderConfig, on_event: Option<EventSink>) -> Result<Provider> {
        let conn = client::connect(&config.kube_config).await?;
        let config = Arc::new(config);
        let stop = CancellationToken::new();
        let lifecycle = Lifecycle::new(&conn, config.clone(), on_event, &stop);
        let engine = ExecEngine::new(
            conn.client.clone(),
            lifecycle.pod_cache(),
            config.max_concurrent_execs,
            config.max_concurrent_execs_per_sandbox,
        )
        .with_commands_in_audit_log(config.commands_in_audit_log);
        Ok(Provider {
            lifecycle: Arc::new(lifecycle),
            requests: conn.requests.clone(),
            engine,
            config,
            background: TaskTracker::new(),
            stop,
            runtime: Handle::current(),
        })
    }

    /// Starts provisioning a sandbox for `actor_id`; returns its id.
    ///
    /// # Cancel safety
    /// Dropping the future after the create request was sent may leave the
    /// claim or Sandbox made; calling `create` again for the same actor finds
    /// it (the name derives from the actor id) instead of making another.
    pub async fn create(&self, actor_id: &str) -> Result<String> {
        check_actor(actor_id)?;
        traced("create", actor_id, self.lifecycle.create(actor_id), |id| format!("made {id}")).await
    }

    /// Waits until the sandbox is ready (resuming it if suspended), kills
    /// process trees left by execs of a previous process (unless this
    /// provider created the sandbox and never connected it before), and
    /// returns it.
    /// `Ok(None)` only when the sandbox no longer exists.
    ///
    /// # Cancel safety
    /// Dropping the future leaves a resume that was already requested in
    /// effect (the sandbox keeps starting); the next `connect` waits for it.
    pub async fn connect(&self, actor_id: &str, id: &str) -> Result<Option<Sandbox>> {
        check_actor(actor_id)?;
        // A reconnect answers from the shared watches' cache, which can be a
        // moment behind a change made elsewhere (a suspend by another
        // process, a pod deleted by hand). The sweep's exec is then the first
        // to meet the going pod, and fails `connection_lost` naming it; by
        // then the watch has seen it, so one more round waits for the
        // sandbox as it now is.
        let mut rounds = 0;
        loop {
            rounds += 1;
            let connected = traced("connect", id, self.lifecycle.connect(actor_id, id), |c| match c {
                Some(c) => {
                    format!("ready in {}/{}{}", c.target.namespace, c.target.pod, if c.fresh { " (fresh)" } else { "" })
                }
                None => "gone".to_owned(),
            });
            let Some(connected) = connected.await? else { return Ok(None) };
            let target = connected.target;
            // An exec costs as much as the rest of a warm connect: skip it
            // where no process can have been left behind.
            if !connected.fresh {
                match self.engine.sweep_orphans(&target).await {
                    Err(e) if e.code == ErrorCode::ConnectionLost && rounds == 1 => continue,
                    swept => swept?,
                }
            }
            return Ok(Some(Sandbox::new(self.engine.clone(), target, self.config.cwd.clone(), self.config.limits)));
        }
    }

    /// Records activity on the sandbox `id` (moves the TTL backstop, at most
    /// about once a minute).
    pub async fn touch(&self, id: &str) -> Result<()> {
        self.lifecycle.touch(id).await
    }

    /// [`Provider::touch`] in the background, from any thread: best effort
    /// (the next activity retries), and it ends with the provider instead of
    /// outliving it.
    pub fn touch_in_background(&self, id: &str) {
        let (lifecycle, stop, id) = (self.lifecycle.clone(), self.stop.clone(), id.to_owned());
        self.background.spawn_on(
            async move {
                let _ = stop.run_until_cancelled_owned(lifecycle.touch(&id)).await;
            },
            &self.runtime,
        );
    }

    /// What this provider has cost the API server so far (for diagnostics,
    /// benchmarks and tests).
    pub fn stats(&self) -> Stats {
        let (watches, failing, lists) = self.lifecycle.watches();
        Stats { requests: self.requests.snapshot(), watches, failing, lists }
    }

    /// Background tasks still running (for tests and diagnostics).
    pub fn background_tasks(&self) -> usize {
        self.background.len()
    }

    /// Suspends the sandbox (deletes its pod) or, with `suspend: "none"`,
    /// only moves the TTL.
    ///
    /// # Cancel safety
    /// Once the patch is sent, dropping the future does not stop the suspend;
    /// a later `connect` waits for it to finish and resumes.
    pub async fn suspend(&self, actor_id: &str, id: &str) -> Result<()> {
        check_actor(actor_id)?;
        traced("suspend", id, self.lifecycle.suspend(actor_id, id), |()| "done".to_owned()).await
    }

    /// Deletes the sandbox and everything it owns; idempotent.
    ///
    /// # Cancel safety
    /// Once the delete is sent, dropping the future does not stop it (only
    /// the wait for it ends); calling `destroy` again finishes the wait.
    pub async fn destroy(&self, actor_id: &str, id: &str) -> Result<()> {
        check_actor(actor_id)?;
        traced("destroy", id, self.lifecycle.destroy(actor_id, id), |()| "done".to_owned()).await
    }
}

/// See [`Provider::stats`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// `"verb resource"` (e.g. `"get pods"`, `"exec pods/exec"`) → requests
    /// sent, retries included.
    pub requests: std::collections::BTreeMap<String, u64>,
    /// Shared watches open now (one per kind in use: claims, Sandboxes, pods).
    pub watches: usize,
    /// Those of them failing now (an error since their last complete list:
    /// they list again after a backoff, and serve nothing meanwhile).
    pub failing: usize,
    /// Lists those watches have started so far (a first list, then one per
    /// recovery).
    pub lists: u64,
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
    /// Background touches end with their owner.
    fn drop(&mut self) {
        self.stop.cancel();
        self.background.close();
    }
}
