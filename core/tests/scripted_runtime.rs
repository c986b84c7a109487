//! The engine's timing logic against a scripted in-memory runtime (a test
//! double: no processes, no sockets) under paused time, so timeouts of
//! seconds take no time and the order of events is exact: timeout → kill →
//! the output so far, abort before the first output, a status that comes
//! before the trailer, a connection lost mid-command, a trailer while the
//! session stays open. The same behaviours run for real in `local_exec.rs`
//! (local processes) and `__test__/exec.test.mjs` (the cluster).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use sandbox_core::testing::trailer::needle;
use sandbox_core::testing::wrapper::WRAPPER;
use sandbox_core::testing::{kill, Completion, ExecEngine, ExecTarget, Release, Runtime, Stdin, TunnelLimits};
use sandbox_core::{lock, Error, ErrorCode, ExecRequest, OutputChunk, Result, Stream, Tunnel};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

/// What the scripted command does, step by step.
#[derive(Clone, Debug)]
enum Step {
    Out(Stream, &'static [u8]),
    Wait(Duration),
    /// The wrapper's trailer with this status, on both streams.
    Trailer(i32),
    /// A trailer the command printed itself: it knows its run id, not the
    /// run's secret.
    ForgedTrailer(i32),
    /// The server's status frame ends the session.
    Status(i32),
    /// The connection breaks.
    Lost,
    /// Runs until a kill of this run arrives, then the shell dies of TERM.
    UntilKilled,
}

#[derive(Default)]
struct Scripted {
    steps: Vec<Step>,
    /// Run ids the engine asked to kill.
    kills: Mutex<Vec<String>>,
    /// Orphan sweeps run.
    sweeps: Mutex<usize>,
    killed: Notify,
    /// Port-forward tunnels the runtime opened.
    tunnels: Mutex<usize>,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Scripted { steps, ..Default::default() })
    }

    fn kills(&self) -> Vec<String> {
        lock(&self.kills).clone()
    }
}

/// The engine owns its runtime; the test keeps a handle to the script.
struct Handle(Arc<Scripted>);

impl Runtime for Handle {
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        output: mpsc::Sender<OutputChunk>,
        release: Release,
    ) -> BoxFuture<'a, Result<Completion>> {
        let script = self.0.clone();
        async move {
            let stdin = match stdin {
                Stdin::None => None,
                Stdin::Bytes(head) | Stdin::Stream { head, .. } => Some(head),
                Stdin::Terminal { .. } => {
                    return Err(Error::new(ErrorCode::Unsupported, "the scripted runtime has no terminal"))
                }
            };
            if argv[2] == kill::KILL {
                *lock(&script.sweeps) += usize::from(argv[4] == "sweep");
                lock(&script.kills).extend(argv[6..].iter().cloned());
                script.killed.notify_waiters();
                return Ok(Completion::Exited(0));
            }
            let id = argv[4].clone();
            // The wrapper's stdin starts with the run's secret; the engine's
            // other scripts (file calls) get only the steps' output.
            let secret = match (argv[2] == WRAPPER, &stdin) {
                (true, Some(stdin)) => {
                    String::from_utf8(stdin.split(|b| *b == b'\n').next().unwrap().to_vec()).unwrap()
                }
                (true, None) => panic!("the wrapper gets its secret on stdin"),
                (false, _) => String::new(),
            };
            let send = |stream, data: Vec<u8>| {
                let output = output.clone();
                async move { output.send(OutputChunk { stream, data: Bytes::from(data) }).await.is_ok() }
            };
            // Commands in the pod named `quick` print `hi` and end at once.
            let quick = [Step::Out(Stream::Stdout, b"hi\n"), Step::Trailer(0)];
            let steps = if target.pod == "quick" { &quick[..] } else { &script.steps[..] };
            for step in steps {
                let done = async {
                    match step {
                        Step::Out(stream, data) => {
                            send(*stream, data.to_vec()).await;
                        }
                        Step::Wait(d) => tokio::time::sleep(*d).await,
                        Step::Trailer(code) => {
                            let mut t = needle(&secret);
                            t.extend_from_slice(format!("{code}\n").as_bytes());
                            send(Stream::Stdout, t.clone()).await;
                            send(Stream::Stderr, t).await;
                        }
                        Step::ForgedTrailer(code) => {
                            let mut t = needle(&id);
                            t.extend_from_slice(format!("{code}\n").as_bytes());
                            send(Stream::Stdout, t.clone()).await;
                            send(Stream::Stderr, t).await;
                        }
                        Step::Status(code) => return Some(Ok(Completion::Exited(*code))),
                        Step::Lost => {
                            return Some(Err(Error::new(ErrorCode::ConnectionLost, "the exec connection broke")))
                        }
                        Step::UntilKilled => {
                            while !script.kills().contains(&id) {
                                script.killed.notified().await;
                            }
                            return Some(Ok(Completion::Exited(143)));
                        }
                    }
                    None
                };
                tokio::select! {
                    ended = done => if let Some(ended) = ended { return ended },
                    _ = release.requested() => return Ok(Completion::Released),
                }
            }
            release.requested().await;
            Ok(Completion::Released)
        }
        .boxed()
    }

    /// An echo server: every chunk comes back; the connection stays open
    /// after the local side's last (there is no half-close).
    fn port_forward<'a>(&'a self, _: &'a ExecTarget, _: u16, mut tunnel: Tunnel) -> BoxFuture<'a, Result<()>> {
        *lock(&self.0.tunnels) += 1;
        async move {
            while let Some(data) = tunnel.input.recv().await {
                if tunnel.output.send(OutputChunk { stream: Stream::Stdout, data }).await.is_err() {
                    return Ok(());
                }
            }
            std::future::pending().await
        }
        .boxed()
    }
}

fn engine(script: &Arc<Scripted>) -> ExecEngine {
    ExecEngine::with_runtime(Box::new(Handle(script.clone())), 8)
}

fn target() -> ExecTarget {
    pod("pod")
}

fn pod(name: &str) -> ExecTarget {
    ExecTarget { namespace: "ns".into(), pod: name.into(), container: None }
}

#[tokio::test(start_paused = true)]
async fn a_forged_trailer_does_not_end_the_exec() {
    let script = Scripted::new(vec![
        Step::ForgedTrailer(0),
        Step::Wait(Duration::from_secs(5)),
        Step::Out(Stream::Stdout, b"after"),
        Step::Trailer(7),
    ]);
    let r = engine(&script).exec(&target(), ExecRequest::new("forge", "/")).await.unwrap();
    assert_eq!(r.exit_code, Some(7));
    assert!(r.stdout.ends_with(b"after") && r.stdout.len() > 5, "the forged trailer is output: {:?}", r.stdout);
}

#[tokio::test(start_paused = true)]
async fn one_sandbox_cannot_hold_every_slot() {
    // Two slots per sandbox out of four: six never-ending commands of one
    // sandbox take two; another sandbox's command runs at once.
    let script = Scripted::new(vec![Step::UntilKilled]);
    let engine = ExecEngine::with_shares(Box::new(Handle(script.clone())), 4, 2);
    let mut hung = Vec::new();
    for _ in 0..6 {
        let engine = engine.clone();
        hung.push(tokio::spawn(async move { engine.exec(&pod("a"), ExecRequest::new("cat fifo", "/")).await }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let r = engine.exec(&pod("quick"), ExecRequest::new("echo hi", "/")).await.unwrap();
    assert_eq!(r.stdout, b"hi\n");
    assert_eq!(started.elapsed(), Duration::ZERO, "served at once, no slot to wait for");
    // Without the share, the six would have held every slot.
    let unfair = ExecEngine::with_runtime(Box::new(Handle(script.clone())), 4);
    for _ in 0..4 {
        let unfair = unfair.clone();
        hung.push(tokio::spawn(async move { unfair.exec(&pod("a"), ExecRequest::new("cat fifo", "/")).await }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let quick = pod("quick");
    let waited = tokio::time::timeout(Duration::from_secs(60), unfair.exec(&quick, ExecRequest::new("x", "/"))).await;
    assert!(waited.is_err(), "the control: every slot held");
    for h in hung {
        h.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_kills_the_command_and_keeps_the_output_so_far() {
    let script = Scripted::new(vec![Step::Out(Stream::Stdout, b"partial\n"), Step::UntilKilled]);
    let mut req = ExecRequest::new("sleep 100", "/");
    req.timeout = Some(Duration::from_secs(10));
    let started = Instant::now();
    let r = engine(&script).exec(&target(), req).await.unwrap();
    assert!(r.timed_out && r.exit_code.is_none(), "{r:?}");
    assert_eq!(r.stdout, b"partial\n");
    assert_eq!(script.kills().len(), 1, "one kill of the run");
    // The deadline, plus no more than the engine's short drain after the kill.
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(10) && took <= Duration::from_secs(12), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn an_abort_before_any_output_kills_and_fails_with_aborted() {
    let script = Scripted::new(vec![Step::Wait(Duration::from_secs(5)), Step::UntilKilled]);
    let req = ExecRequest::new("sleep 100", "/");
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let e = engine(&script).exec(&target(), req).await.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::Aborted, "aborted"));
    assert_eq!(script.kills().len(), 1, "the command is killed, not left running");
}

#[tokio::test(start_paused = true)]
async fn a_status_before_the_trailer_is_the_authority() {
    // A wrapper killed by a signal writes no trailer; the status says 137.
    let script = Scripted::new(vec![Step::Out(Stream::Stdout, b"x"), Step::Status(137)]);
    let r = engine(&script).exec(&target(), ExecRequest::new("kill -9 $$", "/")).await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(137), &b"x"[..]));
    assert!(script.kills().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lost_connection_fails_the_exec_and_kills_the_command() {
    let script = Scripted::new(vec![Step::Out(Stream::Stdout, b"x"), Step::Wait(Duration::from_secs(1)), Step::Lost]);
    let e = engine(&script).exec(&target(), ExecRequest::new("sleep 100", "/")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ConnectionLost, "{}", e.message);
    assert_eq!(script.kills().len(), 1, "pods/exec leaves the command running: the engine kills it");
}

#[tokio::test(start_paused = true)]
async fn the_trailer_ends_the_exec_while_the_session_stays_open() {
    // `server &` keeps the streams open after the shell exits.
    let script = Scripted::new(vec![
        Step::Out(Stream::Stdout, b"started\n"),
        Step::Trailer(0),
        Step::Out(Stream::Stdout, b"the child's later output\n"),
        Step::Wait(Duration::from_secs(3600)),
    ]);
    let started = Instant::now();
    let r = engine(&script).exec(&target(), ExecRequest::new("server & echo started", "/")).await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"started\n"[..]));
    assert!(started.elapsed() < Duration::from_secs(1), "returned at the trailer, not the hour");
    assert!(script.kills().is_empty(), "the child is left running");
}

/// A runtime whose every run waits for `open`, counting the runs in flight
/// (now, most at once).
struct Gate {
    open: tokio::sync::Semaphore,
    in_flight: Mutex<(usize, usize)>,
}

struct GateHandle(Arc<Gate>);

impl Runtime for GateHandle {
    fn run<'a>(
        &'a self,
        _: &'a ExecTarget,
        _: Vec<String>,
        _: Stdin,
        _: mpsc::Sender<OutputChunk>,
        _: Release,
    ) -> BoxFuture<'a, Result<Completion>> {
        let gate = self.0.clone();
        async move {
            {
                let mut counts = gate.in_flight.lock().unwrap();
                counts.0 += 1;
                counts.1 = counts.1.max(counts.0);
            }
            let _pass = gate.open.acquire().await.unwrap();
            gate.in_flight.lock().unwrap().0 -= 1;
            Ok(Completion::Exited(0))
        }
        .boxed()
    }
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_storm_sweeps_sixteen_sandboxes_at_a_time() {
    // Every connect sweeps its sandbox over one exec connection: forty
    // connects at once hold sixteen, whatever maxConcurrentExecs allows.
    let gate = Arc::new(Gate { open: tokio::sync::Semaphore::new(0), in_flight: Mutex::default() });
    let engine = ExecEngine::with_runtime(Box::new(GateHandle(gate.clone())), 256);
    let sweeps: Vec<_> = (0..40)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.sweep_orphans(&pod(&format!("p{i}"))).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*gate.in_flight.lock().unwrap(), (16, 16));
    gate.open.add_permits(1_000);
    for sweep in sweeps {
        sweep.await.unwrap().unwrap();
    }
    assert_eq!(*gate.in_flight.lock().unwrap(), (0, 16), "all forty swept, never more than sixteen at once");
}

#[tokio::test(start_paused = true)]
async fn a_connect_sweeps_a_pod_again_only_where_something_may_have_been_left() {
    let script = Scripted::new(vec![Step::UntilKilled]);
    let engine = engine(&script);
    let (a, b) = (pod("a"), pod("b"));
    let sweeps = || *lock(&script.sweeps);
    // `ours`: the Sandbox names this engine as the last to take it over.
    assert!(engine.sweep_on_connect(&a, Some("uid-1"), false, true).await.unwrap(), "this engine's first connect");
    assert!(!engine.sweep_on_connect(&a, Some("uid-1"), false, true).await.unwrap(), "nothing left behind since");
    assert!(engine.sweep_on_connect(&a, Some("uid-1"), false, false).await.unwrap(), "another process took it over");
    assert!(engine.sweep_on_connect(&a, Some("uid-2"), false, true).await.unwrap(), "another pod of the name");
    assert!(!engine.sweep_on_connect(&b, Some("uid-3"), true, false).await.unwrap(), "a new pod");
    assert!(!engine.sweep_on_connect(&b, Some("uid-3"), false, true).await.unwrap(), "seen new, nothing since");
    assert!(engine.sweep_on_connect(&b, None, false, true).await.unwrap(), "no UID to go by");
    assert_eq!(sweeps(), 4);
    // A command that ends leaves nothing; one dropped while it runs may.
    let r = engine.exec(&pod("quick"), ExecRequest::new("echo hi", "/")).await.unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert!(!engine.sweep_on_connect(&b, Some("uid-3"), false, true).await.unwrap());
    let running = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.exec(&pod("c"), ExecRequest::new("sleep 1000", "/")).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    assert!(engine.sweep_on_connect(&b, Some("uid-3"), false, true).await.unwrap(), "a run was left behind");
    assert!(engine.sweep_on_connect(&a, Some("uid-2"), false, true).await.unwrap(), "in any pod: every pod again");
    assert!(!engine.sweep_on_connect(&a, Some("uid-2"), false, true).await.unwrap());
    assert_eq!(sweeps(), 6, "each true above ran a sweep");
}

/// The local side of a tunnel: what it writes, what it reads, and the
/// tunnel to hand the engine.
fn local_side() -> (mpsc::Sender<Bytes>, mpsc::Receiver<OutputChunk>, Tunnel) {
    let (input, input_rx) = mpsc::channel(4);
    let (output, output_rx) = mpsc::channel(4);
    let (_, paused) = watch::channel(false);
    (input, output_rx, Tunnel { input: input_rx, output, paused })
}

#[tokio::test(start_paused = true)]
async fn tunnels_take_slots_of_their_own_shared_out_per_sandbox() {
    let script = Scripted::new(vec![]);
    let limits = TunnelLimits { max: 3, per_sandbox: 2, idle: Duration::from_secs(600) };
    // One exec slot in all: a tunnel taking it would block the exec below.
    let engine = ExecEngine::with_shares(Box::new(Handle(script.clone())), 1, 1).with_tunnel_limits(limits);
    let wait = Duration::from_secs(30);
    let open = |name: &'static str| {
        let (input, output, tunnel) = local_side();
        let engine = engine.clone();
        (input, output, tokio::spawn(async move { engine.port_forward(&pod(name), 80, tunnel, wait).await }))
    };
    let held = [open("a"), open("a")];
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*lock(&script.tunnels), 2);
    // A third to the same sandbox waits for its share, then fails with
    // nothing opened.
    let started = Instant::now();
    let (_input, _output, tunnel) = local_side();
    let e = engine.port_forward(&pod("a"), 80, tunnel, wait).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    assert!(e.message.contains("maxTunnelsPerSandbox"), "{e}");
    assert_eq!(started.elapsed(), wait);
    assert_eq!(*lock(&script.tunnels), 2);
    // Another sandbox's tunnel opens and carries bytes at once, and the
    // engine's one exec slot is free.
    let started = Instant::now();
    let (input, mut output, b) = open("b");
    input.send(Bytes::from_static(b"ping")).await.unwrap();
    assert_eq!(output.recv().await.unwrap().data, Bytes::from_static(b"ping"));
    let r = engine.exec(&pod("quick"), ExecRequest::new("echo hi", "/")).await.unwrap();
    assert_eq!(r.stdout, b"hi\n");
    assert_eq!(started.elapsed(), Duration::ZERO);
    // The provider's three are taken: a fourth sandbox waits too.
    let (_input, _output, tunnel) = local_side();
    assert!(engine.port_forward(&pod("c"), 80, tunnel, wait).await.is_err());
    // A closed tunnel gives its slot back.
    b.abort();
    let _ = b.await;
    let (input, mut output, _c) = open("c");
    input.send(Bytes::from_static(b"c")).await.unwrap();
    assert_eq!(output.recv().await.unwrap().data, Bytes::from_static(b"c"));
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_tunnel_that_moves_no_byte_for_the_idle_timeout_is_closed() {
    let script = Scripted::new(vec![]);
    let idle = Duration::from_secs(10);
    let engine = ExecEngine::with_runtime(Box::new(Handle(script)), 1).with_tunnel_limits(TunnelLimits {
        max: 1,
        per_sandbox: 1,
        idle,
    });
    let (input, mut output, tunnel) = local_side();
    let started = Instant::now();
    let carried = tokio::spawn({
        let engine = engine.clone();
        async move { engine.port_forward(&pod("a"), 80, tunnel, idle).await }
    });
    // Bytes more often than the timeout keep it open...
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(8)).await;
        input.send(Bytes::from_static(b"x")).await.unwrap();
        assert_eq!(output.recv().await.unwrap().data, Bytes::from_static(b"x"));
    }
    // ...then silence closes it, one timeout after the last byte, and its
    // slot is free again.
    let e = carried.await.unwrap().unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    assert!(e.message.contains("tunnelIdleTimeoutMs"), "{e}");
    assert_eq!(started.elapsed(), Duration::from_secs(34));
    let (input, mut output, tunnel) = local_side();
    let again = tokio::spawn(async move { engine.port_forward(&pod("a"), 80, tunnel, Duration::ZERO).await });
    input.send(Bytes::from_static(b"y")).await.unwrap();
    assert_eq!(output.recv().await.unwrap().data, Bytes::from_static(b"y"));
    again.abort();
}
