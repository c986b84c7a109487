//! Sandbox lifecycle on kubernetes-sigs/agent-sandbox (v1beta1):
//! create / connect / suspend / destroy, readiness watches, TTL backstop,
//! progress events.
//!
//! - [`Provider`]: the lifecycle plus the exec engine (the binding's view).
//! - [`ops`]: [`Lifecycle`], the Kubernetes side (create and shared helpers);
//!   `connect` and `teardown` (suspend/destroy) extend it.
//! - `access`: permission checks before a call changes anything.
//! - [`readiness`]: pure decisions on observed objects; [`watch`]: waiting.
//! - [`manifest`], [`names`], [`resources`]: what we create and read.

mod access;
mod connect;
pub mod events;
pub mod manifest;
pub mod names;
pub mod ops;
mod preflight;
mod provider;
pub mod readiness;
pub mod resources;
mod teardown;
pub mod ttl;
pub mod watch;

pub use events::{Event, EventKind, EventSink};
pub use ops::{Lifecycle, PodTarget};
pub use provider::Provider;
