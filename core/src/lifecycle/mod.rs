//! Sandbox lifecycle on kubernetes-sigs/agent-sandbox (v1beta1): the
//! Kubernetes side of create / connect / suspend / destroy, without the exec
//! engine (the top-level [`crate::provider`] joins the two).
//!
//! [`Lifecycle`] and its shared helpers live here; each operation extends it
//! in its own module: [`create`](create.rs), `connect`, `suspend`, `destroy`,
//! and [`ttl`] (the `ttlSeconds` backstop and the `touch` that moves it).
//! - `access`: permission checks before a call changes anything.
//! - [`readiness`]: pure decisions on observed objects; [`waits`]: waiting on
//!   watched objects until a decision; [`caches`]: the shared watches those
//!   waits subscribe to, and the cache reconnects read.
//! - [`manifest`], [`names`], [`resources`]: what we create and read;
//!   `preflight`: the warm pool's template check; [`events`]: progress.

mod access;
pub(crate) mod caches;
mod connect;
mod create;
mod destroy;
pub(crate) mod events;
pub(crate) mod manifest;
pub(crate) mod names;
#[cfg(test)]
mod orchestration_tests;
mod preflight;
pub(crate) mod readiness;
pub(crate) mod resources;
mod suspend;
pub(crate) mod ttl;
pub(crate) mod waits;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::Object;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use caches::Caches;
use events::Emitter;
pub use events::{Event, EventKind, EventSink};
use names::SandboxId;
use preflight::PoolCheck;
use resources::Kind;
use ttl::Ttl;

use crate::client::informer::{Health, Informer};
use crate::client::{api_error, Action, Connection};
use crate::config::{Mode, ProviderConfig};
use crate::error::{Error, ErrorCode, Result};
use crate::exec::ExecTarget;
use crate::sync::lock;

/// A connected sandbox: where its commands run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Connected {
    /// The pod (= Sandbox name) and container: the `container` option or the
    /// pod's first.
    pub target: ExecTarget,
    /// The Sandbox's Service DNS name (`status.serviceFQDN`), if it has one.
    pub service: Option<String>,
    /// The pod's UID: a pod recreated under the same name is another pod.
    pub pod_uid: Option<String>,
    /// The [`names::SWEPT_BY_ANNOTATION`] of the object the id names, if any.
    pub swept_by: Option<String>,
    /// Created by this process and connected for the first time, or resumed
    /// by this connect (its pod is new): no exec can have left processes in
    /// the pod, so there is nothing to sweep.
    pub fresh: bool,
}

/// Kubernetes lifecycle operations for one provider configuration. Keeps no
/// per-actor state beyond throttling (TTL) and event bookkeeping.
pub(crate) struct Lifecycle {
    client: Client,
    /// Namespace new sandboxes are created in.
    pub namespace: String,
    config: Arc<ProviderConfig>,
    ttl: Option<Ttl>,
    sink: Option<EventSink>,
    /// Ids of claims / Sandboxes created by this process and not yet
    /// connected, with the actor they were created for. No exec can have run
    /// in them, so their first connect skips the orphan sweep (and the GET
    /// that checks the owner: only that actor's connect takes the entry); a
    /// claim's first connect also reports `adopted` / `cold_start` and
    /// follows the claim with a watch from the start.
    fresh: Mutex<HashMap<String, Fresh>>,
    /// The shared watches of the namespace.
    caches: Caches,
    /// The permission review, shared by the calls of a short while.
    rules: access::RulesCache,
    pool_check: PoolCheck,
    /// The connection's transport warning, until the first call's emitter
    /// has reported it (an event and a trace line, once).
    transport_warning: Mutex<Option<String>>,
    /// This provider's exec engine, as creates and resumes mark it (see
    /// [`Lifecycle::with_swept_by`]).
    swept_by: String,
}

/// A claim or Sandbox this process created and nobody connected yet.
struct Fresh {
    /// The actor it was created for.
    actor: String,
    /// Its UID: the cache may still hold a deleted object of the same name
    /// (names derive from actor ids), which is not this one.
    uid: Option<String>,
}

impl Lifecycle {
    /// Lifecycle over `conn`; the namespace is the option or the client's
    /// default. Its watches end when `stop` is cancelled.
    pub(crate) fn new(
        conn: &Connection,
        config: Arc<ProviderConfig>,
        sink: Option<EventSink>,
        stop: &CancellationToken,
    ) -> Self {
        let namespace = config.namespace.clone().unwrap_or_else(|| conn.default_namespace.clone());
        let warm = matches!(config.mode, Mode::WarmPool(_));
        Lifecycle {
            client: conn.client.clone(),
            caches: Caches::new(&conn.client, &namespace, warm, stop),
            rules: access::RulesCache::default(),
            namespace,
            ttl: config.ttl.map(|t| Ttl::new(t).with_refresh_interval(config.ttl_refresh_interval)),
            config,
            sink,
            fresh: Mutex::new(HashMap::new()),
            pool_check: PoolCheck::default(),
            transport_warning: Mutex::new(conn.transport_warning.clone()),
            swept_by: String::new(),
        }
    }

    /// Names the exec engine (its instance id) that this provider's creates
    /// and resumes put in [`names::SWEPT_BY_ANNOTATION`].
    pub(crate) fn with_swept_by(mut self, engine: &str) -> Self {
        self.swept_by = engine.to_owned();
        self
    }

    /// Marks the sandbox `id` as taken over by this provider's engine (after
    /// its sweep), so its next reconnects need none.
    pub(crate) async fn mark_swept(&self, id: &str) -> Result<()> {
        let Some(id) = self.own_id(id) else { return Ok(()) };
        let patch = json!({ "metadata": { "annotations": { names::SWEPT_BY_ANNOTATION: self.swept_by } } });
        self.patch(self.kind(), &id.namespace, &id.name, &patch).await.map(drop)
    }

    /// True in warm-pool mode (the id names a SandboxClaim).
    fn warm(&self) -> bool {
        matches!(self.config.mode, Mode::WarmPool(_))
    }

    /// The kind of object `create` makes and the id names.
    fn kind(&self) -> Kind {
        if self.warm() {
            Kind::SandboxClaim
        } else {
            Kind::Sandbox
        }
    }

    /// The events of one call; the first call's starts with the transport
    /// warning, if there is one: events belong to a call, and the provider
    /// is built by its first call, so this is as early as it can be said.
    fn emitter(&self, id: &SandboxId, actor_id: &str) -> Emitter {
        let ev = Emitter::new(self.sink.clone(), &id.to_string(), actor_id);
        if let Some(warning) = lock(&self.transport_warning).take() {
            ev.emit(EventKind::Warning, None, None, Some(&warning));
        }
        ev
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.config.ready_timeout
    }

    /// GET; 404 → `None`.
    async fn get<P, U>(&self, kind: Kind, ns: &str, name: &str) -> Result<Option<Object<P, U>>>
    where
        P: Clone + DeserializeOwned + std::fmt::Debug,
        U: Clone + DeserializeOwned + std::fmt::Debug + Default,
    {
        get_opt(kind.api::<P, U>(&self.client, ns), kind.resource(), ns, name).await
    }

    /// Shared watches open now, how many of them are failing (an error since
    /// their last complete list), and the lists they started so far.
    pub(crate) fn watches(&self) -> (usize, usize, u64) {
        let (claims, sandboxes, pods) = (&self.caches.claims, &self.caches.sandboxes, &self.caches.pods);
        let all = [
            (claims.activity(), claims.health()),
            (sandboxes.activity(), sandboxes.health()),
            (pods.activity(), pods.health()),
        ];
        all.iter().fold((0, 0, 0), |(open, failing, lists), ((running, l), health)| {
            let failed = *running && matches!(health, Health::Degraded(_));
            (open + usize::from(*running), failing + usize::from(failed), lists + l)
        })
    }

    /// The shared pod watch, for the exec engine's pod-liveness checks.
    pub(crate) fn pod_cache(&self) -> Informer<Pod> {
        self.caches.pods.clone()
    }
    /// JSON merge patch; 404 → `Ok(false)`.
    async fn patch(&self, kind: Kind, ns: &str, name: &str, patch: &Value) -> Result<bool> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &kind.api_resource());
        let action = Action { verb: "patch", resource: kind.resource(), name: Some(name), namespace: ns };
        match api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(true),
            Err(e) => match api_error(e, action) {
                e if e.code == ErrorCode::NotFound => Ok(false),
                e => Err(e),
            },
        }
    }

    /// `id` as one of this provider's sandboxes: `None` when it cannot name
    /// one (malformed, or in a namespace other than the provider's, where it
    /// creates nothing and its Role grants nothing), so connect resolves
    /// `undefined` and suspend/destroy have nothing to do, as the adapter's
    /// other providers do for ids their backend does not know.
    fn own_id(&self, id: &str) -> Option<SandboxId> {
        SandboxId::parse(id).ok().filter(|id| id.namespace == self.namespace)
    }

    /// Fails with `forbidden` when the credentials lack a verb of `needs` in
    /// the namespace (see `access`); `op` says what was refused.
    async fn require(&self, op: &str, needs: &[access::Need]) -> Result<()> {
        access::require(&self.client, &self.namespace, op, needs, self.warm(), &self.rules).await
    }

    /// Whether `id` is fresh for `actor_id` (see [`Lifecycle::fresh`]): the
    /// UID it was created with, if known; it no longer is fresh afterwards.
    /// Another actor's call neither gets nor takes it.
    fn take_fresh(&self, id: &SandboxId, actor_id: &str) -> Option<Option<String>> {
        let mut fresh = lock(&self.fresh);
        let key = id.to_string();
        if fresh.get(&key).is_some_and(|f| f.actor == actor_id) {
            fresh.remove(&key).map(|f| f.uid)
        } else {
            None
        }
    }

    /// Records `id` as created for `actor_id` with `uid`.
    fn mark_fresh(&self, id: &SandboxId, actor_id: &str, uid: Option<String>) {
        let mut fresh = lock(&self.fresh);
        fresh.insert(id.to_string(), Fresh { actor: actor_id.to_owned(), uid });
    }

    /// Forgets `id` as fresh, whoever created it (it was deleted).
    fn forget_fresh(&self, id: &SandboxId) {
        lock(&self.fresh).remove(&id.to_string());
    }
}

/// GET of `name` through `api` (`resource` and `ns` name it in errors);
/// 404 → `None`.
pub(super) async fn get_opt<K>(api: Api<K>, resource: &'static str, ns: &str, name: &str) -> Result<Option<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let action = Action { verb: "get", resource, name: Some(name), namespace: ns };
    match api.get(name).await {
        Ok(o) => Ok(Some(o)),
        Err(e) => match api_error(e, action) {
            e if e.code == ErrorCode::NotFound => Ok(None),
            e => Err(e),
        },
    }
}

/// The object exists but was made for another actor (or not by us).
fn not_ours(kind: Kind, id: &SandboxId) -> Error {
    Error::new(
        ErrorCode::InvalidState,
        format!("{} {id} was not created for this actor; refusing to use it", kind.resource()),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn the_transport_warning_is_the_first_event_of_the_first_call_only() {
        let options = json!({
            "warmPool": "p",
            "namespace": "ns",
            "kubeConfig": { "server": "http://user:s3cr3t@10.0.0.1:8080", "token": "s3cr3t" },
        });
        let config = crate::config::parse(&options).unwrap();
        let conn = crate::client::connect(&config.kube_config).await.unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let sink: EventSink = Arc::new(move |e| crate::sync::lock(&seen).push(e));
        let lifecycle = Lifecycle::new(&conn, Arc::new(config), Some(sink), &CancellationToken::new());
        let id = SandboxId { namespace: "ns".into(), name: "sbx-1".into() };
        lifecycle.emitter(&id, "actor").emit(EventKind::Claimed, None, None, None);
        lifecycle.emitter(&id, "actor").emit(EventKind::Ready, None, None, None);
        let events = crate::sync::lock(&events);
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Warning, EventKind::Claimed, EventKind::Ready]);
        let warning = &events[0];
        assert_eq!((warning.id.as_str(), warning.actor_id.as_str()), ("ns/sbx-1", "actor"));
        let message = warning.message.as_deref().unwrap();
        assert!(message.contains("http://10.0.0.1:8080 is plain http://"), "{message}");
        assert!(!serde_json::to_string(&*events).unwrap().contains("s3cr3t"));
    }
}
