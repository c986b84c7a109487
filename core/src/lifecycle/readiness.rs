//! Pure decisions over observed objects: is the sandbox ready for its
//! current generation, has it failed for good, is it suspended.
//!
//! Status is checked against `metadata.generation` because the controller
//! writes status without a resourceVersion precondition, so a stale status
//! (e.g. Ready from before a suspend) can show up briefly.

use k8s_openapi::api::core::v1::Pod;

use super::resources::{bound_sandbox, condition, ClaimObject, SandboxObject};

/// Sandbox `Ready=False` reasons that never recover by waiting.
const SANDBOX_FAILED: [&str; 4] = ["PodFailed", "PodSucceeded", "SandboxExpired", "MultiplePods"];
/// Those of them that describe the pod (see `sandbox_readiness`).
const POD_FAILED: [&str; 2] = ["PodFailed", "PodSucceeded"];
/// Claim `Ready=False` reasons that never recover by waiting.
const CLAIM_FAILED: [&str; 6] = [
    "TemplateNotFound",
    "WarmPoolNotFound",
    "InvalidMetadata",
    "EnvVarsInjectionRejected",
    "VolumeClaimTemplatesError",
    "ClaimExpired",
];
/// What a Sandbox's `ReconcilerError` says when admission refused its pod
/// (Pod Security, a ValidatingAdmissionPolicy, a webhook): the same pod would
/// be refused again, so waiting cannot help. Other errors, "exceeded quota"
/// among them, can clear (another sandbox goes) and are waited out.
const ADMISSION_REFUSED: [&str; 3] = ["violates PodSecurity", "ValidatingAdmissionPolicy", "denied the request"];
/// Container waiting reasons that mean the pod will not start.
const CONTAINER_FAILED: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
];

/// The state of a sandbox's readiness.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Ready at the current generation, with a live pod.
    Ready,
    /// Not yet; the text says why.
    Waiting(String),
    /// Will not become ready: the reason and message.
    Failed(String),
}

/// The state of a claim before it is bound to a Sandbox.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    /// Bound to the Sandbox of this name.
    Bound(String),
    /// Not yet bound; the text says why.
    Waiting(String),
    /// Failed for good.
    Failed(String),
}

/// Whether the claim is bound, failed or still waiting.
pub(crate) fn claim_binding(claim: &ClaimObject) -> Binding {
    let conditions = claim.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = condition(conditions, "Ready");
    if let Some(c) = ready.filter(|c| !c.is_true() && CLAIM_FAILED.contains(&c.reason.as_str())) {
        return Binding::Failed(format!("claim failed: {}", c.describe()));
    }
    match bound_sandbox(claim) {
        Some(name) => Binding::Bound(name.to_string()),
        None => Binding::Waiting(match ready {
            Some(c) if !c.reason.is_empty() => format!("claim not bound to a sandbox yet ({})", c.describe()),
            _ => "claim not bound to a sandbox yet".to_string(),
        }),
    }
}

/// Whether the Sandbox is ready for its current generation with `pod` (the
/// pod named after it, if it exists). A terminating pod never counts: after
/// a quick suspend/resume, Ready may briefly come from the dying pod.
///
/// A pod being deleted is never a failure either: a kubelet stops its
/// containers and reports the pod `Succeeded` or `Failed` on its way out (a
/// pod deleted by hand, a suspend), and the controller then makes another
/// of the same name. Neither its phase nor the Sandbox's `PodSucceeded` /
/// `PodFailed` that describe it mean the sandbox will not start; they count
/// only while that pod is there and not going.
pub(crate) fn sandbox_readiness(sandbox: &SandboxObject, pod: Option<&Pod>) -> Readiness {
    let live_pod = pod.filter(|p| p.metadata.deletion_timestamp.is_none());
    if let Some(failure) = live_pod.and_then(pod_failure) {
        return Readiness::Failed(failure);
    }
    let generation = sandbox.metadata.generation;
    let conditions = sandbox.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = condition(conditions, "Ready").filter(|c| c.is_current(generation));
    let describes_going_pod = |reason: &str| POD_FAILED.contains(&reason) && pod.is_some() && live_pod.is_none();
    if let Some(c) =
        ready.filter(|c| !c.is_true() && SANDBOX_FAILED.contains(&c.reason.as_str()) && !describes_going_pod(&c.reason))
    {
        return Readiness::Failed(format!("sandbox failed: {}", c.describe()));
    }
    if sandbox.spec.is_suspended() {
        return Readiness::Waiting("sandbox is suspended".into());
    }
    let reconciler_error = ready.filter(|c| !c.is_true() && c.reason == "ReconcilerError");
    if let Some(c) =
        reconciler_error.filter(|c| pod.is_none() && ADMISSION_REFUSED.iter().any(|m| c.message.contains(m)))
    {
        return Readiness::Failed(format!("its pod was refused: {}", c.describe()));
    }
    match (ready, live_pod) {
        // The pod itself must run too: the Sandbox's condition can still be
        // the previous pod's for a moment after that pod was replaced (seen
        // after a pod deleted by hand: Ready, with a pod not yet scheduled).
        (Some(c), Some(p)) if c.is_true() && pod_running(p) => Readiness::Ready,
        (_, None) => Readiness::Waiting(match reconciler_error {
            Some(c) => format!("waiting for the pod to be created ({})", c.describe()),
            None => "waiting for the pod to be created".into(),
        }),
        (_, Some(p)) => Readiness::Waiting(pod_progress(p).unwrap_or_else(|| match ready {
            Some(c) => c.describe(),
            None => "waiting for the controller to report readiness".into(),
        })),
    }
}

/// True once the Sandbox's pod is gone after a suspend (`Suspended=True` at
/// the current generation).
pub(crate) fn is_suspended(sandbox: &SandboxObject) -> bool {
    let conditions = sandbox.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    sandbox.spec.is_suspended()
        && condition(conditions, "Suspended").is_some_and(|c| c.is_true() && c.is_current(sandbox.metadata.generation))
}

/// A reason the pod will never start, if any.
pub(crate) fn pod_failure(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if let Some(phase @ ("Failed" | "Succeeded")) = status.phase.as_deref() {
        let why = [status.reason.as_deref(), status.message.as_deref()].into_iter().flatten().collect::<Vec<_>>();
        return Some(format!(
            "pod {phase}{}",
            if why.is_empty() { String::new() } else { format!(": {}", why.join(": ")) }
        ));
    }
    let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    containers.into_iter().find_map(|cs| {
        let waiting = cs.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        CONTAINER_FAILED.contains(&reason).then(|| {
            format!("container {:?}: {reason}: {}", cs.name, waiting.message.as_deref().unwrap_or("cannot start"))
        })
    })
}

/// What the pod is doing while not ready (unschedulable, pulling, ...).
fn pod_progress(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let scheduled = status.conditions.iter().flatten().find(|c| c.type_ == "PodScheduled");
    if let Some(c) = scheduled.filter(|c| c.status == "False") {
        let reason = c.reason.as_deref().unwrap_or("not scheduled");
        return Some(format!("pod {reason}: {}", c.message.as_deref().unwrap_or("waiting for a node")));
    }
    let waiting = status.container_statuses.iter().flatten().find_map(|cs| cs.state.as_ref()?.waiting.as_ref());
    waiting.and_then(|w| w.reason.clone()).map(|r| format!("container {r}"))
}

/// Scheduled to a node and in phase Running.
fn pod_running(pod: &Pod) -> bool {
    scheduled_node(pod).is_some_and(|n| !n.is_empty())
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The node the pod is scheduled to, once it is (for the `scheduled` event).
pub(crate) fn scheduled_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

#[cfg(test)]
mod tests;
