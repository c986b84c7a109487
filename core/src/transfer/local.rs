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
/// resolve inside the target on disk (see [`archive::escapes`]). Every
/// call goes through a [`Cursor`], so the work grows with the archive's
/// size whatever its shape.
#[cfg(unix)]
pub(crate) struct Extractor {
    cursor: Cursor,
    parser: Parser,
    rules: Rules,
    file: Option<std::fs::File>,
    dirs: Vec<Made>,
    totals: Totals,
    max_entries: u64,
}

/// A directory the extraction made whose mode waits for the end.
#[cfg(unix)]
struct Made {
    path: Vec<u8>,
    /// Device and inode when made: the mode goes to this one only.
    id: (u64, u64),
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
            cursor: Cursor::new(root)?,
            parser: Parser::new(limits.max_entries, limits.max_bytes),
            rules: Rules::new(ErrorCode::InvalidState),
            file: None,
            dirs: Vec::new(),
            totals: Totals::default(),
            max_entries: limits.max_entries,
        })
    }

    /// Takes the next archive bytes.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<()> {
        let Extractor { cursor, parser, rules, file, dirs, totals, max_entries } = self;
        parser.feed(data, &mut |event| match event {
            Event::Entry(entry) => {
                let entry = match checked(rules, entry)? {
                    Some(e) => e,
                    None => return Ok(()),
                };
                totals.count(&entry);
                *file = create(cursor, &entry, dirs)?;
                // Each directory a path implies costs as much as an entry:
                // 100,000 entries 2,000 deep must not make 200 million.
                if rules.entries() + cursor.made > *max_entries {
                    return Err(Error::new(
                        ErrorCode::TooLarge,
                        format!(
                            "the archive has more than {max_entries} entries (maxEntries), counting the directories its paths imply"
                        ),
                    ));
                }
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
    pub(crate) fn finish(mut self) -> Result<Totals> {
        self.end()
    }

    /// [`Extractor::finish`], leaving the extractor to be asked what it cost.
    fn end(&mut self) -> Result<Totals> {
        let Extractor { cursor, parser, rules, dirs, totals, .. } = self;
        parser.finish().map_err(|e| Error::new(ErrorCode::ConnectionLost, e.message))?;
        let links: Vec<_> = rules.symlinks().collect();
        for (path, target) in &links {
            let name = cursor.enter(path)?;
            cursor.clear(path, name, false)?;
            let made = rustix::fs::symlinkat(*target, cursor.dir(), name);
            cursor.call(made).map_err(|e| cursor.failed("cannot create", path, e))?;
        }
        let mut budget = rules.budget();
        let mut out = Vec::new();
        for (path, _) in &links {
            if archive::escapes(path, |p| cursor.target(p), &mut budget)? {
                out.push(path);
            }
        }
        if let Some(first) = out.first() {
            for path in &out {
                let name = cursor.enter(path)?;
                let removed = rustix::fs::unlinkat(cursor.dir(), name, rustix::fs::AtFlags::empty());
                cursor.call(removed).map_err(|e| cursor.failed("cannot remove", path, e))?;
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
        for dir in dirs.iter().rev() {
            dir.set_mode(cursor)?;
        }
        Ok(*totals)
    }

    /// Names the kernel walked for the extraction so far.
    #[cfg(test)]
    fn walked(&self) -> u64 {
        self.cursor.walked
    }
}

/// How the cursor opens a directory: never through a symlink (`O_NOFOLLOW`
/// with `O_DIRECTORY` fails on one), and on Linux as a bare handle
/// (`O_PATH`), which needs no read permission, as a path would not.
#[cfg(unix)]
const DIRECTORY: rustix::fs::OFlags = {
    use rustix::fs::OFlags;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let handle = OFlags::PATH;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let handle = OFlags::RDONLY;
    handle.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC)
};

/// The one directory under the target that the extraction has open, where
/// its every call is made: each names one component relative to it, so
/// what the kernel walks per call is one name, whatever the depth. (A call
/// by path walks the whole path again: checking an entry's directories one
/// by one that way cost the square of its depth, minutes of CPU for an
/// archive of 2,000 nested directories.) It gets from one directory to the
/// next the shortest way, up through `..` or down by name, or again from
/// the root: a run of entries in one directory costs nothing to reach, and
/// any entry at most the components of its path.
///
/// What it assumes: each directory on its path was opened as a directory
/// by name, never through a symlink, and stays that directory, with `..`
/// its parent: only this extractor writes under the target during the
/// call, and it never removes, replaces or moves a directory (an entry over
/// one is refused, see [`Cursor::clear`]). What it does not: anything of a
/// name it has not opened, pre-existing ones included; each is opened
/// without following a link when the cursor first passes through it, and a
/// symlink or a file there refuses the entry.
#[cfg(unix)]
struct Cursor {
    /// The target, for messages, and a handle on it.
    root: PathBuf,
    root_dir: std::os::fd::OwnedFd,
    /// Where the cursor is (a checked path, empty at the root) and its handle.
    at: Vec<u8>,
    dir: std::os::fd::OwnedFd,
    /// Directories made that the archive has no entry of.
    made: u64,
    /// Names the kernel walked for the extraction's calls (one for a call
    /// at a name, as most are).
    walked: u64,
}

/// Components of a checked path.
#[cfg(unix)]
fn depth(path: &[u8]) -> usize {
    if path.is_empty() {
        0
    } else {
        memchr::memchr_iter(b'/', path).count() + 1
    }
}

/// A checked path's directory and name.
#[cfg(unix)]
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memrchr(b'/', path) {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

#[cfg(unix)]
impl Cursor {
    fn new(root: &Path) -> Result<Self> {
        let root_dir: std::os::fd::OwnedFd =
            std::fs::File::open(root).map_err(|e| io_error("cannot open", root, e))?.into();
        let dir = root_dir.try_clone().map_err(|e| io_error("cannot open", root, e))?;
        Ok(Cursor { root: root.to_path_buf(), root_dir, at: Vec::new(), dir, made: 0, walked: 0 })
    }

    fn dir(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.dir.as_fd()
    }

    /// Counts a call at one name that was made.
    fn call<T>(&mut self, result: rustix::io::Result<T>) -> rustix::io::Result<T> {
        self.walked += 1;
        result
    }

    fn failed(&self, what: &str, path: &[u8], e: rustix::io::Errno) -> Error {
        io_error(what, &self.root.join(std::ffi::OsStr::from_bytes(path)), e.into())
    }

    /// Moves to the directory `to` (a checked path), making what is missing
    /// if `make`. `Some(prefix)`: the directory at that prefix of `to` is
    /// missing (not `make`) or is no directory (a symlink, a file); the
    /// cursor stays on the way.
    fn go<'p>(&mut self, to: &'p [u8], make: bool) -> Result<Option<&'p [u8]>> {
        use rustix::fs::{mkdirat, openat, Mode};
        use rustix::io::Errno;
        if self.at != to {
            // Where the two paths part, at a component's end.
            let mut common = self.at.iter().zip(to).position(|(a, b)| a != b).unwrap_or(self.at.len().min(to.len()));
            let ends = |p: &[u8]| common == p.len() || p[common] == b'/';
            if !(ends(&self.at) && ends(to)) {
                common = memchr::memrchr(b'/', &to[..common]).unwrap_or(0);
            }
            let (shared, ups) = (depth(&to[..common]), depth(&self.at) - depth(&to[..common]));
            if ups > shared {
                let root = self.root_dir.try_clone().map_err(|e| io_error("cannot open", &self.root, e))?;
                self.walked += 1;
                self.dir = root;
                self.at.clear();
            } else {
                for _ in 0..ups {
                    let parent = openat(&self.dir, "..", DIRECTORY, Mode::empty());
                    self.dir = self.call(parent).map_err(|e| self.failed("cannot open", &self.at, e))?;
                    self.at.truncate(memchr::memrchr(b'/', &self.at).unwrap_or(0));
                }
            }
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.at.len() < to.len() {
            // Down several names in one call, refused (ELOOP) at any
            // symlink: the kernel's walk is cheap where a call per name is
            // not. Whatever fails (a name missing, a link, an old kernel
            // without openat2) is walked again name by name, which tells.
            let rest = &to[if self.at.is_empty() { 0 } else { self.at.len() + 1 }..];
            if memchr::memchr(b'/', rest).is_some() {
                use rustix::fs::{openat2, ResolveFlags};
                self.walked += depth(rest) as u64;
                if let Ok(dir) = openat2(&self.dir, rest, DIRECTORY, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
                    self.dir = dir;
                    self.at = to.to_vec();
                    return Ok(None);
                }
            }
        }
        while self.at.len() < to.len() {
            let start = if self.at.is_empty() { 0 } else { self.at.len() + 1 };
            let end = memchr::memchr(b'/', &to[start..]).map_or(to.len(), |i| start + i);
            let name = &to[start..end];
            let mut opened = openat(&self.dir, name, DIRECTORY, Mode::empty());
            self.walked += 1;
            if make && matches!(opened, Err(Errno::NOENT)) {
                let made = mkdirat(&self.dir, name, Mode::from_raw_mode(0o777));
                self.call(made).map_err(|e| self.failed("cannot create", &to[..end], e))?;
                self.made += 1;
                opened = openat(&self.dir, name, DIRECTORY, Mode::empty());
                self.walked += 1;
            }
            match opened {
                Ok(dir) => {
                    self.dir = dir;
                    self.at.clear();
                    self.at.extend_from_slice(&to[..end]);
                }
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(Some(&to[..end])),
                Err(e) => return Err(self.failed("cannot open", &to[..end], e)),
            }
        }
        Ok(None)
    }

    /// Moves to the directory of the entry at `path`, making what is
    /// missing; its name, or a refusal if a symlink or a file is on the way.
    fn enter<'p>(&mut self, path: &'p [u8]) -> Result<&'p [u8]> {
        let (dir, name) = split(path);
        match self.go(dir, true)? {
            None => Ok(name),
            Some(through) => Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "archive entry {} would be written through {} (a symlink or a file); nothing past it was extracted",
                    archive::shown(path),
                    archive::shown(split(through).1)
                ),
            )),
        }
    }

    /// The type of `name` here, `None` if missing.
    fn kind(&mut self, name: &[u8]) -> Option<rustix::fs::FileType> {
        let stat = rustix::fs::statat(&self.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
        self.call(stat).ok().map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode))
    }

    /// Makes room for a new entry at `name` here (`path`): removes what is
    /// there unless it is a directory (a symlink is removed, never
    /// followed); `Ok(true)` for a directory kept.
    fn clear(&mut self, path: &[u8], name: &[u8], keep_dir: bool) -> Result<bool> {
        match self.kind(name) {
            Some(rustix::fs::FileType::Directory) if keep_dir => Ok(true),
            Some(rustix::fs::FileType::Directory) => Err(Error::new(
                ErrorCode::InvalidState,
                format!("{:?} is a directory", self.root.join(std::ffi::OsStr::from_bytes(path)).display().to_string()),
            )),
            Some(_) => {
                let removed = rustix::fs::unlinkat(&self.dir, name, rustix::fs::AtFlags::empty());
                self.call(removed).map(|()| false).map_err(|e| self.failed("cannot replace", path, e))
            }
            None => Ok(false),
        }
    }

    /// What [`archive::escapes`] asks of the tree on disk: the target of
    /// the symlink at `path`, `None` for anything else (missing too).
    fn target(&mut self, path: &[u8]) -> Result<Option<Vec<u8>>> {
        let (dir, name) = split(path);
        if self.go(dir, false)?.is_some() {
            return Ok(None);
        }
        let target = rustix::fs::readlinkat(&self.dir, name, Vec::new());
        Ok(self.call(target).ok().map(std::ffi::CString::into_bytes))
    }

    /// Opens the directory `name` here without following a link, as a file.
    fn open_dir(&mut self, path: &[u8], name: &[u8], flags: rustix::fs::OFlags) -> Result<std::fs::File> {
        let opened = rustix::fs::openat(&self.dir, name, flags, rustix::fs::Mode::empty());
        self.call(opened).map(std::fs::File::from).map_err(|e| self.failed("cannot open", path, e))
    }
}

#[cfg(unix)]
impl Made {
    /// Gives the directory its mode through a descriptor opened without
    /// following a symlink, if it is still the directory made.
    fn set_mode(&self, cursor: &mut Cursor) -> Result<()> {
        use rustix::fs::OFlags;
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let at = cursor.root.join(std::ffi::OsStr::from_bytes(&self.path));
        let replaced = || {
            Error::new(
                ErrorCode::InvalidState,
                format!("{:?} was replaced during the download", at.display().to_string()),
            )
        };
        let (parent, name) = split(&self.path);
        if cursor.go(parent, false)?.is_some() {
            return Err(replaced());
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = cursor.open_dir(&self.path, name, flags)?;
        let meta = dir.metadata().map_err(|e| io_error("cannot read", &at, e))?;
        if (meta.dev(), meta.ino()) != self.id {
            return Err(replaced());
        }
        cursor.walked += 2;
        dir.set_permissions(std::fs::Permissions::from_mode(self.mode))
            .map_err(|e| io_error("cannot set the mode of", &at, e))
    }
}

#[cfg(unix)]
fn checked(rules: &mut Rules, mut entry: Entry) -> Result<Option<Entry>> {
    Ok(rules.check(&mut entry)?.then_some(entry))
}

/// Creates a checked file, directory or hard link (symlinks wait for
/// `finish`, their directories do not); a file is returned open for its
/// data.
#[cfg(unix)]
fn create(cursor: &mut Cursor, entry: &Entry, dirs: &mut Vec<Made>) -> Result<Option<std::fs::File>> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::unix::fs::MetadataExt;
    let path = &entry.path;
    match entry.kind {
        Kind::Directory => {
            let name = cursor.enter(path)?;
            if !cursor.clear(path, name, true)? {
                // Owner rwx until the end, so its contents can be made; the
                // umask applies (the kernel's), and only ever narrows it.
                let made = rustix::fs::mkdirat(cursor.dir(), name, Mode::from_raw_mode((entry.mode | 0o700) as _));
                cursor.call(made).map_err(|e| cursor.failed("cannot create", path, e))?;
                let m = cursor
                    .open_dir(path, name, DIRECTORY)?
                    .metadata()
                    .map_err(|e| io_error("cannot read", &cursor.root, e))?;
                cursor.walked += 1;
                let now = m.mode() & 0o7777;
                // What the archive asked, under the umask: the bits mkdir kept of it.
                if now & entry.mode != now {
                    dirs.push(Made { path: path.clone(), id: (m.dev(), m.ino()), mode: now & entry.mode });
                }
            }
            Ok(None)
        }
        Kind::File => {
            let name = cursor.enter(path)?;
            cursor.clear(path, name, false)?;
            // O_EXCL and O_NOFOLLOW: not even a symlink raced in is
            // followed; the umask applies to the mode.
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let file = rustix::fs::openat(cursor.dir(), name, flags, Mode::from_raw_mode((entry.mode & 0o777) as _));
            Ok(Some(cursor.call(file).map(std::fs::File::from).map_err(|e| cursor.failed("cannot create", path, e))?))
        }
        Kind::Symlink => {
            cursor.enter(path)?;
            Ok(None)
        }
        Kind::HardLink => {
            let (dir, source) = split(&entry.link);
            if cursor.go(dir, false)?.is_some() || cursor.kind(source) != Some(FileType::RegularFile) {
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    format!(
                        "archive entry {} is a hard link to {}, which is not a file the archive made",
                        archive::shown(path),
                        archive::shown(&entry.link)
                    ),
                ));
            }
            let source_dir = cursor.dir.try_clone().map_err(|e| io_error("cannot open", &cursor.root, e))?;
            let name = cursor.enter(path)?;
            cursor.clear(path, name, false)?;
            let linked = rustix::fs::linkat(&source_dir, source, cursor.dir(), name, rustix::fs::AtFlags::empty());
            cursor.call(linked).map_err(|e| cursor.failed("cannot create", path, e))?;
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

    #[test]
    fn extraction_walks_names_in_proportion_to_the_archive() {
        // Names the kernel walks, for feed and finish together, at most one
        // per two archive bytes (a name takes two in a path): checking each
        // entry's directories by path walked each one's depth squared.
        let shapes = [
            // 1,000 nested directories, one entry each, and 200 links at the
            // bottom, 10 up and 10 down.
            ("deep", super::cost::deep(1000, 200, 10)),
            // 100 files alternating between two directories 1,000 deep.
            ("alternating", super::cost::alternating(1000, 100)),
        ];
        for (name, data) in shapes {
            let dir = scratch(&format!("walked-{name}"));
            let mut x = Extractor::new(&dir.join("to"), Limits::default(), false).unwrap();
            data.chunks(64 * 1024).try_for_each(|piece| x.feed(piece)).unwrap();
            x.end().unwrap();
            let walked = x.walked();
            assert!(walked <= data.len() as u64 / 2, "{name}: {walked} names walked for {} bytes", data.len());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn link_resolution_is_refused_within_its_budget() {
        // 20 chains of 40 links 200 deep, each link up and down one level to
        // the one before: following every chain from every link is refused
        // once the steps run out (16 per entry), having walked a few names
        // per step.
        let dir = scratch("chains");
        let data = super::cost::chains(200, 20, 40);
        let mut x = Extractor::new(&dir.join("to"), Limits::default(), false).unwrap();
        data.chunks(64 * 1024).try_for_each(|piece| x.feed(piece)).unwrap();
        let (fed, budget) = (x.walked(), x.rules.budget());
        assert_eq!(budget, archive::RESOLVE_STEPS_FLOOR + archive::RESOLVE_STEPS_PER_ENTRY * 801);
        let e = x.end().unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge, "{}", e.message);
        let walked = x.walked() - fed;
        assert!(walked <= 4 * budget, "{walked} names walked for a budget of {budget} steps");
        std::fs::remove_dir_all(&dir).unwrap();
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

/// Archives a hostile sandbox could send to make extraction expensive, and
/// what extracting each costs (`cargo test --release -p sandbox-core
/// extraction_cost -- --ignored --nocapture`).
#[cfg(all(test, unix))]
mod cost {
    use super::*;
    use crate::transfer::archive::{encode_end, encode_header, encode_padding};

    fn push(out: &mut Vec<u8>, path: &[u8], kind: Kind, link: &[u8], size: u64) {
        let e = Entry { path: path.to_vec(), link: link.to_vec(), kind, mode: 0o755, size, mtime: 0 };
        encode_header(&e, out);
        out.resize(out.len() + size as usize, b'x');
        encode_padding(size, out);
    }

    fn end(mut out: Vec<u8>) -> Vec<u8> {
        let n = out.len() as u64;
        encode_end(n, &mut out);
        out
    }

    /// `depth` nested directories `d/d/…` (one entry each), a file at the
    /// bottom and `links` symlinks there, each `../` `up` times then `d/`
    /// `up` times to the file.
    pub(crate) fn deep(depth: usize, links: usize, up: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut path = Vec::new();
        for _ in 0..depth {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.push(b'd');
            push(&mut out, &path, Kind::Directory, b"", 0);
        }
        push(&mut out, &[&path[..], b"/f"].concat(), Kind::File, b"", 1);
        let target = [b"../".repeat(up), b"d/".repeat(up), b"f".to_vec()].concat();
        for i in 0..links {
            push(&mut out, &[&path[..], format!("/l{i}").as_bytes()].concat(), Kind::Symlink, &target, 0);
        }
        end(out)
    }

    /// `files` files alternating between the bottoms of two branches
    /// `a/d/d/…` and `b/d/d/…`, each `depth` deep (no directory entries).
    pub(crate) fn alternating(depth: usize, files: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let tail = b"/d".repeat(depth - 1);
        for i in 0..files {
            let branch: &[u8] = if i % 2 == 0 { b"a" } else { b"b" };
            push(&mut out, &[branch, &tail[..], format!("/f{i}").as_bytes()].concat(), Kind::File, b"", 0);
        }
        end(out)
    }

    /// `files` empty files in one directory.
    pub(crate) fn wide(files: usize) -> Vec<u8> {
        let mut out = Vec::new();
        push(&mut out, b"w", Kind::Directory, b"", 0);
        for i in 0..files {
            push(&mut out, format!("w/f{i}").as_bytes(), Kind::File, b"", 0);
        }
        end(out)
    }

    /// `chains` chains of `hops` links under a `depth`-deep directory, each
    /// link `../d/l<i-1>`-like: up and down one level to the previous one,
    /// whose resolution a later link repeats.
    pub(crate) fn chains(depth: usize, chains: usize, hops: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let path = [b"d".to_vec(), b"/d".repeat(depth - 1)].concat();
        push(&mut out, &[&path[..], b"/f"].concat(), Kind::File, b"", 1);
        for c in 0..chains {
            for h in 0..hops {
                let target = if h == 0 { b"../d/f".to_vec() } else { format!("../d/c{c}h{}", h - 1).into_bytes() };
                push(&mut out, &[&path[..], format!("/c{c}h{h}").as_bytes()].concat(), Kind::Symlink, &target, 0);
            }
        }
        end(out)
    }

    /// CPU time of this thread so far.
    fn cpu() -> std::time::Duration {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
        std::time::Duration::from_nanos(stat.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0))
    }

    /// `COST_SHAPES` picks shapes by a part of their names.
    #[test]
    #[ignore = "a measurement: run in release with --nocapture"]
    #[allow(clippy::print_stdout)] // The measurement is what it prints.
    fn extraction_cost() {
        type Shape = (&'static str, fn() -> Vec<u8>);
        let shapes: [Shape; 6] = [
            ("deep 2000 dirs, 3000 links up/down 10", || deep(2000, 3000, 10)),
            ("deep 2000 dirs, 2000 links up/down 300", || deep(2000, 2000, 300)),
            ("deep 500 dirs, 500 links up/down 10", || deep(500, 500, 10)),
            ("alternating 2 x 2000 deep, 2000 files", || alternating(2000, 2000)),
            ("wide 50000 files", || wide(50_000)),
            ("chains 1000 deep, 100 x 40 hops", || chains(1000, 100, 40)),
        ];
        let pick = std::env::var("COST_SHAPES").unwrap_or_default();
        for (name, make) in shapes.into_iter().filter(|(name, _)| name.contains(pick.as_str())) {
            let data = make();
            let dir = std::env::temp_dir().join(format!("transfer-cost-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let start = cpu();
            let wall = std::time::Instant::now();
            let mut calls = 0;
            let result = (|| {
                let mut x = Extractor::new(&dir, Limits::default(), false)?;
                let fed = data.chunks(64 * 1024).try_for_each(|piece| x.feed(piece));
                calls = x.walked();
                fed?;
                x.finish()
            })();
            let (cpu, wall) = (cpu() - start, wall.elapsed());
            let outcome = match result {
                Ok(t) => format!("ok ({} files, {} dirs)", t.files, t.directories),
                Err(e) => format!("{:?}: {}", e.code, &e.message[..e.message.len().min(120)]),
            };
            println!(
                "{name}: {} MB, {cpu:.2?} CPU, {wall:.2?} wall, {calls} names walked in feed: {outcome}",
                data.len() / 1_000_000
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
