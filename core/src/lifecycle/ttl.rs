//! The `ttlSeconds` backstop: a shutdown time (deleting the claim or
//! Sandbox) that activity keeps moving forward, at most about once a minute
//! per sandbox so busy sandboxes do not turn into a stream of patches.
//! [`Ttl`] is the bookkeeping; the `Lifecycle` methods below move the time
//! on activity (`touch`) and as part of connect and suspend.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use tokio::time::Instant;

use super::names::SandboxId;
use super::resources::Kind;
use super::{manifest, Lifecycle};
use crate::error::Result;
use crate::sync::lock;

/// Throttled shutdown-time bookkeeping for one provider.
pub(crate) struct Ttl {
    ttl: Duration,
    interval: Duration,
    last_refresh: Mutex<HashMap<String, Instant>>,
}

impl Ttl {
    /// Backstop of `ttl` after the last activity.
    pub(crate) fn new(ttl: Duration) -> Self {
        Ttl { ttl, interval: (ttl / 4).min(Duration::from_secs(60)), last_refresh: Mutex::new(HashMap::new()) }
    }

    /// The same with refreshes at most every `interval` instead of
    /// min(ttl / 4, 60 s), when given (a test seam: the hidden option
    /// `__testTtlRefreshMs`, so no test waits out the throttle).
    pub(crate) fn with_refresh_interval(mut self, interval: Option<Duration>) -> Self {
        if let Some(interval) = interval {
            self.interval = interval.min(self.ttl);
        }
        self
    }

    /// `now + ttl` as RFC 3339 (whole seconds).
    pub(crate) fn shutdown_time(&self) -> String {
        let at = Timestamp::now().as_second() + self.ttl.as_secs() as i64;
        Timestamp::from_second(at).map(|t| t.to_string()).unwrap_or_default()
    }

    /// Whether the shutdown time of `key`, currently `current`, should be moved
    /// now: not when it was moved less than an interval ago by this process,
    /// nor when it is already within an interval of `now + ttl`.
    pub(crate) fn due(&self, key: &str, current: Option<&str>) -> bool {
        let recent = lock(&self.last_refresh).get(key).is_some_and(|t| t.elapsed() < self.interval);
        if recent {
            return false;
        }
        let fresh_enough = current.and_then(|c| c.parse::<Timestamp>().ok()).is_some_and(|t| {
            let slack = SignedDuration::try_from(self.ttl.saturating_sub(self.interval)).unwrap_or_default();
            Timestamp::now().checked_add(slack).is_ok_and(|threshold| t >= threshold)
        });
        !fresh_enough
    }

    /// Records a refresh of `key` (and forgets entries too old to matter).
    pub(crate) fn mark(&self, key: &str) {
        let mut m = lock(&self.last_refresh);
        m.retain(|_, t| t.elapsed() < self.interval);
        m.insert(key.to_string(), Instant::now());
    }

    /// Forgets `key` (after destroy).
    pub(crate) fn forget(&self, key: &str) {
        lock(&self.last_refresh).remove(key);
    }
}

impl Lifecycle {
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

    /// Activity on `id` (an exec, a file call): the patch moving its TTL
    /// backstop, or `None` when there is nothing to send (no `ttlSeconds`,
    /// not one of this provider's sandboxes, or moved by this process less
    /// than an interval ago). Synchronous and cheap, so every call can ask;
    /// marked before the patch is sent, so a burst of calls makes one patch.
    pub(crate) fn touch_due(&self, id: &str) -> Option<Touch> {
        let ttl = self.ttl.as_ref()?;
        let id = self.own_id(id)?;
        if !ttl.due(&id.to_string(), None) {
            return None;
        }
        ttl.mark(&id.to_string());
        let kind = self.kind();
        Some(Touch { patch: manifest::ttl_patch(kind, &ttl.shutdown_time()), kind, id })
    }

    /// Sends a patch [`Lifecycle::touch_due`] made.
    pub(crate) async fn touch(&self, touch: Touch) -> Result<()> {
        self.patch(touch.kind, &touch.id.namespace, &touch.id.name, &touch.patch).await.map(drop)
    }
}

/// A TTL move to send (see [`Lifecycle::touch_due`]).
pub(crate) struct Touch {
    kind: Kind,
    id: SandboxId,
    patch: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles_and_skips_fresh_times() {
        let ttl = Ttl::new(Duration::from_secs(600));
        let t = ttl.shutdown_time();
        assert!(t.ends_with('Z') && !t.contains('.'), "{t}");
        assert!(ttl.due("a", None));
        assert!(ttl.due("a", Some("2000-01-01T00:00:00Z")));
        assert!(!ttl.due("a", Some(&t)), "a fresh shutdown time needs no refresh");
        ttl.mark("a");
        assert!(!ttl.due("a", Some("2000-01-01T00:00:00Z")), "refreshed moments ago");
        assert!(ttl.due("b", Some("2000-01-01T00:00:00Z")));
    }

    #[tokio::test(start_paused = true)]
    async fn the_refresh_interval_is_injectable() {
        let ttl = Ttl::new(Duration::from_secs(600)).with_refresh_interval(Some(Duration::from_secs(1)));
        ttl.mark("a");
        assert!(!ttl.due("a", Some("2000-01-01T00:00:00Z")), "refreshed moments ago");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(ttl.due("a", Some("2000-01-01T00:00:00Z")), "the interval is 1 s, not 60 s");
    }
}
