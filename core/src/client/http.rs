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
//!
//! Calls and lists travel over HTTP/2 where the server offers it (ALPN;
//! every kube-apiserver does), as client-go's do: they share one connection,
//! so a burst of calls opens none and costs no TLS handshakes. kube's
//! connector offers HTTP/1.1 only. Watches and the WebSocket upgrades of
//! pods/exec and pods/portforward take HTTP/1.1 connections of their own
//! from a second pool behind the same layers (one auth, one request
//! counter): upgrades need HTTP/1.1, and a watch over HTTP/2 delivers its
//! events late while the API server is busy (measured with the scale
//! benchmark: a warm-pool create+connect at N = 300 resolved 10 ms after
//! Ready at p50 and 417 ms at p99 with the watches on the shared HTTP/2
//! connection, and as late on an HTTP/2 connection of their own, against
//! 0.5 and 5.5 ms over HTTP/1.1). Our reading, not verified in the server's
//! code: Go's HTTP/2 server hands every frame of a connection to one writer,
//! where over HTTP/1.1 each watch writes to its own socket.
//!
//! Retries of 429/503/504 are bounded tighter than kube's `server_retry`
//! (15 retries, up to about five minutes of backoff): [`RETRIES`] with
//! backoff from 50 ms doubling to 5 s, about 11 s in all, honouring a
//! `Retry-After` that is longer than the backoff. That rides out an API
//! server's start or a burst of priority-and-fairness throttling; a server
//! that keeps refusing is reported as `unavailable` while the caller can
//! still do something about it.

use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::Body;
use kube::client::{AuthError, ConfigExt};
use kube::{Client, Config};
use rustls::pki_types::ServerName;
use tower::retry::RetryLayer;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::errors::{self, CredentialError};
use super::proxy::Proxy;
use super::requests::{is_watch, Requests};
use crate::error::{Error, Result};

/// Idle time before the first TCP keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between unanswered probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes after which the connection is dropped.
const KEEPALIVE_PROBES: u32 = 3;

/// Idle connections kept for reuse, per pool: what a burst of calls left
/// behind where the server speaks HTTP/1.1 only (a proxy in front of it, or
/// plain HTTP), watches that ended, and upgrade requests the server
/// refused. Five, so that a provider holds few connections when nothing is
/// in flight, at any number of sandboxes (issue 19's bound).
const POOL_IDLE_MAX: usize = 5;
/// An HTTP/2 connection that has been silent this long is pinged, and
/// dropped (failing its streams, so watches list again and calls report it)
/// if the ping is not answered in [`PING_TIMEOUT`]: client-go's
/// ReadIdleTimeout and PingTimeout. Every call shares that connection, so a
/// stalled one must not go unnoticed for long.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an idle connection is kept.
const POOL_IDLE_FOR: Duration = Duration::from_secs(30);

/// Retries of a request the server answered 429, 503 or 504.
pub(super) const RETRIES: u32 = 8;

/// A client equivalent to `Client::try_from(config)` with TCP_NODELAY and
/// keepalive, through `proxy` when there is one. Errors are `config`, in
/// words that quote no credential (see [`errors::describe`]).
pub(super) fn client(config: Config, proxy: Option<&Proxy>, requests: &Requests) -> Result<Client> {
    let plugin = errors::plugin_name(&config.auth_info);
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    // A peer that vanishes without closing (node or network gone) would leave
    // an exec or a watch waiting forever; probes end it within about a minute.
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let opened = requests.clone();
    let http = http.map_response(move |tcp| {
        opened.connected();
        tcp
    });
    let Some(proxy) = proxy else { return finish(config, http, plugin.as_deref(), requests) };
    match proxy.uri().scheme_str() {
        Some(scheme @ ("socks5" | "socks5h")) => {
            let mut socks = SocksV5::new(proxy.uri().clone(), http).local_dns(scheme == "socks5");
            if let Some((user, pass)) = proxy.raw_auth() {
                socks = socks.with_auth(user.to_owned(), pass.to_owned());
            }
            finish(config, socks, plugin.as_deref(), requests)
        }
        Some("https") => {
            // The proxy is not the cluster: the cluster's CA, its
            // insecure-skip-tls-verify and its client certificate are no
            // business of the proxy's. kube's TLS set up for a config with no
            // CA, no identity and verification on is the platform verifier
            // (the system's roots; on Linux `SSL_CERT_FILE` / `SSL_CERT_DIR`
            // replace them), offering no client certificate.
            let tls = Config::new(proxy.uri().clone()).rustls_https_connector_with_connector(http).map_err(|e| {
                Error::config(format!(
                    "cannot set up TLS to the HTTPS proxy {} (verified against the system's CA certificates): {}",
                    proxy.display(),
                    errors::describe(&e, None)
                ))
            })?;
            let tunnel = Tunnel::new(proxy.uri().clone(), tls);
            finish(config, with_auth(tunnel, proxy), plugin.as_deref(), requests)
        }
        _ => finish(config, with_auth(Tunnel::new(proxy.uri().clone(), http), proxy), plugin.as_deref(), requests),
    }
}

fn with_auth<C>(tunnel: Tunnel<C>, proxy: &Proxy) -> Tunnel<C> {
    match proxy.basic_auth() {
        Some(auth) => tunnel.with_auth(auth.clone()),
        None => tunnel,
    }
}

/// TLS, kube's timeouts and kube's layers over `connector`; `plugin` names
/// the credential plugin in errors; every attempt is counted in `requests`.
fn finish<C>(config: Config, connector: C, plugin: Option<&str>, requests: &Requests) -> Result<Client>
where
    C: Service<http::Uri> + Clone + Send + Sync + 'static,
    C::Response: Connection + hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    let failed =
        |e: kube::Error| Error::config(format!("cannot build the Kubernetes client: {}", errors::describe(&e, plugin)));
    let tls = ClusterTls::new(&config)?;
    let calls = pool(&config, &tls, connector.clone(), Protocols::Negotiated);
    let own_connections = pool(&config, &tls, connector, Protocols::Http1);
    let resent = requests.clone();
    let dispatch = tower::service_fn(move |request: http::Request<Body>| {
        // kube's `Client::connect` asks for its WebSocket by this header.
        let upgrade = request.headers().contains_key(http::header::UPGRADE);
        let pool = if upgrade || is_watch(request.uri()) { own_connections.clone() } else { calls.clone() };
        let resent = resent.clone();
        async move {
            // A GET is sent again when the connection it went out on turned
            // out dead (reset, or lost while the request was on its way): a
            // pooled connection a network failure cut can be handed out
            // before the pool has noticed. Reads are idempotent; client-go
            // retries them alike. Upgrades are not: a command may have run.
            let mut again = if request.method() == http::Method::GET && !upgrade { copy(&request) } else { None };
            let mut result = pool.request(request).await;
            for _ in 0..CONNECTION_RETRIES {
                let (Err(e), Some(request)) = (&result, again.take()) else { break };
                if !connection_died(e) {
                    break;
                }
                again = copy(&request);
                resent.record(request.method(), request.uri());
                result = pool.request(request).await;
            }
            result
        }
    });
    let plugin: Option<Arc<str>> = plugin.map(Arc::from);
    let counted = requests.clone();
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(retry_policy())))
        // The auth layer runs an exec plugin again as its token expires; its
        // failure would reach the caller as kube's error, which prints the
        // plugin's arguments, environment and output: say it in our words.
        .map_err(move |e: BoxError| match e.downcast::<AuthError>() {
            Ok(auth) => BoxError::from(CredentialError::new(&auth, plugin.as_deref())),
            Err(other) => other,
        })
        .option_layer(config.auth_layer().map_err(failed)?)
        .layer(config.extra_headers_layer().map_err(failed)?)
        .map_request(move |request: http::Request<Body>| {
            counted.record(request.method(), request.uri());
            request
        })
        .map_err(BoxError::from)
        .service(dispatch);
    Ok(Client::new(service, config.default_namespace))
}

/// What a connection pool's TLS offers the server.
#[derive(Clone, Copy, PartialEq)]
enum Protocols {
    /// HTTP/2 or HTTP/1.1, as the server chooses.
    Negotiated,
    /// HTTP/1.1 only, for watches and upgrades.
    Http1,
}

type Pool<C> = hyper_util::client::legacy::Client<TimeoutConnector<HttpsConnector<C>>, Body>;

/// The cluster's TLS as kube's client configuration sets it up (CA, client
/// identity, `tls-server-name`), read once for both pools: the identity can
/// come from a credential plugin, which kube runs to read it.
struct ClusterTls {
    config: rustls::ClientConfig,
    server_name: Option<ServerName<'static>>,
}

impl ClusterTls {
    fn new(config: &Config) -> Result<Self> {
        let tls = config.rustls_client_config().map_err(|e| {
            Error::config(format!("cannot set up TLS to the API server: {}", errors::describe(&e, None)))
        })?;
        let server_name = match &config.tls_server_name {
            Some(name) => Some(ServerName::try_from(name.clone()).map_err(|_| {
                Error::config(format!("kubeconfig: tls-server-name {name:?} is not a DNS name or IP address"))
            })?),
            None => None,
        };
        Ok(ClusterTls { config: tls, server_name })
    }
}

/// A connection pool over `connector` with the cluster's TLS and kube's
/// connect, read and write timeouts.
fn pool<C>(config: &Config, tls: &ClusterTls, connector: C, protocols: Protocols) -> Pool<C>
where
    C: Service<http::Uri> + Clone + Send + Sync + 'static,
    C::Response: Connection + hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    let mut builder = HttpsConnectorBuilder::new().with_tls_config(tls.config.clone()).https_or_http();
    if let Some(name) = &tls.server_name {
        builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone()));
    }
    let https = match protocols {
        Protocols::Negotiated => builder.enable_http1().enable_http2().wrap_connector(connector),
        Protocols::Http1 => builder.enable_http1().wrap_connector(connector),
    };
    // As kube's builder: the connect timeout covers proxy and TLS too; reads
    // are unbounded by default (watches are quiet), writes bounded.
    let mut timeouts = TimeoutConnector::new(https);
    timeouts.set_connect_timeout(config.connect_timeout);
    timeouts.set_read_timeout(config.read_timeout);
    timeouts.set_write_timeout(config.write_timeout);
    let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    // Bounded: a burst of calls over HTTP/1.1 would otherwise leave one idle
    // connection per request in flight for 90 s.
    builder.pool_max_idle_per_host(POOL_IDLE_MAX).pool_idle_timeout(POOL_IDLE_FOR).pool_timer(TokioTimer::new());
    if protocols == Protocols::Negotiated {
        builder
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true);
    }
    builder.build(timeouts)
}

/// Times a GET is sent again after its connection died (see `finish`): a
/// network failure can leave every pooled connection dead, and each is
/// dropped as it fails.
const CONNECTION_RETRIES: usize = 2;

/// A copy of `request` with its body (an empty or in-memory one), if it has one.
fn copy(request: &http::Request<Body>) -> Option<http::Request<Body>> {
    let mut copy = http::Request::new(request.body().try_clone()?);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    Some(copy)
}

/// Whether a request failed because its established connection died: not
/// a failure to connect (a new connection would fail alike), not a timeout
/// (waiting again would double it), not an answer.
fn connection_died(e: &hyper_util::client::legacy::Error) -> bool {
    if e.is_connect() {
        return false;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if err.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return false;
        }
        cause = err.source();
    }
    true
}

fn retry_policy() -> RetryPolicy {
    RetryPolicy::new(Duration::from_millis(50), Duration::from_secs(5), RETRIES, true)
        .expect("constant backoff parameters are valid")
}

#[cfg(test)]
mod tests {
    //! Against an in-process plain-HTTP fake (named so): a real API server
    //! cannot be made to answer 503 on demand.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::client::{api_error, Action};

    /// Closes the connection of the first `drops` requests without an
    /// answer (a connection that died under them), serves `failures`
    /// answers of `status`, then 200 with `{}`; counts requests.
    async fn fake_server(drops: u32, status: u16, failures: u32) -> (Client, Arc<AtomicU32>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(AtomicU32::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    // One request per connection, answered with `Connection: close`.
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        let mut buf = [0u8; 1024];
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    if n < drops {
                        return;
                    }
                    let n = n - drops;
                    let refusal = format!(
                        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused on purpose","code":{status}}}"#
                    );
                    let (code, body) = if n < failures { (status, refusal) } else { (200, "{}".to_owned()) };
                    let response = format!(
                        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        (client(Config::new(url.parse().unwrap()), None, &Requests::default()).unwrap(), count)
    }

    async fn get(client: &Client) -> Result<serde_json::Value, kube::Error> {
        client.request(http::Request::get("/api/v1/namespaces/x").body(Vec::new()).unwrap()).await
    }

    #[tokio::test]
    async fn a_burst_of_503_and_429_is_retried_until_it_passes() {
        for status in [503, 429, 504] {
            let (client, count) = fake_server(0, status, 3).await;
            get(&client).await.unwrap_or_else(|e| panic!("{status}: {e}"));
            assert_eq!(count.load(Ordering::SeqCst), 4, "{status}: three refusals, one success");
        }
    }

    #[tokio::test]
    async fn a_server_that_keeps_refusing_is_an_error_after_the_bounded_retries() {
        let (client, count) = fake_server(0, 503, u32::MAX).await;
        // 50 ms doubling, capped at 5 s, with jitter: about 12 s at most. The
        // count is the check; the bound only catches retries without end.
        let err =
            tokio::time::timeout(Duration::from_secs(600), get(&client)).await.expect("the retries end").unwrap_err();
        assert_eq!(count.load(Ordering::SeqCst), RETRIES + 1);
        let action = Action { verb: "get", resource: "namespaces", name: Some("x"), namespace: "" };
        let err = api_error(err, action);
        assert_eq!(err.code, crate::ErrorCode::Unavailable, "{}", err.message);
        assert!(err.message.contains("503") && err.message.contains("refused on purpose"), "{}", err.message);
    }

    #[tokio::test]
    async fn other_errors_are_not_retried() {
        let (client, count) = fake_server(0, 500, u32::MAX).await;
        assert!(get(&client).await.is_err());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_get_whose_connection_died_is_sent_again_and_nothing_else_is() {
        let (client, count) = fake_server(CONNECTION_RETRIES as u32, 200, 0).await;
        get(&client).await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), CONNECTION_RETRIES as u32 + 1);
        // One death more than the retries: the error stands.
        let (client, count) = fake_server(CONNECTION_RETRIES as u32 + 1, 200, 0).await;
        assert!(get(&client).await.is_err());
        assert_eq!(count.load(Ordering::SeqCst), CONNECTION_RETRIES as u32 + 1);
        // A POST may have been acted on: never sent again.
        let (client, count) = fake_server(1, 200, 0).await;
        let post = http::Request::post("/api/v1/namespaces").body(b"{}".to_vec()).unwrap();
        assert!(client.request::<serde_json::Value>(post).await.is_err());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }
}
