//! The exec engine against an in-process fake of the pods/exec WebSocket
//! endpoint, for what the real local cluster cannot do: a server that speaks
//! only `v4.channel.k8s.io` (no stdin EOF), and status frames that are
//! malformed, missing, or failures without an exit code.
//!
//! In `V4Local` mode the fake runs the requested argv on this machine (the
//! engine's real wrapper script under the local `/bin/sh`) and never closes
//! the child's stdin, as a v4 server cannot learn about EOF.

use std::process::Stdio;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use sandbox_core::testing::informer::{ApiSource, Informer};
use sandbox_core::testing::{ExecEngine, ExecTarget, Liveness, PodExecRuntime};
use sandbox_core::{ErrorCode, ExecRequest};
use tokio::io::DuplexStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy)]
enum Mode {
    /// v4 only; runs the command locally; stdin never reaches EOF.
    V4Local,
    /// Some output, then a status frame that is not JSON.
    MalformedStatus,
    /// Some output, then a clean close without a status frame.
    NoStatus,
    /// A `Failure` status without an `ExitCode` cause.
    FailureWithoutExitCode,
    /// Upgrades, then neither reads nor writes: a stalled connection whose
    /// socket stays open (tungstenite answers pings only when polled).
    Silent,
    /// Accepts the TCP connection and never answers the upgrade request.
    NoUpgrade,
    /// Answers pings but sends nothing for `QUIET`, then a success status: a
    /// long quiet command on a live connection.
    QuietThenExit,
}

/// How long `QuietThenExit` stays quiet: four stall periods of the default
/// liveness (a ping every 5 s, a stall after 15 s of silence). The tests
/// that wait on pings and stalls run under tokio's paused time: the fake and
/// the engine share one runtime and in-memory pipes, so the clock moves only
/// when both wait, and the machine's load cannot stretch a window.
const QUIET: Duration = Duration::from_secs(60);

/// Pings and stall detection scaled down (in paused time it costs nothing,
/// but it keeps the stall short against the fake's minute of silence).
fn fast() -> Liveness {
    Liveness { ping: Duration::from_millis(100), stall: Duration::from_millis(400) }
}

/// Starts the fake; returns an engine talking to it.
async fn engine(mode: Mode) -> ExecEngine {
    engine_with(mode, Liveness::default()).await
}

/// Starts the fake; returns an engine with `liveness` talking to it.
///
/// Each request gets a connection of its own over an in-memory pipe
/// (`tokio::io::duplex`), not a socket: the fake and the engine then wake
/// each other directly, so under tokio's paused time the clock moves only
/// when both truly wait (with a socket, readiness comes from the OS and
/// paused time jumps to the next timer before a reply is read).
async fn engine_with(mode: Mode, liveness: Liveness) -> ExecEngine {
    let connect = tower::service_fn(move |req: http::Request<kube::client::Body>| async move {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        tokio::spawn(serve(theirs, mode));
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(ours)).await?;
        tokio::spawn(conn.with_upgrades());
        sender.send_request(req).await
    });
    let client = kube::Client::new(connect, "ns");
    // The fake serves exec only: no pod watch (its owner is gone from the
    // start, so it never starts), and so no deletion detection.
    let stopped = CancellationToken::new();
    stopped.cancel();
    let source = ApiSource::new(kube::Api::namespaced(client.clone(), "ns"), "ns", Default::default(), "pods", |_| {});
    let pods = Informer::new(source, stopped);
    ExecEngine::with_runtime(Box::new(PodExecRuntime::new(client, pods).with_liveness(liveness)), 8)
}

fn target() -> ExecTarget {
    ExecTarget { namespace: "ns".into(), pod: "pod".into(), container: None }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::binary(v)
}

async fn serve(stream: DuplexStream, mode: Mode) {
    if let Mode::NoUpgrade = mode {
        tokio::time::sleep(Duration::from_secs(60)).await;
        return drop(stream);
    }
    let mut argv = Vec::new();
    #[allow(clippy::result_large_err)] // tungstenite's callback signature
    let accept = |req: &Request, mut res: Response| {
        argv = form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.into_owned())
            .collect();
        let offered = req.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(offered.contains("v4.channel.k8s.io"), "client offers v4: {offered}");
        res.headers_mut().insert("sec-websocket-protocol", "v4.channel.k8s.io".parse().unwrap());
        Ok(res)
    };
    // Anything but an exec upgrade (the engine's pod watch) just fails.
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, accept).await else { return };
    let (mut tx, mut rx) = ws.split();
    match mode {
        Mode::MalformedStatus => {
            tx.send(frame(1, b"partial")).await.unwrap();
            tx.send(frame(3, b"{not json")).await.unwrap();
            // Stay open: the client must not wait for anything more.
            while rx.next().await.is_some() {}
        }
        Mode::NoStatus => {
            tx.send(frame(1, b"out")).await.unwrap();
            tx.close().await.unwrap();
        }
        Mode::FailureWithoutExitCode => {
            let status = br#"{"status":"Failure","message":"OCI runtime exec failed: boom","reason":"InternalError","code":500}"#;
            tx.send(frame(3, status)).await.unwrap();
            tx.close().await.unwrap();
        }
        Mode::NoUpgrade => unreachable!(),
        Mode::Silent => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop((tx, rx));
        }
        Mode::QuietThenExit => {
            let mut ws = tx.reunite(rx).unwrap();
            let quiet = tokio::time::sleep(QUIET);
            tokio::pin!(quiet);
            loop {
                tokio::select! {
                    // Polling makes tungstenite queue pongs; flush sends them.
                    msg = ws.next() => if msg.is_none() { return },
                    () = &mut quiet => break,
                }
                let _ = ws.flush().await;
            }
            ws.send(frame(3, br#"{"status":"Success","metadata":{}}"#)).await.unwrap();
            let _ = ws.close(None).await;
        }
        Mode::V4Local => run_locally(argv, tx, rx).await,
    }
}

async fn run_locally(
    argv: Vec<String>,
    mut tx: impl SinkExt<Message, Error = impl std::fmt::Debug> + Unpin,
    mut rx: impl StreamExt<Item = Result<Message, impl std::fmt::Debug>> + Unpin,
) {
    let run_dir = std::env::temp_dir().join(format!("fake-exec-{}", std::process::id()));
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("TMPDIR", &run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Held open to the end: a v4 server has no way to learn about EOF.
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (mut out, mut err) = (vec![0u8; 32 * 1024], vec![0u8; 32 * 1024]);
    let (mut out_done, mut err_done) = (false, false);
    loop {
        tokio::select! {
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => { let _ = stdin.write_all(&b[1..]).await; }
                Some(Ok(_)) => {}
                _ => return,
            },
            n = stdout.read(&mut out), if !out_done => match n.unwrap() {
                0 => out_done = true,
                n => tx.send(frame(1, &out[..n])).await.unwrap(),
            },
            n = stderr.read(&mut err), if !err_done => match n.unwrap() {
                0 => err_done = true,
                n => tx.send(frame(2, &err[..n])).await.unwrap(),
            },
            status = child.wait(), if out_done && err_done => {
                let code = status.unwrap().code().unwrap_or(255);
                let json = if code == 0 {
                    r#"{"status":"Success","metadata":{}}"#.to_owned()
                } else {
                    format!(r#"{{"status":"Failure","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#)
                };
                tx.send(frame(3, json.as_bytes())).await.unwrap();
                let _ = tx.close().await;
                return;
            }
        }
    }
}

fn request(command: &str) -> ExecRequest {
    ExecRequest::new(command, "/")
}

#[tokio::test]
async fn v4_server_output_and_exit_code_are_not_lost() {
    let engine = engine(Mode::V4Local).await;
    let r = engine.exec(&target(), request("echo out; echo err >&2; exit 7")).await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice(), r.stderr.as_slice()), (Some(7), &b"out\n"[..], &b"err\n"[..]));
}

#[tokio::test]
async fn v4_server_stdin_reaches_eof_without_a_close_signal() {
    let engine = engine(Mode::V4Local).await;
    let mut req = request("cat; echo done");
    req.stdin = Some(bytes::Bytes::from_static(b"hello "));
    let r = tokio::time::timeout(Duration::from_secs(30), engine.exec(&target(), req)).await.expect("no hang").unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"hello done\n"[..]));

    // A command that ignores 1 MiB of stdin still reports its status.
    let mut req = request("exit 3");
    req.stdin = Some(bytes::Bytes::from(vec![b'x'; 1 << 20]));
    let r = tokio::time::timeout(Duration::from_secs(30), engine.exec(&target(), req)).await.expect("no hang").unwrap();
    assert_eq!(r.exit_code, Some(3));
}

#[tokio::test]
async fn malformed_status_is_connection_lost_not_success() {
    let engine = engine(Mode::MalformedStatus).await;
    let e = tokio::time::timeout(Duration::from_secs(30), engine.exec(&target(), request("true")))
        .await
        .expect("no hang")
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ConnectionLost, "{}", e.message);
    assert!(e.message.contains("status"), "{}", e.message);
}

#[tokio::test]
async fn close_without_status_is_connection_lost_not_success() {
    let engine = engine(Mode::NoStatus).await;
    let e = engine.exec(&target(), request("true")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ConnectionLost, "{}", e.message);
    assert!(e.message.contains("without an exit status"), "{}", e.message);
}

#[tokio::test]
async fn failure_without_exit_code_is_an_error_with_the_status_message() {
    let engine = engine(Mode::FailureWithoutExitCode).await;
    let e = engine.exec(&target(), request("true")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal);
    assert!(e.message.contains("OCI runtime exec failed: boom"), "{}", e.message);
}

#[tokio::test]
async fn a_slow_consumer_loses_nothing_when_the_session_ends_first() {
    // The command ends (status sent) while the consumer still lags behind:
    // every chunk parked on the way must still arrive, in order.
    let engine = engine(Mode::V4Local).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let mut req = request("seq 1 1000000");
    req.output = Some(tx);
    req.max_output_bytes = 0;
    let consumer = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(chunk) = rx.recv().await {
            tokio::time::sleep(Duration::from_millis(1)).await;
            all.extend_from_slice(&chunk.data);
        }
        all
    });
    let r = engine.exec(&target(), req).await.unwrap();
    assert_eq!(r.exit_code, Some(0));
    let expected: String = (1..=1_000_000).map(|i| format!("{i}\n")).collect();
    assert!(consumer.await.unwrap() == expected.as_bytes(), "output lost or reordered");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_connection_is_connection_lost_within_the_stall_time() {
    let engine = engine_with(Mode::Silent, fast()).await;
    let started = tokio::time::Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(20), engine.exec(&target(), request("sleep 100")))
        .await
        .expect("a stall is detected, not waited out")
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ConnectionLost, "{}", e.message);
    assert!(e.message.contains("stalled"), "{}", e.message);
    // The stall time (paused time: exactly), far below the fake's 60 s of silence.
    let took = started.elapsed();
    assert!(took >= fast().stall && took < Duration::from_secs(10), "took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_command_on_a_live_connection_is_not_a_stall() {
    // Quiet for four stall periods of the default liveness; pongs keep the
    // session alive.
    let engine = engine_with(Mode::QuietThenExit, Liveness::default()).await;
    assert!(QUIET >= Liveness::default().stall * 4);
    let started = tokio::time::Instant::now();
    let r = engine.exec(&target(), request("sleep 2")).await.unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert!(started.elapsed() >= QUIET, "the fake stayed quiet for {QUIET:?}");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_exec_request_is_connection_lost_too() {
    let engine = engine_with(Mode::NoUpgrade, fast()).await;
    let e = tokio::time::timeout(Duration::from_secs(20), engine.exec(&target(), request("true")))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ConnectionLost, "{}", e.message);
    assert!(e.message.contains("did not answer the exec request"), "{}", e.message);
}
