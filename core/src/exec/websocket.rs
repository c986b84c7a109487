//! [`PodExecRuntime`]: the [`Runtime`](super::Runtime) over the Kubernetes
//! pods/exec WebSocket.
//!
//! [`PodExecRuntime`] speaks the channel protocol itself over the WebSocket
//! that kube's client opens (auth, TLS, proxy and retries stay kube's), rather
//! than through kube's `AttachedProcess`. That one moves every byte through a
//! background task and local pipes, which cost a thread hand-off and two
//! copies per chunk and capped output at about half the socket's speed; it
//! sends stdin in 4 KiB messages with no way to change that; and its pipes
//! hide connection drops (a reader waits for EOF that never comes).
//! Here one loop reads frames and hands their payloads on without copying,
//! and writes stdin in large messages while it reads.
//!
//! Protocol (`k8s.io/apimachinery/pkg/util/httpstream/wsstream`): every
//! binary message starts with a channel byte: 0 stdin, 1 stdout, 2 stderr,
//! 3 the final `metav1.Status`; `v5.channel.k8s.io` adds 255 to close a
//! channel. The exit status comes only from channel 3: a connection that ends
//! without it is `connection_lost`, never exit 0. EOF on stdin needs no close
//! frame: the engine's scripts read exactly the announced number of stdin
//! bytes (`head -c`), so commands see EOF on v4 servers too.
//!
//! A connection can also stall with its socket open (a node or middlebox
//! gone silent; TCP keepalive takes a minute to notice, and only if nothing
//! answers for the peer). Every session pings the server every
//! [`Liveness::ping`]; waiting on the socket for [`Liveness::stall`] with
//! nothing arriving, not even a pong, ends it as `connection_lost`. Time
//! spent waiting on a slow consumer does not count.
//!
//! A consumer can end a session before the status (see [`Release`]): the
//! wrapper's trailer already said how the command ended, while a child it
//! left running still holds the streams open. A released session is either
//! closed, or kept reading in the background (output discarded) until the
//! server ends it, so that child can go on writing to its stdout without
//! getting EPIPE; those drains belong to the runtime and end with it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{SplitSink, SplitStream};
use futures::{FutureExt, SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachParams;
use kube::core::Request;
use kube::{Client, Resource};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{self, MissedTickBehavior};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The socket under a session's WebSocket.
pub(super) type Upgraded = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

use super::output::{OutputChunk, Stream};
use super::pod_liveness::{PodWatch, PodWatches};
use super::runtime::{Release, Runtime, Stdin, TerminalInput, TerminalSize, Tunnel};
use super::status::{decode, Completion};
use super::ExecTarget;
use crate::client::informer::Informer;
use crate::client::{api_error, Action};
use crate::error::{Error, ErrorCode, Result};
use crate::sync::lock;

/// Payload bytes per stdin message. kube's 4 KiB made writeFile 3× slower
/// than the socket allows; much larger only grows the API server's buffers.
const STDIN_MESSAGE_BYTES: usize = 128 * 1024;
/// Most bytes tungstenite reads from the socket at once. It zero-fills this
/// much before every read (10–13 % of the client's CPU at 128 KiB, its
/// default), while a read rarely returns more than a few TLS records.
const SOCKET_READ_BYTES: usize = 32 * 1024;
/// Released sessions kept draining at once, in all and for one pod; beyond
/// these they are closed (the child left writing gets EPIPE, as when a
/// `docker exec` client goes).
const MAX_DRAINS: usize = 256;
const MAX_DRAINS_PER_SANDBOX: usize = 16;
/// What one drain may read before it is closed: a burst, then a steady rate
/// (a server's logs fit; `yes &` does not), for at most an hour. A drain
/// costs the host a read of everything the child writes, so its budget is
/// what keeps fifty `yes &` from taking a core and the API server's.
const DRAIN_BURST_BYTES: u64 = 1024 * 1024;
const DRAIN_BYTES_PER_SECOND: u64 = 64 * 1024;
const DRAIN_LIFETIME: Duration = Duration::from_secs(3600);

/// When a session pings the server and when silence means it stalled.
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    /// Interval between WebSocket pings.
    pub ping: Duration,
    /// Waiting on the socket this long with nothing arriving ends the
    /// session as `connection_lost`. Several pings long, so one lost or slow
    /// pong is not a stall.
    pub stall: Duration,
}

impl Default for Liveness {
    /// A ping every 5 s; stalled after 15 s of silence.
    fn default() -> Self {
        Liveness { ping: Duration::from_secs(5), stall: Duration::from_secs(15) }
    }
}

/// [`Runtime`] over the Kubernetes pods/exec subresource (WebSocket,
/// `v5.channel.k8s.io` preferred, `v4.channel.k8s.io` accepted).
pub struct PodExecRuntime {
    client: Client,
    watches: PodWatches,
    liveness: Liveness,
    /// Released sessions still being drained; aborted when the runtime drops.
    drains: Mutex<Drains>,
}

/// The drain tasks and how many each pod has.
#[derive(Default)]
struct Drains {
    tasks: JoinSet<(String, String)>,
    per_sandbox: HashMap<(String, String), usize>,
}

impl PodExecRuntime {
    /// A runtime using `client`; one connection per exec is inherent to the
    /// HTTP/1.1 upgrade, the client (auth, TLS config) is shared. In-flight
    /// execs learn that their pod went from `pods`, the provider's shared
    /// pod watch.
    pub fn new(client: Client, pods: Informer<Pod>) -> Self {
        PodExecRuntime {
            watches: PodWatches::new(pods),
            client,
            liveness: Liveness::default(),
            drains: Mutex::default(),
        }
    }

    /// The same runtime with other ping and stall times.
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = liveness;
        self
    }

    /// Opens the WebSocket of `request` (`what` names it in errors); an API
    /// server that does not answer the upgrade within two stall times is
    /// `connection_lost`.
    pub(super) async fn open(
        &self,
        request: http::Request<Vec<u8>>,
        action: Action<'_>,
        what: &str,
    ) -> Result<WebSocketStream<Upgraded>> {
        let upgrade = self.liveness.stall * 2;
        let connection = time::timeout(upgrade, self.client.connect(request))
            .await
            .map_err(|_| {
                Error::new(
                    ErrorCode::ConnectionLost,
                    format!("the API server did not answer the {what} request within {} s", upgrade.as_secs_f32()),
                )
            })?
            .map_err(|e| api_error(e, action))?;
        // Nothing has been read yet, so re-wrapping the socket loses
        // nothing; it is the only way to set tungstenite's read size.
        let socket = connection.into_stream().into_inner();
        let config = WebSocketConfig::default().read_buffer_size(SOCKET_READ_BYTES);
        Ok(WebSocketStream::from_raw_socket(socket, Role::Client, Some(config)).await)
    }

    /// The ping and stall times of this runtime's sessions.
    pub(super) fn liveness(&self) -> Liveness {
        self.liveness
    }

    /// Keeps a released session reading until the server, the connection,
    /// the pod or its budget ends it; over [`MAX_DRAINS`] (or
    /// [`MAX_DRAINS_PER_SANDBOX`] for its pod) it is closed instead.
    fn keep_draining<S>(&self, target: &ExecTarget, session: Session<S>, watch: PodWatch)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut drains = lock(&self.drains);
        let Drains { tasks, per_sandbox } = &mut *drains;
        while let Some(ended) = tasks.try_join_next() {
            if let Ok(key) = ended {
                if let Some(n) = per_sandbox.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        per_sandbox.remove(&key);
                    }
                }
            }
        }
        let key = (target.namespace.clone(), target.pod.clone());
        let mine = per_sandbox.entry(key.clone()).or_default();
        if tasks.len() < MAX_DRAINS && *mine < MAX_DRAINS_PER_SANDBOX {
            *mine += 1;
            let liveness = self.liveness;
            tasks.spawn(async move {
                drain(session, watch, liveness).await;
                key
            });
        }
    }
}

impl Runtime for PodExecRuntime {
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        output: mpsc::Sender<OutputChunk>,
        release: Release,
    ) -> BoxFuture<'a, Result<Completion>> {
        async move {
            // Subscribed before connecting so the watch lists in parallel; its
            // verdict counts only once the process runs (a missing pod is the
            // exec call's own 404).
            let mut watch = self.watches.subscribe(target);
            let action =
                Action { verb: "create", resource: "pods/exec", name: Some(&target.pod), namespace: &target.namespace };
            // With a TTY the node merges stderr into the terminal (and kube
            // refuses to ask for both).
            let tty = matches!(stdin, Stdin::Terminal { .. });
            let mut params =
                AttachParams::default().stdin(!matches!(stdin, Stdin::None)).stdout(true).stderr(!tty).tty(tty);
            if let Some(c) = &target.container {
                params = params.container(c.clone());
            }
            let request = Request::new(Pod::url_path(&(), Some(&target.namespace)))
                .exec(&target.pod, argv, &params)
                .map_err(|e| api_error(kube::Error::BuildRequest(e), action))?;
            // A stalled connection (a pooled one, say) can also swallow the
            // upgrade request; the command may have started, so the engine
            // kills it like any lost exec.
            let ws = self.open(request, action, "exec").await?;
            let lost =
                |reason: String| Error::new(ErrorCode::ConnectionLost, format!("{reason} while the command ran"));
            let driven = tokio::select! {
                driven = drive(ws, stdin, &output, &release, self.liveness) => driven,
                reason = watch.gone() => return Err(lost(reason)),
            };
            match driven? {
                // A node that kills the pod's processes on deletion ends
                // the exec with a signal status: if the pod is going or
                // gone, that is what happened.
                Driven::Ended(Completion::Exited(code)) if code >= 128 => {
                    watch.gone_after_signal().await.map_or(Ok(Completion::Exited(code)), |r| Err(lost(r)))
                }
                Driven::Ended(completion) => Ok(completion),
                Driven::Released { session, drain } => {
                    if drain {
                        self.keep_draining(target, session, watch);
                    }
                    Ok(Completion::Released)
                }
            }
        }
        .boxed()
    }

    fn port_forward<'a>(&'a self, target: &'a ExecTarget, port: u16, tunnel: Tunnel) -> BoxFuture<'a, Result<()>> {
        self.forward(target, port, tunnel).boxed()
    }
}

/// The two halves of a session's WebSocket.
struct Session<S> {
    sink: SplitSink<WebSocketStream<S>, Message>,
    frames: SplitStream<WebSocketStream<S>>,
}

/// How [`drive`] ended.
enum Driven<S> {
    /// The status frame arrived.
    Ended(Completion),
    /// The consumer released the session; `drain` as requested.
    Released { session: Session<S>, drain: bool },
}

/// Reads the session until its status frame (or a release) while feeding
/// stdin and pinging. A connection that breaks, closes or stalls first is
/// `connection_lost`.
async fn drive<S>(
    ws: WebSocketStream<S>,
    stdin: Stdin,
    output: &mpsc::Sender<OutputChunk>,
    release: &Release,
    liveness: Liveness,
) -> Result<Driven<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut frames) = ws.split();
    // As the consumer asked, when it released the session.
    let mut drain = false;
    let status = {
        // The one writer: stdin pieces with pings between them, then pings.
        // A failed write means the session ended; the reader says how.
        let feed = async {
            let mut pings = pings(liveness);
            let fed = match stdin {
                Stdin::None => Ok(()),
                Stdin::Bytes(bytes) => send_stdin(&mut sink, &bytes, &mut pings).await,
                Stdin::Stream { head, rest } => feed_stream(&mut sink, head, rest, &mut pings).await,
                Stdin::Terminal { size, input } => feed_terminal(&mut sink, size, input, &mut pings).await,
            };
            if fed.is_ok() {
                keep_pinging(&mut sink, pings).await;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            ended = read(&mut frames, output, liveness.stall) => Some(ended?),
            requested = release.requested() => {
                drain = requested;
                None
            }
            () = feed => unreachable!("the writer never completes"),
        }
    };
    Ok(match status {
        Some(completion) => Driven::Ended(completion),
        None => Driven::Released { session: Session { sink, frames }, drain },
    })
}

/// The socket failed: the session is over, the reader says how.
struct Broken;

/// Writes `bytes` as stdin messages, pinging between them when a ping is due.
async fn send_stdin<S>(
    sink: &mut SplitSink<WebSocketStream<S>, Message>,
    bytes: &[u8],
    pings: &mut time::Interval,
) -> std::result::Result<(), Broken>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    for piece in bytes.chunks(STDIN_MESSAGE_BYTES) {
        if pings.tick().now_or_never().is_some() {
            sink.send(Message::Ping(Bytes::new())).await.map_err(|_| Broken)?;
        }
        sink.send(frame(0, piece)).await.map_err(|_| Broken)?;
    }
    Ok(())
}

/// A stream's writer: `head`, then the pieces of `rest` as they come,
/// pinging while the producer is slow (a caller's iterable, a local disk),
/// until `rest`'s sender is gone.
async fn feed_stream<S>(
    sink: &mut SplitSink<WebSocketStream<S>, Message>,
    head: Bytes,
    mut rest: mpsc::Receiver<Bytes>,
    pings: &mut time::Interval,
) -> std::result::Result<(), Broken>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    send_stdin(sink, &head, pings).await?;
    loop {
        tokio::select! {
            piece = rest.recv() => match piece {
                Some(piece) => send_stdin(sink, &piece, pings).await?,
                None => return Ok(()),
            },
            _ = pings.tick() => sink.send(Message::Ping(Bytes::new())).await.map_err(|_| Broken)?,
        }
    }
}

/// A terminal's writer: its first size (channel 4, before any input, so the
/// program never reads at another size), then keystrokes and resizes as
/// they come, pinging meanwhile, until the input's sender is gone.
async fn feed_terminal<S>(
    sink: &mut SplitSink<WebSocketStream<S>, Message>,
    size: TerminalSize,
    mut input: mpsc::Receiver<TerminalInput>,
    pings: &mut time::Interval,
) -> std::result::Result<(), Broken>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    sink.send(resize_frame(size)).await.map_err(|_| Broken)?;
    loop {
        tokio::select! {
            next = input.recv() => match next {
                Some(TerminalInput::Data(bytes)) => send_stdin(sink, &bytes, pings).await?,
                Some(TerminalInput::Resize(size)) => sink.send(resize_frame(size)).await.map_err(|_| Broken)?,
                None => return Ok(()),
            },
            _ = pings.tick() => sink.send(Message::Ping(Bytes::new())).await.map_err(|_| Broken)?,
        }
    }
}

/// A binary message on `channel`.
fn frame(channel: u8, payload: &[u8]) -> Message {
    let mut message = BytesMut::with_capacity(payload.len() + 1);
    message.put_u8(channel);
    message.put_slice(payload);
    Message::Binary(message.freeze())
}

/// The resize channel's message: `{"Width":cols,"Height":rows}`
/// (`remotecommand.TerminalSize`).
fn resize_frame(size: TerminalSize) -> Message {
    frame(4, format!(r#"{{"Width":{},"Height":{}}}"#, size.cols, size.rows).as_bytes())
}

/// Hands output on until the status frame; a connection that breaks, closes
/// or stays silent for `stall` first is `connection_lost`. Cancel safe
/// between chunks (a chunk being handed on when cancelled is lost, which
/// only happens on release).
async fn read<S>(
    frames: &mut SplitStream<WebSocketStream<S>>,
    output: &mpsc::Sender<OutputChunk>,
    stall: Duration,
) -> Result<Completion>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let Some(message) = next_frame(frames, stall, "exec").await? else { break };
        let data = match message {
            Message::Binary(data) => data,
            Message::Close(_) => break,
            // Pongs only prove the connection lives; text is not part of the
            // binary protocol; pings are answered by tungstenite itself.
            _ => continue,
        };
        let (Some(&channel), payload) = (data.first(), data.slice(1..)) else { continue };
        let stream = match channel {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            // The server sends the status after the last output (client-go's
            // stream() waits for both copies first), so the session is over;
            // a status that does not parse is as good as none.
            3 => {
                return serde_json::from_slice::<Status>(&payload).map(|s| decode(&s)).map_err(|e| {
                    Error::new(ErrorCode::ConnectionLost, format!("the exec status frame is malformed: {e}"))
                        .with_source(e)
                })
            }
            _ => continue,
        };
        if !payload.is_empty() {
            output
                .send(OutputChunk { stream, data: payload })
                .await
                .map_err(|_| Error::internal("exec output consumer went away"))?;
        }
    }
    Err(Error::new(ErrorCode::ConnectionLost, "the exec connection closed without an exit status"))
}

/// The next message, `None` at the end of the stream. Waiting longer than
/// `stall` is `connection_lost` (`what` names the session); the time starts
/// when the caller asks, so a slow consumer is not a stall. Cancel safe.
pub(super) async fn next_frame<S>(
    frames: &mut SplitStream<WebSocketStream<S>>,
    stall: Duration,
    what: &str,
) -> Result<Option<Message>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match time::timeout(stall, frames.next()).await {
        Ok(Some(Ok(message))) => Ok(Some(message)),
        Ok(Some(Err(e))) => {
            let text = format!("the {what} connection failed before it ended: {e}");
            Err(Error::new(ErrorCode::ConnectionLost, text).with_source(e))
        }
        Ok(None) => Ok(None),
        Err(_) => Err(Error::new(
            ErrorCode::ConnectionLost,
            format!(
                "the {what} connection stalled: nothing arrived for {} s, not even a reply to a ping",
                stall.as_secs_f32()
            ),
        )),
    }
}

/// Ticks every `liveness.ping`, the first a full interval from now.
pub(super) fn pings(liveness: Liveness) -> time::Interval {
    let mut pings = time::interval_at(time::Instant::now() + liveness.ping, liveness.ping);
    pings.set_missed_tick_behavior(MissedTickBehavior::Delay);
    pings
}

/// Pings on every tick; never returns (after a failed write it just waits:
/// the reader says how the session ended).
pub(super) async fn keep_pinging<S>(sink: &mut SplitSink<WebSocketStream<S>, Message>, mut pings: time::Interval)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        pings.tick().await;
        if sink.send(Message::Ping(Bytes::new())).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Reads a released session to its end, discarding what arrives, so a child
/// the command left running can keep writing to the streams it inherited.
/// It keeps pinging, so middleboxes that close idle connections (load
/// balancers, often after a few minutes) leave a quiet child its streams, and
/// ends on a stall like an exec does. A child that writes past the budget
/// (see [`DRAIN_BURST_BYTES`]) or outlives [`DRAIN_LIFETIME`] has its
/// streams closed.
async fn drain<S>(session: Session<S>, mut watch: PodWatch, liveness: Liveness)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Session { mut sink, mut frames } = session;
    let to_end = async {
        let mut budget = DrainBudget::new(time::Instant::now());
        while let Ok(Some(message)) = next_frame(&mut frames, liveness.stall, "exec").await {
            match message {
                Message::Binary(data) if data.first() == Some(&3) => break,
                Message::Close(_) => break,
                Message::Binary(data) if !budget.spend(data.len() as u64, time::Instant::now()) => break,
                _ => {}
            }
        }
    };
    let to_end = async {
        let _ = time::timeout(DRAIN_LIFETIME, to_end).await;
    };
    // A deleted pod leaves the session open but silent (kubernetes#129144).
    tokio::select! {
        () = to_end => {}
        () = keep_pinging(&mut sink, pings(liveness)) => {}
        _ = watch.gone() => {}
    }
    drop(sink);
}

/// A token bucket over the bytes one drain reads.
struct DrainBudget {
    tokens: u64,
    at: time::Instant,
}

impl DrainBudget {
    fn new(now: time::Instant) -> Self {
        DrainBudget { tokens: DRAIN_BURST_BYTES, at: now }
    }

    /// Takes `bytes` read at `now`; `false` once the child wrote more than
    /// the burst plus the steady rate allow.
    fn spend(&mut self, bytes: u64, now: time::Instant) -> bool {
        let earned = now.saturating_duration_since(self.at).as_millis() as u64 * DRAIN_BYTES_PER_SECOND / 1000;
        if earned > 0 {
            self.tokens = (self.tokens + earned).min(DRAIN_BURST_BYTES);
            self.at = now;
        }
        match self.tokens.checked_sub(bytes) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_budget_allows_a_burst_then_a_rate() {
        let start = time::Instant::now();
        let mut b = DrainBudget::new(start);
        assert!(b.spend(DRAIN_BURST_BYTES, start));
        assert!(!b.spend(1, start), "the burst is spent");
        let mut b = DrainBudget::new(start);
        // Logs at half the rate go on for an hour.
        for s in 1..=3600 {
            assert!(b.spend(DRAIN_BYTES_PER_SECOND / 2, start + Duration::from_secs(s)), "second {s}");
        }
        // A flood does not get past the burst.
        let mut b = DrainBudget::new(start);
        let flooded = (0..100).take_while(|i| b.spend(64 * 1024, start + Duration::from_millis(*i))).count();
        assert!(flooded <= 17, "{flooded}");
    }
}
