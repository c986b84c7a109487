//! The Kubernetes client: building it from the `kubeConfig` option (see
//! [`build`]), and mapping API errors (see [`errors`]).

pub mod build;
pub mod errors;
mod http;
pub mod informer;
mod proxy;
pub mod requests;

pub use build::{connect, Connection};

/// How long 403s and 401s may follow a moment when the API server was
/// unreachable or had been allowing the same request, before they count:
/// a restarting API server answers them until its authorizer is ready.
pub const AUTH_GRACE: std::time::Duration = std::time::Duration::from_secs(15);
pub use errors::{api_error, redact, Action};
