//! [`Sandbox`]: one connected pod plus the exec engine. What the binding
//! exposes to JS as the adapter's `Sandbox` object.
//!
//! Paths (files, and the `cwd` of commands and processes) are used as given
//! when absolute; a relative one is taken relative to [`Sandbox::cwd`],
//! rather than to whatever directory the container's exec starts in.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::args::{ByteRange, Limits};
use crate::error::{Error, Result};
use crate::exec::{Call, ExecEngine, ExecRequest, ExecResult, ExecTarget, Terminal, TerminalRequest, Tunnel};
use crate::files::{self, FileStat, RemoveOptions};
use crate::ports::{self, ListeningPort, ServiceUrl};
use crate::process::{self, Answer, Kill, Pollers, ProcessChunk, ProcessExit, ProcessInfo, ProcessPoll, SpawnRequest};
use crate::transfer::{self, Totals};
use crate::usage::{self, Usage};

/// A connected sandbox. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sandbox {
    engine: ExecEngine,
    target: ExecTarget,
    cwd: String,
    limits: Limits,
    /// Followers behind polls in a loop; they stop with the last clone.
    pollers: Arc<Pollers>,
    /// The sandbox's id, as the provider's `create` returned it.
    id: String,
    activity: Activity,
    /// The DNS name of the Sandbox's Service, if it has one.
    service: Option<String>,
    /// The provider's hold on transfers' local paths and limits.
    transfers: transfer::Policy,
}

/// Told of every call a sandbox serves, with the sandbox's id: the provider
/// moves the TTL backstop from it. Runs on the caller's thread, so it must
/// be cheap and must not block (the provider's checks a throttle and, at
/// most about once a minute per sandbox, spawns a patch).
#[derive(Clone)]
pub(crate) struct Activity(Arc<dyn Fn(&str) + Send + Sync>);

impl Activity {
    /// Calls `report` with the sandbox's id on each call.
    pub(crate) fn new(report: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Activity(Arc::new(report))
    }

    /// Reports a call on sandbox `id`.
    pub(crate) fn report(&self, id: &str) {
        (self.0)(id)
    }
}

impl Default for Activity {
    /// Reports to nobody.
    fn default() -> Self {
        Activity::new(|_| {})
    }
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Activity")
    }
}

impl Sandbox {
    /// A sandbox running commands in `target`; `cwd` (absolute) is where
    /// commands run unless they say otherwise; `limits` bound every call.
    pub(crate) fn new(engine: ExecEngine, target: ExecTarget, cwd: String, limits: Limits) -> Self {
        Sandbox {
            engine,
            target,
            cwd,
            limits,
            pollers: Arc::default(),
            id: String::new(),
            activity: Activity::default(),
            service: None,
            transfers: transfer::Policy::default(),
        }
    }

    /// The same sandbox with the provider's `transfers` policy.
    pub(crate) fn with_transfers(mut self, policy: transfer::Policy) -> Self {
        self.transfers = policy;
        self
    }

    /// The same sandbox known as `id`, reporting each call to `activity`.
    pub(crate) fn with_activity(mut self, id: &str, activity: Activity) -> Self {
        self.id = id.to_owned();
        self.activity = activity;
        self
    }

    /// The same sandbox reachable in the cluster through the Service
    /// `service_fqdn` (the Sandbox's `status.serviceFQDN`).
    pub(crate) fn with_service(mut self, service_fqdn: Option<String>) -> Self {
        self.service = service_fqdn;
        self
    }

    /// The in-cluster URL of `port` (see `ports::service_url`).
    pub fn url(&self, port: u16) -> Result<ServiceUrl> {
        ports::service_url(&self.target.pod, self.service.as_deref(), port)
    }

    /// The default working directory.
    pub fn cwd(&self) -> &str {
        &self.cwd
    }

    /// The timeout of calls that do not set one (`callTimeoutMs`).
    pub fn call_timeout(&self) -> Duration {
        self.limits.call_timeout
    }

    /// Starts a terminal (see [`ExecEngine::terminal`]); an empty
    /// `request.cwd` means [`Sandbox::cwd`]. `invalid_request` for a timeout
    /// over the provider's [`Limits`].
    pub async fn terminal(&self, mut request: TerminalRequest) -> Result<Terminal> {
        self.check_timeout(request.timeout)?;
        self.activity.report(&self.id);
        request.cwd = self.command_cwd(&request.cwd);
        self.engine.terminal(&self.target, request).await
    }

    /// Runs a command; an empty `request.cwd` means [`Sandbox::cwd`]. With
    /// `request.reattach`, as a spawned process followed to its end (see
    /// [`process::exec_reattached`]). `invalid_request` for a timeout or
    /// output cap over the provider's [`Limits`].
    ///
    /// # Cancel safety
    /// Dropping the future closes the connection but leaves the command
    /// running (pods/exec cannot signal it); the next `connect`'s orphan sweep
    /// kills it. To stop a command, cancel `request.cancel`: that kills its
    /// tree first.
    pub async fn exec(&self, mut request: ExecRequest) -> Result<ExecResult> {
        self.check_timeout(request.timeout)?;
        self.activity.report(&self.id);
        check_bytes("maxOutputBytes", request.max_output_bytes as u64, "maxOutputBytes", self.limits.max_output_bytes)?;
        request.cwd = self.command_cwd(&request.cwd);
        if request.reattach {
            process::exec_reattached(&self.engine, &self.target, request).await
        } else {
            self.engine.exec(&self.target, request).await
        }
    }

    /// See [`process::spawn`]; the cwd as for [`Sandbox::exec`].
    pub async fn spawn(&self, mut request: SpawnRequest, call: Call) -> Result<ProcessInfo> {
        self.check_timeout(request.timeout)?;
        let call = self.call(call);
        request.cwd = self.command_cwd(&request.cwd);
        process::spawn(&self.engine, &self.target, &call, request).await
    }

    /// See [`process::find`].
    pub async fn process(&self, id: &str, call: Call) -> Result<Option<ProcessInfo>> {
        process::find(&self.engine, &self.target, &self.call(call), id).await
    }

    /// See [`process::list`].
    pub async fn processes(&self, call: Call) -> Result<Vec<ProcessInfo>> {
        process::list(&self.engine, &self.target, &self.call(call)).await
    }

    /// See [`process::poll`]. Polls in a loop (the adapter's
    /// `runRemoteProcess`) are answered by a follower after the first, so
    /// they cost a few execs per process instead of one each.
    pub async fn poll_process(&self, id: &str, after: Option<u64>, call: Call) -> Result<ProcessPoll> {
        process::check_poll(id, after)?;
        let call = self.call(call);
        if let Answer::Held(poll) = self.pollers.answer(id, after) {
            return Ok(poll);
        }
        let poll = process::poll(&self.engine, &self.target, &call, id, after).await?;
        if poll.exit.is_none() {
            let last = poll.chunks.last().map(|c| c.sequence).or(after);
            self.pollers.start(&self.engine, &self.target, id, last);
        }
        Ok(poll)
    }

    /// See [`process::follow`]: runs until the process ends, so no call timeout.
    pub async fn follow_process(
        &self,
        id: &str,
        after: Option<u64>,
        output: Option<mpsc::Sender<ProcessChunk>>,
        cancel: CancellationToken,
    ) -> Result<process::Followed> {
        self.activity.report(&self.id);
        process::follow(&self.engine, &self.target, id, after, output, cancel).await
    }

    /// See [`process::wait`]: runs until the process ends, so no call timeout.
    pub async fn wait_process(&self, id: &str, cancel: CancellationToken) -> Result<ProcessExit> {
        self.activity.report(&self.id);
        process::wait(&self.engine, &self.target, id, cancel).await
    }

    /// See [`process::write_stdin`].
    pub async fn write_stdin(&self, id: &str, data: Bytes, call: Call) -> Result<()> {
        process::write_stdin(&self.engine, &self.target, &self.call(call), id, data).await
    }

    /// See [`process::close_stdin`].
    pub async fn close_stdin(&self, id: &str, call: Call) -> Result<()> {
        process::close_stdin(&self.engine, &self.target, &self.call(call), id).await
    }

    /// See [`process::kill`].
    pub async fn kill_process(&self, id: &str, kill: Kill, call: Call) -> Result<()> {
        process::kill(&self.engine, &self.target, &self.call(call), id, kill).await
    }

    /// The start of a call on this sandbox: reports the activity and gives
    /// `call` the provider's call timeout unless it sets its own.
    fn call(&self, mut call: Call) -> Call {
        self.activity.report(&self.id);
        call.timeout = Some(call.timeout.unwrap_or(self.limits.call_timeout));
        call
    }

    fn check_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        match timeout {
            Some(t) if t > self.limits.max_timeout => Err(Error::invalid_request(format!(
                "timeoutMs must be at most {} (the provider's limits.maxTimeoutMs), got {}; nothing was run",
                self.limits.max_timeout.as_millis(),
                t.as_millis()
            ))),
            _ => Ok(()),
        }
    }

    fn resolve<'a>(&self, path: &'a str) -> Cow<'a, str> {
        resolve(&self.cwd, path)
    }

    /// Where a command runs: `cwd` resolved, the sandbox's own when empty.
    fn command_cwd(&self, cwd: &str) -> String {
        if cwd.is_empty() {
            self.cwd.clone()
        } else {
            self.resolve(cwd).into_owned()
        }
    }

    /// See [`files::read_file`]; `invalid_request` for a `max_bytes` over
    /// the provider's [`Limits::max_read_bytes`], before anything is read.
    pub async fn read_file(&self, path: &str, max_bytes: u64, range: ByteRange, call: Call) -> Result<Vec<u8>> {
        check_bytes("maxBytes", max_bytes, "maxReadBytes", self.limits.max_read_bytes)?;
        files::read_file(&self.engine, &self.target, &self.call(call), &self.resolve(path), max_bytes, range).await
    }

    /// See [`files::write_file`].
    ///
    /// # Cancel safety
    /// The content goes to a temp file renamed over `path` at the end:
    /// dropping the future never leaves `path` half written (at most a temp
    /// file next to it).
    pub async fn write_file(&self, path: &str, content: Bytes, call: Call) -> Result<()> {
        files::write_file(&self.engine, &self.target, &self.call(call), &self.resolve(path), content).await
    }

    /// See [`files::mkdir`].
    pub async fn mkdir(&self, path: &str, call: Call) -> Result<()> {
        files::mkdir(&self.engine, &self.target, &self.call(call), &self.resolve(path)).await
    }

    /// See [`files::stat`].
    pub async fn stat(&self, path: &str, call: Call) -> Result<FileStat> {
        files::stat(&self.engine, &self.target, &self.call(call), &self.resolve(path)).await
    }

    /// See [`files::readdir`].
    pub async fn readdir(&self, path: &str, call: Call) -> Result<Vec<Vec<u8>>> {
        files::readdir(&self.engine, &self.target, &self.call(call), &self.resolve(path)).await
    }

    /// See [`files::exists`].
    pub async fn exists(&self, path: &str, call: Call) -> Result<bool> {
        files::exists(&self.engine, &self.target, &self.call(call), &self.resolve(path)).await
    }

    /// See `ports::listening_ports`.
    pub async fn listening_ports(&self, call: Call) -> Result<Vec<ListeningPort>> {
        ports::listening_ports(&self.engine, &self.target, &self.call(call)).await
    }

    /// Carries one TCP connection to `port` in the sandbox until either side
    /// ends it; each call opens its own pods/portforward connection, so it
    /// reaches whatever pod runs the sandbox now. See [`Tunnel`]; it waits
    /// for a tunnel slot up to the call timeout (see
    /// [`ExecEngine::port_forward`]).
    pub async fn port_forward(&self, port: u16, tunnel: Tunnel) -> Result<()> {
        self.activity.report(&self.id);
        self.engine.port_forward(&self.target, port, tunnel, self.limits.call_timeout).await
    }

    /// See [`files::remove`].
    pub async fn remove(&self, path: &str, options: RemoveOptions, call: Call) -> Result<()> {
        files::remove(&self.engine, &self.target, &self.call(call), &self.resolve(path), options).await
    }

    /// See `usage::usage`; disk figures of the filesystem holding cwd.
    pub async fn usage(&self, sample: Option<Duration>, call: Call) -> Result<Usage> {
        usage::usage(&self.engine, &self.target, &self.call(call), &self.cwd, sample).await
    }
}

impl Sandbox {
    /// The limits of a transfer that asked for `requested`:
    /// `invalid_request` over the provider's `transfers` (checked again by
    /// each transfer call; this is for refusing before a stream exists).
    pub fn transfer_limits(&self, requested: transfer::Requested) -> Result<transfer::Limits> {
        self.transfers.limits(requested)
    }

    /// See `transfer::download`; `path` resolved as for files. No call
    /// timeout: a transfer lasts as long as its tree; `cancel` stops it.
    pub async fn download(
        &self,
        path: &str,
        exclude: &[String],
        requested: transfer::Requested,
        cancel: CancellationToken,
        out: mpsc::Sender<Bytes>,
    ) -> Result<Totals> {
        let limits = self.transfers.limits(requested)?;
        self.activity.report(&self.id);
        transfer::download(&self.engine, &self.target, &cancel, &self.resolve(path), exclude, limits, out).await
    }

    /// See `transfer::download_to`; `to` must resolve inside the
    /// provider's `transfers.localRoot` if it has one.
    pub async fn download_to(
        &self,
        path: &str,
        exclude: &[String],
        requested: transfer::Requested,
        cancel: CancellationToken,
        to: &Path,
        overwrite: bool,
    ) -> Result<Totals> {
        let limits = self.transfers.limits(requested)?;
        let to = self.transfers.local_path("download target", to)?;
        self.activity.report(&self.id);
        let path = self.resolve(path);
        transfer::download_to(&self.engine, &self.target, &cancel, &path, exclude, limits, to, overwrite).await
    }

    /// See `transfer::upload`; `dir` resolved as for files. A local
    /// directory must resolve inside the provider's `transfers.localRoot`
    /// if it has one.
    pub async fn upload(
        &self,
        source: transfer::Source,
        dir: &str,
        overwrite: bool,
        requested: transfer::Requested,
        cancel: CancellationToken,
    ) -> Result<Totals> {
        let limits = self.transfers.limits(requested)?;
        let source = match source {
            transfer::Source::Directory(d) => {
                transfer::Source::Directory(self.transfers.local_path("upload source", &d)?)
            }
            other => other,
        };
        self.activity.report(&self.id);
        transfer::upload(&self.engine, &self.target, &cancel, source, &self.resolve(dir), overwrite, limits).await
    }
}

/// `invalid_request` for a byte count `name` over the provider's
/// `limits.<limit_name>`, before anything is read.
fn check_bytes(name: &str, value: u64, limit_name: &str, limit: u64) -> Result<()> {
    if value > limit {
        return Err(Error::invalid_request(format!(
            "{name} must be at most {limit} (the provider's limits.{limit_name}), got {value}; nothing was read"
        )));
    }
    Ok(())
}

/// `path` if absolute (or empty, which the file operations reject), else `cwd/path`.
fn resolve<'a>(cwd: &str, path: &'a str) -> Cow<'a, str> {
    if path.starts_with('/') || path.is_empty() {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(format!("{}/{path}", cwd.trim_end_matches('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn relative_paths_resolve_against_cwd() {
        assert_eq!(resolve("/w", "/etc/x"), "/etc/x");
        assert_eq!(resolve("/w", "a/b"), "/w/a/b");
        assert_eq!(resolve("/", "-rf"), "/-rf");
        assert_eq!(resolve("/w/", "a"), "/w/a");
        assert_eq!(resolve("/w", ""), "");
    }
}
