//! The Kubernetes client: building it from the `kubeConfig` option (see
//! [`build`]), and mapping API errors (see [`errors`]).

pub(crate) mod build;
pub(crate) mod errors;
mod http;
pub(crate) mod informer;
mod proxy;
pub(crate) mod requests;

pub use build::connect;
pub(crate) use build::Connection;

/// How long 403s and 401s may follow a moment when the API server was
/// unreachable or had been allowing the same request, before they count:
/// a restarting API server answers them until its authorizer is ready.
pub(crate) const AUTH_GRACE: std::time::Duration = std::time::Duration::from_secs(15);
pub(crate) use errors::redact;
pub use errors::{api_error, Action};
