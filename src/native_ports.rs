//! The ports of a sandbox as JS sees them: `listeningPorts`, and
//! `NativeTunnel`, one forwarded TCP connection, which `js/ports.js` joins
//! to a local socket (`forward`) or to an HTTP request (`fetch`).
//!
//! Bytes from the port reach JS through the output delivery (the
//! `(stream, chunk)` callback, stream always 1) with its backpressure; a JS
//! consumer whose own buffer is full calls `pause()` until it drains. Bytes
//! to the port go through `write`, which settles once the tunnel took them:
//! awaiting it is the backpressure the other way.

use std::sync::Mutex;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sandbox_core::{lock, port, ListeningPort, ServiceUrl, Tunnel};
use tokio::sync::{mpsc, watch};

use crate::calls::{promise, NativeCancel};
use crate::delivery::{self, deliver, ChunkCallback};
use crate::errors::to_napi;
use crate::native_sandbox::NativeSandbox;
use crate::task::Task;

/// Writes queued towards the port.
const INPUT_DEPTH: usize = 4;

/// A TCP port the sandbox listens on.
#[napi(object)]
pub struct NativeListeningPort {
    /// The port.
    pub port: u32,
    /// The bound address (`0.0.0.0` / `::`: every address).
    pub address: String,
    /// `IPv4` or `IPv6`.
    pub family: String,
    /// Bound to loopback only.
    pub loopback_only: bool,
}

impl From<ListeningPort> for NativeListeningPort {
    fn from(p: ListeningPort) -> Self {
        NativeListeningPort {
            port: u32::from(p.port),
            address: p.address,
            family: p.family.to_owned(),
            loopback_only: p.loopback_only,
        }
    }
}

/// Where a port is reached inside the cluster (the sandbox's Service).
#[napi(object)]
pub struct NativeServiceUrl {
    /// `http://<host>:<port>`.
    pub url: String,
    /// The Service's cluster DNS name.
    pub host: String,
    /// The port.
    pub port: u32,
}

impl From<ServiceUrl> for NativeServiceUrl {
    fn from(u: ServiceUrl) -> Self {
        NativeServiceUrl { url: u.url, host: u.host, port: u32::from(u.port) }
    }
}

/// One forwarded connection.
#[napi]
pub struct NativeTunnel {
    input: Mutex<Option<mpsc::Sender<Bytes>>>,
    paused: watch::Sender<bool>,
    task: Task<()>,
}

#[napi]
impl NativeTunnel {
    /// Sends bytes to the port; settles once the tunnel took them. After the
    /// tunnel ended the bytes are dropped (`wait()` says how it ended).
    #[napi]
    pub async fn write(&self, data: Buffer) -> napi::Result<()> {
        let input = lock(&self.input).clone();
        if let Some(input) = input {
            let _ = input.send(Bytes::from_owner(data)).await;
        }
        Ok(())
    }

    /// Stops reading from the port until `resume()`.
    #[napi]
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Reads from the port again.
    #[napi]
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Closes the connection (the server in the sandbox sees it reset);
    /// idempotent. `wait()` resolves.
    #[napi]
    pub fn close(&self) {
        lock(&self.input).take();
        self.task.abort();
    }

    /// Resolves when the connection ended (the server closed it, or
    /// `close()`) and every chunk reached the callback; rejects with the
    /// tunnel's error. Callable once.
    #[napi]
    pub async fn wait(&self) -> napi::Result<()> {
        self.task.wait("tunnel").await
    }
}

/// `value` if it is a TCP port number, else the core's `invalid_request`
/// naming it `name`: `js/ports.js` asks before it opens anything.
#[napi]
pub fn check_port(name: String, value: f64) -> napi::Result<u32> {
    port(&name, value).map(u32::from).map_err(to_napi)
}

#[napi]
impl NativeSandbox {
    /// The TCP ports listening in the sandbox's network.
    #[napi(ts_return_type = "Promise<Array<NativeListeningPort>>")]
    pub fn listening_ports<'env>(
        &self,
        env: &'env Env,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, Vec<NativeListeningPort>>> {
        let (sandbox, call) = (self.core().clone(), cancel.call());
        promise(env, async move { Ok(sandbox.listening_ports(call).await?.into_iter().map(Into::into).collect()) })
    }

    /// The in-cluster URL of `port` through the sandbox's Service.
    #[napi]
    pub fn url(&self, port_number: f64) -> napi::Result<NativeServiceUrl> {
        let port = port("port", port_number).map_err(to_napi)?;
        self.core().url(port).map(Into::into).map_err(to_napi)
    }

    /// Opens one connection to `port` in the sandbox; bytes from it go to
    /// `onData(1, chunk)`.
    #[napi]
    pub fn open_tunnel(
        &self,
        port_number: f64,
        #[napi(ts_arg_type = "(stream: number, chunk: Buffer) => void")] on_data: ChunkCallback,
    ) -> napi::Result<NativeTunnel> {
        let port = port("port", port_number).map_err(to_napi)?;
        let sandbox = self.core().clone();
        let (input, input_rx) = mpsc::channel(INPUT_DEPTH);
        let (paused, paused_rx) = watch::channel(false);
        let task = self.start(move |stop| async move {
            let (output, output_rx) = delivery::channel();
            let tunnel = Tunnel { input: input_rx, output, paused: paused_rx };
            let forwarded = async {
                let (result, ()) = tokio::join!(sandbox.port_forward(port, tunnel), deliver(output_rx, on_data));
                result
            };
            tokio::select! {
                result = forwarded => result,
                () = stop.cancelled() => Ok(()),
            }
        });
        Ok(NativeTunnel { input: Mutex::new(Some(input)), paused, task })
    }
}
