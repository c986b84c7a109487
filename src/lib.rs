//! napi binding of `sandbox-core`: converts JS values to core types and core
//! errors to JS errors with a `code`. No Kubernetes logic lives here.
//!
//! One module per class it exposes to `js/`: [`native_provider`]
//! (`NativeProvider`), [`native_sandbox`] (`NativeSandbox`), [`native_process`]
//! (`NativeProcess`), [`native_ports`] (`NativeTunnel`, listening ports), [`native_terminal`]
//! (`NativeTerminal`), [`native_transfer`]; [`errors`] is the error conversion, `delivery` the
//! output hand-off to JS with backpressure, [`calls`] the abort handle and
//! promise of file and process calls, [`task`] the handle of work that
//! outlives its call (`NativeTask`: an exec, a follow, a wait), owned by the
//! provider.
#![deny(clippy::all)]
pub mod calls;
mod delivery;
pub mod errors;
pub mod native_ports;
pub mod native_process;
pub mod native_provider;
pub mod native_sandbox;
pub mod native_terminal;
pub mod native_transfer;
pub mod task;
