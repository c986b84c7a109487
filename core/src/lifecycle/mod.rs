//! Sandbox lifecycle on agent-sandbox.
pub mod manifest;
pub mod names;
pub mod readiness;
pub mod resources;
pub mod watch;
