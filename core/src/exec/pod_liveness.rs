//! One shared pod watch per target while execs are in flight.
//!
//! Kubernetes leaves an exec open but frozen when its pod is deleted
//! (kubernetes#129144), so the runtime fails in-flight execs itself when the
//! watch sees the pod deleted, being deleted, or replaced (UID changed). The
//! watch lingers a while after the last exec so a sequence of commands does
//! not pay for a new LIST+WATCH each. The watch tasks belong to their
//! [`PodWatches`]: [`PodWatches::stop`] (called when the runtime is dropped)
//! ends them all at once instead of after their linger.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{watcher::watch_object, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ExecTarget;

/// How long an unused watch stays open.
const LINGER: Duration = Duration::from_secs(30);
/// How often an unused watch checks whether it may stop.
const IDLE_CHECK: Duration = Duration::from_secs(5);

type Key = (String, String);

/// The set of live watches of one engine.
#[derive(Clone)]
pub(crate) struct PodWatches {
    client: Client,
    map: Arc<Mutex<HashMap<Key, Arc<Shared>>>>,
    /// Ends every watch task (their owner is gone).
    stop: CancellationToken,
}

/// State shared by a watch task and its subscribers.
struct Shared {
    /// `Some(reason)` once the pod is gone.
    gone: watch::Sender<Option<String>>,
    /// Subscribers, and when the count last dropped to zero.
    users: Mutex<(usize, Instant)>,
}

/// A subscription; while it lives the watch stays open.
pub(crate) struct PodWatch {
    shared: Arc<Shared>,
    gone: watch::Receiver<Option<String>>,
}

impl PodWatches {
    /// No watches yet; they start on first use.
    pub(crate) fn new(client: Client) -> Self {
        PodWatches { client, map: Arc::default(), stop: CancellationToken::new() }
    }

    /// Ends every watch task now; later subscriptions start none.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Subscribes to the target's pod, starting a watch if none is open.
    pub(crate) fn subscribe(&self, target: &ExecTarget) -> PodWatch {
        let key = (target.namespace.clone(), target.pod.clone());
        let mut map = self.map.lock().expect("pod watch map poisoned");
        let shared = match map.get(&key) {
            Some(s) => s.clone(),
            None => {
                let shared = Arc::new(Shared { gone: watch::channel(None).0, users: Mutex::new((0, Instant::now())) });
                map.insert(key.clone(), shared.clone());
                if !self.stop.is_cancelled() {
                    tokio::spawn(run(self.client.clone(), key, shared.clone(), self.map.clone(), self.stop.clone()));
                }
                shared
            }
        };
        shared.users.lock().expect("pod watch users poisoned").0 += 1;
        PodWatch { gone: shared.gone.subscribe(), shared }
    }
}

impl PodWatch {
    /// Resolves with a reason once the pod is deleted, being deleted or
    /// replaced; pends forever otherwise.
    pub(crate) async fn gone(&mut self) -> String {
        let reason = self.gone.wait_for(Option::is_some).await.map(|r| r.clone().unwrap_or_default());
        match reason {
            Ok(reason) => reason,
            // The task ended without a verdict: nothing more to learn.
            Err(_) => std::future::pending().await,
        }
    }

    /// The reason, if the watch has already seen the pod go.
    pub(crate) fn gone_now(&self) -> Option<String> {
        self.gone.borrow().clone()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        let mut users = self.shared.users.lock().expect("pod watch users poisoned");
        users.0 -= 1;
        users.1 = Instant::now();
    }
}

/// The watch task: reports the verdict, stops when idle or after a verdict,
/// and removes its own map entry (only if the entry is still this watch).
///
/// The entry goes before the task stops listening, under the map lock that
/// `subscribe` holds while it counts a user: a subscriber either joins a
/// watch that still runs or starts a new one, never one that is ending.
async fn run(
    client: Client,
    key: Key,
    shared: Arc<Shared>,
    map: Arc<Mutex<HashMap<Key, Arc<Shared>>>>,
    stop: CancellationToken,
) {
    let api: Api<Pod> = Api::namespaced(client, &key.0);
    let mut events = watch_object(api, &key.1).default_backoff().boxed();
    let mut tracker = Tracker::default();
    let mut idle = tokio::time::interval(IDLE_CHECK);
    let retire = |map: &mut HashMap<Key, Arc<Shared>>| {
        if map.get(&key).is_some_and(|s| Arc::ptr_eq(s, &shared)) {
            map.remove(&key);
        }
    };
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(pod)) => {
                    if let Some(reason) = tracker.observe(pod.as_ref()) {
                        // Later execs (a resumed pod of the same name) get a new watch.
                        retire(&mut map.lock().expect("pod watch map poisoned"));
                        shared.gone.send_replace(Some(format!("pod {:?} in namespace {:?} {reason}", key.1, key.0)));
                        return;
                    }
                }
                // Watch errors (RBAC, outages) are retried with backoff; execs
                // then simply run without deletion detection.
                Some(Err(_)) => {}
                None => break,
            },
            () = stop.cancelled() => break,
            _ = idle.tick() => {
                let mut map = map.lock().expect("pod watch map poisoned");
                let users = shared.users.lock().expect("pod watch users poisoned");
                if users.0 == 0 && users.1.elapsed() >= LINGER {
                    retire(&mut map);
                    return;
                }
            }
        }
    }
    retire(&mut map.lock().expect("pod watch map poisoned"));
}

/// Turns the watched pod's states into a verdict about the pod it first saw.
#[derive(Default)]
struct Tracker {
    uid: Option<String>,
}

impl Tracker {
    /// `Some(reason)` when the pod is gone for the execs running in it.
    /// `pod` is `None` when the pod is absent (deleted, or missing from a
    /// relist).
    fn observe(&mut self, pod: Option<&Pod>) -> Option<&'static str> {
        let Some(pod) = pod else {
            return Some(if self.uid.is_some() { "was deleted" } else { "no longer exists" });
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
        // Absent from the first list: the exec's own call reports the 404.
        assert_eq!(Tracker::default().observe(None), Some("no longer exists"));
    }

    #[tokio::test]
    async fn stopping_ends_every_watch_task_at_once() {
        // Nothing listens there: the watch keeps retrying, as during an outage.
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let watches = PodWatches::new(client);
        let target = ExecTarget { namespace: "ns".into(), pod: "p".into(), container: None };
        let subscription = watches.subscribe(&target);
        drop(subscription);
        assert_eq!(watches.map.lock().unwrap().len(), 1, "lingering for {LINGER:?}");
        watches.stop();
        for _ in 0..100 {
            if watches.map.lock().unwrap().is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the watch task outlived stop()");
    }
}
