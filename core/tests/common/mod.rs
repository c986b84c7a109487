//! A [`Runtime`] that runs the engine's argv as a local child process: the
//! real wrapper and scripts under this machine's `/bin/sh` (dash), real
//! processes, real `/proc`, no cluster. A test double named as such: it
//! stands in for pods/exec to test the engine's timing, kill, trailer and
//! process logic quickly; the cluster suites test the real transport.
//!
//! Like a kubelet it reports the exit status only after the process has
//! exited and both output pipes have closed, closes stdin after the bytes
//! (a v5 server's EOF), and reports death by signal N as 128+N. Each runtime
//! stands for its own pod: it has its own `TMPDIR`, and the scripts' run
//! record directory under `/dev/shm` (a pod's own tmpfs) is rewritten to one
//! under it, so records, sweeps and process files of tests never mix.
#![allow(dead_code)] // each test binary uses a different part

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use sandbox_core::testing::{Completion, ExecEngine, ExecTarget, Release, Runtime, Stdin};
use sandbox_core::{Error, ErrorCode, OutputChunk, Result, Stream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Runs argv locally with `TMPDIR` set to its own directory.
pub(crate) struct LocalRuntime {
    tmpdir: PathBuf,
    /// The program and arguments that stand for `/bin/sh` (dash here;
    /// `bash --posix` where an image's `/bin/sh` is bash).
    shell: Vec<String>,
    /// Sessions still to cut after their first chunk of output (a dropped
    /// connection: the process goes on, the caller gets `connection_lost`).
    cut: Arc<AtomicUsize>,
    /// Sessions started (execs a real runtime would make).
    runs: Arc<AtomicUsize>,
    /// Environment set for every process, over this process's own.
    env: Vec<(String, String)>,
}

impl LocalRuntime {
    /// A runtime whose commands see `TMPDIR=<tmpdir>`.
    pub(crate) fn new(tmpdir: &Path) -> Self {
        LocalRuntime {
            tmpdir: tmpdir.to_owned(),
            shell: vec!["/bin/sh".into()],
            cut: Arc::default(),
            runs: Arc::default(),
            env: Vec::new(),
        }
    }

    /// The same runtime with `name=value` in every process's environment
    /// (a `PATH` stands for an image with fewer tools).
    pub(crate) fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// A counter of the sessions this runtime starts.
    pub(crate) fn runs(&self) -> Arc<AtomicUsize> {
        self.runs.clone()
    }

    /// The same runtime running the scripts with `shell` instead of `/bin/sh`.
    pub(crate) fn with_shell(mut self, shell: &[&str]) -> Self {
        self.shell = shell.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// A handle that makes the next `n` sessions with output drop their
    /// connection after the first chunk.
    pub(crate) fn cutter(&self) -> Arc<AtomicUsize> {
        self.cut.clone()
    }
}

/// A fresh directory under the system temp dir, removed by the OS eventually,
/// with the `shm/` a [`LocalRuntime`] uses for `/dev/shm` (which every
/// container runtime provides).
pub(crate) fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "asb-{label}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(dir.join("shm")).unwrap();
    dir
}

/// An engine over a [`LocalRuntime`] in a fresh TMPDIR; returns the dir too.
pub(crate) fn local_engine(label: &str) -> (ExecEngine, PathBuf) {
    let dir = scratch(label);
    (ExecEngine::with_runtime(Box::new(LocalRuntime::new(&dir)), 64), dir)
}

/// Like [`local_engine`], with the runtime's connection cutter.
pub(crate) fn cuttable_engine(label: &str) -> (ExecEngine, PathBuf, Arc<AtomicUsize>) {
    let dir = scratch(label);
    let runtime = LocalRuntime::new(&dir);
    let cut = runtime.cutter();
    (ExecEngine::with_runtime(Box::new(runtime), 64), dir, cut)
}

/// The target a local engine ignores.
pub(crate) fn target() -> &'static ExecTarget {
    static TARGET: std::sync::LazyLock<ExecTarget> =
        std::sync::LazyLock::new(|| ExecTarget { namespace: "local".into(), pod: "local".into(), container: None });
    &TARGET
}

/// Whether a local process is alive (not a zombie).
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat.rsplit(") ").next().and_then(|s| s.chars().next()), Some('Z' | 'X')),
        Err(_) => false,
    }
}

/// How long a test waits for something that happens in milliseconds when
/// it works: only a hang (or broken behaviour) waits this out, however loaded
/// the machine.
pub(crate) const HANG: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits until `done()` holds, checking every 20 ms; panics with `what` after
/// [`HANG`].
pub(crate) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + HANG;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "still waiting after {HANG:?}: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits until none of `pids` is alive: the negative checks of a kill look
/// only after this, so a slow machine cannot make them pass before the
/// killed tree would have acted.
pub(crate) async fn wait_gone(pids: &[u32]) {
    wait_until(&format!("pids {pids:?} to be gone"), || pids.iter().all(|&p| !alive(p))).await;
}

/// The numbers in `text` (pids a command printed).
pub(crate) fn pids_in(text: &[u8]) -> Vec<u32> {
    String::from_utf8_lossy(text).split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

async fn pump(mut pipe: impl AsyncRead + Unpin, stream: Stream, output: mpsc::Sender<OutputChunk>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                // A closed session stops reading: the writer gets EPIPE, as
                // when a real exec connection closes.
                if output.send(OutputChunk { stream, data: Bytes::copy_from_slice(&buf[..n]) }).await.is_err() {
                    return;
                }
            }
        }
    }
}

impl Runtime for LocalRuntime {
    fn run<'a>(
        &'a self,
        _target: &'a ExecTarget,
        argv: Vec<String>,
        stdin: Stdin,
        output: mpsc::Sender<OutputChunk>,
        release: Release,
    ) -> BoxFuture<'a, Result<Completion>> {
        async move {
            // Bytes or a stream's head, then the stream's pieces.
            let (stdin, rest) = match stdin {
                Stdin::None => (None, None),
                Stdin::Bytes(bytes) => (Some(bytes), None),
                Stdin::Stream { head, rest } => (Some(head), Some(rest)),
                Stdin::Terminal { .. } => {
                    return Err(Error::new(ErrorCode::Unsupported, "the local runtime has no terminal"))
                }
            };
            self.runs.fetch_add(1, Ordering::SeqCst);
            let shm = format!("{}/shm", self.tmpdir.display());
            let mut argv: Vec<String> = argv.into_iter().map(|a| a.replace("/dev/shm", &shm)).collect();
            if argv[0] == "/bin/sh" {
                argv.splice(..1, self.shell.iter().cloned());
            }
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .env("TMPDIR", &self.tmpdir)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| Error::new(ErrorCode::Internal, format!("spawn: {e}")))?;
            if let (Some(head), Some(mut pipe), mut rest) = (stdin, child.stdin.take(), rest) {
                tokio::spawn(async move {
                    let _ = pipe.write_all(&head).await;
                    while let Some(piece) = match rest.as_mut() { Some(r) => r.recv().await, None => None } {
                        if pipe.write_all(&piece).await.is_err() {
                            break;
                        }
                    }
                    let _ = pipe.shutdown().await;
                });
            }
            let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
            // Output goes through a relay channel so a release can stop
            // delivery while the pipes are still read (a drain).
            let (tx, mut rx) = mpsc::channel::<OutputChunk>(16);
            let session = tokio::spawn(async move {
                tokio::join!(pump(out, Stream::Stdout, tx.clone()), pump(err, Stream::Stderr, tx));
                child.wait().await
            });
            loop {
                tokio::select! {
                    chunk = rx.recv() => match chunk {
                        Some(chunk) => {
                            if output.send(chunk).await.is_err() {
                                return Err(Error::internal("exec output consumer went away"));
                            }
                            if self.cut.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                                // The process goes on, as with a real dropped connection.
                                tokio::spawn(async move { while rx.recv().await.is_some() {} });
                                return Err(Error::new(ErrorCode::ConnectionLost, "the exec connection failed (cut by the test)"));
                            }
                        }
                        None => break,
                    },
                    drain = release.requested() => {
                        if drain {
                            // Keep reading (and discarding) until the pipes close.
                            tokio::spawn(async move { while rx.recv().await.is_some() {} });
                        }
                        return Ok(Completion::Released);
                    }
                }
            }
            let status = session.await.unwrap().map_err(|e| Error::internal(format!("wait: {e}")))?;
            Ok(Completion::Exited(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))))
        }
        .boxed()
    }
}

/// Every env name a caller may set that a name clash could lose: the 52
/// one-letter names and `_` (the scripts' minified variables are one or two
/// letters), some two-letter ones, and common names; each with a value of
/// its own that no quoting could pass through unchanged (blanks, newlines,
/// quotes, `$(…)`, backquotes, backslashes, non-ASCII, an empty one).
pub(crate) fn every_env_name() -> Vec<(String, String)> {
    let letters = ('A'..='Z').chain('a'..='z').map(String::from).chain(["_".to_owned()]);
    let others = [
        "gn", "gl", "nu", "st", "ka", "kp", "xt", "wa", "at", "pi", "od", "hd", "PATH", "HOME", "OLDPWD", "SHELL",
        "LANG", "LC_ALL", "TERM", "USER", "TMPDIR", "CDPATH", "ENV", "PS1", "PS4", "HOSTNAME",
    ];
    letters
        .chain(others.iter().map(|n| (*n).to_owned()))
        .enumerate()
        .map(|(i, name)| {
            let value = match i % 4 {
                0 => format!(" {name} $(echo no) `echo no` '\"\\n\\\\ \n\nline ü "),
                1 => format!("{name}\n"),
                2 => String::new(),
                _ => format!("$({name}) ${{{name}}} \"$@\" *"),
            };
            (name, value)
        })
        .collect()
}

/// A command that prints each of `names`' values, each followed by a NUL:
/// first as its own shell sees them, then as a child `/bin/sh` does (so
/// exported too). Only builtins and absolute paths: PATH is among the names.
pub(crate) fn print_env_command(names: &[(String, String)]) -> String {
    let script: String = std::iter::once("printf '%s\\0'".to_owned())
        .chain(names.iter().map(|(n, _)| format!(" \"${{{n}}}\"")))
        .collect();
    format!("{script}; /bin/sh -c {}", shell_quote(&script))
}

/// What [`print_env_command`] prints when every value arrived exactly.
pub(crate) fn printed_env(names: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..2 {
        for (_, value) in names {
            out.extend_from_slice(value.as_bytes());
            out.push(0);
        }
    }
    out
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
