//! One forwarded TCP connection over the pods/portforward WebSocket
//! (`v4.channel.k8s.io`, which the API server passes through to the
//! kubelet's own handler).
//!
//! kube's `Portforwarder` is not used, for the reasons the exec session does
//! not use `AttachedProcess` (see [`super::websocket`]): it moves bytes
//! through a background task and local duplex pipes, neither pings nor
//! notices a stalled connection, and reports the error channel apart from the
//! stream. Here the session is the exec session's: opened by the same
//! [`PodExecRuntime::open`], pinged and read with the same stall rule.
//!
//! Protocol (one port per connection): channel 0 carries data both ways,
//! channel 1 the node's error text; the first frame the server sends on each
//! channel is the port (2 bytes, little endian) and nothing else counts in
//! it. The server closes the WebSocket when the connection in the pod ends.
//! There is no half-close: a client that stops sending leaves it open.

use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::core::Request;
use kube::Resource;
use tokio_tungstenite::tungstenite::Message;

use super::output::{OutputChunk, Stream};
use super::runtime::Tunnel;
use super::websocket::{keep_pinging, next_frame, pings, PodExecRuntime};
use super::ExecTarget;
use crate::client::{api_error, Action};
use crate::error::{Error, ErrorCode, Result};

/// Most of the node's error text kept.
const MAX_ERROR_BYTES: usize = 1024;

impl PodExecRuntime {
    /// Carries one connection to `port` of `target`: see
    /// [`Runtime::port_forward`](super::Runtime::port_forward). Ends `Ok`
    /// when the pod's side closed it, or when nobody reads `output` any more.
    pub(super) async fn forward(&self, target: &ExecTarget, port: u16, tunnel: Tunnel) -> Result<()> {
        let action =
            Action { verb: "get", resource: "pods/portforward", name: Some(&target.pod), namespace: &target.namespace };
        let request = Request::new(Pod::url_path(&(), Some(&target.namespace)))
            .portforward(&target.pod, &[port])
            .map_err(|e| api_error(kube::Error::BuildRequest(e), action))?;
        let ws = self.open(request, action, "port-forward").await?;
        let liveness = self.liveness();
        let Tunnel { mut input, output, mut paused } = tunnel;
        let (mut sink, mut frames) = ws.split();
        // The one writer: the local side's bytes with pings between them,
        // then pings. A failed write means the connection ended; the reader
        // says how.
        let feed = async {
            let mut ticks = pings(liveness);
            loop {
                let message = tokio::select! {
                    data = input.recv() => match data {
                        Some(data) => {
                            let mut message = BytesMut::with_capacity(data.len() + 1);
                            message.put_u8(0);
                            message.put_slice(&data);
                            Message::Binary(message.freeze())
                        }
                        None => break,
                    },
                    _ = ticks.tick() => Message::Ping(Bytes::new()),
                };
                if sink.send(message).await.is_err() {
                    break;
                }
            }
            keep_pinging(&mut sink, ticks).await;
        };
        let read = async {
            let mut first = [true, true];
            let mut error = Vec::new();
            loop {
                // A paused consumer is not a stall: wait before asking.
                while *paused.borrow_and_update() {
                    if paused.changed().await.is_err() {
                        return Ok(());
                    }
                }
                let Some(message) = next_frame(&mut frames, liveness.stall, "port-forward").await? else { break };
                let data = match message {
                    Message::Binary(data) => data,
                    Message::Close(_) => break,
                    _ => continue,
                };
                let channel = match data.first() {
                    Some(&c) if c < 2 => usize::from(c),
                    _ => continue,
                };
                // The port announcement opens each channel.
                let skip = if std::mem::take(&mut first[channel]) { 3 } else { 1 };
                let payload = data.slice(skip.min(data.len())..);
                if payload.is_empty() {
                    continue;
                }
                if channel == 1 {
                    let room = MAX_ERROR_BYTES.saturating_sub(error.len());
                    error.extend_from_slice(&payload[..payload.len().min(room)]);
                } else if output.send(OutputChunk { stream: Stream::Stdout, data: payload }).await.is_err() {
                    return Ok(()); // the local side closed the connection
                }
            }
            match error.is_empty() {
                true => Ok(()),
                false => Err(node_error(port, &String::from_utf8_lossy(&error))),
            }
        };
        tokio::select! {
            ended = read => ended,
            () = feed => unreachable!("the writer never completes"),
        }
    }
}

/// What the node's error text means for the caller. Runtimes word it
/// themselves; these are containerd's and CRI-O's words for "nothing
/// listens" and the sandboxed runtimes' (gVisor, Kata) for "cannot".
fn node_error(port: u16, text: &str) -> Error {
    let lower = text.to_ascii_lowercase();
    if lower.contains("connection refused") || lower.contains("failed to connect to localhost") {
        Error::new(
            ErrorCode::NotFound,
            format!("nothing listens on port {port} in the sandbox (the node said: {text})"),
        )
    } else if ["not support", "unsupported", "not implemented", "unimplemented"].iter().any(|w| lower.contains(w)) {
        Error::new(
            ErrorCode::Unsupported,
            format!(
                "this sandbox's runtime cannot forward ports (the node said: {text}); use sandbox.url() with a Service"
            ),
        )
    } else {
        Error::new(ErrorCode::Unavailable, format!("the node could not forward port {port}: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_errors_map_to_codes() {
        let refused = "error forwarding port 80 to pod p, uid : failed to connect to localhost:80 inside namespace \
                       \"x\", IPv4: dial tcp4 127.0.0.1:80: connect: connection refused";
        assert_eq!(node_error(80, refused).code, ErrorCode::NotFound);
        let kata = "error forwarding port 80 to pod p: port forwarding is not supported by the kata runtime";
        assert_eq!(node_error(80, kata).code, ErrorCode::Unsupported);
        assert_eq!(node_error(80, "error forwarding port 80: EOF").code, ErrorCode::Unavailable);
    }
}
