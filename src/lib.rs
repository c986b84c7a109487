//! napi binding of `sandbox-core`: converts JS values to core types and core
//! errors to JS errors with a `code`. No Kubernetes logic lives here.
#![deny(clippy::all)]
mod delivery;
pub mod errors;
pub mod process;
pub mod provider;
pub mod sandbox;
