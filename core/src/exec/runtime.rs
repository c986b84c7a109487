//! The transport that runs one process in a target: the [`Runtime`] trait and
//! its pods/exec WebSocket implementation on kube 5.
//!
//! kube 5's `AttachedProcess` has hazards (see the exec notes, §2.3): dropping
//! a pipe half closes nothing, readers never see EOF after a connection drop,
//! `join()` deadlocks on undrained output and fails without a prior
//! `take_status()`. [`PodExecRuntime`] follows the pattern that avoids all of
//! them: 64 KiB pipes, `take_status()` first, stdout and stderr pumped
//! concurrently, the pumps raced against `join()`, leftovers drained without
//! blocking, and the exit status taken only from the status frame.
//!
//! Stdin is always attached and never shut down. kube reaches EOF on a
//! v4-only server by closing the whole socket, which loses the remaining
//! output and the exit status, and kube does not tell which protocol it
//! negotiated. Worse, `join()` shuts down a stdin pipe the caller did not
//! take — even one never requested — so on v4 joining alone would close the
//! socket. So we always request stdin, take the writer and keep it; the
//! engine's scripts read exactly the announced number of stdin bytes
//! (`head -c`), so commands see EOF on v4 and v5 alike and nothing is lost.

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, AttachedProcess};
use kube::{Api, Client};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::output::{OutputChunk, Stream};
use super::status::{decode, Completion};
use super::watch::PodWatches;
use super::ExecTarget;
use crate::client::{api_error, Action};
use crate::error::{Error, ErrorCode, Result};

/// Local pipe size between kube's message loop and our pumps (kube's default
/// of 1 KiB is 5–6× slower on bulk output).
const PIPE_BYTES: usize = 256 * 1024;
/// Largest single read from a pipe, i.e. the largest chunk we emit. As large
/// as the pipe: a pump that fell behind catches up in one chunk.
const READ_BYTES: usize = PIPE_BYTES;

/// Runs one process in a target and reports how it ended.
///
/// Output chunks go to `output` in the order they were read; a full channel
/// pauses reading (backpressure reaches the socket through kube's bounded
/// pipes). `stdin`, when given, is written and then left open (see the module
/// doc). `Err` with [`ErrorCode::ConnectionLost`] means the process may still
/// be running; any other `Err` means it never started.
pub trait Runtime: Send + Sync + 'static {
    /// Starts `argv` in `target` and waits for it to end.
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        output: mpsc::Sender<OutputChunk>,
    ) -> BoxFuture<'a, Result<Completion>>;
}

/// [`Runtime`] over the Kubernetes pods/exec subresource (WebSocket,
/// `v5.channel.k8s.io` preferred, `v4.channel.k8s.io` accepted).
pub struct PodExecRuntime {
    client: Client,
    watches: PodWatches,
}

impl PodExecRuntime {
    /// A runtime using `client`; one connection per exec is inherent to
    /// kube's HTTP/1.1 upgrade, the client (auth, TLS config) is shared.
    pub fn new(client: Client) -> Self {
        PodExecRuntime { watches: PodWatches::new(client.clone()), client }
    }
}

impl Runtime for PodExecRuntime {
    fn run<'a>(
        &'a self,
        target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        output: mpsc::Sender<OutputChunk>,
    ) -> BoxFuture<'a, Result<Completion>> {
        async move {
            let mut watch = self.watches.subscribe(target);
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &target.namespace);
            let mut params = AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(true)
                .max_stdin_buf_size(PIPE_BYTES)
                .max_stdout_buf_size(PIPE_BYTES)
                .max_stderr_buf_size(PIPE_BYTES);
            if let Some(c) = &target.container {
                params = params.container(c.clone());
            }
            let action =
                Action { verb: "create", resource: "pods/exec", name: Some(&target.pod), namespace: &target.namespace };
            // Subscribed before connecting so the watch lists in parallel; its
            // verdict counts only once the process runs (a missing pod is the
            // exec call's own 404).
            let process = api.exec(&target.pod, argv, &params).await.map_err(|e| api_error(e, action))?;
            tokio::select! {
                result = drive(process, stdin, &output) => result,
                reason = watch.gone() => Err(Error::new(ErrorCode::ConnectionLost, format!("{reason} while the command ran"))),
            }
        }
        .boxed()
    }
}

/// Pumps one attached process to its end (exec notes §2.5).
///
/// The pumps run alongside `join()` rather than being raced against it: a
/// pump may be parked in a send to a slow consumer while kube finishes, and
/// cancelling it there would drop that chunk. When the session ends the
/// pumps switch to taking only what is already buffered (after a dropped
/// connection kube never closes the pipes, so waiting for EOF would hang).
async fn drive(mut process: AttachedProcess, stdin: Option<Bytes>, output: &mpsc::Sender<OutputChunk>) -> Result<Completion> {
    let status = process.take_status().expect("status is taken once, first");
    let mut stdout = process.stdout().expect("stdout is attached");
    let mut stderr = process.stderr().expect("stderr is attached");
    let mut writer = process.stdin().expect("stdin is attached");
    let (ended_tx, ended) = watch::channel(false);
    let join = async move {
        let joined = process.join().await;
        ended_tx.send_replace(true);
        joined
    };
    let pumps = async {
        tokio::try_join!(
            pump(&mut stdout, Stream::Stdout, output, ended.clone()),
            pump(&mut stderr, Stream::Stderr, output, ended.clone())
        )
    };
    let feed = async move {
        if let Some(data) = stdin {
            // A write error means the session ended; the status tells how.
            let _ = writer.write_all(&data).await;
        }
        // Keep the writer open: never shut down (see the module doc).
        let _keep = writer;
        std::future::pending::<()>().await
    };
    tokio::pin!(join, pumps, feed);
    let (mut pumped, mut joined) = (false, None);
    while !pumped || joined.is_none() {
        tokio::select! {
            // On a consumer failure return at once: waiting for `join()`
            // with undrained pipes could deadlock (notes §2.3).
            result = &mut pumps, if !pumped => { result?; pumped = true; }
            result = &mut join, if joined.is_none() => joined = Some(result),
            () = &mut feed => unreachable!("stdin feeding never completes"),
        }
    }
    match status.await {
        Some(status) => Ok(decode(&status)),
        None => Err(Error::new(
            ErrorCode::ConnectionLost,
            match joined {
                Some(Err(e)) => format!("the exec connection failed before an exit status arrived: {e}"),
                _ => "the exec connection closed without an exit status".to_owned(),
            },
        )),
    }
}

/// Reads a stream to EOF, forwarding chunks; once `ended` is set, forwards
/// only what is buffered and stops.
async fn pump<R: AsyncRead + Unpin>(
    reader: &mut R,
    stream: Stream,
    output: &mpsc::Sender<OutputChunk>,
    mut ended: watch::Receiver<bool>,
) -> Result<()> {
    // Reused: each chunk is copied out at its exact size, so a 32 KiB frame
    // does not pin a READ_BYTES allocation while it travels to the consumer.
    let mut buf = BytesMut::with_capacity(READ_BYTES);
    loop {
        buf.clear();
        let read = if *ended.borrow() {
            reader.read_buf(&mut buf).now_or_never().unwrap_or(Ok(0))
        } else {
            // Reads are cancel-safe: a read interrupted here consumed nothing.
            tokio::select! {
                read = reader.read_buf(&mut buf) => read,
                _ = ended.changed() => continue,
            }
        };
        let n = read.map_err(|e| Error::internal(format!("reading exec output: {e}")))?;
        if n == 0 {
            return Ok(());
        }
        // Never cancelled: this chunk is delivered before anything else happens.
        output
            .send(OutputChunk { stream, data: Bytes::copy_from_slice(&buf) })
            .await
            .map_err(|_| Error::internal("exec output consumer went away"))?;
    }
}
