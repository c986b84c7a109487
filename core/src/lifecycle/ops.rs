//! [`Lifecycle`]: the Kubernetes side of create / connect / suspend /
//! destroy, without the exec engine. Shared helpers and `create` live here;
//! connect and suspend/destroy have their own modules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::Object;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;

use super::access;
use super::events::{Emitter, EventKind, EventSink};
use super::names::{self, SandboxId};
use super::preflight::{Checked, PoolCheck};
use super::resources::Kind;
use super::ttl::Ttl;
use super::{manifest, watch};
use crate::client::{api_error, Action, Connection};
use crate::config::{Mode, ProviderConfig};
use crate::error::{Error, ErrorCode, Result};

/// The pod a connected sandbox runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    /// Namespace of the pod.
    pub namespace: String,
    /// Pod name (= Sandbox name).
    pub pod: String,
    /// Container: the `container` option or the pod's first container.
    pub container: String,
    /// Created by this process and connected for the first time: no exec can
    /// have left processes in the pod, so there is nothing to sweep.
    pub fresh: bool,
}

/// Kubernetes lifecycle operations for one provider configuration. Keeps no
/// per-actor state beyond throttling (TTL) and event bookkeeping.
pub struct Lifecycle {
    pub(super) client: Client,
    /// Namespace new sandboxes are created in.
    pub namespace: String,
    pub(super) config: Arc<ProviderConfig>,
    pub(super) ttl: Option<Ttl>,
    pub(super) sink: Option<EventSink>,
    /// Ids of claims / Sandboxes created by this process and not yet
    /// connected, with the actor they were created for. No exec can have run
    /// in them, so their first connect skips the orphan sweep (and the GET
    /// that checks the owner: only that actor's connect takes the entry); a
    /// claim's first connect also reports `adopted` / `cold_start` and
    /// follows the claim with a watch from the start.
    pub(super) fresh: Mutex<HashMap<String, String>>,
    pool_check: PoolCheck,
}

impl Lifecycle {
    /// Lifecycle over `conn`; the namespace is the option or the client's default.
    pub fn new(conn: &Connection, config: Arc<ProviderConfig>, sink: Option<EventSink>) -> Self {
        let namespace = config.namespace.clone().unwrap_or_else(|| conn.default_namespace.clone());
        Lifecycle {
            client: conn.client.clone(),
            namespace,
            ttl: config.ttl.map(Ttl::new),
            config,
            sink,
            fresh: Mutex::new(HashMap::new()),
            pool_check: PoolCheck::default(),
        }
    }

    /// True in warm-pool mode (the id names a SandboxClaim).
    pub(super) fn warm(&self) -> bool {
        matches!(self.config.mode, Mode::WarmPool(_))
    }

    /// The kind of object `create` makes and the id names.
    pub(super) fn kind(&self) -> Kind {
        if self.warm() {
            Kind::SandboxClaim
        } else {
            Kind::Sandbox
        }
    }

    pub(super) fn emitter(&self, id: &SandboxId, actor_id: &str) -> Emitter {
        Emitter::new(self.sink.clone(), &id.to_string(), actor_id)
    }

    pub(super) fn deadline(&self) -> Instant {
        Instant::now() + self.config.ready_timeout
    }

    /// GET; 404 → `None`.
    pub(super) async fn get<P, U>(&self, kind: Kind, ns: &str, name: &str) -> Result<Option<Object<P, U>>>
    where
        P: Clone + DeserializeOwned + std::fmt::Debug,
        U: Clone + DeserializeOwned + std::fmt::Debug + Default,
    {
        get_opt(kind.api::<P, U>(&self.client, ns), kind.resource(), ns, name).await
    }

    /// GET of the pod `name`; 404 → `None`.
    pub(super) async fn get_pod(&self, ns: &str, name: &str) -> Result<Option<Pod>> {
        get_opt(Api::namespaced(self.client.clone(), ns), "pods", ns, name).await
    }

    /// JSON merge patch; 404 → `Ok(false)`.
    pub(super) async fn patch(&self, kind: Kind, ns: &str, name: &str, patch: &Value) -> Result<bool> {
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

    /// Moves the TTL backstop of `kind`/`name` if it is due (see [`Ttl::due`]).
    pub(super) async fn refresh_ttl(
        &self,
        kind: Kind,
        id: &SandboxId,
        name: &str,
        current: Option<&str>,
    ) -> Result<()> {
        let Some(patch) = self.ttl_patch_if_due(kind, id, current) else { return Ok(()) };
        self.patch(kind, &id.namespace, name, &patch).await?;
        self.ttl_marked(id, true);
        Ok(())
    }

    /// The merge patch for `kind` moving the TTL backstop, if one is due.
    pub(super) fn ttl_patch_if_due(&self, kind: Kind, id: &SandboxId, current: Option<&str>) -> Option<Value> {
        let ttl = self.ttl.as_ref()?;
        ttl.due(&id.to_string(), current).then(|| manifest::ttl_patch(kind, &ttl.shutdown_time()))
    }

    /// Records that the TTL of `id` was just moved (when `moved`).
    pub(super) fn ttl_marked(&self, id: &SandboxId, moved: bool) {
        if let (Some(ttl), true) = (&self.ttl, moved) {
            ttl.mark(&id.to_string());
        }
    }

    /// `id` as one of this provider's sandboxes: `None` when it cannot name
    /// one (malformed, or in a namespace other than the provider's, where it
    /// creates nothing and its Role grants nothing), so connect resolves
    /// `undefined` and suspend/destroy have nothing to do, as the adapter's
    /// other providers do for ids their backend does not know.
    pub(super) fn own_id(&self, id: &str) -> Option<SandboxId> {
        SandboxId::parse(id).ok().filter(|id| id.namespace == self.namespace)
    }

    /// Activity on `id` (an exec): moves the TTL backstop unless this process
    /// moved it less than an interval ago. Marked before patching so a burst
    /// of execs makes one patch.
    pub async fn touch(&self, id: &str) -> Result<()> {
        let Some(ttl) = &self.ttl else { return Ok(()) };
        let Some(id) = self.own_id(id) else { return Ok(()) };
        if !ttl.due(&id.to_string(), None) {
            return Ok(());
        }
        ttl.mark(&id.to_string());
        let kind = self.kind();
        self.patch(kind, &id.namespace, &id.name, &manifest::ttl_patch(kind, &ttl.shutdown_time())).await.map(drop)
    }

    /// Makes the claim or Sandbox for `actor_id` and returns its id. The name
    /// is derived from the actor id, so a retry after a crash finds the
    /// object it made before instead of creating a second one.
    pub async fn create(&self, actor_id: &str) -> Result<String> {
        let id = SandboxId { namespace: self.namespace.clone(), name: names::object_name(self.warm(), actor_id) };
        let ev = self.emitter(&id, actor_id);
        access::require(&self.client, &id.namespace, &format!("create {id}"), &access::create(self.kind())).await?;
        if let Mode::WarmPool(pool) = &self.config.mode {
            let checked = Checked {
                pool,
                cwd: &self.config.cwd,
                container: self.config.container.as_deref(),
                suspend: self.config.suspend,
            };
            self.pool_check.ensure(&self.client, &id.namespace, &checked).await?;
        }
        let shutdown_time = self.ttl.as_ref().map(Ttl::shutdown_time);
        let manifest = match &self.config.mode {
            Mode::WarmPool(p) => {
                manifest::claim(&self.config, p, &id.name, &id.namespace, actor_id, shutdown_time.as_deref())
            }
            Mode::Direct(d) => {
                manifest::sandbox(&self.config, d, &id.name, &id.namespace, actor_id, shutdown_time.as_deref())
            }
        };
        let object: DynamicObject = serde_json::from_value(manifest).map_err(|e| Error::internal(e.to_string()))?;
        let kind = self.kind();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &id.namespace, &kind.api_resource());
        let action =
            Action { verb: "create", resource: kind.resource(), name: Some(&id.name), namespace: &id.namespace };
        // Two rounds: the second follows an object of ours that was still
        // being deleted when the first create ran into it.
        for _ in 0..2 {
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {
                    if let Some(ttl) = &self.ttl {
                        ttl.mark(&id.to_string());
                    }
                    self.fresh.lock().map(|mut s| s.insert(id.to_string(), actor_id.to_owned())).ok();
                    if self.warm() {
                        ev.emit(EventKind::Claimed, None, None, None);
                    } else {
                        ev.emit(EventKind::ColdStart, Some(&id.name), None, None);
                    }
                    return Ok(id.to_string());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let existing = self.get::<Value, Value>(kind, &id.namespace, &id.name).await?;
                    let Some(existing) = existing else { continue };
                    if !names::owned_by(&existing.metadata, actor_id) {
                        return Err(Error::new(
                            ErrorCode::InvalidState,
                            format!(
                                "{} {id} already exists and was not created for this actor; refusing to use it",
                                kind.resource()
                            ),
                        ));
                    }
                    if existing.metadata.deletion_timestamp.is_none() {
                        return Ok(id.to_string());
                    }
                    self.wait_gone(&[(kind, id.name.clone())], &id.namespace, self.deadline()).await?;
                }
                Err(e) => return Err(api_error(e, action)),
            }
        }
        Err(Error::new(
            ErrorCode::InvalidState,
            format!("{} {id} keeps reappearing while being created", kind.resource()),
        ))
    }

    /// Whether `id` is fresh for `actor_id` (see [`Lifecycle::fresh`]); it no
    /// longer is afterwards. Another actor's call neither gets nor takes it.
    pub(super) fn take_fresh(&self, id: &SandboxId, actor_id: &str) -> bool {
        let Ok(mut fresh) = self.fresh.lock() else { return false };
        let key = id.to_string();
        if fresh.get(&key).is_some_and(|owner| owner == actor_id) {
            fresh.remove(&key);
            true
        } else {
            false
        }
    }

    /// Forgets `id` as fresh, whoever created it (it was deleted).
    pub(super) fn forget_fresh(&self, id: &SandboxId) {
        if let Ok(mut fresh) = self.fresh.lock() {
            fresh.remove(&id.to_string());
        }
    }

    /// Waits until every listed object (and, for Sandboxes, the pod of the
    /// same name) no longer exists.
    pub(super) async fn wait_gone(&self, objects: &[(Kind, String)], ns: &str, deadline: Instant) -> Result<()> {
        let exists = |s: BoxStream<'static, Result<bool>>, i: usize| s.map_ok(move |e| (i, e)).boxed();
        let mut streams: Vec<BoxStream<'static, Result<bool>>> = Vec::new();
        for (kind, name) in objects {
            let objects = watch::watch_named(kind.api::<Value, Value>(&self.client, ns), name, kind.resource());
            streams.push(objects.map_ok(|o| o.is_some()).boxed());
            if *kind == Kind::Sandbox {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                streams.push(watch::watch_named(pods, name, "pods").map_ok(|p| p.is_some()).boxed());
            }
        }
        let total = streams.len();
        let tagged = streams.into_iter().enumerate().map(|(i, s)| exists(s, i)).collect();
        let mut present: Vec<Option<bool>> = vec![None; total];
        let what = format!(
            "{} to be deleted",
            objects.iter().map(|(k, n)| format!("{} {n}", k.resource())).collect::<Vec<_>>().join(", ")
        );
        watch::wait(
            &mut watch::merge(tagged),
            deadline,
            &what,
            |(i, exists): (usize, bool)| {
                present[i] = Some(exists);
                let left = present.iter().filter(|p| **p != Some(false)).count();
                Some(if left == 0 {
                    watch::Step::Done(())
                } else {
                    watch::Step::Waiting(format!("{left} object(s) still present"))
                })
            },
            |_| {},
        )
        .await
    }
}

/// GET of `name` through `api` (`resource` and `ns` name it in errors);
/// 404 → `None`.
async fn get_opt<K>(api: Api<K>, resource: &'static str, ns: &str, name: &str) -> Result<Option<K>>
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
