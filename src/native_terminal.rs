//! `NativeTerminal`: the napi face of `sandbox_core::Terminal`.
//! `js/terminal.js` wraps it into the `SandboxTerminal` object (AbortSignal,
//! a throwing `onData`, string input, error codes). Output reaches JS as
//! exec output does (`delivery`), in a task that the terminal's handle
//! owns: dropping the handle, or the provider, ends the terminal.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sandbox_core::{terminal_dimension, timeout_ms, Terminal, TerminalRequest, TerminalSize};

use crate::calls::{promise, NativeCancel};
use crate::delivery::{self, deliver, ChunkCallback};
use crate::errors::to_napi;
use crate::native_sandbox::NativeSandbox;
use crate::task::Task;

/// Options of `terminal`; `js/terminal.js` fills and checks the JS side.
#[napi(object)]
pub struct NativeTerminalOptions {
    /// Shell command line; default: an interactive login shell.
    pub command: Option<String>,
    /// Working directory; default: the sandbox's cwd.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Option<HashMap<String, String>>,
    /// Columns, 1..4096; default 80.
    pub cols: Option<f64>,
    /// Rows, 1..4096; default 24.
    pub rows: Option<f64>,
    /// Kill the terminal after this many ms; 0 or absent: never.
    pub timeout_ms: Option<f64>,
}

/// How a terminal ended.
#[napi(object)]
pub struct NativeTerminalExit {
    /// Exit status; null when the timeout killed it.
    pub exit_code: Option<i32>,
    /// The timeout fired.
    pub timed_out: bool,
}

/// A running terminal.
#[napi]
pub struct NativeTerminal {
    inner: Arc<Terminal>,
    /// Its output to JS; ends once every chunk has reached JS. Its token is
    /// the terminal's.
    output: Task<()>,
}

/// A size from JS numbers.
fn size(cols: Option<f64>, rows: Option<f64>) -> sandbox_core::Result<TerminalSize> {
    Ok(TerminalSize { cols: terminal_dimension("cols", cols, 80)?, rows: terminal_dimension("rows", rows, 24)? })
}

#[napi]
impl NativeSandbox {
    /// Starts a terminal; resolves once its command runs. `onChunk(1,
    /// chunk)` gets its output (stdout and stderr merged); it must not throw.
    #[napi(ts_return_type = "Promise<NativeTerminal>")]
    pub fn terminal<'env>(
        &self,
        env: &'env Env,
        options: NativeTerminalOptions,
        #[napi(ts_arg_type = "(stream: number, chunk: Buffer) => void")] on_chunk: ChunkCallback,
        cancel: &NativeCancel,
    ) -> napi::Result<PromiseRaw<'env, NativeTerminal>> {
        let (sandbox, signal) = (self.core().clone(), cancel.call().cancel);
        let (tx, rx) = delivery::channel();
        // Ends when the terminal's run drops its sender, after the last chunk
        // reached JS. The caller's signal stops the terminal as the handle does.
        let output = self.start(move |stop| async move {
            let signalled = async {
                signal.cancelled().await;
                stop.cancel();
                std::future::pending::<()>().await;
            };
            tokio::select! {
                () = deliver(rx, on_chunk) => {}
                () = signalled => {}
            }
            Ok(())
        });
        let cancel = output.token().clone();
        promise(env, async move {
            let request = TerminalRequest {
                command: options.command,
                cwd: options.cwd.unwrap_or_default(),
                env: options.env.unwrap_or_default().into_iter().collect(),
                size: size(options.cols, options.rows)?,
                timeout: timeout_ms("timeoutMs", options.timeout_ms)?,
                cancel,
                output: tx,
            };
            let terminal = sandbox.terminal(request).await?;
            Ok(NativeTerminal { inner: Arc::new(terminal), output })
        })
    }
}

#[napi]
impl NativeTerminal {
    /// Pid of the terminal's session leader in the sandbox.
    #[napi(getter)]
    pub fn pid(&self) -> u32 {
        self.inner.pid()
    }

    /// Types bytes into the terminal; resolves once they are on their way.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn write<'env>(&self, env: &'env Env, data: Buffer) -> napi::Result<PromiseRaw<'env, ()>> {
        let (terminal, data) = (self.inner.clone(), Bytes::from_owner(data));
        promise(env, async move { terminal.write(data).await })
    }

    /// Resizes the terminal.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn resize<'env>(&self, env: &'env Env, cols: f64, rows: f64) -> napi::Result<PromiseRaw<'env, ()>> {
        let terminal = self.inner.clone();
        promise(env, async move { terminal.resize(size(Some(cols), Some(rows))?).await })
    }

    /// Sends a signal to the terminal's process tree.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn kill<'env>(&self, env: &'env Env, signal: String) -> napi::Result<PromiseRaw<'env, ()>> {
        let terminal = self.inner.clone();
        promise(env, async move { terminal.kill(&signal).await })
    }

    /// HUP, then KILL after 2 s; resolves once it has ended. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let terminal = self.inner.clone();
        promise(env, async move { terminal.close().await })
    }

    /// Resolves how it ended, after its last output chunk reached JS.
    /// Callable once.
    #[napi]
    pub async fn wait(&self) -> napi::Result<NativeTerminalExit> {
        let exit = self.inner.wait().await;
        // A second wait() gets the core's error.
        if let Some(delivered) = self.output.result().await {
            delivered?;
        }
        let exit = exit.map_err(to_napi)?;
        Ok(NativeTerminalExit { exit_code: exit.exit_code, timed_out: exit.timed_out })
    }
}
