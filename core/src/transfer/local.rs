//! The local side of a transfer: a directory's tree as checked entries
//! ([`walk`], [`send_tree`]) and an archive extracted into a directory
//! ([`Extractor`]), both under [`Rules`]. Names are bytes (`OsStr` on
//! unix); on other platforms, where modes and symlinks do not map, local
//! directories are `unsupported` (bytes and streams still work).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::archive::{self, Entry, Event, Kind, Parser, Rules};
use super::{Framer, Limits, Totals};
use crate::error::{Error, ErrorCode, Result};

/// Bytes read from a local file at once.
const READ_BYTES: usize = 256 * 1024;

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorCode::NotFound,
        _ => ErrorCode::Internal,
    };
    Error::new(code, format!("{what} {:?}: {e}", path.display().to_string())).with_source(e)
}

/// Walks the tree under `root` (a directory, followed if a symlink) in
/// archive order (a directory before its contents, names sorted), checking
/// every entry under the rules and the caps, and calls `visit` with each
/// checked entry and its local path. FIFOs, sockets and devices are
/// `invalid_request`.
#[cfg(unix)]
pub(crate) fn walk(root: &Path, limits: Limits, visit: &mut dyn FnMut(&Entry, &Path) -> Result<()>) -> Result<Totals> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    let meta = std::fs::metadata(root).map_err(|e| io_error("upload source", root, e))?;
    if !meta.is_dir() {
        return Err(Error::invalid_request(format!(
            "upload source {:?} is not a directory",
            root.display().to_string()
        )));
    }
    let mut rules = Rules::new(ErrorCode::InvalidRequest);
    let mut totals = Totals::default();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut scratch = Vec::new();
    // (local path, archive path); popped in order, children pushed reversed.
    let mut stack = vec![(root.to_path_buf(), Vec::new())];
    while let Some((path, name)) = stack.pop() {
        let meta = if name.is_empty() { Ok(meta.clone()) } else { std::fs::symlink_metadata(&path) }
            .map_err(|e| io_error("cannot read", &path, e))?;
        let kind = meta.file_type();
        let (kind, link) = if kind.is_dir() {
            (Kind::Directory, Vec::new())
        } else if kind.is_file() {
            (Kind::File, Vec::new())
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| io_error("cannot read the symlink", &path, e))?;
            (Kind::Symlink, target.into_os_string().into_vec())
        } else {
            let what = if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "a device node"
            };
            return Err(Error::invalid_request(format!(
                "{} is {what}; only files, directories and symlinks are uploaded; nothing was sent",
                archive::shown(&name)
            )));
        };
        let size = if kind == Kind::File { meta.len() } else { 0 };
        let mtime = u64::try_from(meta.mtime()).unwrap_or(0);
        let mut entry = Entry { path: name.clone(), link, kind, mode: meta.mode() & 0o7777, size, mtime };
        if !rules.check(&mut entry)? {
            // The root: its children only.
        } else {
            entries += 1;
            scratch.clear();
            archive::encode_header(&entry, &mut scratch);
            bytes += scratch.len() as u64 + size.div_ceil(archive::BLOCK as u64) * archive::BLOCK as u64;
            if entries > limits.max_entries {
                return Err(Error::new(
                    ErrorCode::TooLarge,
                    format!("the tree has more than {} entries (maxEntries); nothing was sent", limits.max_entries),
                ));
            }
            if bytes > limits.max_bytes {
                return Err(Error::new(
                    ErrorCode::TooLarge,
                    format!("the tree's archive is over {} bytes (maxBytes); nothing was sent", limits.max_bytes),
                ));
            }
            totals.count(&entry);
            visit(&entry, &path)?;
        }
        if kind == Kind::Directory {
            let mut children: Vec<_> = std::fs::read_dir(&path)
                .map_err(|e| io_error("cannot list", &path, e))?
                .map(|c| c.map(|c| c.file_name()))
                .collect::<std::io::Result<_>>()
                .map_err(|e| io_error("cannot list", &path, e))?;
            children.sort();
            for child in children.into_iter().rev() {
                let mut child_name = name.clone();
                if !child_name.is_empty() {
                    child_name.push(b'/');
                }
                child_name.extend_from_slice(child.as_bytes());
                stack.push((path.join(&child), child_name));
            }
        }
    }
    Ok(totals)
}

#[cfg(not(unix))]
pub fn walk(_: &Path, _: Limits, _: &mut dyn FnMut(&Entry, &Path) -> Result<()>) -> Result<Totals> {
    Err(Error::new(ErrorCode::Unsupported, "uploading a local directory needs a unix host; pass the archive's bytes"))
}

/// Sends the tree under `root` through `framer`, re-encoded: a blocking
/// thread walks and reads it, a bounded channel carries the pieces.
pub(crate) async fn send_tree(root: PathBuf, limits: Limits, framer: &mut Framer) -> Result<Totals> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    let walker = tokio::task::spawn_blocking(move || {
        let mut header = Vec::new();
        walk(&root, limits, &mut |entry, path| {
            header.clear();
            archive::encode_header(entry, &mut header);
            let send = |piece: Bytes| tx.blocking_send(piece).map_err(|_| crate::exec::aborted());
            send(Bytes::copy_from_slice(&header))?;
            if entry.kind == Kind::File {
                send_file(path, entry.size, &send)?;
            }
            Ok(())
        })
    });
    while let Some(piece) = rx.recv().await {
        framer.push(&piece).await?;
    }
    walker.await.map_err(|e| Error::internal(format!("the upload's reader failed: {e}")))?
}

/// Sends exactly `size` bytes of the file at `path`, then its padding; a
/// file that shrank since it was walked fails (its archive would lie).
fn send_file(path: &Path, size: u64, send: &dyn Fn(Bytes) -> Result<()>) -> Result<()> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| io_error("cannot open", path, e))?;
    let mut file = file.take(size);
    let mut left = size;
    while left > 0 {
        let mut buf = vec![0u8; READ_BYTES.min(left as usize)];
        let n = file.read(&mut buf).map_err(|e| io_error("cannot read", path, e))?;
        if n == 0 {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!("{:?} shrank while it was uploaded", path.display().to_string()),
            ));
        }
        buf.truncate(n);
        left -= n as u64;
        send(Bytes::from(buf))?;
    }
    let mut pad = Vec::new();
    archive::encode_padding(size, &mut pad);
    if !pad.is_empty() {
        send(Bytes::from(pad))?;
    }
    Ok(())
}

/// Extracts an archive a sandbox sent into a local directory, as hostile:
/// the rules (refusals are `invalid_state`), and no symlink ever followed
/// below the target, whoever made it. Directories get their modes at the
/// end (a read-only one would refuse its own contents).
#[cfg(unix)]
pub(crate) struct Extractor {
    root: PathBuf,
    parser: Parser,
    rules: Rules,
    file: Option<std::fs::File>,
    dirs: Vec<(PathBuf, u32)>,
    totals: Totals,
}

#[cfg(unix)]
impl Extractor {
    /// Creates `root` if missing.
    pub(crate) fn new(root: &Path, limits: Limits) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| io_error("cannot create", root, e))?;
        Ok(Extractor {
            root: root.to_path_buf(),
            parser: Parser::new(limits.max_entries, limits.max_bytes),
            rules: Rules::new(ErrorCode::InvalidState),
            file: None,
            dirs: Vec::new(),
            totals: Totals::default(),
        })
    }

    /// Takes the next archive bytes.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<()> {
        let Extractor { root, parser, rules, file, dirs, totals } = self;
        parser.feed(data, &mut |event| match event {
            Event::Entry(entry) => {
                let entry = match checked(rules, entry)? {
                    Some(e) => e,
                    None => return Ok(()),
                };
                totals.count(&entry);
                *file = create(root, &entry, dirs)?;
                Ok(())
            }
            Event::Data(piece) => {
                use std::io::Write;
                if let Some(f) = file.as_mut() {
                    f.write_all(piece)
                        .map_err(|e| Error::internal(format!("cannot write a downloaded file: {e}")).with_source(e))?;
                }
                Ok(())
            }
        })
    }

    /// Checks the archive's end and gives directories their modes.
    pub(crate) fn finish(self) -> Result<Totals> {
        use std::os::unix::fs::PermissionsExt;
        self.parser.finish().map_err(|e| Error::new(ErrorCode::ConnectionLost, e.message))?;
        for (dir, mode) in self.dirs.iter().rev() {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| io_error("cannot set the mode of", dir, e))?;
        }
        Ok(self.totals)
    }
}

#[cfg(unix)]
fn checked(rules: &mut Rules, mut entry: Entry) -> Result<Option<Entry>> {
    Ok(rules.check(&mut entry)?.then_some(entry))
}

/// Local path of a checked archive path under `root`, after making sure no
/// directory on the way is a symlink (or anything but a directory);
/// missing ones are created.
#[cfg(unix)]
fn place(root: &Path, path: &[u8]) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut at = root.to_path_buf();
    let mut parts = path.split(|b| *b == b'/').peekable();
    while let Some(part) = parts.next() {
        at.push(std::ffi::OsStr::from_bytes(part));
        if parts.peek().is_none() {
            break;
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    format!(
                    "archive entry {} would be written through {} (a symlink or a file); nothing past it was extracted",
                    archive::shown(path),
                    archive::shown(part)
                ),
                ))
            }
            Err(_) => std::fs::create_dir(&at).map_err(|e| io_error("cannot create", &at, e))?,
        }
    }
    Ok(at)
}

/// Makes room for a new entry at `at`: removes what is there unless it is
/// a directory (a symlink is removed, never followed).
#[cfg(unix)]
fn clear(at: &Path, keep_dir: bool) -> Result<bool> {
    match std::fs::symlink_metadata(at) {
        Ok(m) if m.is_dir() => {
            if keep_dir {
                Ok(true)
            } else {
                Err(Error::new(ErrorCode::InvalidState, format!("{:?} is a directory", at.display().to_string())))
            }
        }
        Ok(_) => std::fs::remove_file(at).map(|()| false).map_err(|e| io_error("cannot replace", at, e)),
        Err(_) => Ok(false),
    }
}

/// Creates a checked entry; a file is returned open for its data.
#[cfg(unix)]
fn create(root: &Path, entry: &Entry, dirs: &mut Vec<(PathBuf, u32)>) -> Result<Option<std::fs::File>> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let at = place(root, &entry.path)?;
    match entry.kind {
        Kind::Directory => {
            if !clear(&at, true)? {
                std::fs::create_dir(&at).map_err(|e| io_error("cannot create", &at, e))?;
            }
            dirs.push((at, entry.mode));
            Ok(None)
        }
        Kind::File => {
            clear(&at, false)?;
            // create_new: O_EXCL, so not even a symlink raced in is followed.
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&at)
                .map_err(|e| io_error("cannot create", &at, e))?;
            file.set_permissions(std::fs::Permissions::from_mode(entry.mode))
                .map_err(|e| io_error("cannot set the mode of", &at, e))?;
            Ok(Some(file))
        }
        Kind::Symlink => {
            clear(&at, false)?;
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&entry.link), &at)
                .map_err(|e| io_error("cannot create", &at, e))?;
            Ok(None)
        }
        Kind::HardLink => {
            let source = place(root, &entry.link)?;
            match std::fs::symlink_metadata(&source) {
                Ok(m) if m.is_file() => {}
                _ => {
                    return Err(Error::new(
                        ErrorCode::InvalidState,
                        format!(
                            "archive entry {} is a hard link to {}, which is not a file the archive made",
                            archive::shown(&entry.path),
                            archive::shown(&entry.link)
                        ),
                    ))
                }
            }
            clear(&at, false)?;
            std::fs::hard_link(&source, &at).map_err(|e| io_error("cannot create", &at, e))?;
            Ok(None)
        }
    }
}

/// Extraction into a local directory needs a unix host.
#[cfg(not(unix))]
pub struct Extractor;

#[cfg(not(unix))]
impl Extractor {
    pub fn new(_: &Path, _: Limits) -> Result<Self> {
        Err(Error::new(ErrorCode::Unsupported, "downloading into a local directory needs a unix host; use the stream"))
    }
    pub fn feed(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    pub fn finish(self) -> Result<Totals> {
        Ok(Totals::default())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::transfer::archive::{encode_end, encode_header, encode_padding};

    fn entry(path: &[u8], kind: Kind, link: &[u8], size: u64) -> Entry {
        Entry { path: path.to_vec(), link: link.to_vec(), kind, mode: 0o644, size, mtime: 0 }
    }

    fn archive(entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            encode_header(e, &mut out);
            out.extend(std::iter::repeat_n(b'x', e.size as usize));
            encode_padding(e.size, &mut out);
        }
        let n = out.len() as u64;
        encode_end(n, &mut out);
        out
    }

    /// A scratch directory holding `to/` (the target) and `outside/`.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("transfer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        dir
    }

    fn extract(dir: &Path, data: &[u8], limits: Limits) -> Result<Totals> {
        let mut x = Extractor::new(&dir.join("to"), limits)?;
        for piece in data.chunks(700) {
            x.feed(piece)?;
        }
        x.finish()
    }

    /// Every file under `dir/outside` and beside `to`: what an escape would have written.
    fn outside(dir: &Path) -> Vec<String> {
        let mut found: Vec<String> = std::fs::read_dir(dir.join("outside"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        found.extend(
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "to" && n != "outside"),
        );
        found
    }

    #[test]
    fn hostile_archives_write_nothing_outside_the_target() {
        let cases: Vec<(&str, Vec<Entry>)> = vec![
            ("absolute", vec![entry(b"/tmp/escape-abs", Kind::File, b"", 1)]),
            ("dotdot", vec![entry(b"../outside/x", Kind::File, b"", 1)]),
            (
                "symlink then write",
                vec![entry(b"l", Kind::Symlink, b"../outside", 0), entry(b"l/x", Kind::File, b"", 1)],
            ),
            ("inner symlink then write", vec![entry(b"l", Kind::Symlink, b"d", 0), entry(b"l/x", Kind::File, b"", 1)]),
            ("hardlink out", vec![entry(b"h", Kind::HardLink, b"../outside/secret", 0)]),
            ("hardlink absolute", vec![entry(b"h", Kind::HardLink, b"/etc/passwd", 0)]),
        ];
        for (name, entries) in cases {
            let dir = scratch(&name.replace(' ', "-"));
            std::fs::write(dir.join("outside/secret"), b"s").unwrap();
            let e = extract(&dir, &archive(&entries), Limits::default()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidState, "{name}: {}", e.message);
            assert_eq!(outside(&dir), vec!["secret".to_owned()], "{name}");
            assert!(!Path::new("/tmp/escape-abs").exists());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_symlink_already_in_the_target_is_never_followed() {
        let dir = scratch("preexisting");
        std::fs::create_dir_all(dir.join("to")).unwrap();
        std::os::unix::fs::symlink("../outside", dir.join("to/l")).unwrap();
        let e = extract(&dir, &archive(&[entry(b"l/x", Kind::File, b"", 1)]), Limits::default()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
        // A file entry over it replaces the symlink itself.
        extract(&dir, &archive(&[entry(b"l", Kind::File, b"", 3)]), Limits::default()).unwrap();
        assert!(std::fs::symlink_metadata(dir.join("to/l")).unwrap().is_file());
        assert!(outside(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_million_empty_entries_stop_at_the_cap() {
        let dir = scratch("million");
        let mut x = Extractor::new(&dir.join("to"), Limits::default()).unwrap();
        let mut block = Vec::new();
        let mut e = None;
        for i in 0..1_000_000u32 {
            block.clear();
            encode_header(&entry(format!("f{i}").as_bytes(), Kind::File, b"", 0), &mut block);
            if let Err(err) = x.feed(&block) {
                e = Some((i, err));
                break;
            }
        }
        let (at, e) = e.expect("refused");
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert_eq!(u64::from(at), crate::transfer::DEFAULT_MAX_ENTRIES);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_modes_links_and_odd_names_are_extracted() {
        let dir = scratch("good");
        let mut f = entry(b"d/new\nline\xff", Kind::File, b"", 600);
        f.mode = 0o4755;
        let entries = vec![
            entry(b"d", Kind::Directory, b"", 0),
            f,
            entry(b"d/l", Kind::Symlink, b"new\nline\xff", 0),
            entry(b"h", Kind::HardLink, b"d/new\nline\xff", 0),
            entry(&[b'n'; 255], Kind::File, b"", 0),
        ];
        let totals = extract(&dir, &archive(&entries), Limits::default()).unwrap();
        assert_eq!(totals, Totals { files: 4, directories: 1, bytes: 600 });
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let file = dir.join("to/d").join(std::ffi::OsStr::from_bytes(b"new\nline\xff"));
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755, "setuid dropped");
        assert_eq!(meta.len(), 600);
        assert_eq!(std::fs::read_link(dir.join("to/d/l")).unwrap().as_os_str().as_bytes(), b"new\nline\xff");
        assert_eq!(std::fs::read(dir.join("to/h")).unwrap().len(), 600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_cut_archive_is_connection_lost() {
        let dir = scratch("cut");
        let data = archive(&[entry(b"f", Kind::File, b"", 2000)]);
        let mut x = Extractor::new(&dir.join("to"), Limits::default()).unwrap();
        x.feed(&data[..2048]).unwrap();
        assert_eq!(x.finish().unwrap_err().code, ErrorCode::ConnectionLost);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
