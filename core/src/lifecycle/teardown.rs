//! `suspend` (delete the pod, keep the volume) and `destroy` (delete
//! everything).

use kube::api::{DeleteParams, DynamicObject};
use kube::Api;
use serde_json::{json, Value};

use super::access;
use super::connect::not_ours;
use super::events::EventKind;
use super::manifest;
use super::names;
use super::ops::Lifecycle;
use super::resources::{bound_sandbox, ClaimObject, Kind, SandboxObject};
use crate::client::{api_error, Action};
use crate::config::SuspendPolicy;
use crate::error::{ErrorCode, Result};

impl Lifecycle {
    /// Suspends the sandbox: `operatingMode: Suspended` on the Sandbox, then
    /// waits until its pod is gone. With `suspend: "none"` only the TTL
    /// backstop is moved (so it counts from now). A sandbox that no longer
    /// exists needs no suspending.
    pub async fn suspend(&self, actor_id: &str, id: &str) -> Result<()> {
        let Some(id) = self.own_id(id) else { return Ok(()) };
        let ev = self.emitter(&id, actor_id);
        let ns = &id.namespace;
        let name = if self.warm() {
            let Some(claim) = self.get::<_, _>(Kind::SandboxClaim, ns, &id.name).await? else { return Ok(()) };
            let claim: ClaimObject = claim;
            if !names::owned_by(&claim.metadata, actor_id) {
                return Err(not_ours(Kind::SandboxClaim, &id));
            }
            self.refresh_ttl(
                Kind::SandboxClaim,
                &id,
                &id.name,
                claim.spec.lifecycle.as_ref().and_then(|l| l.shutdown_time.as_deref()),
            )
            .await?;
            match bound_sandbox(&claim) {
                Some(n) => n.to_string(),
                None => return Ok(()),
            }
        } else {
            id.name.clone()
        };
        let Some(sb) = self.get::<_, _>(Kind::Sandbox, ns, &name).await? else { return Ok(()) };
        let sb: SandboxObject = sb;
        if !self.warm() && !names::owned_by(&sb.metadata, actor_id) {
            return Err(not_ours(Kind::Sandbox, &id));
        }
        let ttl = if self.warm() {
            None
        } else {
            self.ttl_patch_if_due(Kind::Sandbox, &id, sb.spec.shutdown_time.as_deref())
        };
        let mut patch = match self.config.suspend {
            SuspendPolicy::Pod if !sb.spec.is_suspended() => json!({ "spec": { "operatingMode": "Suspended" } }),
            _ => Value::Null,
        };
        if !patch.is_null() {
            access::require(&self.client, ns, &format!("suspend {id}"), &access::suspend()).await?;
        }
        if let Some(t) = &ttl {
            manifest::merge_patch(&mut patch, t);
        }
        if !patch.is_null() && !self.patch(Kind::Sandbox, ns, &name, &patch).await? {
            return Ok(());
        }
        self.ttl_marked(&id, ttl.is_some());
        if self.config.suspend == SuspendPolicy::None {
            return Ok(());
        }
        if self.wait_suspended(ns, &name, self.deadline(), &ev).await? {
            ev.emit(EventKind::Suspended, Some(&name), None, None);
        }
        Ok(())
    }

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
    pub async fn destroy(&self, actor_id: &str, id: &str) -> Result<()> {
        let Some(id) = self.own_id(id) else { return Ok(()) };
        let ev = self.emitter(&id, actor_id);
        let ns = &id.namespace;
        let kind = self.kind();
        let Some(obj) = self.get::<Value, Value>(kind, ns, &id.name).await? else { return Ok(()) };
        if !names::owned_by(&obj.metadata, actor_id) {
            return Err(not_ours(kind, &id));
        }
        let mut gone = vec![(kind, id.name.clone())];
        if self.warm() {
            let bound = obj.status.as_ref().and_then(|s| s.pointer("/sandbox/name")).and_then(Value::as_str);
            if let Some(sandbox) = bound.filter(|n| !n.is_empty()) {
                gone.push((Kind::Sandbox, sandbox.to_string()));
            }
        }
        access::require(&self.client, ns, &format!("destroy {id}"), &access::destroy(kind)).await?;
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
        self.wait_gone(&gone, ns, self.deadline()).await?;
        self.forget_fresh(&id);
        if let Some(ttl) = &self.ttl {
            ttl.forget(&id.to_string());
        }
        ev.emit(EventKind::Deleted, gone.last().map(|(_, n)| n.as_str()), None, None);
        Ok(())
    }
}
