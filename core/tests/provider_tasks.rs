//! The provider owns its background work: a TTL touch still waiting on the
//! API server ends when the provider is dropped (its connection closes)
//! instead of running on until the client's timeouts, and so does the work
//! a caller made its own (`Provider::own`: the binding's execs, follows,
//! transfers and tunnels).

use std::time::Duration;

use sandbox_core::Provider;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::time::timeout;

fn provider(options: serde_json::Value) -> Provider {
    Provider::new(sandbox_core::parse_config(&options).unwrap(), None)
}

#[tokio::test]
async fn a_dropped_provider_stops_the_work_it_owns() {
    let provider = provider(json!({ "warmPool": "p", "namespace": "ns" }));
    let (token, work) = provider.own(|cancel| async move {
        cancel.cancelled().await;
        "stopped"
    });
    let running = tokio::spawn(work);
    assert_eq!(provider.background_tasks(), 1);
    drop(provider);
    // Ends only through its token, which only the provider's drop cancelled.
    assert_eq!(running.await.unwrap(), "stopped");
    assert!(token.is_cancelled());
}

#[tokio::test]
async fn cancelling_owned_work_stops_that_work_only() {
    let provider = provider(json!({ "warmPool": "p", "namespace": "ns" }));
    let (first, first_work) = provider.own(|cancel| async move { cancel.cancelled().await });
    let (second, second_work) = provider.own(|cancel| async move { cancel.cancelled().await });
    let (first_work, second_work) = (tokio::spawn(first_work), tokio::spawn(second_work));
    assert_eq!(provider.background_tasks(), 2);
    first.cancel();
    first_work.await.unwrap();
    assert_eq!(provider.background_tasks(), 1);
    assert!(!second.is_cancelled());
    assert!(!second_work.is_finished());
    drop(provider);
    second_work.await.unwrap();
}

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
    let provider = provider(options);
    sandbox_core::testing::report_activity(&provider, "ns/sandbox-a").await.unwrap();
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
