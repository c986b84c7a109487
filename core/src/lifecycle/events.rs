//! Lifecycle progress events (`onEvent`), so a slow cold start is visible.
//! Events carry ids, names, timings and controller messages — never
//! credentials. One more, `warning`, tells once per provider that its
//! credentials travel unprotected (see `client::build::transport_warning`).

use std::sync::Arc;

use serde::Serialize;
use tokio::time::Instant;

/// Receives events. Called on Tokio worker threads; must not block.
pub type EventSink = Arc<dyn Fn(Event) + Send + Sync>;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A SandboxClaim was created (warm-pool mode).
    Claimed,
    /// The claim was bound to a pre-warmed pool sandbox.
    Adopted,
    /// A new sandbox is being started (direct mode, or a claim the pool could not serve).
    ColdStart,
    /// Still waiting; `message` says for what (pending pod, pulling, ...).
    Waiting,
    /// The pod was scheduled to `node`.
    Scheduled,
    /// The sandbox is ready for commands.
    Ready,
    /// The pod was deleted by a suspend.
    Suspended,
    /// A suspended sandbox was started again.
    Resumed,
    /// The sandbox and everything it owned are gone.
    Deleted,
    /// Something the caller should fix, though the call goes on; `message`
    /// says what: credentials sent over plain `http://` or to a server whose
    /// certificate is not checked (at the start of the provider's first call
    /// with a sandbox id), a warm pool whose template has no seccomp profile.
    /// Each once per provider.
    Warning,
}

/// One progress event, serialized as `{ type, id, actorId, elapsedMs, ... }`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The sandbox id.
    pub id: String,
    /// The actor the sandbox belongs to.
    pub actor_id: String,
    /// Milliseconds since the start of the call (create/connect/suspend/destroy).
    pub elapsed_ms: u64,
    /// The Sandbox object (and pod) name, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Node of the pod (`scheduled`, `ready`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Detail (`waiting`, `warning`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Emits the events of one call with a common id, actor and start time.
#[derive(Clone)]
pub(crate) struct Emitter {
    sink: Option<EventSink>,
    id: String,
    actor_id: String,
    start: Instant,
}

impl Emitter {
    /// An emitter for one call; `sink` `None` discards everything.
    pub(crate) fn new(sink: Option<EventSink>, id: &str, actor_id: &str) -> Self {
        Emitter { sink, id: id.to_string(), actor_id: actor_id.to_string(), start: Instant::now() }
    }

    /// Milliseconds since the call started.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Emits `kind` with optional sandbox name, node and message.
    pub(crate) fn emit(&self, kind: EventKind, sandbox: Option<&str>, node: Option<&str>, message: Option<&str>) {
        crate::trace!(
            "  {} {kind:?} after {} ms{}{}{}",
            self.id,
            self.elapsed_ms(),
            sandbox.map(|s| format!(", sandbox {s}")).unwrap_or_default(),
            node.map(|n| format!(", node {n}")).unwrap_or_default(),
            message.map(|m| format!(": {m}")).unwrap_or_default()
        );
        if let Some(sink) = &self.sink {
            sink(Event {
                kind,
                id: self.id.clone(),
                actor_id: self.actor_id.clone(),
                elapsed_ms: self.elapsed_ms(),
                sandbox: sandbox.map(str::to_string),
                node: node.map(str::to_string),
                message: message.map(str::to_string),
            });
        }
    }
}
