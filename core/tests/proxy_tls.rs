//! TLS to an `https://` proxy is the proxy's, not the cluster's: the proxy's
//! certificate is verified against the system's roots (never the cluster's
//! CA), and the cluster's client certificate is never offered to it.
//!
//! Against an in-process TLS proxy that asks for a client certificate
//! (optional) and records what it got. The certificates in
//! `fixtures/proxy-tls/` are test-only: a CA (`ca.pem`, used as the cluster's
//! CA, its key thrown away), the proxy's certificate for 127.0.0.1 and a
//! cluster client certificate, both signed by it (EC P-256, valid 100 years):
//!
//! ```text
//! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 36500 \
//!   -subj "/CN=test cluster CA" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
//! # proxy (subjectAltName=IP:127.0.0.1, extendedKeyUsage=serverAuth) and client (extendedKeyUsage=clientAuth):
//! openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout k -out csr -subj /CN=proxy
//! openssl pkcs8 -topk8 -nocrypt -in k -out proxy.key
//! openssl x509 -req -in csr -CA ca.pem -CAkey ca.key -CAcreateserial -out proxy.pem -days 36500 -extfile ext
//! ```
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::config::Kubeconfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use sandbox_core::testing::{api_error, connect, Action, KubeConfigSource};
use sandbox_core::{lock, ErrorCode};

/// Set in the child process that runs a test with other system roots.
const CHILD: &str = "SANDBOX_CORE_PROXY_TLS_CHILD";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proxy-tls").join(name)
}

/// What the proxy saw of one connection.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// The TLS handshake completed.
    handshake: bool,
    /// The client presented a certificate.
    client_certificate: bool,
    /// The request head (the CONNECT line), when one came.
    request: String,
}

/// A TLS proxy on 127.0.0.1 that asks for (but does not require) a client
/// certificate signed by the test CA, refuses every CONNECT with 403, and
/// records each connection.
fn tls_proxy() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(fixture("ca.pem")).unwrap()).unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .unwrap();
    let chain = vec![CertificateDer::from_pem_file(fixture("proxy.pem")).unwrap()];
    let key = PrivateKeyDer::from_pem_file(fixture("proxy.key")).unwrap();
    let config = Arc::new(
        ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut tls = StreamOwned::new(ServerConnection::new(config.clone()).unwrap(), tcp);
            let mut seen = Seen::default();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            seen.handshake = !tls.conn.is_handshaking();
            seen.client_certificate = tls.conn.peer_certificates().is_some_and(|c| !c.is_empty());
            seen.request = String::from_utf8_lossy(&head).into_owned();
            if seen.handshake {
                let _ = tls.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
            lock(&log).push(seen);
        }
    });
    (port, seen)
}

/// A kubeconfig for a cluster whose CA signed the proxy's certificate, with
/// a client certificate from that CA, reached through the proxy at `port`.
fn through_proxy(port: u16) -> KubeConfigSource {
    let yaml = format!(
        r#"apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: {ca}
    proxy-url: https://127.0.0.1:{port}
contexts:
- name: x
  context: {{ cluster: c, user: u }}
current-context: x
users:
- name: u
  user:
    client-certificate: {cert}
    client-key: {key}
"#,
        ca = fixture("ca.pem").display(),
        cert = fixture("client.pem").display(),
        key = fixture("client.key").display(),
    );
    KubeConfigSource::Inline(Box::new(Kubeconfig::from_yaml(&yaml).unwrap()))
}

/// A GET through the proxy; its error (the proxy never lets one through).
async fn get_through(port: u16) -> sandbox_core::Error {
    let conn = connect(&through_proxy(port)).await.unwrap();
    let request = http::Request::get("/api/v1/namespaces").body(Vec::new()).unwrap();
    let err = conn.client.request::<serde_json::Value>(request).await.unwrap_err();
    api_error(err, Action { verb: "get", resource: "namespaces", name: None, namespace: "" })
}

/// What the proxy recorded, once it has recorded a connection: the client
/// can see its error (a failed handshake, the proxy's 403) before the
/// proxy's thread writes the record. Waits at most the proxy's own read
/// timeout.
fn recorded(seen: &Mutex<Vec<Seen>>) -> Vec<Seen> {
    for _ in 0..200 {
        let now = lock(seen).clone();
        if !now.is_empty() {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Vec::new()
}

#[tokio::test]
async fn the_proxy_is_not_verified_with_the_clusters_ca() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let (port, seen) = tls_proxy();
    let e = get_through(port).await;
    assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
    assert!(e.message.contains("certificate"), "{}", e.message);
    let seen = recorded(&seen);
    assert!(!seen.is_empty(), "the proxy was reached");
    for s in &seen {
        assert!(!s.handshake && !s.client_certificate && s.request.is_empty(), "{s:?}");
    }
}

#[tokio::test]
async fn a_proxy_the_system_trusts_is_offered_no_client_certificate() {
    if std::env::var_os(CHILD).is_none() {
        // The system's roots are read from SSL_CERT_FILE by the platform
        // verifier on Linux: set in a child process of this test alone.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["a_proxy_the_system_trusts_is_offered_no_client_certificate", "--exact", "--nocapture"])
            .env(CHILD, "1")
            .env("SSL_CERT_FILE", fixture("ca.pem"))
            .env_remove("SSL_CERT_DIR")
            .output()
            .unwrap();
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{output}");
        assert!(output.contains("1 passed"), "{output}");
        return;
    }
    let (port, seen) = tls_proxy();
    let e = get_through(port).await;
    assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
    let seen = recorded(&seen);
    assert!(!seen.is_empty(), "the proxy was reached");
    for s in &seen {
        assert!(s.handshake, "the proxy's certificate is trusted through the system roots: {s:?}");
        assert!(!s.client_certificate, "the cluster's client certificate went to the proxy: {s:?}");
        assert!(s.request.starts_with("CONNECT 10.0.0.1:6443 "), "{s:?}");
    }
}
