//! The engine's registry of runs: unique run ids and which runs are live,
//! for the orphan sweep.

use crate::sync::lock;
use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Run ids of one engine: `<instance>.<counter>`.
#[derive(Debug)]
pub(crate) struct Runs {
    /// Random per engine, so run ids of different processes never collide.
    instance: String,
    /// Changed together, so a sweep sees a consistent picture.
    state: Mutex<State>,
    /// Runs that may have left processes behind so far: dropped while their
    /// command was running, or not confirmed killed (see
    /// [`Runs::left_behind`]).
    left_behind: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// The counter of the next run.
    next: u64,
    /// The counters of the runs not finished yet.
    live: BTreeSet<u64>,
}

/// The registry at one moment, for the orphan sweep.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The counter of the next run: runs from here on are not orphans.
    pub(crate) next: u64,
    /// The ids of the live runs.
    pub(crate) live: Vec<String>,
}

/// How often a run asks its wrapper to remove the finished runs' records.
const CLEANUP_EVERY: u64 = 256;

/// A live run; it stops being live when dropped.
pub(crate) struct RunGuard {
    runs: Arc<Runs>,
    counter: u64,
    /// The run id, only `[0-9a-f.]`: safe as a file name and in scripts.
    /// The command can see it (its processes carry it as their kill marker).
    pub(crate) id: String,
    /// 128 random bits as hex, known only to the engine and the wrapper's
    /// own shell (sent on stdin, never in argv, env or a file): the trailer
    /// carries it, so a command cannot print a trailer of its own.
    pub(crate) secret: String,
    /// Every [`CLEANUP_EVERY`] runs: the lowest live counter, below which
    /// every run of this engine has finished (see the wrapper's `$5`).
    pub(crate) cleanup_bound: Option<u64>,
    /// Its command may be running in the pod and the engine is waiting for
    /// its end: dropped so, the run is left behind.
    in_flight: bool,
}

impl Runs {
    /// A registry with a fresh instance id.
    pub(crate) fn new() -> Arc<Runs> {
        Arc::new(Runs { instance: instance_id(), state: Mutex::default(), left_behind: AtomicU64::new(0) })
    }

    /// This engine's instance id.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// Registers a new live run. Runs are live from before they wait for a
    /// concurrency slot, so a sweep can never take a starting run for an orphan.
    pub(crate) fn start(self: &Arc<Self>) -> RunGuard {
        let mut state = lock(&self.state);
        let counter = state.next;
        state.next += 1;
        state.live.insert(counter);
        let cleanup_bound =
            (counter % CLEANUP_EVERY == CLEANUP_EVERY - 1).then(|| state.live.first().copied().unwrap_or(counter));
        RunGuard {
            runs: self.clone(),
            counter,
            id: self.id(counter),
            secret: secret(),
            cleanup_bound,
            in_flight: false,
        }
    }

    /// Counts a run that may have left processes behind (a kill that could
    /// not be confirmed).
    pub(crate) fn leave_behind(&self) {
        self.left_behind.fetch_add(1, Ordering::SeqCst);
    }

    /// How many runs may have left processes behind so far: while it stays
    /// the same, a pod swept since needs no other sweep.
    pub(crate) fn left_behind(&self) -> u64 {
        self.left_behind.load(Ordering::SeqCst)
    }

    /// The next counter and the ids of the live runs, taken together.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let state = lock(&self.state);
        Snapshot { next: state.next, live: state.live.iter().map(|n| self.id(*n)).collect() }
    }

    fn id(&self, counter: u64) -> String {
        format!("{}.{counter}", self.instance)
    }
}

impl RunGuard {
    /// Whether its command may be running with the engine waiting for its
    /// end (from the exec's start until its end or kill is known).
    pub(crate) fn set_in_flight(&mut self, in_flight: bool) {
        self.in_flight = in_flight;
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        lock(&self.runs.state).live.remove(&self.counter);
        if self.in_flight {
            self.runs.leave_behind();
        }
    }
}

/// 128 bits from the OS's random source, as 32 hex digits.
fn secret() -> String {
    random_hex::<16>()
}

/// 64 random bits as hex: unique per engine.
fn instance_id() -> String {
    random_hex::<8>()
}

/// `N` random bytes as hex. The OS's random source does not fail where Node
/// runs; should it ever, std's `RandomState` (seeded from it once per
/// thread, with a per-call counter) keeps the value unguessable from inside
/// a sandbox instead of panicking in an exec.
fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    if getrandom::fill(&mut bytes).is_err() {
        for (i, b) in bytes.iter_mut().enumerate() {
            let mut h = RandomState::new().build_hasher();
            h.write_usize(i);
            *b = h.finish() as u8;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_liveness_is_tracked() {
        let runs = Runs::new();
        assert_eq!(runs.instance().len(), 16);
        assert_ne!(runs.instance(), Runs::new().instance());
        let r1 = runs.start();
        let r2 = runs.start();
        assert_eq!(r1.id, format!("{}.0", runs.instance()));
        assert_eq!(r2.id, format!("{}.1", runs.instance()));
        assert_eq!(r1.secret.len(), 32);
        assert!(r1.secret.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(r1.secret, r2.secret);
        drop(r1);
        assert_eq!(runs.snapshot(), Snapshot { next: 2, live: vec![r2.id.clone()] });
        assert_eq!(r2.cleanup_bound, None);
        let all: Vec<RunGuard> = (2..CLEANUP_EVERY).map(|_| runs.start()).collect();
        // The 256th run: r2 (counter 1) is the oldest still live.
        assert_eq!(all.last().unwrap().cleanup_bound, Some(1));
    }
}
