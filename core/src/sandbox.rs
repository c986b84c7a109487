//! [`Sandbox`]: one connected pod plus the exec engine. What the binding
//! exposes to JS as the adapter's `Sandbox` object.
//!
//! File paths are used as given when absolute; a relative path is taken
//! relative to [`Sandbox::cwd`], as commands are, rather than to whatever
//! directory the container's exec starts in.

use std::borrow::Cow;

use bytes::Bytes;

use crate::error::Result;
use crate::exec::{ExecEngine, ExecRequest, ExecResult, ExecTarget};
use crate::files::{self, FileStat, RemoveOptions};

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

    /// Runs a command; an empty `request.cwd` means [`Sandbox::cwd`].
    pub async fn exec(&self, mut request: ExecRequest) -> Result<ExecResult> {
        if request.cwd.is_empty() {
            request.cwd.clone_from(&self.cwd);
        }
        self.engine.exec(&self.target, request).await
    }

    fn resolve<'a>(&self, path: &'a str) -> Cow<'a, str> {
        resolve(&self.cwd, path)
    }

    /// See [`files::read_file`].
    pub async fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>> {
        files::read_file(&self.engine, &self.target, &self.resolve(path), max_bytes).await
    }

    /// See [`files::write_file`].
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
