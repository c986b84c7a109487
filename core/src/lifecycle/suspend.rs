//! `suspend`: `operatingMode: Suspended` on the Sandbox (its pod goes, its
//! volumes stay), and the wait for it that a resuming `connect` shares.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::events::{Emitter, EventKind};
use super::resources::{bound_sandbox, ClaimObject, Kind, SandboxObject};
use super::waits::{self, Step};
use super::{access, manifest, names, not_ours, readiness, Lifecycle};
use crate::config::SuspendPolicy;
use crate::error::Result;

impl Lifecycle {
    /// Suspends the sandbox: `operatingMode: Suspended` on the Sandbox, then
    /// waits until its pod is gone. With `suspend: "none"` only the TTL
    /// backstop is moved (so it counts from now). A sandbox that no longer
    /// exists needs no suspending.
    pub(crate) async fn suspend(&self, actor_id: &str, id: &str) -> Result<()> {
        let Some(id) = self.own_id(id) else { return Ok(()) };
        let ev = self.emitter(&id, actor_id);
        let ns = &id.namespace;
        let name = if self.warm() {
            let claim: Option<ClaimObject> = self.caches.claims.read(&id.name).await?;
            let Some(claim) = claim else { return Ok(()) };
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
        let sb: Option<SandboxObject> = self.caches.sandboxes.read(&name).await?;
        let Some(sb) = sb else { return Ok(()) };
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
            self.require(&format!("suspend {id}"), &access::suspend()).await?;
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

    /// Waits for `Suspended=True` at the current generation, then for the
    /// pod to be gone; `false` if the Sandbox is gone.
    pub(super) async fn wait_suspended(&self, ns: &str, name: &str, deadline: Instant, ev: &Emitter) -> Result<bool> {
        let mut sandboxes = self.caches.sandboxes.watch_named(name, None);
        let what = format!("sandbox {ns}/{name} to finish suspending");
        let step = |sb: Option<SandboxObject>| {
            Some(match sb {
                None => Step::Done(false),
                Some(sb) if readiness::is_suspended(&sb) => Step::Done(true),
                Some(_) => Step::Waiting("waiting for the pod to terminate".into()),
            })
        };
        let waiting = |w: &str| ev.emit(EventKind::Waiting, Some(name), None, Some(w));
        if !waits::wait(&mut sandboxes, deadline, &what, step, waiting).await? {
            return Ok(false);
        }
        // agent-sandbox reports Suspended once it has deleted the pod, which
        // a real node then stops within its grace period: a resume before
        // the pod is gone would meet the old one (its name is the Sandbox's),
        // and an exec in it dies with it.
        let mut pods = self.caches.pods.watch_named(name, None);
        let what = format!("the pod of sandbox {ns}/{name} to be gone");
        let step = |pod: Option<Pod>| {
            Some(match pod {
                None => Step::Done(true),
                Some(_) => Step::Waiting("waiting for the pod to terminate".into()),
            })
        };
        waits::wait(&mut pods, deadline, &what, step, waiting).await
    }
}
