//! `sandbox-core`: a Kubernetes sandbox provider for agents, built on
//! kubernetes-sigs/agent-sandbox (SandboxClaim / Sandbox) and pods/exec.
//!
//! The surface is [`Provider`] (create / connect / suspend / destroy) and the
//! [`Sandbox`] it connects to, with what their calls take and return,
//! re-exported here; [`transfer`] keeps its own namespace. Everything else is
//! private to the crate. Modules, one concern each:
//! - `error`: the error type with stable codes.
//! - `config`: provider options, validated up front.
//! - `args`: the numbers a caller passes to calls (timeouts, byte counts,
//!   sequences), checked the same way everywhere.
//! - `client`: building the Kubernetes client from the kubeconfig options, and
//!   mapping API errors to [`Error`].
//! - `lifecycle`: create / connect / suspend / destroy, readiness, TTL, events.
//! - `exec`: the exec engine behind the `exec::Runtime` trait (pods/exec now).
//! - `files`: file operations built on exec.
//! - `process`: background processes on exec.
//! - [`transfer`]: trees in and out as tar streams, archives checked as hostile.
//! - `usage`: what a sandbox uses (CPU, memory, pids, disk), from its
//!   cgroup files over exec.
//! - `sandbox`: a connected sandbox (exec and files on one pod).
//! - `provider`: the assembly of client, lifecycle and exec engine that the
//!   binding exposes.
//! - `trace`: `AGENT_SANDBOX_LOG=debug` tracing on stderr (no secrets).
//! - `sync`: [`lock`], the one policy for a poisoned mutex (core and binding).

/// An in-pod script as sent: `core/src/<path>` composed with the libraries it
/// needs and minified by the build script (`core/build/`).
macro_rules! in_pod_script {
    ($path:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/sh/", $path))
    };
}

mod args;
mod client;
mod config;
mod error;
mod exec;
mod files;
mod lifecycle;
mod ports;
mod process;
mod provider;
mod sandbox;
mod script_exit;
mod sync;
mod trace;
pub mod transfer;
mod usage;

// What the binding uses, and all it may: the rest of the crate is private.
// `transfer` stays a module: its `Limits` and `Source` would clash with
// `args::Limits` and `usage::Source` at the root.
pub use args::{byte_count, byte_range, sample_ms, sequence, terminal_dimension, timeout_ms, ByteRange, Limits};
pub use config::{parse as parse_config, ProviderConfig};
pub use error::{Error, ErrorCode, Result};
pub use exec::{
    Call, ExecRequest, ExecResult, OutputChunk, Stream, Terminal, TerminalRequest, TerminalSize, Tunnel,
    DEFAULT_MAX_OUTPUT_BYTES,
};
pub use files::{FileStat, RemoveOptions, DEFAULT_MAX_READ_BYTES};
pub use lifecycle::{Event, EventKind, EventSink};
pub use ports::{port, ListeningPort, ServiceUrl};
pub use process::{
    Kill, ProcessChunk, ProcessExit, ProcessInfo, ProcessPoll, SpawnRequest, SpawnStdin,
    DEFAULT_CAP as DEFAULT_PROCESS_CAP,
};
pub use provider::{Provider, Stats};
pub use sandbox::Sandbox;
pub use sync::lock;
pub use usage::{Source as UsageSource, Usage};

/// Seams for the crate's integration tests (`core/tests/`): the engine over a
/// runtime of their own, the wrapper and trailer as sent, the module
/// functions under [`Sandbox`]. Not API: nothing outside this repository may
/// use it, and it changes with the internals it exposes.
#[doc(hidden)]
pub mod testing {
    pub use crate::args::TunnelLimits;
    pub use crate::client::{api_error, connect, Action};
    pub use crate::config::KubeConfigSource;
    pub use crate::exec::{Completion, ExecEngine, ExecTarget, Liveness, PodExecRuntime, Release, Runtime, Stdin};

    use crate::{Limits, Provider, Sandbox};

    /// A sandbox on `engine` without a provider.
    pub fn sandbox(engine: ExecEngine, target: ExecTarget, cwd: String, limits: Limits) -> Sandbox {
        Sandbox::new(engine, target, cwd, limits)
    }

    /// What a connected sandbox `id` reports on each call, without connecting it.
    pub async fn report_activity(provider: &Provider, id: &str) -> crate::Result<()> {
        provider.report_activity(id).await
    }

    /// `client::informer`.
    pub mod informer {
        pub use crate::client::informer::{ApiSource, Informer, Source};
    }
    /// `exec::wrapper`.
    pub mod wrapper {
        pub use crate::exec::wrapper::{
            script_argv, wrapper_argv, CommandStdin, ScriptCommand, INLINE_COMMAND_MAX, WRAPPER,
        };
    }
    /// `exec::trailer`.
    pub mod trailer {
        pub use crate::exec::trailer::{needle, MAX_TRAILER};
    }
    /// `exec::kill`.
    pub mod kill {
        pub use crate::exec::kill::KILL;
    }
    /// `script_exit`: the in-pod scripts' exit statuses.
    pub mod script_exit {
        pub use crate::script_exit::*;
    }
    /// `exec::relay`.
    pub mod relay {
        pub use crate::exec::relay::RELAY;
    }
    /// `files`: the operations under [`Sandbox`](crate::Sandbox)'s.
    pub mod files {
        pub use crate::files::{exists, mkdir, read_file, readdir, remove, scripts, stat, write_file};
    }
    /// `process`: the operations under [`Sandbox`](crate::Sandbox)'s.
    pub mod process {
        pub use crate::process::scripts;
        pub use crate::process::{
            close_stdin, exec_reattached, find, follow, kill, list, poll, spawn, wait, write_stdin, MAX_CAP, POLL_PAGE,
        };
    }
}
