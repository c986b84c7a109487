//! The exec engine: runs commands in a sandbox pod over pods/exec and adds
//! what the API lacks — cwd, env, stdin with EOF, timeouts, abort, killing the
//! whole process tree, orphan cleanup, a concurrency cap and backpressure.
//!
//! Layout: [`script`] holds the fixed shell scripts (user input only as
//! positional arguments); [`runtime`] is the transport ([`Runtime`], with
//! [`PodExecRuntime`] speaking the pods/exec channel protocol); [`watch`] fails execs
//! whose pod goes away; [`engine`] ties them together; [`status`] and
//! [`output`] are the pure pieces.
//!
//! Each command runs as `/bin/sh -c <wrapper> sh <runid> <cwd> <cmd> <n> <env…>`:
//! the wrapper starts the command in its own session (`setsid`), records the
//! process-group id under `${TMPDIR:-/tmp}/.agent-sandbox/run/<runid>`, and
//! waits. Timeout, abort and a dropped connection kill that group with a
//! second exec; [`ExecEngine::sweep_orphans`] kills groups of runs that are no
//! longer live. Descendants that call `setsid` themselves leave the group and
//! escape the kill.

mod engine;
pub mod output;
mod runs;
mod runtime;
pub mod script;
pub mod status;
mod watch;

pub use engine::{ExecEngine, ExecRequest, ExecResult, DEFAULT_MAX_OUTPUT_BYTES};
pub(crate) use engine::script_status;
pub use output::{OutputChunk, Stream};
pub use runtime::{PodExecRuntime, Runtime};
pub use status::Completion;

/// Where commands run: a container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExecTarget {
    /// Namespace of the pod.
    pub namespace: String,
    /// Pod name (for agent-sandbox, the Sandbox's name).
    pub pod: String,
    /// Container; `None` uses the pod's default container.
    pub container: Option<String>,
}
