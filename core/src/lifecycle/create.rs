//! `create`: the claim or Sandbox for an actor, named after it so a retry
//! finds the object it made before.

use kube::api::{DynamicObject, PostParams};
use kube::Api;
use serde_json::Value;

use super::events::EventKind;
use super::names::{self, SandboxId};
use super::preflight::Checked;
use super::ttl::Ttl;
use super::{access, manifest, Lifecycle};
use crate::client::{api_error, Action};
use crate::config::Mode;
use crate::error::{Error, ErrorCode, Result};

impl Lifecycle {
    /// Makes the claim or Sandbox for `actor_id` and returns its id. The name
    /// is derived from the actor id, so a retry after a crash finds the
    /// object it made before instead of creating a second one.
    pub(crate) async fn create(&self, actor_id: &str) -> Result<String> {
        let id = SandboxId { namespace: self.namespace.clone(), name: names::object_name(self.warm(), actor_id) };
        let ev = self.emitter(&id, actor_id);
        // The connect that follows waits on these: their lists start now.
        self.caches.start(self.warm());
        self.require(&format!("create {id}"), &access::create(self.kind())).await?;
        if let Mode::WarmPool(pool) = &self.config.mode {
            let checked = Checked {
                pool,
                cwd: &self.config.cwd,
                container: self.config.container.as_deref(),
                suspend: self.config.suspend,
            };
            for warning in self.pool_check.ensure(&self.client, &id.namespace, &checked).await? {
                ev.emit(EventKind::Warning, None, None, Some(&warning));
            }
        }
        let shutdown_time = self.ttl.as_ref().map(Ttl::shutdown_time);
        let mut manifest = match &self.config.mode {
            Mode::WarmPool(p) => {
                manifest::claim(&self.config, p, &id.name, &id.namespace, actor_id, shutdown_time.as_deref())
            }
            Mode::Direct(d) => {
                manifest::sandbox(&self.config, d, &id.name, &id.namespace, actor_id, shutdown_time.as_deref())
            }
        };
        // Its pod is new, or a warm pool member's that no exec ran in: this
        // provider's engine takes it over.
        manifest["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION] = self.swept_by.clone().into();
        let object: DynamicObject =
            serde_json::from_value(manifest).map_err(|e| Error::internal(e.to_string()).with_source(e))?;
        let kind = self.kind();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &id.namespace, &kind.api_resource());
        let action =
            Action { verb: "create", resource: kind.resource(), name: Some(&id.name), namespace: &id.namespace };
        // Two rounds: the second follows an object of ours that was still
        // being deleted when the first create ran into it.
        for _ in 0..2 {
            match api.create(&PostParams::default(), &object).await {
                Ok(made) => {
                    if let Some(ttl) = &self.ttl {
                        ttl.mark(&id.to_string());
                    }
                    self.mark_fresh(&id, actor_id, made.metadata.uid);
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
                    self.wait_gone(&[(kind, id.name.clone())], self.deadline()).await?;
                }
                Err(e) => return Err(api_error(e, action)),
            }
        }
        Err(Error::new(
            ErrorCode::InvalidState,
            format!("{} {id} keeps reappearing while being created", kind.resource()),
        ))
    }
}
