//! The exec engine: user commands with cwd, env, stdin, timeout, abort and
//! process-tree kill on top of a [`Runtime`], plus the orphan sweep and the
//! per-engine concurrency cap.
//!
//! One entry point, [`ExecEngine::run`], runs everything: a [`Program`] (a
//! shell command line, or the argv of one of the engine's scripts) with
//! [`RunOptions`], its output into a [`Sink`], ending in an [`Exit`]. Every
//! shell command goes through the wrapper ([`super::wrapper`]); the engine
//! strips its trailers ([`super::trailer`]) and ends the exec there, so a
//! command returns when its own process exits even if a child it left in
//! the background still holds stdout open.
//!
//! Cancel safety: dropping an `exec` future closes its connection but does
//! not kill the command (only an explicit abort or timeout does); it keeps
//! running until it exits or the next connect's orphan sweep.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::kill;
use super::output::{HeadBuffer, OutputChunk};
use super::permits::{Permits, Slot};
use super::relay::{self, LocalSide, Relays, Replay};
use super::request::{Call, ExecRequest, ExecResult, Exit};
use super::runs::{RunGuard, Runs, Snapshot};
use super::runtime::{Release, Runtime, Stdin, TerminalInput, TerminalSize, Tunnel};
use super::sink::{Collector, Flow, ScriptOutput, Sink, TerminalStart, Wrapped};
use super::status::Completion;
use super::websocket::PodExecRuntime;
use super::wrapper::{self, CommandStdin, NotRun, Shell, WrapperCall, WrapperEnd};
use super::ExecTarget;
use crate::args::TunnelLimits;
use crate::error::{shorten, Error, ErrorCode, Result};
use crate::sync::lock;
use crate::trace;

/// Chunks buffered between the runtime and a consumer (one WebSocket frame each).
const CHANNEL_DEPTH: usize = 16;
/// Upper bound for a kill exec (TERM, 2 s grace, KILL, plus connection setup).
const KILL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long to keep collecting output once the kill has finished.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);
/// Long-lived runs (followers, waits) in flight at once, and per sandbox.
/// They last as long as a process, so they have slots of their own and
/// cannot take the ones of calls.
const MAX_LONG_RUNS: usize = 256;
const MAX_LONG_RUNS_PER_SANDBOX: usize = 32;
/// Upper bound of the orphan sweep (it reads `/proc`, nothing that blocks).
const SWEEP_TIMEOUT: Duration = Duration::from_secs(60);
/// Pods whose last sweep an engine remembers (see
/// [`ExecEngine::sweep_on_connect`]): about 100 bytes each.
const SWEPT_REMEMBERED: usize = 4096;
/// Orphan sweeps in flight at once (one per sandbox). Every connect sweeps,
/// so a worker reconnecting hundreds of actors would otherwise hold one API
/// connection per connect in flight; the sweeps beyond this wait their turn.
const MAX_SWEEPS: usize = 16;

/// Runs commands in pods. Cheap to clone; one per provider.
#[derive(Clone)]
pub struct ExecEngine {
    inner: Arc<Inner>,
    /// Port-forward tunnels: slots of their own (each one is an API server
    /// connection for as long as it is open, as a command's exec is, but
    /// must not take the slots of commands), and the idle timeout.
    tunnels: Arc<Tunnels>,
    /// Commands also go into the exec request's URL (see
    /// [`ExecEngine::with_commands_in_audit_log`]).
    audit: bool,
}

struct Inner {
    runtime: Box<dyn Runtime>,
    /// Commands and the engine's scripts.
    calls: Permits,
    /// Followers and waits.
    long: Permits,
    /// Orphan sweeps, which also take a slot of `calls`.
    sweeps: Permits,
    runs: Arc<Runs>,
    /// Pods (`namespace/name`) this engine swept or saw new (see
    /// [`ExecEngine::sweep_on_connect`]).
    swept: Mutex<HashMap<String, Swept>>,
}

struct Tunnels {
    permits: Permits,
    idle: Duration,
    /// Connections the node cannot carry go through these.
    relays: Relays,
}

impl Tunnels {
    fn new(limits: TunnelLimits) -> Arc<Self> {
        Arc::new(Tunnels {
            permits: Permits::new(limits.max, limits.per_sandbox),
            idle: limits.idle,
            relays: Relays::new(limits.max),
        })
    }
}

/// A pod as this engine last swept it or saw it new.
struct Swept {
    /// Its UID then: a pod recreated under the same name is another pod.
    pod_uid: String,
    /// [`Runs::left_behind`] then: a run left behind since may have left
    /// processes in it.
    left_behind: u64,
}

impl std::fmt::Debug for ExecEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecEngine").field("instance", &self.inner.runs.instance()).finish_non_exhaustive()
    }
}

/// What [`ExecEngine::run`] starts.
pub(crate) enum Program<'a> {
    /// A shell command line, run by the wrapper (see [`wrapper::WRAPPER`])
    /// in its cwd with its env: a timeout or an abort kills its tree (the
    /// run then ends [`Exit::TIMED_OUT`], or fails `aborted`), so does a
    /// lost connection, and the orphan sweep finds it after a crash. User
    /// commands, terminals, transfers, and the followers (see
    /// [`wrapper::ScriptCommand`]).
    Shell(Shell<'a>),
    /// `/bin/sh -c <script> sh <args…>` as the exec's own argv (see
    /// [`wrapper::script_argv`]): one of the engine's short scripts. A
    /// timeout fails the run with `timeout` and an abort with `aborted` at
    /// once, closing the connection; the script ends by itself in the pod.
    Argv(Vec<String>),
}

/// How [`ExecEngine::run`] runs a [`Program`].
pub(crate) struct RunOptions {
    /// What it reads.
    pub stdin: Input,
    /// How long it may take, waiting for a slot included; `None`: no limit.
    pub timeout: Option<Duration>,
    /// Cancelling stops it (see [`Program`] for how).
    pub cancel: CancellationToken,
    /// Which slots it takes.
    pub slots: Slots,
}

impl RunOptions {
    /// A call of one of the engine's scripts (see [`Call`]) with `stdin`
    /// (`None` or empty: nothing).
    pub(crate) fn call(call: &Call, stdin: Option<Bytes>) -> Self {
        RunOptions { stdin: stdin.into(), timeout: call.timeout, cancel: call.cancel.clone(), slots: Slots::Calls }
    }
}

/// Which concurrency slots a run takes.
pub(crate) enum Slots {
    /// One of `maxConcurrentExecs` (commands and the engine's scripts).
    Calls,
    /// A follower or a wait: it lasts as long as a process, so it takes a
    /// slot of its own class instead, and a few of them cannot starve every
    /// other call.
    LongLived,
    /// A slot of the orphan sweeps' (see [`MAX_SWEEPS`]), then one of
    /// `Calls`.
    Sweep,
    /// None: a kill, which must not queue behind the commands it stops.
    Exempt,
}

/// What a [`Program`] reads.
pub(crate) enum Input {
    /// Nothing (`/dev/null`).
    None,
    /// These bytes, then EOF.
    Bytes(Bytes),
    /// A stream: the command reads the exec's own stdin and must know where
    /// its input ends (no EOF comes); the transfer scripts frame it.
    Stream(mpsc::Receiver<Bytes>),
    /// A terminal (see [`TerminalCommand`]); a [`Program::Shell`] only.
    Terminal(TerminalCommand),
}

impl From<Option<Bytes>> for Input {
    /// Empty bytes are no stdin.
    fn from(bytes: Option<Bytes>) -> Self {
        bytes.filter(|b| !b.is_empty()).map_or(Input::None, Input::Bytes)
    }
}

/// A command's terminal: the command runs on a TTY of `size`, its input
/// comes from `input` once it runs, and `started` learns it then. The
/// wrapper's handshake (see [`wrapper::WRAPPER`]) is the engine's: the
/// caller sees only the command's own output.
pub(crate) struct TerminalCommand {
    pub size: TerminalSize,
    pub input: mpsc::Receiver<TerminalInput>,
    pub started: oneshot::Sender<TerminalStarted>,
}

/// A terminal's command has started.
pub(crate) struct TerminalStarted {
    /// Its run id (what a kill of the terminal names).
    pub run: String,
    /// The pid of its wrapper, the terminal's session leader.
    pub pid: u32,
}

impl ExecEngine {
    /// An engine over pods/exec with at most `max_concurrent_execs` commands
    /// and file operations in flight, `per_sandbox` of them in one pod
    /// (kills are exempt, so they cannot queue behind the commands they
    /// stop). Exec bypasses API Priority and Fairness, so this cap is the
    /// only one.
    pub fn new(
        client: kube::Client,
        pods: crate::client::informer::Informer<k8s_openapi::api::core::v1::Pod>,
        max_concurrent_execs: usize,
        per_sandbox: usize,
    ) -> Self {
        Self::with_shares(Box::new(PodExecRuntime::new(client, pods)), max_concurrent_execs, per_sandbox)
    }

    /// An engine over any [`Runtime`], one sandbox may use every slot.
    pub fn with_runtime(runtime: Box<dyn Runtime>, max_concurrent_execs: usize) -> Self {
        Self::with_shares(runtime, max_concurrent_execs, max_concurrent_execs)
    }

    /// An engine over any [`Runtime`] with a per-sandbox share of the slots
    /// (see the `permits` module).
    pub fn with_shares(runtime: Box<dyn Runtime>, max_concurrent_execs: usize, per_sandbox: usize) -> Self {
        ExecEngine {
            inner: Arc::new(Inner {
                runtime,
                calls: Permits::new(max_concurrent_execs, per_sandbox),
                long: Permits::new(MAX_LONG_RUNS, MAX_LONG_RUNS_PER_SANDBOX),
                sweeps: Permits::new(MAX_SWEEPS, 1),
                runs: Runs::new(),
                swept: Mutex::default(),
            }),
            tunnels: Tunnels::new(TunnelLimits::default()),
            audit: false,
        }
    }

    /// The caps of port-forward tunnels (default: [`TunnelLimits::default`]).
    pub fn with_tunnel_limits(mut self, limits: TunnelLimits) -> Self {
        self.tunnels = Tunnels::new(limits);
        self
    }

    /// Also puts each command's text (never env values) into the exec
    /// request's URL, where the API server's audit log records it; by
    /// default commands travel on stdin (see [`wrapper::WRAPPER`]).
    pub fn with_commands_in_audit_log(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// Whether commands go into the exec URL too.
    pub(crate) fn audit_commands(&self) -> bool {
        self.audit
    }

    /// Runs a user command (see [`ExecRequest`]).
    ///
    /// Invalid requests fail with `invalid_request` before anything runs
    /// (`reattach` too: only `Sandbox::exec` can follow a spawned process).
    /// A cancelled token fails with `aborted` at once. Timeout and abort
    /// kill the command's process tree (TERM, 2 s, KILL) with a second exec
    /// and wait for it; a dropped connection does the same and fails with
    /// `connection_lost`. The result comes when the command's own process
    /// exits; children it left running keep running.
    pub async fn exec(&self, target: &ExecTarget, request: ExecRequest) -> Result<ExecResult> {
        let ExecRequest { command, cwd, env, timeout, stdin, max_output_bytes, output, cancel, reattach } = request;
        if reattach {
            return Err(Error::invalid_request(
                "reattach: the engine alone cannot follow a spawned process; nothing was run",
            ));
        }
        let mut collector = Collector::new(max_output_bytes, output);
        let program = Program::Shell(Shell { command: &command, cwd: &cwd, env: &env });
        let options = RunOptions { stdin: stdin.into(), timeout, cancel, slots: Slots::Calls };
        let exit = self.run(target, program, options, &mut collector).await?;
        Ok(collector.result(exit))
    }

    /// Runs `program` in `target`, handing its output to `sink` (for a
    /// [`Program::Shell`], without the wrapper's trailers), and resolves how
    /// it ended. The one way anything runs in a pod.
    pub(crate) async fn run(
        &self,
        target: &ExecTarget,
        program: Program<'_>,
        options: RunOptions,
        sink: &mut impl Sink,
    ) -> Result<Exit> {
        match program {
            Program::Shell(shell) => self.run_shell(target, shell, options, sink).await,
            Program::Argv(argv) => self.run_argv(target, argv, options, sink).await,
        }
    }

    /// [`Program::Shell`]: records the run, then runs it through the wrapper.
    async fn run_shell(
        &self,
        target: &ExecTarget,
        shell: Shell<'_>,
        options: RunOptions,
        sink: &mut impl Sink,
    ) -> Result<Exit> {
        let run = self.inner.runs.start();
        if !trace::enabled() {
            return self.run_started(target, run, shell, options, sink).await;
        }
        let id = run.id.clone();
        let names: Vec<&str> = shell.env.iter().map(|(name, _)| name.as_str()).collect();
        trace!(
            "exec {id} in {}/{}: start ({} command bytes, {} stdin bytes, env {names:?}, cwd {:?})",
            target.namespace,
            target.pod,
            shell.command.len(),
            match &options.stdin {
                Input::Bytes(bytes) => bytes.len(),
                _ => 0,
            },
            shell.cwd
        );
        let start = Instant::now();
        let end = self.run_started(target, run, shell, options, sink).await;
        let how = match &end {
            Ok(Exit { exit_code: Some(code), .. }) => format!("exit {code}"),
            Ok(Exit { timed_out: true, .. }) => "timed out, killed".to_owned(),
            Ok(_) => "released".to_owned(),
            Err(e) => format!("failed: {}", e.code),
        };
        trace!("exec {id}: {how} after {} ms", start.elapsed().as_millis());
        end
    }

    /// [`ExecEngine::run_shell`] for a run already recorded.
    async fn run_started(
        &self,
        target: &ExecTarget,
        mut run: RunGuard,
        shell: Shell<'_>,
        options: RunOptions,
        sink: &mut impl Sink,
    ) -> Result<Exit> {
        let RunOptions { stdin, timeout, cancel, slots } = options;
        let reads = match &stdin {
            Input::None => CommandStdin::None,
            Input::Bytes(bytes) => CommandStdin::Bytes(bytes.len()),
            Input::Stream(_) => CommandStdin::Stream,
            Input::Terminal(terminal) => CommandStdin::Terminal(terminal.size),
        };
        let WrapperCall { argv, mut stdin_prefix } =
            wrapper::wrapper_argv(&run.id, &run.secret, &shell, reads, run.cleanup_bound, self.audit)?;
        // A terminal's wrapper gets its prefix once it has said it takes it
        // raw (`TerminalStart`), then the caller's input; every other
        // wrapper gets it at once, ahead of the command's bytes or stream.
        let (stdin, feed, start) = match stdin {
            Input::None => (Stdin::Bytes(Bytes::from(stdin_prefix)), None, None),
            Input::Bytes(bytes) => {
                stdin_prefix.extend_from_slice(&bytes);
                (Stdin::Bytes(Bytes::from(stdin_prefix)), None, None)
            }
            Input::Stream(rest) => (Stdin::Stream { head: Bytes::from(stdin_prefix), rest }, None, None),
            Input::Terminal(TerminalCommand { size, input, started }) => {
                let (tx, rx) = mpsc::channel(1);
                let (ready, start) = TerminalStart::new(run.id.clone(), started);
                let feed = feed(Bytes::from(stdin_prefix), input, tx, ready);
                (Stdin::Terminal { size, input: rx }, Some(feed), Some(start))
            }
        };
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let _slot = tokio::select! {
            slot = self.acquire(&slots, target) => slot,
            () = cancel.cancelled() => return Err(aborted()),
            () = sleep_until(deadline) => return Ok(Exit::TIMED_OUT),
        };

        let release = Release::new();
        let mut wrapped = Wrapped::new(&run.secret, sink, release.clone(), start);
        // `None`: the engine stopped the run (abort or timeout) and killed
        // its tree.
        let mut aborted_first = false;
        run.set_in_flight(true);
        let ended = {
            let work = self.run_with(target, argv, stdin, release, |rx| wrapped.consume(rx));
            let work = async {
                let Some(feed) = feed else { return work.await };
                tokio::select! {
                    ended = work => ended,
                    () = feed.then(|()| std::future::pending()) => unreachable!("feeding never ends the run"),
                }
            };
            tokio::pin!(work);
            let ended = tokio::select! {
                ended = &mut work => Some(ended),
                () = cancel.cancelled() => None,
                () = sleep_until(deadline) => None,
            };
            if ended.is_none() {
                aborted_first = cancel.is_cancelled();
                // Keep collecting while the tree dies, so the result has
                // the output written up to the kill (the wrapper's
                // trailer then ends the session).
                let kill = self.kill(target, &run.id);
                tokio::pin!(kill);
                tokio::select! {
                    _ = &mut work => kill.await,
                    () = &mut kill => { let _ = tokio::time::timeout(DRAIN_AFTER_KILL, &mut work).await; }
                }
            }
            ended
        };
        // Its end or its kill's outcome is known (a kill that failed counts
        // itself as left behind).
        run.set_in_flight(false);
        match ended {
            None if aborted_first => Err(aborted()),
            None => Ok(Exit::TIMED_OUT),
            // A terminal whose wrapper ended before its command started,
            // without saying why (its `stty` failed, say).
            Some(Ok(_)) if wrapped.start().is_some() && wrapped.said().is_none() => {
                let said = String::from_utf8_lossy(wrapped.start().map_or(&[][..], TerminalStart::held)).into_owned();
                Err(Error::new(
                    ErrorCode::Unsupported,
                    format!(
                        "the sandbox could not set up a terminal (does its image have stty?): {}",
                        shorten(said.trim())
                    ),
                ))
            }
            Some(ended) => self.finish(target, &run.id, shell.cwd, ended, wrapped.said(), wrapped.sink_done()).await,
        }
    }

    /// [`Program::Argv`]: the script as the exec's own process.
    async fn run_argv(
        &self,
        target: &ExecTarget,
        argv: Vec<String>,
        options: RunOptions,
        sink: &mut impl Sink,
    ) -> Result<Exit> {
        let RunOptions { stdin, timeout, cancel, slots } = options;
        let stdin = match stdin {
            Input::None => Stdin::None,
            Input::Bytes(bytes) => Stdin::Bytes(bytes),
            Input::Stream(rest) => Stdin::Stream { head: Bytes::new(), rest },
            Input::Terminal(_) => return Err(Error::internal("a terminal runs a shell command, not a script")),
        };
        let release = Release::new();
        let work = async {
            let _slot = self.acquire(&slots, target).await;
            self.run_with(target, argv, stdin, release.clone(), |rx| forward(rx, sink, &release)).await
        };
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let ended = tokio::select! {
            ended = work => ended?,
            () = cancel.cancelled() => return Err(aborted()),
            () = sleep_until(timeout.map(|t| Instant::now() + t)) => return Err(Error::new(
                ErrorCode::Timeout,
                format!(
                    "the call did not finish within {} ms (its timeoutMs, or the provider's callTimeoutMs)",
                    timeout.unwrap_or_default().as_millis()
                ),
            )),
        };
        match ended {
            Completion::Exited(code) => Ok(Exit::code(code)),
            Completion::Released => Ok(Exit::RELEASED),
            Completion::Failed(message) => {
                Err(Error::internal(format!("the container runtime failed the exec: {message}")))
            }
        }
    }

    /// The slots of the class `slots` names, once they are free. Cancel
    /// safe: dropping the future gives back what it took.
    async fn acquire(&self, slots: &Slots, target: &ExecTarget) -> [Option<Slot>; 2] {
        match slots {
            Slots::Calls => [Some(self.inner.calls.acquire(target).await), None],
            Slots::LongLived => [Some(self.inner.long.acquire(target).await), None],
            Slots::Sweep => {
                let sweep = self.inner.sweeps.acquire(target).await;
                [Some(sweep), Some(self.inner.calls.acquire(target).await)]
            }
            Slots::Exempt => [None, None],
        }
    }

    /// This engine's instance id: in its run ids, and what marks a Sandbox
    /// as taken over by it.
    pub fn instance(&self) -> &str {
        self.inner.runs.instance()
    }

    /// Carries one TCP connection to `port` of `target` (see
    /// [`Runtime::port_forward`]) in a tunnel slot: not a command's (a
    /// tunnel storm leaves commands their slots), but shared out per
    /// sandbox the same way (see the `permits` module). Waits up to `wait`
    /// for one, else fails `timeout`. A tunnel that moves no byte either way
    /// for the idle timeout (a paused reader included) fails `timeout`.
    pub async fn port_forward(&self, target: &ExecTarget, port: u16, tunnel: Tunnel, wait: Duration) -> Result<()> {
        let tunnels = &self.tunnels;
        let Ok(_slot) = tokio::time::timeout(wait, tunnels.permits.acquire(target)).await else {
            return Err(Error::new(
                ErrorCode::Timeout,
                format!(
                    "no tunnel to port {port} could open within {} ms (callTimeoutMs): the sandbox's other tunnels \
                     hold its maxTunnelsPerSandbox, or the provider's hold maxTunnels",
                    wait.as_millis()
                ),
            ));
        };
        let Tunnel { mut input, output, paused } = tunnel;
        let moved = &Notify::new();
        let relays = &self.tunnels.relays;
        let carried = async {
            // The node first, unless only the relay reached this sandbox.
            let (head, node) = if relays.only_route(target) {
                (Bytes::new(), None)
            } else {
                let mut replay = Replay::default();
                match self.forward_by_node(target, port, &mut input, &output, paused.clone(), moved, &mut replay).await
                {
                    Err(e) if relay::worth_relaying(&e) => match replay.take() {
                        Some(head) => (head, Some(e)),
                        None => return Err(e),
                    },
                    ended => return ended,
                }
            };
            let local = LocalSide { head, input: &mut input, output: &output, paused, moved };
            relay::relay(&*self.inner.runtime, relays, target, port, local, node).await
        };
        let idle = async { while tokio::time::timeout(tunnels.idle, moved.notified()).await.is_ok() {} };
        tokio::select! {
            ended = carried => ended,
            () = idle => Err(Error::new(
                ErrorCode::Timeout,
                format!(
                    "the tunnel to port {port} moved no byte for {} ms (tunnelIdleTimeoutMs) and was closed",
                    tunnels.idle.as_millis()
                ),
            )),
        }
    }

    /// One connection through the runtime's own port-forward. What the
    /// client sends is recorded in `replay` until the port answers, so a
    /// relay can send it again when the node fails.
    #[allow(clippy::too_many_arguments)]
    async fn forward_by_node(
        &self,
        target: &ExecTarget,
        port: u16,
        input: &mut mpsc::Receiver<Bytes>,
        output: &mpsc::Sender<OutputChunk>,
        paused: watch::Receiver<bool>,
        moved: &Notify,
        replay: &mut Replay,
    ) -> Result<()> {
        // The runtime's ends of the tunnel go through copies that note
        // every byte moved, which the idle timer waits for.
        let (to_port, input_rx) = mpsc::channel(1);
        let (output_tx, mut from_port) = mpsc::channel(1);
        let answered = &AtomicBool::new(false);
        let carried =
            self.inner.runtime.port_forward(target, port, Tunnel { input: input_rx, output: output_tx, paused });
        let outbound = async move {
            while let Some(data) = input.recv().await {
                moved.notify_one();
                // Recorded before it is sent: a send the node's failure
                // interrupts is replayed all the same.
                if answered.load(Ordering::Relaxed) {
                    replay.spend();
                } else {
                    replay.record(&data);
                }
                if to_port.send(data).await.is_err() {
                    break;
                }
            }
        };
        // Ends once the runtime's side ended, or when the local side closed
        // (the port may be silent: waiting for its next byte could take
        // until the idle timeout). Dropping `from_port` ends the runtime's
        // run too.
        let inbound = async move {
            loop {
                let chunk = tokio::select! {
                    chunk = from_port.recv() => chunk,
                    () = output.closed() => return,
                };
                let Some(chunk) = chunk else { return };
                moved.notify_one();
                answered.store(true, Ordering::Relaxed);
                if output.send(chunk).await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            (ended, ()) = futures::future::join(carried, inbound) => ended,
            // The local side's end is no end of the connection (no half-close).
            () = outbound.then(|()| std::future::pending()) => unreachable!("the outbound copy never completes"),
        }
    }

    /// Kills every process tree recorded in the pod that is not a live
    /// command of this engine: left behind by a crashed or killed host
    /// process, or by a connection whose kill failed. Called on connect (see
    /// [`ExecEngine::sweep_on_connect`]) so a resumed session never shares
    /// the workspace with an orphan.
    pub async fn sweep_orphans(&self, target: &ExecTarget) -> Result<()> {
        let Snapshot { next, live } = self.inner.runs.snapshot();
        let argv = kill::sweep_argv(self.inner.runs.instance(), next, &live);
        let mut out = ScriptOutput::new(|_| Ok(()));
        let options = RunOptions { slots: Slots::Sweep, ..RunOptions::call(&Call::within(SWEEP_TIMEOUT), None) };
        let exit = self.run(target, Program::Argv(argv), options, &mut out).await?;
        script_status(exit, "the orphan sweep", out.into_stderr())
    }

    /// The orphan sweep of a connect to the pod of UID `pod_uid`: none where
    /// nothing can have been left there, that is when the pod is `new` (just
    /// created or resumed: no exec ran in it), or when no other process has
    /// taken it over since this engine did (`ours`: the claim or Sandbox the
    /// id names says so, see `names::SWEPT_BY_ANNOTATION`) and this engine
    /// swept or saw new the same pod with no run of its own left behind
    /// since (dropped while running, or not confirmed killed). Returns
    /// whether it swept.
    pub async fn sweep_on_connect(
        &self,
        target: &ExecTarget,
        pod_uid: Option<&str>,
        new: bool,
        ours: bool,
    ) -> Result<bool> {
        let key = format!("{}/{}", target.namespace, target.pod);
        let left_behind = self.inner.runs.left_behind();
        let clean = new
            || ours
                && pod_uid.is_some_and(|uid| {
                    lock(&self.inner.swept).get(&key).is_some_and(|s| s.pod_uid == uid && s.left_behind == left_behind)
                });
        if !clean {
            self.sweep_orphans(target).await?;
        }
        if let Some(uid) = pod_uid {
            let mut swept = lock(&self.inner.swept);
            // One entry per sandbox this engine connected to: a worker that
            // served many forgets them all now and then (a sweep each next).
            if swept.len() >= SWEPT_REMEMBERED && !swept.contains_key(&key) {
                swept.clear();
            }
            swept.insert(key, Swept { pod_uid: uid.to_owned(), left_behind });
        }
        Ok(!clean)
    }

    /// Runs `argv` while `consume` takes its output.
    fn run_with<'a, C>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        release: Release,
        consume: impl FnOnce(mpsc::Receiver<OutputChunk>) -> C,
    ) -> impl Future<Output = Result<Completion>> + Send + 'a
    where
        C: Future<Output = Result<()>> + Send + 'a,
    {
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let consumer = consume(rx);
        let ran = self.inner.runtime.run(target, argv, stdin, tx, release);
        async move {
            let (ran, consumed) = tokio::join!(ran, consumer);
            consumed?;
            ran
        }
    }

    /// Maps a finished wrapper run to how it ended: `ended` as the runtime
    /// says, `said` as the wrapper's trailer says, `sink_done` whether the
    /// sink ended it.
    async fn finish(
        &self,
        target: &ExecTarget,
        run: &str,
        cwd: &str,
        ended: Result<Completion>,
        said: Option<WrapperEnd>,
        sink_done: bool,
    ) -> Result<Exit> {
        // The wrapper said it never started the command.
        if let (Ok(_), Some(not_run)) = (&ended, said.and_then(|said| said.not_run_error(cwd, NotRun::Command))) {
            return Err(not_run);
        }
        match (ended, said) {
            (Ok(Completion::Released), _) if sink_done => Ok(Exit::RELEASED),
            (Ok(Completion::Released), Some(WrapperEnd::Exited(code))) => Ok(Exit::code(code)),
            // The status is the authority when it comes first (a wrapper
            // killed before its trailer, say).
            (Ok(Completion::Exited(code)), _) => Ok(Exit::code(code)),
            (Ok(Completion::Failed(message)), _) => {
                self.kill(target, run).await;
                Err(Error::internal(format!("the container runtime failed the exec: {message}")))
            }
            (Ok(Completion::Released), _) => Err(Error::internal("an exec was released before its trailer")),
            (Err(e), _) if e.code == ErrorCode::ConnectionLost => {
                self.kill(target, run).await;
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Best-effort kill of one run's process tree through a second exec.
    async fn kill(&self, target: &ExecTarget, run: &str) {
        // Failure leaves an orphan for the next connect's sweep; nothing
        // better to do here.
        if self.signal_run(target, run, kill::KillMode::Terminate).await.is_err() {
            self.inner.runs.leave_behind();
        }
    }

    /// Signals one run's process tree through a second exec (see
    /// [`kill::KillMode`]); fails when that exec does (`timeout` after
    /// [`KILL_TIMEOUT`]). Exempt from the concurrency cap, as every kill.
    pub(crate) async fn signal_run(&self, target: &ExecTarget, run: &str, mode: kill::KillMode) -> Result<()> {
        let argv = kill::kill_argv(&[run.to_owned()], mode);
        let mut out = ScriptOutput::new(|_| Ok(()));
        let options = RunOptions {
            stdin: Input::None,
            timeout: Some(KILL_TIMEOUT),
            cancel: CancellationToken::new(),
            slots: Slots::Exempt,
        };
        // `run_argv`, not `run`: a shell run kills through here, and a
        // future cannot contain itself.
        let exit = self.run_argv(target, argv, options, &mut out).await.map_err(|e| match e.code {
            ErrorCode::Timeout => {
                Error::new(ErrorCode::Timeout, format!("the kill did not finish within {} s", KILL_TIMEOUT.as_secs()))
            }
            _ => e,
        })?;
        script_status(exit, "the kill", out.into_stderr())
    }
}

/// The `aborted` error; its message is exactly "aborted", as callers match on it.
pub(crate) fn aborted() -> Error {
    Error::new(ErrorCode::Aborted, "aborted")
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A terminal's input: once its wrapper is `ready`, the wrapper's prefix
/// (secret and fields), then the caller's input as it comes, to the
/// session's `tx`. Ends when either side is gone.
async fn feed(
    prefix: Bytes,
    mut input: mpsc::Receiver<TerminalInput>,
    tx: mpsc::Sender<TerminalInput>,
    ready: oneshot::Receiver<()>,
) {
    if ready.await.is_err() || tx.send(TerminalInput::Data(prefix)).await.is_err() {
        return;
    }
    while let Some(next) = input.recv().await {
        if tx.send(next).await.is_err() {
            return;
        }
    }
}

/// Hands a script's output to `sink`; once the sink is done, releases the
/// session and discards the rest.
async fn forward(mut rx: mpsc::Receiver<OutputChunk>, sink: &mut impl Sink, release: &Release) -> Result<()> {
    while let Some(chunk) = rx.recv().await {
        if release.is_requested() {
            continue;
        }
        if let Flow::Done = sink.output(chunk).await? {
            release.close();
        }
    }
    Ok(())
}

/// Exit 0 of one of the engine's scripts, or an error naming it (`what`)
/// with the head of its stderr.
pub(crate) fn script_status(exit: Exit, what: &str, stderr: HeadBuffer) -> Result<()> {
    match exit.status(what)? {
        0 => Ok(()),
        code => Err(script_failed(what, code, stderr)),
    }
}

/// The error of one of the engine's scripts (`what`) that exited with
/// `code`, with the head of its stderr.
pub(crate) fn script_failed(what: &str, code: i32, stderr: HeadBuffer) -> Error {
    Error::internal(format!(
        "{what} failed (exit {code}): {}",
        shorten(String::from_utf8_lossy(&stderr.into_inner()).trim())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_status_names_the_script() {
        let mut err = HeadBuffer::new(100);
        err.push(b"boom\n");
        let e = script_status(Exit::code(3), "the sweep", err).unwrap_err();
        assert_eq!(e.message, "the sweep failed (exit 3): boom");
        script_status(Exit::code(0), "x", HeadBuffer::new(1)).unwrap();
        let e = script_status(Exit::RELEASED, "x", HeadBuffer::new(1)).unwrap_err();
        assert_eq!(e.message, "x ended without an exit status");
    }
}
