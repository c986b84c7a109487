//! Concurrency slots: a provider-wide cap with a per-sandbox share under it.
//!
//! One provider serves every actor of a worker, and what runs in a sandbox
//! is chosen by a model: forty never-ending calls in one sandbox must not
//! take every slot of the provider. A run first takes a slot of its own
//! sandbox (at most `per_sandbox` at once), then one of the provider's.
//! Both semaphores are FIFO, so the provider's queue holds at most
//! `per_sandbox` waiters of any one sandbox and the others are served in
//! turn: one sandbox can delay another's call by at most its share, never
//! starve it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ExecTarget;
use crate::sync::lock;

/// Slots of one class of runs (calls, or long-lived followers).
#[derive(Debug)]
pub(crate) struct Permits {
    global: Arc<Semaphore>,
    per_sandbox: usize,
    /// One semaphore per pod with runs in flight or queued; an entry whose
    /// semaphore nobody holds any more is pruned when the map grows.
    sandboxes: Mutex<Sandboxes>,
}

#[derive(Debug, Default)]
struct Sandboxes {
    map: HashMap<(String, String), Weak<Semaphore>>,
    /// Size at which dead entries are pruned next (doubles with the live ones).
    prune_at: usize,
}

/// A held slot; released when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _global: OwnedSemaphorePermit,
    _sandbox: OwnedSemaphorePermit,
}

impl Permits {
    /// `global` slots in all, at most `per_sandbox` of them for one pod.
    pub(crate) fn new(global: usize, per_sandbox: usize) -> Self {
        let global = global.max(1);
        Permits {
            global: Arc::new(Semaphore::new(global)),
            per_sandbox: per_sandbox.clamp(1, global),
            sandboxes: Mutex::new(Sandboxes { map: HashMap::new(), prune_at: 64 }),
        }
    }

    /// Waits for a slot of `target`'s sandbox, then one of the provider's.
    /// Cancel safe: dropping the future gives back what it took.
    pub(crate) async fn acquire(&self, target: &ExecTarget) -> Slot {
        let sandbox = self.sandbox(target);
        let sandbox = sandbox.acquire_owned().await.expect("slot semaphores are never closed");
        let global = self.global.clone().acquire_owned().await.expect("slot semaphores are never closed");
        Slot { _global: global, _sandbox: sandbox }
    }

    fn sandbox(&self, target: &ExecTarget) -> Arc<Semaphore> {
        let mut sandboxes = lock(&self.sandboxes);
        let key = (target.namespace.clone(), target.pod.clone());
        if let Some(semaphore) = sandboxes.map.get(&key).and_then(Weak::upgrade) {
            return semaphore;
        }
        if sandboxes.map.len() >= sandboxes.prune_at {
            sandboxes.map.retain(|_, s| s.strong_count() > 0);
            sandboxes.prune_at = (sandboxes.map.len() * 2).max(64);
        }
        let semaphore = Arc::new(Semaphore::new(self.per_sandbox));
        sandboxes.map.insert(key, Arc::downgrade(&semaphore));
        semaphore
    }

    /// Sandboxes tracked right now (for tests).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        lock(&self.sandboxes).map.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pod(name: &str) -> ExecTarget {
        ExecTarget { namespace: "ns".into(), pod: name.into(), container: None }
    }

    #[tokio::test(start_paused = true)]
    async fn one_sandbox_cannot_take_every_slot() {
        let permits = Permits::new(4, 2);
        let a = pod("a");
        let held: Vec<Slot> = vec![permits.acquire(&a).await, permits.acquire(&a).await];
        // A third call of `a` waits for its own sandbox's share...
        let third = tokio::time::timeout(Duration::from_secs(60), permits.acquire(&a)).await;
        assert!(third.is_err(), "a third slot for the same sandbox");
        // ...while another sandbox still gets slots at once.
        let b = permits.acquire(&pod("b")).await;
        drop(held);
        let _again = permits.acquire(&a).await;
        drop(b);
    }

    #[tokio::test(start_paused = true)]
    async fn queued_sandboxes_are_served_in_turn() {
        let permits = Arc::new(Permits::new(1, 1));
        let first = permits.acquire(&pod("a")).await;
        // `a` queues many, `b` one: `b` does not wait for all of `a`'s.
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for name in ["a", "a", "a", "b"] {
            let (permits, order) = (permits.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = permits.acquire(&pod(name)).await;
                crate::sync::lock(&order).push(name);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order = crate::sync::lock(&order).clone();
        let b = order.iter().position(|n| *n == "b").unwrap();
        assert!(b <= 1, "{order:?}");
    }

    #[tokio::test]
    async fn finished_sandboxes_are_forgotten() {
        let permits = Permits::new(8, 2);
        for i in 0..500 {
            drop(permits.acquire(&pod(&format!("p{i}"))).await);
        }
        assert!(permits.tracked() <= 128, "{}", permits.tracked());
    }
}
