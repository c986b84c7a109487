//! `destroy`: delete the claim or Sandbox, make sure what it controls goes
//! too, and wait until all of it is gone (the wait `create` also uses for an
//! object still deleting).

use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Preconditions};
use kube::Api;
use tokio::time::Instant;

use super::events::EventKind;
use super::resources::{bound_sandbox, ClaimObject, Kind, SandboxObject};
use super::{access, names, not_ours, waits, Lifecycle};
use crate::client::{api_error, Action};
use crate::error::{ErrorCode, Result};

/// How long the garbage collector gets to delete what the claim or Sandbox
/// controls before `destroy` deletes it itself.
const COLLECTOR_GRACE: Duration = Duration::from_secs(2);

impl Lifecycle {
    /// Deletes the claim (warm-pool mode) or Sandbox and waits until it, its
    /// Sandbox and pod are gone; the garbage collector removes the PVCs and
    /// the Service right after. Idempotent: a missing object is success.
    ///
    /// Background propagation, not foreground: with foreground the Sandbox
    /// lingers while its pod is deleted, and agent-sandbox (v1.0.3) with a
    /// stale cache — after an API server restart, say — recreates that pod;
    /// the garbage collector then never deletes the new pod and the Sandbox
    /// and claim stay forever (seen on the local cluster). In the background
    /// the owner is gone at once, so any such pod is an orphan the collector
    /// removes. Many destroys at once also finish sooner.
    ///
    /// The Sandbox (warm-pool mode) and the pod are deleted here too when
    /// they are still there after `COLLECTOR_GRACE` (2 s): after an API server
    /// restart the collector acts only once its informers have relisted,
    /// which took 6–46 s after a 5 s outage on the local cluster, and the
    /// sandbox kept running all that time. Normally the collector is done
    /// well within the grace, and a destroy costs one request. Each is
    /// deleted only while its controller owner is the object deleted before
    /// it, and with a UID precondition, so a replacement of the same name is
    /// never touched.
    pub(crate) async fn destroy(&self, actor_id: &str, id: &str) -> Result<()> {
        let Some(id) = self.own_id(id) else { return Ok(()) };
        let ev = self.emitter(&id, actor_id);
        let ns = &id.namespace;
        let kind = self.kind();
        self.caches.start(self.warm());
        let (meta, bound) = if self.warm() {
            let claim: Option<ClaimObject> = self.caches.claims.read(&id.name).await?;
            let Some(claim) = claim else { return Ok(()) };
            let bound = bound_sandbox(&claim).map(str::to_owned);
            (claim.metadata, bound)
        } else {
            let sandbox: Option<SandboxObject> = self.caches.sandboxes.read(&id.name).await?;
            let Some(sandbox) = sandbox else { return Ok(()) };
            (sandbox.metadata, None)
        };
        if !names::owned_by(&meta, actor_id) {
            return Err(not_ours(kind, &id));
        }
        let mut gone = vec![(kind, id.name.clone())];
        if let Some(sandbox) = bound {
            gone.push((Kind::Sandbox, sandbox));
        }
        self.require(&format!("destroy {id}"), &access::destroy(kind)).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &kind.api_resource());
        let action = Action { verb: "delete", resource: kind.resource(), name: Some(&id.name), namespace: ns };
        match api.delete(&id.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) => {
                let e = api_error(e, action);
                if e.code != ErrorCode::NotFound {
                    return Err(e);
                }
            }
        }
        let deadline = self.deadline();
        let collected = self.wait_gone(&gone, deadline.min(Instant::now() + COLLECTOR_GRACE)).await;
        match collected {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::Timeout && Instant::now() < deadline => {
                self.delete_dependents(&meta, gone.len() > 1, ns, &gone.last().expect("the object itself").1).await?;
                self.wait_gone(&gone, deadline).await?;
            }
            Err(e) => return Err(e),
        }
        self.forget_fresh(&id);
        if let Some(ttl) = &self.ttl {
            ttl.forget(&id.to_string());
        }
        ev.emit(EventKind::Deleted, gone.last().map(|(_, n)| n.as_str()), None, None);
        Ok(())
    }

    /// Deletes what the garbage collector should have: the claim's Sandbox
    /// (`sandbox_too`), then the Sandbox's pod, both named `name`, each only
    /// while controlled by the object deleted before it (`owner` first).
    async fn delete_dependents(&self, owner: &ObjectMeta, sandbox_too: bool, ns: &str, name: &str) -> Result<()> {
        let pods = ApiResource::erase::<Pod>(&());
        let mut dependents = vec![(pods, "pods")];
        if sandbox_too {
            dependents.insert(0, (Kind::Sandbox.api_resource(), Kind::Sandbox.resource()));
        }
        let mut owner = owner.uid.clone();
        for (resource, plural) in &dependents {
            let Some(uid) = owner else { break };
            owner = self.delete_controlled(resource, plural, ns, name, &uid).await?;
        }
        Ok(())
    }

    /// Deletes `name` if its controller is the object with UID `owner`, in
    /// the background and only that very object (UID precondition); its UID
    /// when it was ours (also when it went meanwhile), else `None`.
    async fn delete_controlled(
        &self,
        resource: &ApiResource,
        plural: &'static str,
        ns: &str,
        name: &str,
        owner: &str,
    ) -> Result<Option<String>> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, resource);
        let Some(obj) = super::get_opt(api.clone(), plural, ns, name).await? else { return Ok(None) };
        let refs = obj.metadata.owner_references.iter().flatten();
        let controlled = refs.filter(|r| r.controller == Some(true)).any(|r| r.uid == owner);
        let Some(uid) = obj.metadata.uid.filter(|_| controlled) else { return Ok(None) };
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
            ..DeleteParams::background()
        };
        let action = Action { verb: "delete", resource: plural, name: Some(name), namespace: ns };
        match api.delete(name, &params).await.map_err(|e| api_error(e, action)) {
            // 404: gone meanwhile; 409: the UID precondition failed, so it
            // went and another of that name came. Either way ours is gone.
            Err(e) if !matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidState) => Err(e),
            _ => Ok(Some(uid)),
        }
    }

    /// Waits until every listed object (and, for Sandboxes, the pod of the
    /// same name) no longer exists.
    pub(super) async fn wait_gone(&self, objects: &[(Kind, String)], deadline: Instant) -> Result<()> {
        let exists = |s: BoxStream<'static, Result<bool>>, i: usize| s.map_ok(move |e| (i, e)).boxed();
        let mut streams: Vec<BoxStream<'static, Result<bool>>> = Vec::new();
        for (kind, name) in objects {
            if *kind == Kind::SandboxClaim {
                streams.push(present(self.caches.claims.watch_named(name, None)));
            } else {
                streams.push(present(self.caches.sandboxes.watch_named(name, None)));
                streams.push(present(self.caches.pods.watch_named(name, None)));
            }
        }
        let total = streams.len();
        let tagged = streams.into_iter().enumerate().map(|(i, s)| exists(s, i)).collect();
        let mut present: Vec<Option<bool>> = vec![None; total];
        let what = format!(
            "{} to be deleted",
            objects.iter().map(|(k, n)| format!("{} {n}", k.resource())).collect::<Vec<_>>().join(", ")
        );
        waits::wait(
            &mut waits::merge(tagged),
            deadline,
            &what,
            |(i, exists): (usize, bool)| {
                present[i] = Some(exists);
                let left = present.iter().filter(|p| **p != Some(false)).count();
                Some(if left == 0 {
                    waits::Step::Done(())
                } else {
                    waits::Step::Waiting(format!("{left} object(s) still present"))
                })
            },
            |_| {},
        )
        .await
    }
}

/// Whether the watched object exists, update by update.
fn present<K: Send + 'static>(updates: BoxStream<'static, Result<Option<K>>>) -> BoxStream<'static, Result<bool>> {
    updates.map_ok(|o| o.is_some()).boxed()
}
