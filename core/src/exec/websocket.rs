//! [`PodExecRuntime`]: the [`Runtime`](super::Runtime) over the Kubernetes
//! pods/exec WebSocket.
//!
//! [`PodExecRuntime`] speaks the channel protocol itself over the WebSocket
//! that kube's client opens (auth, TLS, proxy and retries stay kube's), rather
//! than through kube's `AttachedProcess`. That one moves every byte through a
//! background task and local pipes, which cost a thread hand-off and two
//! copies per chunk and capped output at about half the socket's speed; it
//! sends stdin in 4 KiB messages with no way to change that; and its pipes
//! hide connection drops (readers never see EOF, see the exec notes §2.3).
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

use super::output::{OutputChunk, Stream};
use super::pod_liveness::{PodWatch, PodWatches};
use super::runtime::{Release, Runtime};
use super::status::{decode, Completion};
use super::ExecTarget;
use crate::client::{api_error, Action};
use crate::error::{Error, ErrorCode, Result};

/// Payload bytes per stdin message. kube's 4 KiB made writeFile 3× slower
/// than the socket allows; much larger only grows the API server's buffers.
const STDIN_MESSAGE_BYTES: usize = 128 * 1024;
/// Most bytes tungstenite reads from the socket at once. It zero-fills this
/// much before every read (10–13 % of the client's CPU at 128 KiB, its
/// default), while a read rarely returns more than a few TLS records.
const SOCKET_READ_BYTES: usize = 32 * 1024;
/// Released sessions kept draining at once; beyond this they are closed.
const MAX_DRAINS: usize = 256;

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
    drains: Mutex<JoinSet<()>>,
}

impl PodExecRuntime {
    /// A runtime using `client`; one connection per exec is inherent to the
    /// HTTP/1.1 upgrade, the client (auth, TLS config) is shared.
    pub fn new(client: Client) -> Self {
        PodExecRuntime {
            watches: PodWatches::new(client.clone()),
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

    /// Keeps a released session reading until the server, the connection or
    /// the pod ends it; over [`MAX_DRAINS`] it is closed instead.
    fn keep_draining<S>(&self, session: Session<S>, watch: PodWatch)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut drains = self.drains.lock().expect("drain set poisoned");
        while drains.try_join_next().is_some() {}
        if drains.len() < MAX_DRAINS {
            drains.spawn(drain(session, watch, self.liveness));
        }
    }
}

impl Drop for PodExecRuntime {
    /// The pod watches end with their owner (the drains are aborted by
    /// their `JoinSet`), so nothing of a dropped provider keeps running.
    fn drop(&mut self) {
        self.watches.stop();
    }
}

impl Runtime for PodExecRuntime {
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Option<Bytes>,
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
            let mut params = AttachParams::default().stdin(stdin.is_some()).stdout(true).stderr(true);
            if let Some(c) = &target.container {
                params = params.container(c.clone());
            }
            let request = Request::new(Pod::url_path(&(), Some(&target.namespace)))
                .exec(&target.pod, argv, &params)
                .map_err(|e| api_error(kube::Error::BuildRequest(e), action))?;
            // A stalled connection (a pooled one, say) can also swallow the
            // upgrade request; the command may have started, so the engine
            // kills it like any lost exec.
            let upgrade = self.liveness.stall * 2;
            let connection = time::timeout(upgrade, self.client.connect(request))
                .await
                .map_err(|_| {
                    Error::new(
                        ErrorCode::ConnectionLost,
                        format!("the API server did not answer the exec request within {} s", upgrade.as_secs_f32()),
                    )
                })?
                .map_err(|e| api_error(e, action))?;
            // Nothing has been read yet, so re-wrapping the socket loses
            // nothing; it is the only way to set tungstenite's read size.
            let socket = connection.into_stream().into_inner();
            let config = WebSocketConfig::default().read_buffer_size(SOCKET_READ_BYTES);
            let ws = WebSocketStream::from_raw_socket(socket, Role::Client, Some(config)).await;
            let lost =
                |reason: String| Error::new(ErrorCode::ConnectionLost, format!("{reason} while the command ran"));
            let driven = tokio::select! {
                driven = drive(ws, stdin, &output, &release, self.liveness) => driven,
                reason = watch.gone() => return Err(lost(reason)),
            };
            match driven? {
                // A node that kills the pod's processes on deletion ends
                // the exec with a signal status; if the watch has seen the
                // deletion by then, that is what happened.
                Driven::Ended(Completion::Exited(code)) if code >= 128 => {
                    watch.gone_now().map_or(Ok(Completion::Exited(code)), |r| Err(lost(r)))
                }
                Driven::Ended(completion) => Ok(completion),
                Driven::Released { session, drain } => {
                    if drain {
                        self.keep_draining(session, watch);
                    }
                    Ok(Completion::Released)
                }
            }
        }
        .boxed()
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
    stdin: Option<Bytes>,
    output: &mpsc::Sender<OutputChunk>,
    release: &Release,
    liveness: Liveness,
) -> Result<Driven<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut frames) = ws.split();
    let ended = {
        // The one writer: stdin pieces with pings between them, then pings.
        // A failed write means the session ended; the reader says how.
        let feed = async {
            let mut pings = pings(liveness);
            for piece in stdin.as_deref().unwrap_or_default().chunks(STDIN_MESSAGE_BYTES) {
                if pings.tick().now_or_never().is_some() && sink.send(Message::Ping(Bytes::new())).await.is_err() {
                    break;
                }
                let mut message = BytesMut::with_capacity(piece.len() + 1);
                message.put_u8(0);
                message.put_slice(piece);
                if sink.send(Message::Binary(message.freeze())).await.is_err() {
                    break;
                }
            }
            keep_pinging(&mut sink, pings).await;
        };
        tokio::select! {
            ended = read(&mut frames, output, liveness.stall) => ended.map(ReadEnd::Status),
            drain = release.requested() => Ok(ReadEnd::Released(drain)),
            () = feed => unreachable!("the writer never completes"),
        }
    };
    match ended? {
        ReadEnd::Status(completion) => Ok(Driven::Ended(completion)),
        ReadEnd::Released(drain) => Ok(Driven::Released { session: Session { sink, frames }, drain }),
    }
}

enum ReadEnd {
    Status(Completion),
    Released(bool),
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
        let Some(message) = next_frame(frames, stall).await? else { break };
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
/// `stall` is `connection_lost`; the time starts when the caller asks, so a
/// slow consumer is not a stall. Cancel safe.
async fn next_frame<S>(frames: &mut SplitStream<WebSocketStream<S>>, stall: Duration) -> Result<Option<Message>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match time::timeout(stall, frames.next()).await {
        Ok(Some(Ok(message))) => Ok(Some(message)),
        Ok(Some(Err(e))) => Err(Error::new(
            ErrorCode::ConnectionLost,
            format!("the exec connection failed before an exit status arrived: {e}"),
        )),
        Ok(None) => Ok(None),
        Err(_) => Err(Error::new(
            ErrorCode::ConnectionLost,
            format!(
                "the exec connection stalled: nothing arrived for {} s, not even a reply to a ping",
                stall.as_secs_f32()
            ),
        )),
    }
}

/// Ticks every `liveness.ping`, the first a full interval from now.
fn pings(liveness: Liveness) -> time::Interval {
    let mut pings = time::interval_at(time::Instant::now() + liveness.ping, liveness.ping);
    pings.set_missed_tick_behavior(MissedTickBehavior::Delay);
    pings
}

/// Pings on every tick; never returns (after a failed write it just waits:
/// the reader says how the session ended).
async fn keep_pinging<S>(sink: &mut SplitSink<WebSocketStream<S>, Message>, mut pings: time::Interval)
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
/// ends on a stall like an exec does.
async fn drain<S>(session: Session<S>, mut watch: PodWatch, liveness: Liveness)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Session { mut sink, mut frames } = session;
    let to_end = async {
        while let Ok(Some(message)) = next_frame(&mut frames, liveness.stall).await {
            match message {
                Message::Binary(data) if data.first() == Some(&3) => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    // A deleted pod leaves the session open but silent (kubernetes#129144).
    tokio::select! {
        () = to_end => {}
        () = keep_pinging(&mut sink, pings(liveness)) => {}
        _ = watch.gone() => {}
    }
    drop(sink);
}
