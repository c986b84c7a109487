//! The Kubernetes client: building it from the `kubeConfig` option, and
//! mapping API errors (see [`errors`]).

pub mod errors;

pub use errors::{api_error, Action};
