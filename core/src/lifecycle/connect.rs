//! `connect`: find the sandbox, resume it if suspended, wait until it is
//! ready for its current generation, and say which pod to exec into.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use tokio::time::Instant;

use super::access;
use super::events::{Emitter, EventKind};
use super::manifest;
use super::names::{self, SandboxId};
use super::readiness::{self, Binding, Readiness};
use super::resources::{bound_sandbox, deleting, ClaimObject, Kind, SandboxObject, LAUNCH_TYPE_LABEL};
use super::waits::{self, Latest, Step};
use super::{not_ours, Connected, Lifecycle};
use crate::error::{Error, ErrorCode, Result};
use crate::exec::ExecTarget;

/// Latest state of the objects a connect watches.
enum Seen {
    Sandbox(Option<SandboxObject>),
    Pod(Option<Box<Pod>>),
    Claim(Option<ClaimObject>),
}

/// The watch that saw a claim get bound, handed on to the readiness wait so
/// one watch follows the claim from binding to readiness.
struct ClaimWatch {
    updates: BoxStream<'static, Result<Latest<ClaimObject>>>,
    /// The claim as last seen (bound).
    last: ClaimObject,
}

/// What a warm-pool connect knows of its claim once it is bound (nothing in
/// direct mode): its UID, since its Sandbox counts once the claim controls it
/// (see [`adopted`]), and the watch that saw the binding, if one did.
#[derive(Default)]
struct BoundClaim {
    uid: Option<String>,
    watch: Option<ClaimWatch>,
}

/// What the steps of one connect call share.
#[derive(Clone, Copy)]
struct Call<'a> {
    id: &'a SandboxId,
    actor_id: &'a str,
    deadline: Instant,
    ev: &'a Emitter,
    /// Report `adopted` / `cold_start` on the first sight of the Sandbox.
    announce: bool,
    /// The UID of the claim (warm-pool mode) or Sandbox (direct mode) this
    /// process just created: only that object counts, not a deleted one of
    /// the same name the cache may still hold.
    created: Option<&'a str>,
}

/// How waiting for readiness ended.
enum Outcome {
    /// The pod, the Sandbox's Service DNS name if it has one, and whether
    /// this call resumed the Sandbox: then the pod is one its suspend did not
    /// delete, made after this call's patch, so no exec has run in it.
    Ready { pod: Box<Pod>, service: Option<String>, swept_by: Option<String>, resumed: bool },
    /// The claim or (direct mode) the Sandbox no longer exists.
    Gone,
    /// The claim now points at another Sandbox (its old one was deleted).
    Rebound,
}

impl Lifecycle {
    /// Connects to the sandbox `id` of `actor_id`. `Ok(None)` only when the
    /// claim or Sandbox definitively no longer exists (404) or `id` cannot
    /// name one of this provider's (see `Lifecycle::own_id`); every other
    /// problem is an error, so Rivet keeps the id and retries later.
    pub(crate) async fn connect(&self, actor_id: &str, id: &str) -> Result<Option<Connected>> {
        let Some(id) = self.own_id(id) else { return Ok(None) };
        let ev = self.emitter(&id, actor_id);
        let deadline = self.deadline();
        let fresh = self.take_fresh(&id, actor_id);
        let created = fresh.as_ref().and_then(|uid| uid.as_deref());
        let call = Call { id: &id, actor_id, deadline, ev: &ev, announce: self.warm() && fresh.is_some(), created };
        // Every wait below subscribes to these: start their lists now, in
        // parallel with this call's first reads (the first call only).
        self.caches.start(self.warm());
        // A claim this process just created needs no GET: it is ours, create
        // set its TTL and its mark, and the watch shows its state.
        let mut fetch_claim = fresh.is_none();
        // In warm-pool mode the claim carries the mark (names::SWEPT_BY_ANNOTATION).
        let mut claim_mark = fresh.is_some().then(|| self.swept_by.clone());
        loop {
            let (sandbox_name, claim) = if self.warm() {
                let claim = if fetch_claim {
                    let Some(claim) = self.fetch_claim(&id, actor_id).await? else { return Ok(None) };
                    claim_mark = swept_by(&claim.metadata);
                    Some(claim)
                } else {
                    None
                };
                fetch_claim = true;
                match self.wait_bound(call, claim).await? {
                    Some(bound) => bound,
                    None => return Ok(None),
                }
            } else {
                (id.name.clone(), BoundClaim::default())
            };
            match self.bring_up(call, &sandbox_name, claim).await? {
                Outcome::Ready { pod, service, swept_by, resumed } => {
                    let new = fresh.is_some() || resumed;
                    let mark = if self.warm() { claim_mark } else { swept_by };
                    return self.target(&id, &sandbox_name, &pod, service, mark, new).map(Some);
                }
                Outcome::Gone => return Ok(None),
                Outcome::Rebound => continue,
            }
        }
    }

    /// Reads the claim (from the cache, else by GET), checks it is ours and
    /// moves its TTL if due; `None` if it is gone.
    async fn fetch_claim(&self, id: &SandboxId, actor_id: &str) -> Result<Option<ClaimObject>> {
        let claim = self.caches.claims.read(&id.name).await?;
        let Some(claim) = claim.filter(|c| !deleting(c)) else { return Ok(None) };
        check_owner(&claim, actor_id, id)?;
        let current = claim.spec.lifecycle.as_ref().and_then(|l| l.shutdown_time.clone());
        self.refresh_ttl(Kind::SandboxClaim, id, &id.name, current.as_deref()).await?;
        Ok(Some(claim))
    }

    /// Waits until the claim names its Sandbox: at once if `claim` (just
    /// fetched) does, else with a watch, returned for the readiness wait.
    /// The Sandbox's name and the bound claim; `None` if the claim is gone.
    async fn wait_bound(&self, call: Call<'_>, claim: Option<ClaimObject>) -> Result<Option<(String, BoundClaim)>> {
        let Call { id, deadline, ev, created, .. } = call;
        let decide = |claim: Option<&ClaimObject>| match claim.filter(|c| !deleting(c)).map(readiness::claim_binding) {
            None => Step::Done(None),
            Some(Binding::Bound(name)) => Step::Done(Some(name)),
            Some(Binding::Waiting(why)) => Step::Waiting(why),
            Some(Binding::Failed(why)) => Step::Fail(failed(id, &why)),
        };
        if let Some(claim) = &claim {
            match decide(Some(claim)) {
                Step::Done(bound) => {
                    return Ok(bound.map(|name| (name, BoundClaim { uid: claim.metadata.uid.clone(), watch: None })))
                }
                Step::Fail(e) => return Err(e),
                Step::Waiting(_) => {}
            }
        }
        let mut updates = self.caches.claims.watch_named(&id.name, created.map(str::to_owned));
        let what = format!("SandboxClaim {id} to be bound to a sandbox");
        let mut last = None;
        let step = |claim: Latest<ClaimObject>| {
            let step = decide(claim.as_ref());
            last = claim;
            Some(step)
        };
        let bound =
            waits::wait(&mut updates, deadline, &what, step, |w| ev.emit(EventKind::Waiting, None, None, Some(w)))
                .await?;
        Ok(bound.zip(last).map(|(name, last)| {
            (name, BoundClaim { uid: last.metadata.uid.clone(), watch: Some(ClaimWatch { updates, last }) })
        }))
    }

    /// Resumes the Sandbox if needed and waits for readiness (following the
    /// claim's watch if there is one). In warm-pool mode the Sandbox counts
    /// once the claim controls it (see [`adopted`]).
    async fn bring_up(&self, call: Call<'_>, name: &str, claim: BoundClaim) -> Result<Outcome> {
        let Call { id, actor_id, deadline, ev, announce, .. } = call;
        let ns = &id.namespace;
        let gone = if self.warm() { Outcome::Rebound } else { Outcome::Gone };
        let mut resumed = false;
        // Both at once: the pod only matters if the Sandbox turns out ready.
        // What this process just created is only looked up in the cache: a
        // miss means the watch has not shown it yet, and the wait below
        // follows it.
        let (sandbox, pod): (Option<SandboxObject>, _) = if call.created.is_some() {
            let cached = self.caches.sandboxes.cached(name).map(|s| (*s).clone());
            (cached, self.caches.pods.cached(name).map(|p| (*p).clone()))
        } else {
            // A reconnect reads the Sandbox by GET: the shared watch can be a
            // moment behind a suspend another process (or an operator) made
            // just before this call, and from it this call would hand out the
            // pod that suspend is taking away, leaving the sandbox suspended
            // under an actor that is awake. The Sandbox's Ready at its
            // current generation vouches for the cached pod. The pod only
            // serves the no-wait path: a miss in the live cache (a suspended
            // sandbox's) sends this call to the wait below, so it is not
            // confirmed by a GET.
            futures::try_join!(self.caches.sandboxes.get(name), self.caches.pods.peek(name))?
        };
        let sandbox = sandbox.filter(|s| !deleting(s));
        if sandbox.is_none() && !self.warm() && call.created.is_none() {
            return Ok(Outcome::Gone);
        }
        // A pool member the claim names but does not control yet (as this
        // process has seen it) is followed by the wait below.
        let sandbox = sandbox.filter(|s| adopted(s, claim.uid.as_deref()));
        // A claim whose Sandbox vanished provisions a new one: the wait below
        // follows the claim.
        if let Some(sb) = sandbox {
            if !self.warm() && !names::owned_by(&sb.metadata, actor_id) {
                return Err(not_ours(Kind::Sandbox, id));
            }
            // In direct mode the TTL lives on the Sandbox: one patch for both.
            let ttl = if self.warm() {
                None
            } else {
                self.ttl_patch_if_due(Kind::Sandbox, id, sb.spec.shutdown_time.as_deref())
            };
            if sb.spec.is_suspended() {
                if !readiness::is_suspended(&sb) && !self.wait_suspended(ns, name, deadline, ev).await? {
                    return Ok(gone);
                }
                let op = format!("connect {id} (resuming it)");
                self.require(&op, &access::resume(self.warm())).await?;
                let mut patch = json!({ "spec": { "operatingMode": "Running" } });
                if !self.warm() {
                    // The resumed pod is new: this provider's engine takes it
                    // over (the claim carries the mark in warm-pool mode).
                    patch["metadata"]["annotations"][names::SWEPT_BY_ANNOTATION] = self.swept_by.clone().into();
                }
                if let Some(t) = &ttl {
                    manifest::merge_patch(&mut patch, t);
                }
                if !self.patch(Kind::Sandbox, ns, name, &patch).await? {
                    return Ok(gone);
                }
                self.ttl_marked(id, ttl.is_some());
                resumed = true;
            } else {
                if let Some(t) = &ttl {
                    self.patch(Kind::Sandbox, ns, name, t).await?;
                    self.ttl_marked(id, true);
                }
                // Reconnecting to a running sandbox is the common case: no
                // wait at all.
                if let Some(pod) = pod.filter(|p| readiness::sandbox_readiness(&sb, Some(p)) == Readiness::Ready) {
                    if announce {
                        ev.emit(launch_event(&sb, name, id), Some(name), None, None);
                    }
                    ev.emit(EventKind::Ready, Some(name), readiness::scheduled_node(&pod), None);
                    return Ok(Outcome::Ready {
                        pod: Box::new(pod),
                        service: service_fqdn(&sb),
                        swept_by: swept_by(&sb.metadata),
                        resumed: false,
                    });
                }
            }
        }
        let mut outcome = self.wait_ready(call, name, claim).await?;
        if let Outcome::Ready { pod, resumed: new_pod, .. } = &mut outcome {
            let node = readiness::scheduled_node(pod);
            if resumed {
                ev.emit(EventKind::Resumed, Some(name), node, None);
            }
            ev.emit(EventKind::Ready, Some(name), node, None);
            *new_pod = resumed;
        }
        Ok(outcome)
    }

    /// Watches the Sandbox, its pod and (warm mode) the claim until ready; the
    /// claim through its watch if it is already being watched.
    async fn wait_ready(&self, call: Call<'_>, name: &str, bound: BoundClaim) -> Result<Outcome> {
        let Call { id, deadline, ev, announce, created, .. } = call;
        let ns = &id.namespace;
        let warm = self.warm();
        // The UID gate is for the object create made: the claim in warm-pool
        // mode (its Sandbox, adopted or new, is whatever it names).
        let created = |warm_kind: bool| created.filter(|_| warm_kind == warm).map(str::to_owned);
        // A gone Sandbox ends the wait in direct mode (confirmed, then), not
        // in warm-pool mode (the claim provisions another); a missing pod
        // never does.
        let sandboxes = if warm {
            self.caches.sandboxes.watch_transient(name)
        } else {
            self.caches.sandboxes.watch_named(name, created(false))
        };
        let mut streams = vec![
            sandboxes.map_ok(Seen::Sandbox).boxed(),
            self.caches.pods.watch_transient(name).map_ok(|p| Seen::Pod(p.map(Box::new))).boxed(),
        ];
        let (mut sandbox, mut pod, mut claim) = (None, None, None::<Option<ClaimObject>>);
        if self.warm() {
            let updates = match bound.watch {
                Some(ClaimWatch { updates, last }) => {
                    claim = Some(Some(last));
                    updates
                }
                None => self.caches.claims.watch_named(&id.name, created(true)),
            };
            streams.push(updates.map_ok(Seen::Claim).boxed());
        }
        let (mut announced, mut scheduled) = (!announce, false);
        let what = format!("sandbox {ns}/{name} to become ready");
        let step = |seen: Seen| {
            match seen {
                Seen::Sandbox(s) => sandbox = Some(s),
                Seen::Pod(p) => pod = Some(p),
                Seen::Claim(c) => claim = Some(c),
            }
            if warm {
                match &claim {
                    None => return None,
                    Some(None) => return Some(Step::Done(Outcome::Gone)),
                    Some(Some(c)) if deleting(c) => return Some(Step::Done(Outcome::Gone)),
                    Some(Some(c)) if bound_sandbox(c).is_some_and(|b| b != name) => {
                        return Some(Step::Done(Outcome::Rebound))
                    }
                    Some(Some(_)) => {}
                }
            }
            let (Some(sb), Some(p)) = (&sandbox, &pod) else { return None };
            let Some(sb) = sb.as_ref().filter(|s| !deleting(s)) else {
                return Some(if warm {
                    Step::Waiting(format!("sandbox {name} is gone; waiting for the claim to provision another"))
                } else {
                    Step::Done(Outcome::Gone)
                });
            };
            if !adopted(sb, bound.uid.as_deref()) {
                return Some(Step::Waiting(format!("sandbox {name} is not yet adopted by its claim")));
            }
            if !announced {
                announced = true;
                ev.emit(launch_event(sb, name, id), Some(name), None, None);
            }
            let verdict = readiness::sandbox_readiness(sb, p.as_deref());
            let node = p.as_deref().and_then(readiness::scheduled_node);
            if node.is_some() && !scheduled {
                scheduled = true;
                // An already running (adopted) pod was scheduled long ago.
                if verdict != Readiness::Ready {
                    ev.emit(EventKind::Scheduled, Some(name), node, None);
                }
            }
            Some(match verdict {
                Readiness::Ready => Step::Done(Outcome::Ready {
                    pod: p.clone().unwrap_or_default(),
                    service: service_fqdn(sb),
                    swept_by: swept_by(&sb.metadata),
                    resumed: false,
                }),
                Readiness::Waiting(why) => Step::Waiting(why),
                Readiness::Failed(why) => Step::Fail(failed(id, &why)),
            })
        };
        waits::wait(&mut waits::merge(streams), deadline, &what, step, |w| {
            ev.emit(EventKind::Waiting, Some(name), None, Some(w))
        })
        .await
    }

    /// The exec target in the ready pod: the `container` option (which must
    /// exist) or the first container.
    fn target(
        &self,
        id: &SandboxId,
        name: &str,
        pod: &Pod,
        service: Option<String>,
        swept_by: Option<String>,
        fresh: bool,
    ) -> Result<Connected> {
        let containers: Vec<&str> =
            pod.spec.iter().flat_map(|s| s.containers.iter().map(|c| c.name.as_str())).collect();
        let container = match &self.config.container {
            Some(c) if containers.contains(&c.as_str()) => c.clone(),
            Some(c) => {
                return Err(Error::config(format!(
                    "option `container`: pod {name} has no container {c:?} (containers: {})",
                    containers.join(", ")
                )))
            }
            None => containers
                .first()
                .map(|c| c.to_string())
                .ok_or_else(|| Error::internal(format!("pod {name} has no containers")))?,
        };
        let target = ExecTarget { namespace: id.namespace.clone(), pod: name.to_string(), container: Some(container) };
        Ok(Connected { target, service, pod_uid: pod.metadata.uid.clone(), swept_by, fresh })
    }
}

/// The DNS name of the Sandbox's Service, if it has one (an empty
/// `serviceFQDN` is none; read here only, so nothing after checks again).
fn service_fqdn(sb: &SandboxObject) -> Option<String> {
    sb.status.as_ref().and_then(|s| s.service_fqdn.clone()).filter(|h| !h.is_empty())
}

/// An object's [`names::SWEPT_BY_ANNOTATION`].
fn swept_by(meta: &ObjectMeta) -> Option<String> {
    meta.annotations.as_ref().and_then(|a| a.get(names::SWEPT_BY_ANNOTATION)).cloned()
}

/// Whether the Sandbox is the claim's of UID `claim` (always in direct mode,
/// `None`): the controller adopts a pool member with one patch that makes the
/// claim its controller and bumps its generation, and only then names it in
/// the claim's status. The two arrive on different watches, so the member
/// can still be seen as the pool's after the claim names it; Ready at that
/// older generation is not this claim's Ready.
fn adopted(sb: &SandboxObject, claim: Option<&str>) -> bool {
    let controller = || sb.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true));
    claim.is_none_or(|uid| controller().is_some_and(|r| r.uid == uid))
}

/// `adopted` or `cold_start`: how the claim got the Sandbox `name`.
fn launch_event(sb: &SandboxObject, name: &str, id: &SandboxId) -> EventKind {
    // Without the controller's label: a cold-started claim's Sandbox is
    // named after the claim.
    let launch = sb.metadata.labels.as_ref().and_then(|l| l.get(LAUNCH_TYPE_LABEL));
    let warm_start = launch.map_or(name != id.name, |l| l == "warm");
    if warm_start {
        EventKind::Adopted
    } else {
        EventKind::ColdStart
    }
}

fn check_owner(claim: &ClaimObject, actor_id: &str, id: &SandboxId) -> Result<()> {
    if names::owned_by(&claim.metadata, actor_id) {
        Ok(())
    } else {
        Err(not_ours(Kind::SandboxClaim, id))
    }
}

fn failed(id: &SandboxId, why: &str) -> Error {
    Error::new(ErrorCode::SandboxFailed, format!("sandbox {id} cannot start: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_service_fqdn_is_no_service() {
        let sb = |status| -> SandboxObject {
            serde_json::from_value(json!({ "metadata": { "name": "s" }, "spec": {}, "status": status })).unwrap()
        };
        assert_eq!(service_fqdn(&sb(json!({ "serviceFQDN": "s.ns.svc" }))).as_deref(), Some("s.ns.svc"));
        assert_eq!(service_fqdn(&sb(json!({ "serviceFQDN": "" }))), None);
        assert_eq!(service_fqdn(&sb(json!({}))), None);
    }
}
