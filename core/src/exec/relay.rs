//! Ports the node cannot reach, carried through an exec instead: the exec of
//! [`RELAY`] dials the port from inside the sandbox and copies bytes between
//! it and the session's stdin and stdout.
//!
//! Under gVisor the kubelet's port-forward dials the pod's host-side network
//! namespace while the sandbox's servers listen in gVisor's own network
//! stack, so every dial fails with the words a runc node uses for "nothing
//! listens"; Kata refuses port-forward outright. So a connection the node
//! failed with `not_found` or `unsupported` before the port sent a byte is
//! tried again here, with what the client had sent replayed first. A sandbox
//! only the relay reached is remembered, and its next connections skip the
//! node (they then need `pods/exec` only, not `pods/portforward`).

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, watch, Notify};

use super::output::{HeadBuffer, OutputChunk, Stream};
use super::permits::Permits;
use super::runtime::{Release, Runtime, Stdin};
use super::status::Completion;
use super::wrapper::script_argv;
use super::ExecTarget;
use crate::error::{quoted, Error, ErrorCode, Result};
use crate::script_exit::{MISSING_TOOL, NOTHING_LISTENS};
use crate::sync::lock;

/// Dials the port and copies bytes both ways; exit statuses below.
pub const RELAY: &str = in_pod_script!("exec/sh/relay.sh");

/// Most bytes the client may send before the node fails for them to be
/// replayed to the relay (a request's head is far less); after more, the
/// node's error stands.
pub(super) const MAX_REPLAY: usize = 64 * 1024;
/// Relays of one sandbox at a time. gVisor's shim fails execs when about
/// thirty start together; the other connections wait in their tunnels.
const RELAYS_PER_SANDBOX: usize = 8;
/// Sandboxes remembered as reached only by the relay (about 100 bytes each);
/// the oldest is forgotten first, and then only costs a failed node dial.
const MAX_REMEMBERED: usize = 4096;
/// Most of the relay's stderr kept for an error message.
const MAX_STDERR: usize = 1024;

/// The relays of one engine: their slots and the sandboxes they serve.
pub(super) struct Relays {
    permits: Permits,
    remembered: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    pods: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
}

impl Relays {
    /// At most `max` relays at once in all (the tunnels' own cap).
    pub(super) fn new(max: usize) -> Self {
        Relays { permits: Permits::new(max, RELAYS_PER_SANDBOX), remembered: Mutex::default() }
    }

    /// Whether `target`'s ports were reached by the relay and not the node.
    pub(super) fn only_route(&self, target: &ExecTarget) -> bool {
        lock(&self.remembered).pods.contains(&key(target))
    }

    fn remember(&self, target: &ExecTarget) {
        let mut remembered = lock(&self.remembered);
        if remembered.pods.insert(key(target)) {
            remembered.order.push_back(key(target));
            if remembered.order.len() > MAX_REMEMBERED {
                let oldest = remembered.order.pop_front().expect("not empty");
                remembered.pods.remove(&oldest);
            }
        }
    }
}

fn key(target: &ExecTarget) -> (String, String) {
    (target.namespace.clone(), target.pod.clone())
}

/// What the client sent while the node was tried, for the relay to send
/// again. Spent once the port answered (the node works) or past
/// [`MAX_REPLAY`].
#[derive(Debug, Default)]
pub(super) struct Replay {
    chunks: Vec<Bytes>,
    len: usize,
    spent: bool,
}

impl Replay {
    /// Keeps a copy of `data`, unless spent (or spent by it).
    pub(super) fn record(&mut self, data: &Bytes) {
        if self.spent {
            return;
        }
        self.len += data.len();
        if self.len > MAX_REPLAY {
            self.spend();
        } else {
            self.chunks.push(data.clone());
        }
    }

    /// No replay from now on.
    pub(super) fn spend(&mut self) {
        self.spent = true;
        self.chunks = Vec::new();
    }

    /// Everything recorded, if it can still be replayed.
    pub(super) fn take(self) -> Option<Bytes> {
        (!self.spent).then(|| {
            let mut all = BytesMut::with_capacity(self.len);
            self.chunks.iter().for_each(|c| all.extend_from_slice(c));
            all.freeze()
        })
    }
}

/// Whether a node's failure to forward is worth a relay: it said nothing
/// listens (what gVisor's node says for everything) or that it cannot.
pub(super) fn worth_relaying(e: &Error) -> bool {
    matches!(e.code, ErrorCode::NotFound | ErrorCode::Unsupported)
}

/// The local side of a relayed connection: the client's bytes still to
/// come, where the port's go, and the consumer's pause.
pub(super) struct LocalSide<'a> {
    /// Sent to the port first (the replay).
    pub head: Bytes,
    pub input: &'a mut mpsc::Receiver<Bytes>,
    pub output: &'a mpsc::Sender<OutputChunk>,
    pub paused: watch::Receiver<bool>,
    /// Notified at every byte moved, for the idle timer.
    pub moved: &'a Notify,
}

/// Carries one connection to `port` of `target` through an exec of
/// [`RELAY`], once a relay slot of the sandbox is free. Ends `Ok` when
/// either side closed it. `node` is the node's own error, the answer when
/// the image has no tool to relay with.
pub(super) async fn relay(
    runtime: &dyn Runtime,
    relays: &Relays,
    target: &ExecTarget,
    port: u16,
    local: LocalSide<'_>,
    node: Option<Error>,
) -> Result<()> {
    let LocalSide { head, input, output, mut paused, moved } = local;
    let _slot = tokio::select! {
        slot = relays.permits.acquire(target) => slot,
        // A client that leaves the queue costs no exec.
        () = output.closed() => return Ok(()),
    };
    let (to_relay, rest) = mpsc::channel(1);
    let (chunks_tx, mut chunks) = mpsc::channel(1);
    let argv = script_argv(RELAY, [port.to_string()]);
    let run = runtime.run(target, argv, Stdin::Stream { head, rest }, chunks_tx, Release::new());
    // No end of the client's input ends the connection (as with the node's
    // port-forward, there is no half-close): only the output side does.
    let outbound = async move {
        while let Some(data) = input.recv().await {
            moved.notify_one();
            if to_relay.send(data).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await;
    };
    // `false` once the local side closed (the relay is then dropped, which
    // closes its stdin and ends it), with the relay's stderr.
    let inbound = async {
        let mut stderr = HeadBuffer::new(MAX_STDERR);
        let mut answered = false;
        loop {
            // A paused consumer stops reading, so the relay's writes and
            // then the server block.
            while *paused.borrow_and_update() {
                if paused.changed().await.is_err() {
                    return (false, stderr);
                }
            }
            let chunk = tokio::select! {
                chunk = chunks.recv() => chunk,
                () = output.closed() => return (false, stderr),
            };
            let Some(chunk) = chunk else { return (true, stderr) };
            moved.notify_one();
            if chunk.stream != Stream::Stdout {
                stderr.push(&chunk.data);
                continue;
            }
            if !std::mem::replace(&mut answered, true) {
                relays.remember(target);
            }
            if output.send(chunk).await.is_err() {
                return (false, stderr);
            }
        }
    };
    tokio::pin!(run, inbound);
    let completion = tokio::select! {
        completion = &mut run => completion,
        (false, _) = &mut inbound => return Ok(()),
        () = outbound => unreachable!("the outbound copy never completes"),
    };
    // The run's output channel is closed now: deliver what it holds.
    let (open, stderr) = inbound.await;
    if !open {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&stderr.into_inner()).trim().to_owned();
    match completion? {
        Completion::Exited(0) | Completion::Released => Ok(()),
        Completion::Exited(MISSING_TOOL) => Err(node.unwrap_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                format!(
                    "the node cannot forward port {port} of this sandbox and its image has none of perl, python3, \
                     bash or nc to relay it through an exec"
                ),
            )
        })),
        Completion::Exited(code) if code == NOTHING_LISTENS || stderr.contains("refused") => Err(Error::new(
            ErrorCode::NotFound,
            format!("nothing listens on port {port} in the sandbox (dialed 127.0.0.1 and ::1 from inside it)"),
        )),
        Completion::Exited(code) => Err(Error::new(
            ErrorCode::Unavailable,
            format!("the relay to port {port} failed (exit {code}): {}", quoted(&stderr)),
        )),
        Completion::Failed(message) => Err(Error::new(
            ErrorCode::Unavailable,
            format!("the container runtime failed the relay to port {port}: {}", quoted(&message)),
        )),
    }
}
