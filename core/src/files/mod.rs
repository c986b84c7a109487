//! File operations over exec: nothing in the image beyond `sh` and coreutils
//! (`cat`, `head`, `tail`, `stat`, `mkdir`, `mv`, `rm`, `chmod`, `readlink`).
//!
//! Contents travel as raw stdout/stdin bytes (binary-exact, no encoding),
//! streamed through the engine's bounded channel. Nothing the sandbox
//! reports sizes an allocation: `read_file` grows its buffer as bytes
//! arrive, up to the caller's limit, and listings stop at theirs. Every
//! operation is bounded by a [`Call`] (abort, timeout). Errors carry stable
//! codes: `not_found`, `is_directory`, `too_large`, `invalid_request`;
//! anything unexpected is `internal` with the tool's stderr.

mod parse;
pub mod scripts;

use bytes::Bytes;

pub use parse::FileStat;

use crate::args::ByteRange;
use crate::error::{quoted, Error, ErrorCode, Result};
use crate::exec::output::{HeadBuffer, HeaderLine};
use crate::exec::wrapper::{no_nul, script_argv};
use crate::exec::{script_failed, Call, ExecEngine, ExecTarget, Program, RunOptions, ScriptOutput};

/// Default `read_file` limit.
pub const DEFAULT_MAX_READ_BYTES: u64 = 100 * 1024 * 1024;
/// Most entries `readdir` returns; a larger directory is `too_large`.
pub(crate) const MAX_DIR_ENTRIES: usize = 100_000;
/// Most bytes of names `readdir` takes (100,000 names of 255 bytes would be
/// 25 MB; a listing past this is `too_large` before it is all read).
pub(crate) const MAX_DIR_BYTES: usize = 16 * 1024 * 1024;

/// Options of [`remove`], as `fs.rm`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoveOptions {
    /// Remove directories and their contents.
    pub recursive: bool,
    /// A missing path is not an error.
    pub force: bool,
}

/// Reads a regular file, whole or the bytes of `range` (empty at or past
/// the end, shorter at the end). `not_found` if missing, `is_directory` for
/// a directory, `invalid_request` for anything else that is not a regular
/// file (a FIFO, socket or device could block or never end), `too_large`
/// when what would be returned exceeds `max_bytes` (checked before and
/// during the transfer, which stops at once).
pub async fn read_file(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    path: &str,
    max_bytes: u64,
    range: ByteRange,
) -> Result<Vec<u8>> {
    check_path(path)?;
    let too_large = |size: u64| {
        let what = if range == ByteRange::default() { "" } else { "the range of " };
        Error::new(
            ErrorCode::TooLarge,
            format!("{what}{} is {size} bytes, over the readFile limit of {max_bytes} bytes", quoted(path)),
        )
    };
    // What the range holds of a file of `size` bytes.
    let in_range = |size: u64| {
        let rest = size.saturating_sub(range.offset);
        range.length.map_or(rest, |l| l.min(rest))
    };
    let mut header = HeaderLine::default();
    // Grown as bytes arrive: the size the script announces comes from the
    // sandbox (a sparse file can claim petabytes), so it sizes nothing.
    let mut data = Vec::new();
    let length = range.length.map(|l| l.to_string()).unwrap_or_default();
    let argv = script_argv(scripts::READ, [path.to_owned(), max_bytes.to_string(), range.offset.to_string(), length]);
    let (code, stderr) = run(engine, target, call, argv, None, |chunk| {
        let Some(rest) = header.feed(chunk) else { return Ok(()) };
        if (data.len() + rest.len()) as u64 > max_bytes {
            return Err(too_large((data.len() + rest.len()) as u64));
        }
        data.extend_from_slice(&rest);
        Ok(())
    })
    .await?;
    match code {
        scripts::TOO_LARGE => {
            Err(too_large(header.line().and_then(parse_size).map_or(max_bytes.saturating_add(1), in_range)))
        }
        scripts::NOT_REGULAR => Err(Error::invalid_request(format!(
            "readFile {}: not a regular file (a FIFO, socket or device); readFile reads regular files only",
            quoted(path)
        ))),
        code => check(code, path, stderr, "readFile").map(|()| data),
    }
}

/// Creates or truncates a file with exactly `content`, atomically (temp file
/// in the same directory, then rename). `not_found` if the parent directory
/// is missing, `is_directory` if the path is a directory.
pub async fn write_file(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    path: &str,
    content: Bytes,
) -> Result<()> {
    check_path(path)?;
    let argv = script_argv(scripts::WRITE, [path.to_owned(), content.len().to_string()]);
    let stdin = (!content.is_empty()).then_some(content);
    let (code, stderr) = run(engine, target, call, argv, stdin, |_| Ok(())).await?;
    if code == scripts::SHORT_WRITE {
        return Err(Error::new(
            ErrorCode::ConnectionLost,
            format!("writeFile {}: the content did not arrive completely; the file was not changed", quoted(path)),
        ));
    }
    check(code, path, stderr, "writeFile")
}

/// `mkdir -p`: creates parents, succeeds if the directory exists.
pub async fn mkdir(engine: &ExecEngine, target: &ExecTarget, call: &Call, path: &str) -> Result<()> {
    check_path(path)?;
    let (code, stderr) =
        run(engine, target, call, script_argv(scripts::MKDIR, [path.to_owned()]), None, |_| Ok(())).await?;
    check(code, path, stderr, "mkdir")
}

/// Type, size, mode and mtime of a path (symlinks followed).
pub async fn stat(engine: &ExecEngine, target: &ExecTarget, call: &Call, path: &str) -> Result<FileStat> {
    check_path(path)?;
    // One short line; the cap only guards against a misbehaving `stat`.
    let mut out = HeadBuffer::new(1024);
    let (code, stderr) = run(engine, target, call, script_argv(scripts::STAT, [path.to_owned()]), None, |d| {
        out.push(&d);
        Ok(())
    })
    .await?;
    check(code, path, stderr, "stat")?;
    parse::parse_stat(&String::from_utf8_lossy(&out.into_inner()))
}

/// Entry names of a directory, without `.` and `..`, as raw bytes;
/// `too_large` past `MAX_DIR_ENTRIES` names or `MAX_DIR_BYTES` bytes.
pub async fn readdir(engine: &ExecEngine, target: &ExecTarget, call: &Call, path: &str) -> Result<Vec<Vec<u8>>> {
    check_path(path)?;
    let too_large = |what: String| {
        Error::new(
            ErrorCode::TooLarge,
            format!(
                "readdir {}: the directory has more than {what}; list it with exec (e.g. `find`) in parts",
                quoted(path)
            ),
        )
    };
    let mut out = Vec::new();
    let mut names = 0;
    let argv = script_argv(scripts::READDIR, [path.to_owned(), (MAX_DIR_ENTRIES + 1).to_string()]);
    let (code, stderr) = run(engine, target, call, argv, None, |d| {
        if out.len() + d.len() > MAX_DIR_BYTES {
            return Err(too_large(format!("{MAX_DIR_BYTES} bytes of names")));
        }
        names += memchr::memchr_iter(0, &d).count();
        out.extend_from_slice(&d);
        Ok(())
    })
    .await?;
    check(code, path, stderr, "readdir")?;
    if names > MAX_DIR_ENTRIES {
        return Err(too_large(format!("{MAX_DIR_ENTRIES} entries")));
    }
    Ok(parse::split_names(&out))
}

/// Whether a path exists (symlinks followed). Never fails for a missing
/// path; fails on transport errors.
pub async fn exists(engine: &ExecEngine, target: &ExecTarget, call: &Call, path: &str) -> Result<bool> {
    check_path(path)?;
    let (code, stderr) =
        run(engine, target, call, script_argv(scripts::EXISTS, [path.to_owned()]), None, |_| Ok(())).await?;
    match code {
        scripts::NOT_FOUND => Ok(false),
        code => check(code, path, stderr, "exists").map(|()| true),
    }
}

/// Removes a path, as `fs.rm`: `not_found` unless `force`, `is_directory`
/// for a directory unless `recursive`.
pub async fn remove(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    path: &str,
    options: RemoveOptions,
) -> Result<()> {
    check_path(path)?;
    let flag = |b: bool| if b { "1" } else { "0" }.to_owned();
    let argv = script_argv(scripts::REMOVE, [path.to_owned(), flag(options.recursive), flag(options.force)]);
    let (code, stderr) = run(engine, target, call, argv, None, |_| Ok(())).await?;
    check(code, path, stderr, "remove")
}

/// Runs a file script, handing stdout to `on_stdout`; returns the exit code
/// and the head of stderr.
async fn run(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    argv: Vec<String>,
    stdin: Option<Bytes>,
    on_stdout: impl FnMut(Bytes) -> Result<()> + Send,
) -> Result<(i32, HeadBuffer)> {
    let mut sink = ScriptOutput::new(on_stdout);
    let exit = engine.run(target, Program::Argv(argv), RunOptions::call(call, stdin), &mut sink).await?;
    Ok((exit.status("the file operation")?, sink.into_stderr()))
}

/// Maps a script's exit code to `Ok` or an error naming the operation.
fn check(code: i32, path: &str, stderr: HeadBuffer, op: &str) -> Result<()> {
    let (code, text) = match code {
        0 => return Ok(()),
        scripts::NOT_FOUND => (ErrorCode::NotFound, "no such file or directory"),
        scripts::IS_DIRECTORY => (ErrorCode::IsDirectory, "is a directory"),
        scripts::NOT_DIRECTORY => (ErrorCode::InvalidRequest, "exists and is not a directory"),
        _ => {
            return Err(script_failed(&format!("{op} {}", quoted(path)), code, stderr));
        }
    };
    Err(Error::new(code, format!("{op} {}: {text}", quoted(path))))
}

/// Longest path Linux system calls take (`PATH_MAX` less its NUL).
const PATH_BYTES: usize = 4095;
/// Longest name of one path component on Linux filesystems (`NAME_MAX`).
const NAME_BYTES: usize = 255;

/// Paths must be non-empty, free of NUL bytes (argv cannot carry them) and
/// within Linux's length limits, so a model's runaway path is an
/// `invalid_request` naming the limit, not a tool's `File name too long`
/// (or a misleading `not_found` from `[ -e ]`).
pub(crate) fn check_path(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::invalid_request("path is empty"));
    }
    no_nul("path", path)?;
    if path.len() > PATH_BYTES {
        return Err(Error::invalid_request(format!(
            "path {} is {} bytes; Linux takes at most {PATH_BYTES}",
            quoted(path),
            path.len()
        )));
    }
    match path.split('/').find(|name| name.len() > NAME_BYTES) {
        Some(name) => Err(Error::invalid_request(format!(
            "path {} has a {}-byte name; Linux allows at most {NAME_BYTES} bytes per name",
            quoted(path),
            name.len()
        ))),
        None => Ok(()),
    }
}

fn parse_size(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_to_error_codes() {
        let e = |c| check(c, "/p", HeadBuffer::new(10), "op").unwrap_err();
        assert_eq!(e(scripts::NOT_FOUND).code, ErrorCode::NotFound);
        assert_eq!(e(scripts::IS_DIRECTORY).code, ErrorCode::IsDirectory);
        assert_eq!(e(scripts::NOT_DIRECTORY).code, ErrorCode::InvalidRequest);
        assert_eq!(e(1).code, ErrorCode::Internal);
        assert!(e(scripts::NOT_FOUND).message.contains("op \"/p\""));
        check(0, "/p", HeadBuffer::new(1), "op").unwrap();
    }

    #[test]
    fn paths_are_checked() {
        assert_eq!(check_path("").unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(check_path("a\0b").unwrap_err().code, ErrorCode::InvalidRequest);
        check_path("-rf").unwrap();
        let name = "n".repeat(NAME_BYTES);
        check_path(&format!("/{name}/{name}")).unwrap();
        let e = check_path(&format!("/tmp/{name}n/x")).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains("256-byte name"), "{}", e.message);
        check_path(&"/a".repeat(PATH_BYTES / 2)).unwrap();
        let e = check_path(&"/a".repeat(PATH_BYTES / 2 + 1)).unwrap_err();
        assert!(e.message.contains("4096 bytes") && e.message.len() < 300, "{}", e.message);
        assert_eq!(parse_size(b"123"), Some(123));
        assert_eq!(parse_size(b"x"), None);
    }
}
