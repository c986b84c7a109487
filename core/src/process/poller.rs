//! Polling in a loop without an exec per poll.
//!
//! The sandbox-adapter's `runRemoteProcess` polls every 100 ms until the
//! process exits; one read script per poll would cost 600 pods/exec calls a
//! minute per process. So the first poll of a process reads directly and
//! then starts a follower ([`super::follow`]) from where it stopped; later
//! polls that continue from the follower's start answer from what it has
//! received, and the process's exit comes from it too. A poll from
//! anywhere else (an older sequence, another reader) reads directly, as
//! before. A follower is stopped when its process has exited and the last
//! poll took everything, when nobody polled for [`IDLE`], or when its
//! sandbox handle goes (the [`Pollers`] are dropped); what it holds is
//! bounded by [`HELD_BYTES`] (it stops reading until polls take some).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::follow::{follow, Followed};
use super::stream::ProcessChunk;
use super::{ProcessPoll, POLL_PAGE};
use crate::error::Error;
use crate::exec::{ExecEngine, ExecTarget};
use crate::sync::lock;

/// A follower nobody polled for this long is stopped.
pub(crate) const IDLE: Duration = Duration::from_secs(30);
/// Most bytes a follower holds for the next poll.
const HELD_BYTES: usize = 16 * 1024 * 1024;

/// The followers of one sandbox handle's polled processes.
#[derive(Default)]
pub(crate) struct Pollers {
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    /// Cancelled when the sandbox handle (every clone) is dropped.
    stop: CancellationToken,
}

impl std::fmt::Debug for Pollers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pollers").finish_non_exhaustive()
    }
}

impl Drop for Pollers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One follower and what it received.
struct Entry {
    /// The sequence the follower started after: polls from here on are
    /// answered by it.
    base: u64,
    held: Mutex<Held>,
    /// A poll took chunks (room for more), or it should stop.
    taken: Notify,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Held {
    chunks: VecDeque<ProcessChunk>,
    bytes: usize,
    /// How the follower ended: the exit, or an error (then polls read
    /// directly again).
    ended: Option<Result<Followed, Error>>,
    last_poll: Option<Instant>,
}

/// What a poll can be answered with without an exec.
pub(crate) enum Answer {
    /// From the follower.
    Held(ProcessPoll),
    /// Read directly (no follower, or one that cannot answer this sequence).
    Read,
}

impl Pollers {
    /// Answers a poll of `id` after `after` from its follower, if it has one
    /// that started at or before `after`.
    pub(crate) fn answer(&self, id: &str, after: Option<u64>) -> Answer {
        let entry = match self.lock().get(id) {
            Some(entry) if after.unwrap_or(0) >= entry.base => entry.clone(),
            _ => return Answer::Read,
        };
        let mut held = lock(&entry.held);
        held.last_poll = Some(Instant::now());
        let after = after.unwrap_or(0);
        while held.chunks.front().is_some_and(|c| c.sequence <= after) {
            let c = held.chunks.pop_front().expect("checked");
            held.bytes -= c.data.len();
        }
        if matches!(held.ended, Some(Err(_))) {
            drop(held);
            self.remove(id, &entry);
            return Answer::Read;
        }
        let mut chunks = Vec::new();
        let mut page = [0u64; 2];
        for c in &held.chunks {
            let i = c.stream as usize - 1;
            if page[i] + c.data.len() as u64 > POLL_PAGE {
                break;
            }
            page[i] += c.data.len() as u64;
            chunks.push(c.clone());
        }
        let all = chunks.len() == held.chunks.len();
        let (exit, truncated) = match &held.ended {
            Some(Ok(followed)) if all => (Some(followed.exit), followed.truncated),
            _ => (None, false),
        };
        drop(held);
        entry.taken.notify_one();
        if exit.is_some() {
            self.remove(id, &entry);
        }
        Answer::Held(ProcessPoll { chunks, exit, truncated })
    }

    /// After a direct read of `id` that left it running: starts a follower
    /// after `last` (the last sequence the read returned, or its `after`).
    pub(crate) fn start(&self, engine: &ExecEngine, target: &ExecTarget, id: &str, last: Option<u64>) {
        let mut entries = self.lock();
        // Followers that stopped (idle, failed) leave their entries here.
        entries.retain(|_, e| !e.cancel.is_cancelled());
        if entries.contains_key(id) {
            return;
        }
        let entry = Arc::new(Entry {
            base: last.unwrap_or(0),
            held: Mutex::new(Held { last_poll: Some(Instant::now()), ..Held::default() }),
            taken: Notify::new(),
            cancel: self.stop.child_token(),
        });
        entries.insert(id.to_owned(), entry.clone());
        let (engine, target, id) = (engine.clone(), target.clone(), id.to_owned());
        tokio::spawn(run(engine, target, id, last, entry));
    }

    fn remove(&self, id: &str, entry: &Arc<Entry>) {
        let mut entries = self.lock();
        if entries.get(id).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            entries.remove(id);
        }
        entry.cancel.cancel();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        lock(&self.entries)
    }
}

/// The follower of one entry: holds what it reads until polls take it, and
/// stops when idle or cancelled.
async fn run(engine: ExecEngine, target: ExecTarget, id: String, after: Option<u64>, entry: Arc<Entry>) {
    let (tx, mut rx) = mpsc::channel::<ProcessChunk>(16);
    let following = follow(&engine, &target, &id, after, Some(tx), entry.cancel.clone());
    let holding = async {
        loop {
            let room = {
                let held = lock(&entry.held);
                let idle = held.last_poll.is_some_and(|t| t.elapsed() > IDLE);
                if idle {
                    entry.cancel.cancel();
                    return;
                }
                held.bytes < HELD_BYTES
            };
            if !room {
                tokio::select! {
                    () = entry.taken.notified() => continue,
                    () = tokio::time::sleep(IDLE) => continue,
                }
            }
            tokio::select! {
                chunk = rx.recv() => match chunk {
                    Some(chunk) => {
                        let mut held = lock(&entry.held);
                        held.bytes += chunk.data.len();
                        held.chunks.push_back(chunk);
                    }
                    None => return,
                },
                () = tokio::time::sleep(IDLE) => {}
            }
        }
    };
    let (followed, ()) = tokio::join!(following, holding);
    let mut held = lock(&entry.held);
    held.ended = Some(followed);
}
