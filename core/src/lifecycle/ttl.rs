//! The `ttlSeconds` backstop: a shutdown time (deleting the claim or
//! Sandbox) that activity keeps moving forward, at most about once a minute
//! per sandbox so busy sandboxes do not turn into a stream of patches.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// Throttled shutdown-time bookkeeping for one provider.
pub struct Ttl {
    ttl: Duration,
    interval: Duration,
    last_refresh: Mutex<HashMap<String, Instant>>,
}

impl Ttl {
    /// Backstop of `ttl` after the last activity.
    pub fn new(ttl: Duration) -> Self {
        Ttl { ttl, interval: (ttl / 4).min(Duration::from_secs(60)), last_refresh: Mutex::new(HashMap::new()) }
    }

    /// `now + ttl` as RFC 3339 (whole seconds).
    pub fn shutdown_time(&self) -> String {
        let at = Timestamp::now().as_second() + self.ttl.as_secs() as i64;
        Timestamp::from_second(at).map(|t| t.to_string()).unwrap_or_default()
    }

    /// Whether the shutdown time of `key`, currently `current`, should be moved
    /// now: not when it was moved less than an interval ago by this process,
    /// nor when it is already within an interval of `now + ttl`.
    pub fn due(&self, key: &str, current: Option<&str>) -> bool {
        let recent =
            self.last_refresh.lock().map(|m| m.get(key).is_some_and(|t| t.elapsed() < self.interval)).unwrap_or(false);
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
    pub fn mark(&self, key: &str) {
        if let Ok(mut m) = self.last_refresh.lock() {
            m.retain(|_, t| t.elapsed() < self.interval);
            m.insert(key.to_string(), Instant::now());
        }
    }

    /// Forgets `key` (after destroy).
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.last_refresh.lock() {
            m.remove(key);
        }
    }
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
}
