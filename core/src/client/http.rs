//! kube's HTTP stack, built with TCP_NODELAY and TCP keepalive.
//!
//! `kube::Client::try_from(Config)` uses hyper's `HttpConnector` with Nagle's
//! algorithm on, and offers no way to change it. Every exec is a new
//! connection whose small WebSocket frames (stdin CLOSE, status) then wait on
//! delayed ACKs: measured on the local cluster, about 40 ms more per exec of
//! `true` than the same stack with TCP_NODELAY (as Go, Node and kubectl set).
//! This rebuilds kube's stack (TLS, base URI, retry of 429/503/504, auth,
//! extra headers, connect timeout) around a connector that sets it, and
//! that also probes idle connections (kube's connector does not).

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::ConfigExt;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// Idle time before the first TCP keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between unanswered probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes after which the connection is dropped.
const KEEPALIVE_PROBES: u32 = 3;

/// A client equivalent to `Client::try_from(config)` with TCP_NODELAY and
/// keepalive.
pub(super) fn client(config: Config) -> Result<Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    // A peer that vanishes without closing (node or network gone) would leave
    // an exec or a watch waiting forever; probes end it within about a minute.
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let https = config.rustls_https_connector_with_connector(http)?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https));
    Ok(Client::new(service, config.default_namespace))
}
