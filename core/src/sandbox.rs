//! [`Sandbox`]: one connected pod plus the exec engine. What the binding
//! exposes to JS as the adapter's `Sandbox` object.
//!
//! Paths (files, and the `cwd` of commands and processes) are used as given
//! when absolute; a relative one is taken relative to [`Sandbox::cwd`],
//! rather than to whatever directory the container's exec starts in.

use std::borrow::Cow;

use bytes::Bytes;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::exec::{ExecEngine, ExecRequest, ExecResult, ExecTarget};
use crate::files::{self, FileStat, RemoveOptions};
use crate::process::{self, ProcessChunk, ProcessExit, ProcessInfo, ProcessPoll, SpawnRequest};

/// A connected sandbox. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sandbox {
    engine: ExecEngine,
    target: ExecTarget,
    cwd: String,
}

impl Sandbox {
    /// A sandbox running commands in `target`; `cwd` (absolute) is where
    /// commands run unless they say otherwise.
    pub fn new(engine: ExecEngine, target: ExecTarget, cwd: String) -> Self {
        Sandbox { engine, target, cwd }
    }

    /// The default working directory.
    pub fn cwd(&self) -> &str {
        &self.cwd
    }

    /// The pod the commands run in.
    pub fn target(&self) -> &ExecTarget {
        &self.target
    }

    /// Runs a command; an empty `request.cwd` means [`Sandbox::cwd`]. With
    /// `reattach`, as a spawned process followed to its end (see
    /// [`process::exec_reattached`]).
    ///
    /// # Cancel safety
    /// Dropping the future closes the connection but leaves the command
    /// running (pods/exec cannot signal it); the next `connect`'s orphan sweep
    /// kills it. To stop a command, cancel `request.cancel`: that kills its
    /// tree first.
    pub async fn exec(&self, mut request: ExecRequest, reattach: bool) -> Result<ExecResult> {
        request.cwd = self.command_cwd(&request.cwd);
        if reattach {
            process::exec_reattached(&self.engine, &self.target, request).await
        } else {
            self.engine.exec(&self.target, request).await
        }
    }

    /// See [`process::spawn`]; the cwd as for [`Sandbox::exec`].
    pub async fn spawn(&self, mut request: SpawnRequest) -> Result<ProcessInfo> {
        request.cwd = self.command_cwd(&request.cwd);
        process::spawn(&self.engine, &self.target, request).await
    }

    /// See [`process::find`].
    pub async fn process(&self, id: &str) -> Result<Option<ProcessInfo>> {
        process::find(&self.engine, &self.target, id).await
    }

    /// See [`process::list`].
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        process::list(&self.engine, &self.target).await
    }

    /// See [`process::poll`].
    pub async fn poll_process(&self, id: &str, after: Option<u64>) -> Result<ProcessPoll> {
        process::poll(&self.engine, &self.target, id, after).await
    }

    /// See [`process::follow`].
    pub async fn follow_process(
        &self,
        id: &str,
        after: Option<u64>,
        output: Option<mpsc::Sender<ProcessChunk>>,
        cancel: CancellationToken,
    ) -> Result<process::Followed> {
        process::follow(&self.engine, &self.target, id, after, output, cancel).await
    }

    /// See [`process::wait`].
    pub async fn wait_process(&self, id: &str, cancel: CancellationToken) -> Result<ProcessExit> {
        process::wait(&self.engine, &self.target, id, cancel).await
    }

    /// See [`process::write_stdin`].
    pub async fn write_stdin(&self, id: &str, data: Bytes) -> Result<()> {
        process::write_stdin(&self.engine, &self.target, id, data).await
    }

    /// See [`process::close_stdin`].
    pub async fn close_stdin(&self, id: &str) -> Result<()> {
        process::close_stdin(&self.engine, &self.target, id).await
    }

    /// See [`process::kill`].
    pub async fn kill_process(&self, id: &str, signal: &str) -> Result<()> {
        process::kill(&self.engine, &self.target, id, signal).await
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

    /// See [`files::read_file`].
    pub async fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>> {
        files::read_file(&self.engine, &self.target, &self.resolve(path), max_bytes).await
    }

    /// See [`files::write_file`].
    ///
    /// # Cancel safety
    /// The content goes to a temp file renamed over `path` at the end:
    /// dropping the future never leaves `path` half written (at most a temp
    /// file next to it).
    pub async fn write_file(&self, path: &str, content: Bytes) -> Result<()> {
        files::write_file(&self.engine, &self.target, &self.resolve(path), content).await
    }

    /// See [`files::mkdir`].
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        files::mkdir(&self.engine, &self.target, &self.resolve(path)).await
    }

    /// See [`files::stat`].
    pub async fn stat(&self, path: &str) -> Result<FileStat> {
        files::stat(&self.engine, &self.target, &self.resolve(path)).await
    }

    /// See [`files::readdir`].
    pub async fn readdir(&self, path: &str) -> Result<Vec<Vec<u8>>> {
        files::readdir(&self.engine, &self.target, &self.resolve(path)).await
    }

    /// See [`files::exists`].
    pub async fn exists(&self, path: &str) -> Result<bool> {
        files::exists(&self.engine, &self.target, &self.resolve(path)).await
    }

    /// See [`files::remove`].
    pub async fn remove(&self, path: &str, options: RemoveOptions) -> Result<()> {
        files::remove(&self.engine, &self.target, &self.resolve(path), options).await
    }
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
