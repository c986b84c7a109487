//! The local side of a transfer: a directory's tree as checked entries
//! ([`walk`], [`send_tree`]) and an archive extracted into a directory
//! ([`Extractor`]), both under [`Rules`]. Names are bytes (`OsStr` on
//! unix); on other platforms, where modes and symlinks do not map, local
//! directories are `unsupported` (bytes and streams still work).

#[cfg(unix)]
use std::os::unix::ffi::OsStrExt;
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

/// What `walk` tells its visitor of each entry: the checked entry, its
/// local path, and what `lstat` said of it then.
pub(crate) type Visit<'v> = dyn FnMut(&Entry, &Path, &std::fs::Metadata) -> Result<()> + 'v;

/// Walks the tree under `root` (a directory, followed if a symlink) in
/// archive order (a directory before its contents, names sorted), checking
/// every entry under the rules and the caps, and calls `visit` with each
/// checked entry; at the end, the tree's symlinks must resolve inside it
/// ([`Rules::finish`]). FIFOs, sockets and devices are `invalid_request`.
#[cfg(unix)]
pub(crate) fn walk(root: &Path, limits: Limits, visit: &mut Visit<'_>) -> Result<Totals> {
    use std::os::unix::ffi::OsStringExt;
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
            visit(&entry, &path, &meta)?;
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
    rules.finish()?;
    Ok(totals)
}

#[cfg(not(unix))]
pub fn walk(_: &Path, _: Limits, _: &mut Visit<'_>) -> Result<Totals> {
    Err(no_local_directories())
}

/// Never reached: `walk` refuses first.
#[cfg(not(unix))]
fn send_file(_: &Path, _: &std::fs::Metadata, _: &dyn Fn(Bytes) -> Result<()>) -> Result<()> {
    Err(no_local_directories())
}

#[cfg(not(unix))]
fn no_local_directories() -> Error {
    Error::new(ErrorCode::Unsupported, "uploading a local directory needs a unix host; pass the archive's bytes")
}

/// Sends the tree under `root` through `framer`, re-encoded: a blocking
/// thread walks and reads it, a bounded channel carries the pieces.
pub(crate) async fn send_tree(root: PathBuf, limits: Limits, framer: &mut Framer) -> Result<Totals> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    let walker = tokio::task::spawn_blocking(move || {
        let mut header = Vec::new();
        walk(&root, limits, &mut |entry, path, walked| {
            header.clear();
            archive::encode_header(entry, &mut header);
            let send = |piece: Bytes| tx.blocking_send(piece).map_err(|_| crate::exec::aborted());
            send(Bytes::copy_from_slice(&header))?;
            if entry.kind == Kind::File {
                send_file(path, walked, &send)?;
            }
            Ok(())
        })
    });
    while let Some(piece) = rx.recv().await {
        framer.push(&piece).await?;
    }
    walker.await.map_err(|e| Error::internal(format!("the upload's reader failed: {e}")))?
}

/// Sends exactly the walked size of the file at `path`, then its padding.
/// The file opened must be the one walked (`walked`: same device and inode,
/// still a regular file), opened without following a symlink or blocking on
/// a FIFO: one swapped in since the walk is `invalid_state` with none of
/// its bytes sent. A file that shrank since fails too (its archive would lie).
#[cfg(unix)]
fn send_file(path: &Path, walked: &std::fs::Metadata, send: &dyn Fn(Bytes) -> Result<()>) -> Result<()> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let swapped = || {
        Error::new(
            ErrorCode::InvalidState,
            format!(
                "{:?} was replaced while it was uploaded (it is not the regular file walked); none of its bytes were sent",
                path.display().to_string()
            ),
        )
    };
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(
            |e| match e.raw_os_error() {
                Some(libc::ELOOP) => swapped(),
                _ => io_error("cannot open", path, e),
            },
        )?;
    let meta = file.metadata().map_err(|e| io_error("cannot read", path, e))?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != (walked.dev(), walked.ino()) {
        return Err(swapped());
    }
    let size = walked.len();
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
/// below the target, whoever made it. Files and directories are created
/// with the archive's modes under the process umask (never chmod-ed wider);
/// a directory whose mode would refuse its own contents gets it at the end,
/// through a descriptor opened without following links. Symlinks are made
/// last, once every file and directory is in place, and each must then
/// resolve inside the target on disk (see [`archive::escapes`]).
#[cfg(unix)]
pub(crate) struct Extractor {
    root: PathBuf,
    parser: Parser,
    rules: Rules,
    file: Option<std::fs::File>,
    dirs: Vec<Made>,
    totals: Totals,
}

/// A directory the extraction made, to get its mode at the end.
#[cfg(unix)]
struct Made {
    path: PathBuf,
    /// Device and inode when made: the mode goes to this one only.
    id: (u64, u64),
    /// Its mode now, and the mode it gets.
    now: u32,
    mode: u32,
}

#[cfg(unix)]
impl Extractor {
    /// Creates `root` if missing. A `root` that holds anything is
    /// `invalid_state` unless `overwrite` (then what the archive names is
    /// replaced, a directory kept with its mode); one that is not a
    /// directory is `invalid_request`. Nothing is written when refused.
    pub(crate) fn new(root: &Path, limits: Limits, overwrite: bool) -> Result<Self> {
        match std::fs::metadata(root) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::invalid_request(format!(
                    "download target {:?} exists and is not a directory; nothing was written",
                    root.display().to_string()
                )))
            }
            Ok(_) if !overwrite => {
                let mut entries = std::fs::read_dir(root).map_err(|e| io_error("cannot list", root, e))?;
                if entries.next().is_some() {
                    return Err(Error::new(
                        ErrorCode::InvalidState,
                        format!(
                            "download target {:?} is not empty; pass overwrite: true to extract into it; nothing was written",
                            root.display().to_string()
                        ),
                    ));
                }
            }
            _ => std::fs::create_dir_all(root).map_err(|e| io_error("cannot create", root, e))?,
        }
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

    /// Checks the archive's end, makes the symlinks (removing, and refusing
    /// with `invalid_state`, any that resolves out of the target) and gives
    /// directories their modes.
    pub(crate) fn finish(self) -> Result<Totals> {
        self.parser.finish().map_err(|e| Error::new(ErrorCode::ConnectionLost, e.message))?;
        let mut made = Vec::new();
        for (path, target) in self.rules.symlinks() {
            let at = place(&self.root, path)?;
            clear(&at, false)?;
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), &at)
                .map_err(|e| io_error("cannot create", &at, e))?;
            made.push((path, at));
        }
        let mut budget = archive::MAX_RESOLVE_BYTES;
        let mut out = Vec::new();
        for (path, at) in &made {
            if archive::escapes(path, |p| on_disk(&self.root, p), &mut budget)? {
                out.push((path, at));
            }
        }
        if let Some((first, _)) = out.first() {
            for (_, at) in &out {
                std::fs::remove_file(at).map_err(|e| io_error("cannot remove", at, e))?;
            }
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "archive entry {} {}; it and the {} other(s) that do were removed",
                    archive::shown(first),
                    archive::ESCAPES,
                    out.len() - 1
                ),
            ));
        }
        for dir in self.dirs.iter().rev() {
            dir.set_mode()?;
        }
        Ok(self.totals)
    }
}

/// What `archive::escapes` asks of the tree on disk: the target of the
/// symlink at `path` under `root`, `None` for anything else (missing too).
#[cfg(unix)]
fn on_disk(root: &Path, path: &[u8]) -> Result<Option<Vec<u8>>> {
    use std::os::unix::ffi::OsStringExt;
    let at = root.join(std::ffi::OsStr::from_bytes(path));
    match std::fs::symlink_metadata(&at) {
        Ok(m) if m.is_symlink() => {
            let target = std::fs::read_link(&at).map_err(|e| io_error("cannot read the symlink", &at, e))?;
            Ok(Some(target.into_os_string().into_vec()))
        }
        _ => Ok(None),
    }
}

#[cfg(unix)]
impl Made {
    /// Gives the directory its mode through a descriptor opened without
    /// following a symlink, if it is still the directory made.
    fn set_mode(&self) -> Result<()> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        if self.now == self.mode {
            return Ok(());
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&self.path)
            .map_err(|e| io_error("cannot open", &self.path, e))?;
        let meta = dir.metadata().map_err(|e| io_error("cannot read", &self.path, e))?;
        if (meta.dev(), meta.ino()) != self.id {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!("{:?} was replaced during the download", self.path.display().to_string()),
            ));
        }
        dir.set_permissions(std::fs::Permissions::from_mode(self.mode))
            .map_err(|e| io_error("cannot set the mode of", &self.path, e))
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

/// Creates a checked file, directory or hard link (symlinks wait for
/// `finish`); a file is returned open for its data.
#[cfg(unix)]
fn create(root: &Path, entry: &Entry, dirs: &mut Vec<Made>) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let at = place(root, &entry.path)?;
    match entry.kind {
        Kind::Directory => {
            if !clear(&at, true)? {
                // Owner rwx until the end, so its contents can be made; the
                // umask applies (the kernel's), and only ever narrows it.
                std::fs::DirBuilder::new()
                    .mode(entry.mode | 0o700)
                    .create(&at)
                    .map_err(|e| io_error("cannot create", &at, e))?;
                let m = std::fs::symlink_metadata(&at).map_err(|e| io_error("cannot read", &at, e))?;
                let now = m.mode() & 0o7777;
                // What the archive asked, under the umask: the bits mkdir kept of it.
                dirs.push(Made { path: at, id: (m.dev(), m.ino()), now, mode: now & entry.mode });
            }
            Ok(None)
        }
        Kind::File => {
            clear(&at, false)?;
            // O_EXCL and O_NOFOLLOW: not even a symlink raced in is
            // followed; the umask applies to the mode.
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(entry.mode & 0o777)
                .open(&at)
                .map_err(|e| io_error("cannot create", &at, e))?;
            Ok(Some(file))
        }
        Kind::Symlink => Ok(None),
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
    pub fn new(_: &Path, _: Limits, _: bool) -> Result<Self> {
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

    /// Extracts `data` into `dir/to`, which must be empty or missing
    /// unless `overwrite`.
    fn extract(dir: &Path, data: &[u8], overwrite: bool) -> Result<Totals> {
        let mut x = Extractor::new(&dir.join("to"), Limits::default(), overwrite)?;
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
            let e = extract(&dir, &archive(&entries), false).unwrap_err();
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
        let e = extract(&dir, &archive(&[entry(b"l/x", Kind::File, b"", 1)]), true).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
        // A file entry over it replaces the symlink itself.
        extract(&dir, &archive(&[entry(b"l", Kind::File, b"", 3)]), true).unwrap();
        assert!(std::fs::symlink_metadata(dir.join("to/l")).unwrap().is_file());
        assert!(outside(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_million_empty_entries_stop_at_the_cap() {
        let dir = scratch("million");
        let mut x = Extractor::new(&dir.join("to"), Limits::default(), false).unwrap();
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
        let totals = extract(&dir, &archive(&entries), false).unwrap();
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
        let mut x = Extractor::new(&dir.join("to"), Limits::default(), false).unwrap();
        x.feed(&data[..2048]).unwrap();
        assert_eq!(x.finish().unwrap_err().code, ErrorCode::ConnectionLost);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    const SECRET: &[u8] = b"TOPSECRET";

    /// Every symlink under `to`, with where it resolves (`None`: dangling).
    fn links_under(to: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
        let mut found = Vec::new();
        let mut stack = vec![to.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_symlink() {
                    found.push((path.clone(), std::fs::canonicalize(&path).ok()));
                } else if meta.is_dir() {
                    stack.push(path);
                }
            }
        }
        found
    }

    /// What F1's tests check whatever the extraction said: nothing beside
    /// `to` or in `outside` but the secret, every symlink under `to`
    /// resolving inside it or nowhere, and no path under `to` reading the
    /// secret.
    fn assert_contained(dir: &Path, name: &str) {
        assert_eq!(outside(dir), vec!["secret".to_owned()], "{name}");
        let to = std::fs::canonicalize(dir.join("to")).unwrap();
        for (link, real) in links_under(&to) {
            if let Some(real) = real {
                assert!(real.starts_with(&to), "{name}: {} resolves to {}", link.display(), real.display());
            }
            assert_ne!(std::fs::read(&link).ok().as_deref(), Some(SECRET), "{name}: {}", link.display());
        }
    }

    #[test]
    fn symlinks_resolving_out_of_the_target_are_refused_and_removed() {
        for (name, entries) in crate::transfer::archive::tests::escaping_trees() {
            let dir = scratch(&format!("escape-{}", name.replace([' ', ','], "-")));
            std::fs::write(dir.join("outside/secret"), SECRET).unwrap();
            let e = extract(&dir, &archive(&entries), false).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidState, "{name}: {}", e.message);
            assert!(e.message.contains("resolves out of the tree"), "{name}: {}", e.message);
            assert_contained(&dir, name);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_symlink_through_one_already_in_the_target_is_refused() {
        let dir = scratch("through-preexisting");
        std::fs::write(dir.join("outside/secret"), SECRET).unwrap();
        std::fs::create_dir_all(dir.join("to/sub")).unwrap();
        // An earlier download's links that stay inside, each alone...
        std::os::unix::fs::symlink("..", dir.join("to/sub/up")).unwrap();
        let e =
            extract(&dir, &archive(&[entry(b"r", Kind::Symlink, b"sub/up/../outside/secret", 0)]), true).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
        assert_contained(&dir, "through sub/up");
        // ...and one that points out (not this download's to judge, nor to follow).
        std::os::unix::fs::symlink("../outside", dir.join("to/p")).unwrap();
        let e = extract(&dir, &archive(&[entry(b"q", Kind::Symlink, b"p/secret", 0)]), true).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
        assert!(std::fs::symlink_metadata(dir.join("to/q")).is_err(), "q removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relative_symlinks_that_stay_inside_are_kept() {
        let dir = scratch("links-inside");
        extract(&dir, &archive(&crate::transfer::archive::tests::staying_tree()), false).unwrap();
        assert_eq!(std::fs::read(dir.join("to/node_modules/.bin/tsc")).unwrap(), b"xxx");
        assert_eq!(std::fs::read(dir.join("to/b")).unwrap(), b"xxx");
        assert_eq!(links_under(&dir.join("to")).len(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Sets the process umask (process-wide; 022 is what every test expects).
    #[allow(unsafe_code)]
    fn umask_022() {
        // SAFETY: umask(2) only sets the process's mask; it cannot fail.
        unsafe { libc::umask(0o022) };
    }

    #[test]
    fn modes_are_narrowed_by_the_umask_and_read_only_dirs_still_fill() {
        use std::os::unix::fs::PermissionsExt;
        umask_022();
        let dir = scratch("modes");
        let with_mode = |mut e: Entry, mode| {
            e.mode = mode;
            e
        };
        let entries = [
            with_mode(entry(b"open", Kind::Directory, b"", 0), 0o777),
            with_mode(entry(b"open/run.sh", Kind::File, b"", 4), 0o777),
            with_mode(entry(b"ww.txt", Kind::File, b"", 1), 0o666),
            with_mode(entry(b"locked", Kind::Directory, b"", 0), 0o555),
            with_mode(entry(b"locked/f", Kind::File, b"", 1), 0o444),
            with_mode(entry(b"sticky", Kind::Directory, b"", 0), 0o1777),
        ];
        extract(&dir, &archive(&entries), false).unwrap();
        let mode = |p: &str| std::fs::symlink_metadata(dir.join("to").join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            ["open", "open/run.sh", "ww.txt", "locked", "locked/f", "sticky"].map(mode),
            [0o755, 0o755, 0o644, 0o555, 0o444, 0o1755]
        );
        std::fs::set_permissions(dir.join("to/locked"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_target_that_is_not_empty_needs_overwrite() {
        let dir = scratch("not-empty");
        std::fs::create_dir_all(dir.join("to")).unwrap();
        std::fs::write(dir.join("to/.keep"), b"mine").unwrap();
        let data = archive(&[entry(b".keep", Kind::File, b"", 3), entry(b"new", Kind::File, b"", 1)]);
        let e = extract(&dir, &data, false).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
        assert!(e.message.contains("overwrite"), "{}", e.message);
        assert_eq!(std::fs::read(dir.join("to/.keep")).unwrap(), b"mine");
        assert!(!dir.join("to/new").exists());
        extract(&dir, &data, true).unwrap();
        assert_eq!(std::fs::read(dir.join("to/.keep")).unwrap(), b"xxx");
        // A file is no target at all.
        std::fs::write(dir.join("file"), b"f").unwrap();
        let e = Extractor::new(&dir.join("file"), Limits::default(), true).err().unwrap();
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{}", e.message);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_same_trees_are_refused_as_upload_sources() {
        for (name, entries) in crate::transfer::archive::tests::escaping_trees() {
            let dir = scratch(&format!("walk-{}", name.replace([' ', ','], "-")));
            let src = dir.join("src");
            for e in &entries {
                let at = src.join(std::ffi::OsStr::from_bytes(&e.path));
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                match e.kind {
                    Kind::Directory => std::fs::create_dir_all(&at).unwrap(),
                    _ => std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&e.link), &at).unwrap(),
                }
            }
            let e = walk(&src, Limits::default(), &mut |_, _, _| Ok(())).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{name}: {}", e.message);
            assert!(e.message.contains("resolves out of the tree"), "{name}: {}", e.message);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// Replaces the file at a path.
    type Swap<'a> = dyn Fn(&Path) + 'a;

    /// Walks `src` as the upload does, calling `swap` on each file's path
    /// between its walk and its send; what was sent, or the error.
    fn send_swapped(src: &Path, swap: &Swap<'_>) -> (Vec<u8>, Result<Totals>) {
        let sent = std::sync::Mutex::new(Vec::new());
        let send = |piece: Bytes| {
            sent.lock().unwrap().extend_from_slice(&piece);
            Ok(())
        };
        let walked = walk(src, Limits::default(), &mut |entry, path, meta| {
            if entry.kind == Kind::File {
                swap(path);
                send_file(path, meta, &send)?;
            }
            Ok(())
        });
        (sent.into_inner().unwrap(), walked)
    }

    #[test]
    fn a_file_swapped_between_walk_and_send_sends_none_of_its_bytes() {
        let dir = scratch("swap");
        std::fs::write(dir.join("outside/secret"), SECRET).unwrap();
        let src = dir.join("src");
        std::fs::create_dir_all(&src).unwrap();
        let reset = || std::fs::write(src.join("f"), b"public").unwrap();
        reset();
        let (sent, walked) = send_swapped(&src, &|_| {});
        walked.unwrap();
        assert!(sent.starts_with(b"public"));
        let swaps: [(&str, &Swap<'_>); 3] = [
            ("a symlink", &|p| {
                std::fs::remove_file(p).unwrap();
                std::os::unix::fs::symlink(dir.join("outside/secret"), p).unwrap();
            }),
            ("a FIFO", &|p| {
                std::fs::remove_file(p).unwrap();
                assert!(std::process::Command::new("mkfifo").arg(p).status().unwrap().success());
            }),
            // Renamed over it (made first, so it cannot reuse the inode).
            ("another file", &|p| {
                std::fs::write(p.with_extension("new"), SECRET).unwrap();
                std::fs::rename(p.with_extension("new"), p).unwrap();
            }),
        ];
        for (name, swap) in swaps {
            let (sent, walked) = send_swapped(&src, swap);
            let e = walked.unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidState, "{name}: {}", e.message);
            assert!(sent.is_empty(), "{name}: {} bytes sent", sent.len());
            std::fs::remove_file(src.join("f")).unwrap();
            reset();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
