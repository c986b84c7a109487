//! The provider owns its background work: a TTL touch still waiting on the
//! API server ends when the provider is dropped (its connection closes)
//! instead of running on until the client's timeouts.

use std::time::Duration;

use sandbox_core::Provider;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::time::timeout;

#[tokio::test]
async fn a_dropped_provider_ends_its_background_touches() {
    // An API server that accepts and then never answers (not even TLS).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = format!("https://{}", listener.local_addr().unwrap());
    let options = json!({
        "warmPool": "p",
        "namespace": "ns",
        "ttlSeconds": 600,
        "kubeConfig": { "server": server, "token": "t", "insecureSkipTlsVerify": true },
    });
    let provider = Provider::new(sandbox_core::config::parse(&options).unwrap(), None);
    provider.report_activity("ns/sandbox-a").await.unwrap();
    let (mut socket, _) =
        timeout(Duration::from_secs(10), listener.accept()).await.expect("the touch never connected").unwrap();
    assert_eq!(provider.background_tasks(), 1);
    drop(provider);
    let mut buf = [0u8; 4096];
    loop {
        match timeout(Duration::from_secs(5), socket.read(&mut buf)).await.expect("the touch outlived its provider") {
            Ok(0) | Err(_) => break,
            Ok(_) => {} // the TLS hello
        }
    }
}
