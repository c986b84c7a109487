//! Failing in-flight execs when their pod goes.
//!
//! Kubernetes leaves an exec open but frozen when its pod is deleted
//! (kubernetes#129144), so the runtime fails in-flight execs itself when the
//! provider's shared pod watch (see `client::informer`) sees the pod deleted,
//! being deleted, or replaced (UID changed). A subscription costs a channel,
//! not a watch: however many execs run, the provider holds one pod watch.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::ExecTarget;
use crate::client::informer::{Informer, Seen, Subscription};

/// How long an ended exec waits for the GET that tells whether its pod
/// went: the client's own read timeout is minutes, and the exec's result
/// must not wait on a stalled API server.
const VERDICT_TIMEOUT: Duration = Duration::from_secs(5);

/// The pod watch of one engine.
#[derive(Clone)]
pub(crate) struct PodWatches {
    pods: Informer<Pod>,
}

/// A subscription to one target's pod, with its verdict.
pub(crate) struct PodWatch {
    pods: Informer<Pod>,
    subscription: Subscription<Pod>,
    tracker: Tracker,
    target: ExecTarget,
}

impl PodWatches {
    /// Execs watched through `pods`, the provider's shared pod informer.
    pub(crate) fn new(pods: Informer<Pod>) -> Self {
        PodWatches { pods }
    }

    /// Subscribes to the target's pod (starting the shared watch if needed).
    pub(crate) fn subscribe(&self, target: &ExecTarget) -> PodWatch {
        PodWatch {
            pods: self.pods.clone(),
            subscription: self.pods.subscribe(&target.pod),
            tracker: Tracker::default(),
            target: target.clone(),
        }
    }
}

impl PodWatch {
    /// Resolves with a reason once the pod is deleted, being deleted or
    /// replaced; pends forever otherwise (also while the watch is not live:
    /// execs then run without deletion detection). Cancel safe.
    pub(crate) async fn gone(&mut self) -> String {
        loop {
            if let Some(reason) = self.gone_now() {
                return reason;
            }
            self.subscription.changed().await;
        }
    }

    /// The reason, if the watch has already seen the pod go.
    fn gone_now(&mut self) -> Option<String> {
        let reason = match self.subscription.now()? {
            Seen::Present(pod) => self.tracker.observe(Some(&pod)),
            Seen::Absent => self.tracker.observe(None),
        }?;
        Some(self.because(reason))
    }

    /// For an exec the node ended with a signal: the reason, if its pod is
    /// going or gone. The node kills a deleted pod's processes on the same
    /// event the watch delivers, so the watch may not have it yet (or may be
    /// re-listing after an outage): without its verdict, one GET decides. A
    /// 404 counts as deleted even for a pod the watch never showed, since
    /// the exec ran in it. A failed or slow GET (see [`VERDICT_TIMEOUT`])
    /// is no verdict.
    pub(crate) async fn gone_after_signal(&mut self) -> Option<String> {
        if let Some(reason) = self.gone_now() {
            return Some(reason);
        }
        let get = tokio::time::timeout(VERDICT_TIMEOUT, self.pods.get(&self.target.pod));
        let reason = match get.await.ok()?.ok()? {
            Some(pod) => self.tracker.observe(Some(&pod))?,
            None => "was deleted",
        };
        Some(self.because(reason))
    }

    fn because(&self, reason: &str) -> String {
        format!("pod {:?} in namespace {:?} {reason}", self.target.pod, self.target.namespace)
    }
}

/// Turns the watched pod's states into a verdict about the pod it first saw.
#[derive(Default)]
struct Tracker {
    uid: Option<String>,
}

impl Tracker {
    /// `Some(reason)` when the pod is gone for the execs running in it.
    /// `pod` is `None` when the pod is absent (deleted, or missing from a
    /// list). A pod never seen gives no verdict: the exec's own call reports
    /// a missing pod (404), and a pod the watch's selector does not match
    /// is simply not watched.
    fn observe(&mut self, pod: Option<&Pod>) -> Option<&'static str> {
        let Some(pod) = pod else {
            return self.uid.is_some().then_some("was deleted");
        };
        match (&self.uid, &pod.metadata.uid) {
            (Some(seen), Some(now)) if seen != now => return Some("was replaced (its UID changed)"),
            (None, uid) => self.uid = uid.clone(),
            _ => {}
        }
        pod.metadata.deletion_timestamp.is_some().then_some("is being deleted")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(uid: &str, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                deletion_timestamp: deleting.then(|| Time(Default::default())),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn verdicts() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(Some(&pod("a", false))), None);
        assert_eq!(t.observe(Some(&pod("a", false))), None);
        assert_eq!(t.observe(Some(&pod("a", true))), Some("is being deleted"));
        assert_eq!(t.observe(Some(&pod("b", false))), Some("was replaced (its UID changed)"));
        assert_eq!(t.observe(None), Some("was deleted"));
        // Never seen: the exec's own call reports a 404.
        assert_eq!(Tracker::default().observe(None), None);
    }
}
