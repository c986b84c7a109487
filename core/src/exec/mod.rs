//! The exec engine: runs commands in a sandbox pod over pods/exec and adds
//! what the API lacks — cwd, env, stdin with EOF, timeouts, abort, killing the
//! whole process tree, orphan cleanup, a concurrency cap and backpressure.
//!
//! Layout: [`wrapper`] is the fixed shell script around a user command (user
//! input only as positional arguments) and [`trailer`] the line it ends each
//! stream with; [`kill`] finds and kills a command's process tree;
//! `runtime` is the transport seam ([`Runtime`]) and `websocket` its
//! implementation ([`PodExecRuntime`], the pods/exec channel protocol); `pod_liveness` fails execs
//! whose pod goes away; `engine` ties them together (`request` has what a
//! caller asks and gets), handing output to a `sink`;
//! [`status`] and [`output`] are the pure pieces.
//!
//! Each command runs as `/bin/sh -c <wrapper> sh <runid> <cwd> <cmd> <n> <k> <len> <env…>`
//! with the run's secret on stdin: the wrapper records its pid under
//! `/dev/shm/.agent-sandbox/run/<runid>`, evaluates the command in a
//! subshell (a fork; the exec's only program start is the shell itself), and
//! writes a trailer with the exit status and the secret when it is done.
//! Slots are shared fairly between sandboxes (`permits`). Timeout,
//! abort and a dropped connection kill the command's process tree with a
//! second exec; [`ExecEngine::sweep_orphans`] kills the trees of runs that
//! are no longer live. A descendant that both leaves the tree and clears its
//! environment escapes the kill.

mod engine;
pub(crate) mod kill;
pub(crate) mod output;
mod permits;
mod pod_liveness;
mod portforward;
pub(crate) mod relay;
mod request;
mod runs;
mod runtime;
mod sink;
pub(crate) mod status;
pub(crate) mod terminal;
pub(crate) mod trailer;
mod websocket;
pub(crate) mod wrapper;

pub use engine::ExecEngine;
pub(crate) use engine::{aborted, script_failed, script_status, Input, Program, RunOptions, Slots};
pub use output::{OutputChunk, Stream};
pub(crate) use request::Exit;
pub use request::{Call, ExecRequest, ExecResult, DEFAULT_MAX_OUTPUT_BYTES};
pub(crate) use runtime::TerminalInput;
pub use runtime::{Release, Runtime, Stdin, TerminalSize, Tunnel};
pub(crate) use sink::{Collector, Flow, ScriptOutput, Sink};
pub use status::Completion;
pub use terminal::{Terminal, TerminalRequest};
pub use websocket::{Liveness, PodExecRuntime};

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
