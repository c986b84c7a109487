//! Trees in and out of a sandbox as tar streams: one exec per transfer,
//! through the exec engine's wrapper (so an abort or a dropped connection
//! kills the in-pod `tar`), streamed both ways with backpressure.
//!
//! Every archive is hostile until checked, wherever it comes from: the
//! caller's (upload) or the sandbox's (download to a local directory). The
//! rules live in `archive::Rules` and apply in one place for each
//! direction:
//! - **upload**: the source's entries pass the rules and are re-encoded
//!   (`archive::encode_header`); the in-pod `tar` only ever sees that
//!   re-encoding, so it cannot meet an absolute name, `..`, a device or a
//!   link out, whatever the source held. A local directory or bytes are
//!   checked whole before anything runs; a stream is checked as it comes,
//!   and a refusal stops the transfer (kills the in-pod `tar`) with what
//!   came before it extracted.
//! - **download**: the in-pod `tar`'s output is parsed as it streams
//!   (`archive::Parser`: structure, caps, the end marker), and extracted
//!   locally by `local::Extractor` under the rules, never following a
//!   symlink.
//!
//! A transfer is not atomic: a failure or abort leaves what was extracted
//! before it.

mod archive;
mod local;
mod scripts;

use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{quoted, Error, ErrorCode, Result};
use crate::exec::output::{HeadBuffer, OutputChunk, Stream};
use crate::exec::wrapper::Shell;
use crate::exec::{aborted, ExecEngine, ExecTarget, Flow, Input, Program, RunOptions, Sink, Slots};
use crate::files::scripts::{NOT_DIRECTORY, NOT_FOUND};
use archive::{Entry, Event, Kind, Parser, Rules};

/// Default `maxBytes` of a transfer (archive bytes).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default `maxEntries`.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Archive bytes per stdin frame; the in-pod script starts one `head -c`
/// for each.
pub(crate) const FRAME_BYTES: usize = 1024 * 1024;
/// Frames (or output chunks) in flight between a producer and the exec.
const DEPTH: usize = 4;
/// Stderr kept for error messages.
const MESSAGE_BYTES: usize = 16 * 1024;

/// Caps of one transfer.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Archive bytes (headers and padding included).
    pub max_bytes: u64,
    /// Entries (files, directories, links).
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bytes: DEFAULT_MAX_BYTES, max_entries: DEFAULT_MAX_ENTRIES }
    }
}

/// The limits a caller asked for (`None`: the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Requested {
    /// `maxBytes`.
    pub max_bytes: Option<u64>,
    /// `maxEntries`.
    pub max_entries: Option<u64>,
}

pub(crate) use crate::args::TransferPolicy as Policy;

impl Policy {
    /// The limits of a transfer that asked for `requested`: over the
    /// provider's is `invalid_request`.
    pub(crate) fn limits(&self, requested: Requested) -> Result<Limits> {
        let one = |name: &str, asked: Option<u64>, cap: Option<u64>, default: u64| match (asked, cap) {
            (Some(n), Some(cap)) if n > cap => Err(Error::invalid_request(format!(
                "{name} must be at most {cap} (the provider's transfers.{name}), got {n}; nothing was run"
            ))),
            (Some(n), _) => Ok(n),
            (None, cap) => Ok(cap.map_or(default, |cap| cap.min(default))),
        };
        Ok(Limits {
            max_bytes: one("maxBytes", requested.max_bytes, self.max_bytes, DEFAULT_MAX_BYTES)?,
            max_entries: one("maxEntries", requested.max_entries, self.max_entries, DEFAULT_MAX_ENTRIES)?,
        })
    }

    /// The local path `path` (`what` in messages) as the transfer uses it:
    /// as given without a `localRoot`; with one, resolved (symlinks, `..`;
    /// a missing end below its nearest existing directory) and inside the
    /// root, else `invalid_request` before anything is read or written.
    pub(crate) fn local_path(&self, what: &str, path: &Path) -> Result<PathBuf> {
        let Some(root) = &self.local_root else { return Ok(path.to_path_buf()) };
        let outside = || {
            Error::invalid_request(format!(
                "{what} {} does not resolve inside the provider's transfers.localRoot {}; nothing was read or written",
                quoted(&path.display().to_string()),
                quoted(&root.display().to_string())
            ))
        };
        let real = resolved(path).ok_or_else(outside)?;
        if real.starts_with(root) {
            Ok(real)
        } else {
            Err(outside())
        }
    }
}

/// `path` with its symlinks and `..` resolved; a missing end (plain names
/// only, none of them a dangling symlink) appended to its nearest existing
/// directory, resolved. `None` when that cannot be said.
fn resolved(path: &Path) -> Option<PathBuf> {
    let mut missing = Vec::new();
    let mut at = path;
    loop {
        if let Ok(mut real) = std::fs::canonicalize(at) {
            real.extend(missing.iter().rev());
            return Some(real);
        }
        // Something that exists but does not resolve: a dangling or looping symlink.
        if std::fs::symlink_metadata(at).is_ok() {
            return None;
        }
        let Some(std::path::Component::Normal(name)) = at.components().next_back() else { return None };
        missing.push(name);
        at = match at.parent()? {
            p if p.as_os_str().is_empty() => Path::new("."),
            p => p,
        };
    }
}

/// What a transfer moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Regular files, symlinks and hard links.
    pub files: u64,
    /// Directories (the target itself not counted).
    pub directories: u64,
    /// Bytes of file contents.
    pub bytes: u64,
}

impl Totals {
    /// Counts a checked entry.
    pub(crate) fn count(&mut self, entry: &Entry) {
        match entry.kind {
            Kind::Directory => self.directories += 1,
            _ => self.files += 1,
        }
        self.bytes += entry.size;
    }
}

/// What an upload sends.
pub enum Source {
    /// A local directory's tree (unix only).
    Directory(PathBuf),
    /// A whole tar archive.
    Bytes(Bytes),
    /// A tar archive as it comes; the sender's drop ends it.
    Stream(mpsc::Receiver<Bytes>),
}

/// Checks `path` as the file calls do, then `exclude` patterns (no NUL, no
/// newline): what `download` refuses before anything runs, for callers
/// that want the refusal before they hand out a stream.
pub fn check_args(path: &str, exclude: &[String]) -> Result<()> {
    crate::files::check_path(path)?;
    for pattern in exclude {
        if pattern.is_empty() || pattern.contains(['\n', '\0']) {
            return Err(Error::invalid_request(format!(
                "exclude pattern {} is empty or holds a newline or NUL; nothing was run",
                quoted(pattern)
            )));
        }
    }
    Ok(())
}

/// Streams the tree under `path` in the sandbox (a directory) as a tar
/// archive into `out`: the in-pod `tar`'s bytes as they come, each chunk
/// sent only once `out` has room (a slow consumer slows the sandbox's
/// `tar`). Resolves once the archive ended properly and `tar` exited 0:
/// an archive cut short is `connection_lost`, never a shorter tree. Over
/// `limits` is `too_large`; a consumer that drops `out` or a cancelled
/// `cancel` is `aborted`; all three kill the in-pod `tar`. Counts what the
/// archive held.
pub(crate) async fn download(
    engine: &ExecEngine,
    target: &ExecTarget,
    cancel: &CancellationToken,
    path: &str,
    exclude: &[String],
    limits: Limits,
    out: mpsc::Sender<Bytes>,
) -> Result<Totals> {
    check_args(path, exclude)?;
    let env = vec![("transfer_dir".to_owned(), path.to_owned()), ("transfer_excludes".to_owned(), exclude.join("\n"))];
    let mut sink = DownloadSink {
        parser: Parser::new(limits.max_entries, limits.max_bytes),
        totals: Totals::default(),
        out,
        failure: None,
        stop: cancel.child_token(),
        stderr: HeadBuffer::new(MESSAGE_BYTES),
    };
    let stop = sink.stop.clone();
    let code = run(engine, target, scripts::DOWNLOAD, env, None, stop, &mut sink).await;
    if let Some(e) = sink.failure.take() {
        return Err(e);
    }
    let code = code?;
    exit_status(code, path, "download", sink.stderr)?;
    sink.parser.finish().map_err(|e| {
        Error::new(ErrorCode::ConnectionLost, format!("download {}: the archive was cut short ({e})", quoted(path)))
    })?;
    Ok(sink.totals)
}

/// [`download`] extracted into the local directory `to` (created if
/// missing; one that is not empty needs `overwrite`, else `invalid_state`
/// with nothing run) by [`local::Extractor`]: the archive is hostile, a
/// refused entry is `invalid_state` and stops the transfer (what came
/// before it stays, symlinks excepted: they are made only at the end).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn download_to(
    engine: &ExecEngine,
    target: &ExecTarget,
    cancel: &CancellationToken,
    path: &str,
    exclude: &[String],
    limits: Limits,
    to: PathBuf,
    overwrite: bool,
) -> Result<Totals> {
    check_args(path, exclude)?;
    let mut extractor = local::Extractor::new(&to, limits, overwrite)?;
    let (tx, mut rx) = mpsc::channel::<Bytes>(DEPTH);
    let extract = tokio::task::spawn_blocking(move || {
        while let Some(chunk) = rx.blocking_recv() {
            extractor.feed(&chunk)?;
        }
        extractor.finish()
    });
    let downloaded = download(engine, target, cancel, path, exclude, limits, tx).await;
    let extracted = extract.await.map_err(|e| Error::internal(format!("the local extraction failed: {e}")))?;
    match (downloaded, extracted) {
        // The extractor's refusal is why the download stopped.
        (Err(e), Err(refused)) if e.code == ErrorCode::Aborted && !cancel.is_cancelled() => Err(refused),
        (Err(e), _) => Err(e),
        (Ok(_), extracted) => extracted,
    }
}

/// Extracts `source` into the directory `dir` in the sandbox (created if
/// missing; `overwrite: false` refuses a directory that is not empty with
/// `invalid_state`). A directory or bytes are checked whole first: a
/// refused entry is `invalid_request` with nothing run. A stream is checked
/// as it comes: a refusal stops the transfer with what came before it
/// extracted.
pub(crate) async fn upload(
    engine: &ExecEngine,
    target: &ExecTarget,
    cancel: &CancellationToken,
    source: Source,
    dir: &str,
    overwrite: bool,
    limits: Limits,
) -> Result<Totals> {
    crate::files::check_path(dir)?;
    // The checks walk a whole local tree or archive: on the blocking pool,
    // so a large one holds no runtime worker that other actors' calls need.
    let check = match &source {
        Source::Directory(root) => {
            let root = root.clone();
            Some(tokio::task::spawn_blocking(move || local::walk(&root, limits, &mut |_, _, _| Ok(())).map(drop)))
        }
        Source::Bytes(bytes) => {
            let bytes = bytes.clone();
            Some(tokio::task::spawn_blocking(move || check_bytes(&bytes, limits)))
        }
        Source::Stream(_) => None,
    };
    if let Some(check) = check {
        check.await.map_err(|e| Error::internal(format!("the upload's local check failed: {e}")))??;
    }
    let env = vec![
        ("transfer_dir".to_owned(), dir.to_owned()),
        ("transfer_overwrite".to_owned(), if overwrite { "1" } else { "0" }.to_owned()),
    ];
    let (frames, stdin) = mpsc::channel(DEPTH);
    let stop = cancel.child_token();
    let mut sink = UploadSink { stderr: HeadBuffer::new(MESSAGE_BYTES) };
    let producer = {
        let stop = stop.clone();
        async move {
            let produced = produce(source, limits, Framer::new(frames)).await;
            if produced.is_err() {
                // Through the engine's kill path: the in-pod tar goes too.
                stop.cancel();
            }
            produced
        }
    };
    let (ran, produced) =
        tokio::join!(run(engine, target, scripts::UPLOAD, env, Some(stdin), stop, &mut sink), producer);
    match (ran, produced) {
        // A refusal or a local read error is why the run was stopped; an
        // `aborted` producer only saw the run end first.
        (_, Err(e)) if e.code != ErrorCode::Aborted => Err(e),
        (Err(e), _) => Err(e),
        (Ok(code), produced) => {
            exit_status(code, dir, "upload", sink.stderr)?;
            produced
        }
    }
}

/// Runs a transfer script through the wrapper; cancelling `stop` kills it
/// (`aborted`). Returns its exit code.
async fn run(
    engine: &ExecEngine,
    target: &ExecTarget,
    script: &str,
    env: Vec<(String, String)>,
    stdin: Option<mpsc::Receiver<Bytes>>,
    stop: CancellationToken,
    sink: &mut impl Sink,
) -> Result<i32> {
    let program = Program::Shell(Shell { command: script, cwd: "", env: &env });
    let stdin = stdin.map_or(Input::None, Input::Stream);
    let options = RunOptions { stdin, timeout: None, cancel: stop, slots: Slots::Calls };
    engine.run(target, program, options, sink).await?.status("a transfer")
}

/// Maps a transfer script's exit code.
fn exit_status(code: i32, path: &str, op: &str, stderr: HeadBuffer) -> Result<()> {
    let message = |text: &str| format!("{op} {}: {text}", quoted(path));
    match code {
        0 => Ok(()),
        scripts::MISSING_TOOL => Err(Error::new(
            ErrorCode::Unsupported,
            message("the sandbox image has no `tar` (transfers need it on the PATH)"),
        )),
        scripts::NO_EXCLUDE => Err(Error::new(
            ErrorCode::Unsupported,
            message("the sandbox image's `tar` has no `--exclude` (BusyBox); download without exclude"),
        )),
        scripts::NOT_EMPTY => {
            Err(Error::new(ErrorCode::InvalidState, message("the directory is not empty and overwrite is false")))
        }
        NOT_FOUND => Err(Error::new(ErrorCode::NotFound, message("no such file or directory"))),
        NOT_DIRECTORY => Err(Error::invalid_request(message("exists and is not a directory"))),
        n => Err(Error::internal(message(&format!(
            "tar failed (exit {n}): {}",
            crate::error::shorten(String::from_utf8_lossy(&stderr.into_inner()).trim())
        )))),
    }
}

/// The download's sink: checks the archive as it streams and hands it on.
struct DownloadSink {
    parser: Parser,
    totals: Totals,
    out: mpsc::Sender<Bytes>,
    /// Why the sink stopped the run.
    failure: Option<Error>,
    stop: CancellationToken,
    stderr: HeadBuffer,
}

impl DownloadSink {
    fn fail(&mut self, e: Error) {
        if self.failure.is_none() {
            self.failure = Some(e);
        }
        // Through the engine's kill path: the in-pod tar goes too.
        self.stop.cancel();
    }
}

impl Sink for DownloadSink {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        if self.failure.is_some() {
            return Ok(Flow::More);
        }
        match chunk.stream {
            Stream::Stderr => self.stderr.push(&chunk.data),
            Stream::Stdout => {
                let totals = &mut self.totals;
                let checked = self.parser.feed(&chunk.data, &mut |event| {
                    if let Event::Entry(entry) = event {
                        totals.count(&entry);
                    }
                    Ok(())
                });
                if let Err(e) = checked {
                    // What the sandbox sent is not the caller's request.
                    let code = if e.code == ErrorCode::InvalidRequest { ErrorCode::InvalidState } else { e.code };
                    self.fail(Error::new(code, e.message));
                } else if self.out.send(chunk.data).await.is_err() {
                    self.fail(aborted());
                }
            }
        }
        Ok(Flow::More)
    }
}

/// The upload's sink: only stderr matters (tar's complaints).
struct UploadSink {
    stderr: HeadBuffer,
}

impl Sink for UploadSink {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        if let Stream::Stderr = chunk.stream {
            self.stderr.push(&chunk.data);
        }
        Ok(Flow::More)
    }
}

/// Cuts an archive into the frames `upload.sh` reads: `<length>\n` then the
/// bytes, `0\n` at the end.
pub(crate) struct Framer {
    frames: mpsc::Sender<Bytes>,
    buffer: BytesMut,
    written: u64,
}

impl Framer {
    fn new(frames: mpsc::Sender<Bytes>) -> Self {
        Framer { frames, buffer: BytesMut::with_capacity(FRAME_BYTES + 32), written: 0 }
    }

    /// Appends archive bytes; sends a frame whenever one is full.
    pub(crate) async fn push(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            if self.buffer.is_empty() {
                self.buffer.extend_from_slice(format!("{FRAME_BYTES:>7}\n").as_bytes());
            }
            let header = 8;
            let n = (FRAME_BYTES - (self.buffer.len() - header)).min(data.len());
            self.buffer.extend_from_slice(&data[..n]);
            self.written += n as u64;
            data = &data[n..];
            if self.buffer.len() - header == FRAME_BYTES {
                self.flush().await?;
            }
        }
        Ok(())
    }

    /// Sends what is buffered as a (shorter) frame.
    async fn flush(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let len = self.buffer.len() - 8;
        self.buffer[..8].copy_from_slice(format!("{len:>7}\n").as_bytes());
        let frame = self.buffer.split().freeze();
        self.frames.send(frame).await.map_err(|_| aborted())
    }

    /// Ends the archive (its end marker, record padding) and the frames.
    async fn finish(mut self) -> Result<()> {
        let mut end = Vec::new();
        archive::encode_end(self.written, &mut end);
        self.push(&end).await?;
        self.flush().await?;
        self.frames.send(Bytes::from_static(b"0\n")).await.map_err(|_| aborted())
    }
}

/// Produces the checked, re-encoded archive of `source` into `framer`.
async fn produce(source: Source, limits: Limits, mut framer: Framer) -> Result<Totals> {
    let mut totals = Totals::default();
    match source {
        Source::Directory(root) => totals = local::send_tree(root, limits, &mut framer).await?,
        Source::Bytes(bytes) => {
            let mut reencoder = Reencoder::new(limits);
            for piece in bytes.chunks(FRAME_BYTES) {
                let mut out = Vec::new();
                reencoder.feed(piece, &mut out, &mut totals)?;
                framer.push(&out).await?;
            }
            reencoder.finish()?;
        }
        Source::Stream(mut pieces) => {
            let mut reencoder = Reencoder::new(limits);
            while let Some(piece) = pieces.recv().await {
                let mut out = Vec::new();
                reencoder.feed(&piece, &mut out, &mut totals)?;
                framer.push(&out).await?;
            }
            reencoder.finish()?;
        }
    }
    framer.finish().await?;
    Ok(totals)
}

/// Checks a whole archive under the rules, sending nothing.
fn check_bytes(bytes: &[u8], limits: Limits) -> Result<()> {
    let mut reencoder = Reencoder::new(limits);
    let mut out = Vec::new();
    for piece in bytes.chunks(FRAME_BYTES) {
        reencoder.feed(piece, &mut out, &mut Totals::default())?;
        out.clear();
    }
    reencoder.finish()
}

/// An archive in, the checked entries re-encoded out.
struct Reencoder {
    parser: Parser,
    rules: Rules,
    /// The current entry passed (the root directory is skipped).
    keep: bool,
    /// Data bytes of the current entry still to come, and its size.
    left: u64,
    size: u64,
}

impl Reencoder {
    fn new(limits: Limits) -> Self {
        Reencoder {
            parser: Parser::new(limits.max_entries, limits.max_bytes),
            rules: Rules::new(ErrorCode::InvalidRequest),
            keep: false,
            left: 0,
            size: 0,
        }
    }

    /// Feeds `data`, appending each entry that passes, re-encoded, with its
    /// data and padding, to `out`.
    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>, totals: &mut Totals) -> Result<()> {
        let Reencoder { parser, rules, keep, left, size } = self;
        parser.feed(data, &mut |event| {
            match event {
                Event::Entry(mut entry) => {
                    *keep = rules.check(&mut entry)?;
                    if *keep {
                        totals.count(&entry);
                        archive::encode_header(&entry, out);
                    }
                    (*left, *size) = (entry.size, entry.size);
                }
                Event::Data(piece) => {
                    *left -= piece.len() as u64;
                    if *keep {
                        out.extend_from_slice(piece);
                        if *left == 0 {
                            archive::encode_padding(*size, out);
                        }
                    }
                }
            }
            Ok(())
        })
    }

    /// Checks the archive's end, then its symlinks as a whole.
    fn finish(&self) -> Result<()> {
        self.parser.finish()?;
        self.rules.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_caps_and_lowers_the_limits() {
        let ask = |max_bytes, max_entries| Requested { max_bytes, max_entries };
        let open = Policy::default();
        let l = open.limits(ask(None, None)).unwrap();
        assert_eq!((l.max_bytes, l.max_entries), (DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES));
        assert_eq!(open.limits(ask(Some(1 << 50), None)).unwrap().max_bytes, 1 << 50);
        let held = Policy { max_bytes: Some(1_000_000), max_entries: Some(u64::MAX), ..Policy::default() };
        let l = held.limits(ask(None, None)).unwrap();
        assert_eq!((l.max_bytes, l.max_entries), (1_000_000, DEFAULT_MAX_ENTRIES), "lower is the default");
        assert_eq!(held.limits(ask(Some(1_000_000), Some(5))).unwrap().max_bytes, 1_000_000);
        let e = held.limits(ask(Some(1_000_000_000), None)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains("transfers.maxBytes"), "{}", e.message);
    }

    #[cfg(unix)]
    #[test]
    fn local_paths_must_resolve_inside_the_root() {
        let base = std::env::temp_dir().join(format!("transfer-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("in")).unwrap();
        std::fs::create_dir_all(base.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), root.join("link-out")).unwrap();
        std::os::unix::fs::symlink("in", root.join("link-in")).unwrap();
        std::os::unix::fs::symlink(base.join("nowhere"), root.join("dangling")).unwrap();
        let real = std::fs::canonicalize(&root).unwrap();
        let policy = Policy { local_root: Some(real.clone()), ..Policy::default() };
        let ok = |p: PathBuf| policy.local_path("download target", &p).unwrap();
        assert_eq!(ok(root.join("in")), real.join("in"));
        assert_eq!(ok(root.join("link-in/new/deeper")), real.join("in/new/deeper"));
        assert_eq!(ok(root.join("in/../in2")), real.join("in2"));
        for bad in [
            PathBuf::from("/etc"),
            root.join("../elsewhere"),
            root.join("../x"),
            root.join("link-out"),
            root.join("link-out/new"),
            root.join("missing/../../x"),
            root.join("dangling"),
            root.join("dangling/x"),
            base.join("elsewhere-new"),
        ] {
            let e = policy.local_path("download target", &bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{}", bad.display());
            assert!(e.message.contains("transfers.localRoot"), "{}", e.message);
        }
        assert!(!base.join("x").exists() && !base.join("elsewhere-new").exists());
        // Without a root, paths are the caller's, as given.
        assert_eq!(Policy::default().local_path("to", Path::new("../x")).unwrap(), PathBuf::from("../x"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn exit_codes_name_the_problem() {
        let e = |code| exit_status(code, "/w", "upload", HeadBuffer::new(10)).unwrap_err();
        let no_tar = e(scripts::MISSING_TOOL);
        assert_eq!(no_tar.code, ErrorCode::Unsupported);
        assert!(no_tar.message.contains("`tar`"), "{}", no_tar.message);
        assert_eq!(e(scripts::NOT_EMPTY).code, ErrorCode::InvalidState);
        assert_eq!(e(scripts::NO_EXCLUDE).code, ErrorCode::Unsupported);
        assert_eq!(e(NOT_FOUND).code, ErrorCode::NotFound);
        assert_eq!(e(NOT_DIRECTORY).code, ErrorCode::InvalidRequest);
        assert_eq!(e(2).code, ErrorCode::Internal);
        exit_status(0, "/w", "upload", HeadBuffer::new(1)).unwrap();
    }

    /// The scripts in an image without `tar`: exit 97 before anything else.
    #[cfg(unix)]
    #[test]
    fn an_image_without_tar_is_detected() {
        let bin = std::env::temp_dir().join(format!("transfer-notar-{}", std::process::id()));
        std::fs::create_dir_all(&bin).unwrap();
        for tool in ["head", "mkdir"] {
            let _ = std::os::unix::fs::symlink(format!("/usr/bin/{tool}"), bin.join(tool));
        }
        for script in [scripts::UPLOAD, scripts::DOWNLOAD] {
            let status = std::process::Command::new("/bin/sh")
                .args(["-c", script])
                .env_clear()
                .env("PATH", &bin)
                .env("transfer_dir", bin.join("never"))
                .status()
                .unwrap();
            assert_eq!(status.code(), Some(scripts::MISSING_TOOL));
        }
        assert!(!bin.join("never").exists());
        std::fs::remove_dir_all(&bin).unwrap();
    }

    #[tokio::test]
    async fn frames_carry_the_archive_exactly() {
        let (tx, mut rx) = mpsc::channel(64);
        let data: Vec<u8> = (0..(FRAME_BYTES * 2 + 777)).map(|i| (i % 253) as u8).collect();
        let mut framer = Framer::new(tx);
        let reader = tokio::spawn(async move {
            let mut stream = Vec::new();
            while let Some(f) = rx.recv().await {
                stream.extend_from_slice(&f);
            }
            stream
        });
        framer.push(&data[..10]).await.unwrap();
        framer.push(&data[10..]).await.unwrap();
        framer.finish().await.unwrap();
        let stream = reader.await.unwrap();
        // Decode as upload.sh does.
        let (mut at, mut out) = (0, Vec::new());
        loop {
            let nl = at + stream[at..].iter().position(|b| *b == b'\n').unwrap();
            let n: usize = std::str::from_utf8(&stream[at..nl]).unwrap().trim().parse().unwrap();
            at = nl + 1;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&stream[at..at + n]);
            at += n;
        }
        assert_eq!(at, stream.len());
        assert_eq!(&out[..data.len()], &data[..]);
        assert_eq!(out.len() % archive::RECORD, 0);
        assert!(out[data.len()..].iter().all(|b| *b == 0));
    }
}
