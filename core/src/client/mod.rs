//! The Kubernetes client: building it from the `kubeConfig` option (see
//! [`connect`]), and mapping API errors (see [`errors`]).

pub mod connect;
pub mod errors;
mod http;
mod proxy;

pub use connect::{connect, Connection};
pub use errors::{api_error, redact, Action};
