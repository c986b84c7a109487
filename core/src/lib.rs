//! `sandbox-core`: a Kubernetes sandbox provider for agents, built on
//! kubernetes-sigs/agent-sandbox (SandboxClaim / Sandbox) and pods/exec.
//!
//! Modules, one concern each:
//! - [`error`]: the error type with stable codes.
//! - [`config`]: provider options, validated up front.
//! - [`args`]: the numbers a caller passes to calls (timeouts, byte counts,
//!   sequences), checked the same way everywhere.
//! - [`client`]: building the Kubernetes client from the kubeconfig options, and
//!   mapping API errors to [`error::Error`].
//! - [`lifecycle`]: create / connect / suspend / destroy, readiness, TTL, events.
//! - [`exec`]: the exec engine behind the [`exec::Runtime`] trait (pods/exec now).
//! - [`files`]: file operations built on exec.
//! - [`process`]: background processes on exec.
//! - [`transfer`]: trees in and out as tar streams, archives checked as hostile.
//! - [`usage`]: what a sandbox uses (CPU, memory, pids, disk), from its
//!   cgroup files over exec.
//! - [`sandbox`]: a connected sandbox (exec and files on one pod).
//! - [`provider`]: the assembly of client, lifecycle and exec engine that the
//!   binding exposes.
//! - [`trace`](mod@trace): `AGENT_SANDBOX_LOG=debug` tracing on stderr (no secrets).

/// An in-pod script as sent: `core/src/<path>` composed with the libraries it
/// needs and minified by the build script (`core/build/`).
macro_rules! in_pod_script {
    ($path:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/sh/", $path))
    };
}

pub mod args;
pub mod client;
pub mod config;
pub mod error;
pub mod exec;
pub mod files;
pub mod lifecycle;
pub mod ports;
pub mod process;
pub mod provider;
pub mod sandbox;
pub mod trace;
pub mod transfer;
pub mod usage;

pub use args::Limits;
pub use error::{Error, ErrorCode, Result};
pub use provider::Provider;
pub use sandbox::Sandbox;
