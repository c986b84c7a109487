//! Ports the node cannot reach go through the relay script: the engine over
//! a test double of a gVisor node (its port-forward fails the way gVisor's
//! kubelet does, after taking the client's first bytes) whose execs are
//! local processes ([`common::LocalRuntime`]), so `relay.sh` runs under this
//! machine's `/bin/sh` against a real local TCP server, with each of the
//! tools it can use. `__test__/ports.test.mjs` runs the same on the gVisor
//! node.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{scratch, target, LocalRuntime};
use futures::future::BoxFuture;
use futures::FutureExt;
use sandbox_core::testing::{Completion, ExecEngine, ExecTarget, Release, Runtime, Stdin, TunnelLimits};
use sandbox_core::{Error, ErrorCode, OutputChunk, Result, Tunnel};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

/// A node that cannot forward: it reads the client's first chunk (as the
/// API server does before the node answers) and fails with gVisor's words.
struct GvisorNode {
    local: LocalRuntime,
    dials: Arc<AtomicUsize>,
}

impl Runtime for GvisorNode {
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        output: mpsc::Sender<OutputChunk>,
        release: Release,
    ) -> BoxFuture<'a, Result<Completion>> {
        self.local.run(target, argv, stdin, output, release)
    }

    fn port_forward<'a>(&'a self, _: &'a ExecTarget, port: u16, mut tunnel: Tunnel) -> BoxFuture<'a, Result<()>> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        async move {
            let _ = tunnel.input.recv().await;
            Err(Error::new(
                ErrorCode::NotFound,
                format!(
                    "nothing listens on port {port} (the node said: dial tcp4 127.0.0.1:{port}: connection refused)"
                ),
            ))
        }
        .boxed()
    }
}

/// An engine over a [`GvisorNode`] whose processes see `path` as `PATH`
/// (`None`: this machine's).
fn engine(path: Option<&Path>) -> (ExecEngine, Arc<AtomicUsize>) {
    let mut local = LocalRuntime::new(&scratch("relay"));
    if let Some(path) = path {
        local = local.with_env("PATH", &path.display().to_string());
    }
    let dials = Arc::default();
    let node = GvisorNode { local, dials: Arc::clone(&dials) };
    let limits = TunnelLimits { max: 16, per_sandbox: 16, idle: Duration::from_secs(600) };
    (ExecEngine::with_runtime(Box::new(node), 16).with_tunnel_limits(limits), dials)
}

/// A directory holding links to just these programs (an image with only them).
fn only(programs: &[&str]) -> PathBuf {
    let dir = scratch("bin");
    for program in programs {
        // The real file, not a shim (pyenv's python3 is a bash script).
        let real = match *program {
            "python3" => {
                let out = std::process::Command::new("python3")
                    .args(["-c", "import sys; print(sys.executable)"])
                    .output()
                    .expect("python3 runs");
                String::from_utf8(out.stdout).unwrap().trim().to_owned()
            }
            name => format!("/usr/bin/{name}"),
        };
        std::os::unix::fs::symlink(real, dir.join(program)).unwrap();
    }
    dir
}

/// A server on 127.0.0.1 that answers every chunk with it upper-cased, and
/// counts the connections it saw end.
async fn upper_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let ended = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ended);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let ended = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buf = vec![0; 4096];
                while let Ok(n @ 1..) = socket.read(&mut buf).await {
                    if socket.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                        break;
                    }
                }
                ended.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (port, ended)
}

/// The local side of a connection: what the client writes, what it reads,
/// and the tunnel to hand the engine.
fn local_side() -> (mpsc::Sender<Bytes>, mpsc::Receiver<OutputChunk>, Tunnel) {
    let (input, input_rx) = mpsc::channel(4);
    let (output, output_rx) = mpsc::channel(4);
    let (_, paused) = watch::channel(false);
    (input, output_rx, Tunnel { input: input_rx, output, paused })
}

/// Reads until `want` bytes arrived.
async fn read_exactly(output: &mut mpsc::Receiver<OutputChunk>, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < want {
        got.extend_from_slice(&output.recv().await.expect("the tunnel ended early").data);
    }
    got
}

/// One connection: the client writes before the port said anything (the
/// node takes that and fails), then more; both answers come back.
async fn round_trip(engine: &ExecEngine, port: u16) {
    let (input, mut output, tunnel) = local_side();
    let carried = tokio::spawn({
        let engine = engine.clone();
        async move { engine.port_forward(target(), port, tunnel, Duration::from_secs(60)).await }
    });
    input.send(Bytes::from_static(b"hello ")).await.unwrap();
    assert_eq!(read_exactly(&mut output, 6).await, b"HELLO ");
    input.send(Bytes::from_static(b"again")).await.unwrap();
    assert_eq!(read_exactly(&mut output, 5).await, b"AGAIN");
    // The local side closing ends the connection, also while the port is
    // silent.
    drop((input, output));
    carried.await.unwrap().unwrap();
}

#[tokio::test]
async fn each_tool_relays_a_port_the_node_cannot_reach_with_the_clients_first_bytes() {
    let (port, ended) = upper_server().await;
    let tools: [(&str, Option<PathBuf>); 3] =
        [("perl", None), ("python3", Some(only(&["python3"]))), ("bash", Some(only(&["bash", "cat"])))];
    for (i, (tool, path)) in tools.iter().enumerate() {
        let (engine, dials) = engine(path.as_deref());
        round_trip(&engine, port).await;
        assert_eq!(dials.load(Ordering::SeqCst), 1, "{tool}: the node was tried first");
        // The relay reached it: the next connection skips the node.
        round_trip(&engine, port).await;
        assert_eq!(dials.load(Ordering::SeqCst), 1, "{tool}: the node was tried again");
        // The server saw both connections end (the relay did not outlive
        // its tunnel).
        common::wait_until(&format!("{tool}'s connections to end"), || ended.load(Ordering::SeqCst) == 2 * (i + 1))
            .await;
    }
}

#[tokio::test]
async fn nothing_listening_is_not_found_and_an_image_without_tools_gets_the_nodes_error() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    for path in [None, Some(only(&["python3"])), Some(only(&["bash", "cat"]))] {
        let (engine, _) = engine(path.as_deref());
        let (input, _output, tunnel) = local_side();
        input.send(Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n")).await.unwrap();
        let e = engine.port_forward(target(), port, tunnel, Duration::from_secs(60)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound, "{path:?}: {e}");
        assert!(e.message.contains("dialed 127.0.0.1 and ::1"), "{path:?}: {e}");
    }
    // No tool: the node's own answer stands.
    let (engine, _) = engine(Some(&only(&[])));
    let (input, _output, tunnel) = local_side();
    input.send(Bytes::from_static(b"x")).await.unwrap();
    let e = engine.port_forward(target(), port, tunnel, Duration::from_secs(60)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound, "{e}");
    assert!(e.message.contains("the node said"), "{e}");
}

#[tokio::test]
async fn more_than_the_replay_bound_before_an_answer_gets_the_nodes_error() {
    let (port, _) = upper_server().await;
    let (engine, _) = engine(None);
    let (input, _output, tunnel) = local_side();
    let carried =
        tokio::spawn(async move { engine.port_forward(target(), port, tunnel, Duration::from_secs(60)).await });
    // The node takes only the first chunk; the bound counts what it took.
    input.send(Bytes::from(vec![b'x'; 64 * 1024 + 1])).await.unwrap();
    let e = carried.await.unwrap().unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound, "{e}");
    assert!(e.message.contains("the node said"), "{e}");
}
