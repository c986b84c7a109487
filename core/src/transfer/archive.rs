//! Tar archives as a hostile party may write them: a streaming parser
//! ([`Parser`]) that takes bytes in any pieces and reports entries and their
//! data, the rules every entry must pass ([`Rules`], the one place they
//! live), and the encoder of checked entries ([`encode_header`],
//! [`encode_end`]).
//!
//! The parser holds one 512-byte block and one extension record (a GNU long
//! name or a PAX header, capped at [`MAX_EXTENSION_BYTES`]) at a time; data
//! passes through as slices of what was fed. Names are bytes from end to
//! end: non-UTF-8, newlines and 255-byte names round-trip.

use std::collections::BTreeMap;

use tar::{EntryType, Header};

use crate::error::{Error, ErrorCode, Result};

/// Tar's block size.
pub(crate) const BLOCK: usize = 512;
/// Tar's default record (20 blocks). GNU tar reads a pipe in whole records
/// (`--read-full-records` is on for stdin), so an archive sent to it ends on
/// one; else it waits for bytes that never come.
pub(crate) const RECORD: usize = 20 * BLOCK;
/// The largest GNU long name or PAX record accepted (a path is at most 4095
/// bytes; PAX may add a few other keys).
pub(crate) const MAX_EXTENSION_BYTES: u64 = 64 * 1024;
/// Most bytes of symlink names and targets [`Rules`] keep (to refuse
/// writes through them, and to resolve them at the end).
pub(crate) const MAX_SYMLINK_NAME_BYTES: usize = 16 * 1024 * 1024;
/// Most links one resolution follows (Linux's own bound, `ELOOP`).
pub(crate) const MAX_LINK_HOPS: u32 = 40;
/// Steps (components of paths and link targets walked, each at most one
/// lookup) one tree's link resolutions may take together, per entry of the
/// tree: a workspace's link (`../typescript/bin/tsc`, perhaps through one
/// more) takes a few, and most entries are no links. Proportional to the
/// entries, so a hostile tree costs in step with its size: at the default
/// 100,000 entries, 1.6 million steps (about a second of one core on disk).
pub(crate) const RESOLVE_STEPS_PER_ENTRY: u64 = 16;
/// Steps every tree may take besides, for a small tree with a long link.
pub(crate) const RESOLVE_STEPS_FLOOR: u64 = 4096;
/// Longest path Linux system calls take (`PATH_MAX` less its NUL).
pub(crate) const PATH_BYTES: usize = 4095;
/// Longest name of one path component (`NAME_MAX`).
pub(crate) const NAME_BYTES: usize = 255;

/// What an entry is. Anything else (devices, FIFOs, sparse or volume
/// entries) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (`link` is its target).
    Symlink,
    /// A hard link to an earlier entry (`link` is its path).
    HardLink,
}

/// One entry as the archive describes it (before [`Rules::check`]) or as
/// checked (after: `path` relative and normalized, `mode` without setuid and
/// setgid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The path as bytes (`a/b/c` once checked; empty is the root itself).
    pub path: Vec<u8>,
    /// Symlink target or hard link source.
    pub link: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    /// Data bytes that follow (files only, else 0).
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
}

/// What [`Parser::feed`] reports, in archive order.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    /// An entry starts; its data follows as [`Event::Data`].
    Entry(Entry),
    /// A piece of the current entry's data.
    Data(&'a [u8]),
}

/// Where the parser is.
enum State {
    /// Collecting a header block.
    Header,
    /// Collecting an extension record (GNU `L`/`K`, PAX `x`) of this size.
    Extension { kind: u8, size: u64 },
    /// Passing (or skipping) this many data bytes, then `pad` padding bytes.
    Data { left: u64, pad: usize, deliver: bool },
    /// One zero block seen: the next must be one too.
    OneZero,
    /// Two zero blocks: the archive ended; the rest is record padding.
    End,
}

/// A streaming tar parser for GNU, ustar and PAX archives.
pub(crate) struct Parser {
    state: State,
    block: Vec<u8>,
    /// The extension record being collected.
    extension: Vec<u8>,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    entries: u64,
    bytes: u64,
    max_entries: u64,
    max_bytes: u64,
}

fn malformed(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::InvalidRequest, format!("the archive is malformed: {what}"))
}

impl Parser {
    /// A parser that refuses more than `max_entries` entries or an archive
    /// over `max_bytes` bytes (`too_large`).
    pub(crate) fn new(max_entries: u64, max_bytes: u64) -> Self {
        Parser {
            state: State::Header,
            block: Vec::with_capacity(BLOCK),
            extension: Vec::new(),
            long_name: None,
            long_link: None,
            entries: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// Whether the end-of-archive marker (two zero blocks) has been read.
    pub(crate) fn ended(&self) -> bool {
        matches!(self.state, State::End)
    }

    /// Fails unless the archive ended properly: a stream cut short must not
    /// pass for a shorter tree.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.ended() {
            Ok(())
        } else {
            Err(malformed("it ends before its end-of-archive marker (two zero blocks)"))
        }
    }

    /// Takes the next bytes; `on_event` gets entries and data as they
    /// complete. An `Err` (from the archive or from `on_event`) leaves the
    /// parser unusable.
    pub(crate) fn feed(&mut self, mut data: &[u8], on_event: &mut impl FnMut(Event<'_>) -> Result<()>) -> Result<()> {
        self.bytes += data.len() as u64;
        if self.bytes > self.max_bytes {
            return Err(Error::new(
                ErrorCode::TooLarge,
                format!("the archive is over the limit of {} bytes (maxBytes)", self.max_bytes),
            ));
        }
        while !data.is_empty() {
            match &mut self.state {
                State::End => return Ok(()),
                State::Data { left, pad, deliver } => {
                    if *left > 0 {
                        let n = (*left).min(data.len() as u64) as usize;
                        if *deliver {
                            on_event(Event::Data(&data[..n]))?;
                        }
                        *left -= n as u64;
                        data = &data[n..];
                    } else {
                        let n = (*pad).min(data.len());
                        *pad -= n;
                        data = &data[n..];
                        if *pad == 0 {
                            self.state = State::Header;
                        }
                    }
                    if let State::Data { left: 0, pad: 0, .. } = self.state {
                        self.state = State::Header;
                    }
                }
                State::Extension { kind, size } => {
                    let (kind, size) = (*kind, *size);
                    let want = size as usize - self.extension.len();
                    let n = want.min(data.len());
                    self.extension.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if self.extension.len() as u64 == size {
                        self.extension_done(kind)?;
                        self.state = State::Data { left: 0, pad: padding(size), deliver: false };
                        if padding(size) == 0 {
                            self.state = State::Header;
                        }
                    }
                }
                State::Header | State::OneZero => {
                    let n = (BLOCK - self.block.len()).min(data.len());
                    self.block.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if self.block.len() == BLOCK {
                        let block = std::mem::replace(&mut self.block, Vec::with_capacity(BLOCK));
                        self.header(&block, on_event)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn header(&mut self, block: &[u8], on_event: &mut impl FnMut(Event<'_>) -> Result<()>) -> Result<()> {
        if block.iter().all(|b| *b == 0) {
            self.state = match self.state {
                State::OneZero => State::End,
                _ => State::OneZero,
            };
            return Ok(());
        }
        if let State::OneZero = self.state {
            return Err(malformed("a lone zero block in the middle"));
        }
        let header = Header::from_byte_slice(block);
        let sum = header.cksum().map_err(|_| malformed("a header checksum is not a number"))?;
        let computed: u32 = block[..148].iter().chain(&[b' '; 8]).chain(&block[156..]).map(|b| u32::from(*b)).sum();
        if sum != computed {
            return Err(malformed("a header checksum does not match (not a tar archive, or corrupt)"));
        }
        let size = header.entry_size().map_err(|_| malformed("an entry size is not a number"))?;
        let kind = header.entry_type();
        match kind {
            EntryType::GNULongName | EntryType::GNULongLink | EntryType::XHeader | EntryType::XGlobalHeader => {
                if size > MAX_EXTENSION_BYTES {
                    return Err(malformed(format!("an extension record of {size} bytes")));
                }
                self.extension.clear();
                self.state = State::Extension { kind: kind.as_byte(), size };
                if size == 0 {
                    self.extension_done(kind.as_byte())?;
                    self.state = State::Header;
                }
                return Ok(());
            }
            _ => {}
        }
        self.entries += 1;
        if self.entries > self.max_entries {
            return Err(Error::new(
                ErrorCode::TooLarge,
                format!("the archive has more than {} entries (maxEntries)", self.max_entries),
            ));
        }
        let path = match self.long_name.take() {
            Some(p) => p,
            None => header.path_bytes().into_owned(),
        };
        let link = match self.long_link.take() {
            Some(l) => l,
            None => header.link_name_bytes().map(|l| l.into_owned()).unwrap_or_default(),
        };
        let entry_kind = match kind {
            EntryType::Regular | EntryType::Continuous => Some(Kind::File),
            EntryType::Directory => Some(Kind::Directory),
            EntryType::Symlink => Some(Kind::Symlink),
            EntryType::Link => Some(Kind::HardLink),
            // A pre-POSIX regular file is `\0`; tar's crate maps it to Regular.
            _ => None,
        };
        let Some(entry_kind) = entry_kind else {
            let what = match kind {
                EntryType::Char | EntryType::Block => "a device node",
                EntryType::Fifo => "a FIFO",
                _ => "an entry type tar transfers do not carry",
            };
            return Err(Error::invalid_request(format!(
                "{} is {what} (type {:?}); only files, directories, symlinks and hard links are transferred",
                shown(&path),
                kind.as_byte() as char
            )));
        };
        let mode = header.mode().map_err(|_| malformed("a mode is not a number"))? & 0o7777;
        let mtime = header.mtime().unwrap_or(0);
        let file_size = if entry_kind == Kind::File { size } else { 0 };
        on_event(Event::Entry(Entry { path, link, kind: entry_kind, mode, size: file_size, mtime }))?;
        // Data of anything but a file (GNU tar gives hard links none) is skipped.
        self.state = State::Data { left: size, pad: padding(size), deliver: entry_kind == Kind::File };
        if size == 0 {
            self.state = State::Header;
        }
        Ok(())
    }

    fn extension_done(&mut self, kind: u8) -> Result<()> {
        let record = std::mem::take(&mut self.extension);
        match kind {
            b'L' => self.long_name = Some(c_string(&record)),
            b'K' => self.long_link = Some(c_string(&record)),
            // A global header sets defaults for every entry; we honour none.
            b'g' => {}
            _ => {
                for field in tar::PaxExtensions::new(&record) {
                    let field = field.map_err(|_| malformed("a PAX record is not `<len> <key>=<value>`"))?;
                    match field.key_bytes() {
                        b"path" => self.long_name = Some(field.value_bytes().to_vec()),
                        b"linkpath" => self.long_link = Some(field.value_bytes().to_vec()),
                        // A size over the header's would desynchronize us; refuse rather than guess.
                        b"size" => return Err(malformed("a PAX size record (files over 8 GiB are not transferred)")),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Padding after `size` data bytes.
fn padding(size: u64) -> usize {
    ((BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64) as usize
}

/// A NUL-terminated GNU long name without its NUL.
fn c_string(record: &[u8]) -> Vec<u8> {
    let end = memchr::memchr(0, record).unwrap_or(record.len());
    record[..end].to_vec()
}

/// A name for messages: escaped, at most 200 characters.
pub(crate) fn shown(path: &[u8]) -> String {
    let text: String = path.escape_ascii().to_string();
    if text.len() > 200 {
        format!("{:?}…", &text[..text.char_indices().nth(200).map_or(text.len(), |(i, _)| i)])
    } else {
        format!("{text:?}")
    }
}

/// The rules every entry passes before it is sent to the sandbox or
/// written locally. `refuse` is the code of a refusal (`invalid_request` for
/// what the caller sends, `invalid_state` for what a sandbox sends).
pub(crate) struct Rules {
    refuse: ErrorCode,
    /// Symlinks the archive made and their targets: nothing may be written
    /// through them, and each must resolve inside the tree
    /// ([`Rules::finish`]). A later entry of the same path replaces one.
    /// Keyed by [`key`], and none under another (such a symlink is
    /// refused), so the one a path is under sorts right before it.
    symlinks: BTreeMap<Vec<u8>, Vec<u8>>,
    symlink_bytes: usize,
    /// Entries checked, which pay for the resolution ([`Rules::budget`]).
    entries: u64,
}

impl Rules {
    /// Rules whose refusals carry `refuse`.
    pub(crate) fn new(refuse: ErrorCode) -> Self {
        Rules { refuse, symlinks: BTreeMap::new(), symlink_bytes: 0, entries: 0 }
    }

    fn refused(&self, path: &[u8], why: &str) -> Error {
        Error::new(self.refuse, format!("archive entry {} {why}; nothing past it was extracted", shown(path)))
    }

    /// Checks `entry` and normalizes it in place; `Ok(false)` for an entry
    /// to skip (the root directory itself). Refuses absolute paths, `..`,
    /// names Linux cannot hold, symlinks whose own target climbs out of the
    /// tree, hard links to outside or to a symlink, and anything under a
    /// symlink the archive made. Drops setuid and setgid. A symlink that
    /// leaves the tree through other links is found by [`Rules::finish`].
    pub(crate) fn check(&mut self, entry: &mut Entry) -> Result<bool> {
        let raw = std::mem::take(&mut entry.path);
        entry.path = self.normalize(&raw)?;
        if entry.path.is_empty() {
            return match entry.kind {
                Kind::Directory => Ok(false),
                _ => Err(self.refused(&raw, "names the target directory itself")),
            };
        }
        if let Some(parent) = self.under_symlink(&entry.path) {
            return Err(self.refused(&raw, &format!("would be written through the symlink {}", shown(parent))));
        }
        self.entries += 1;
        entry.mode &= 0o1777;
        match entry.kind {
            Kind::Symlink => {
                if entry.link.is_empty() || entry.link.contains(&0) {
                    return Err(self.refused(&raw, "is a symlink with an empty or invalid target"));
                }
                if entry.link.starts_with(b"/") {
                    return Err(self.refused(&raw, "is a symlink to an absolute path (it points out of the tree)"));
                }
                let mut depth = entry.path.split(|b| *b == b'/').count() as i64 - 1;
                for part in entry.link.split(|b| *b == b'/') {
                    match part {
                        b"" | b"." => {}
                        b".." => depth -= 1,
                        _ => depth += 1,
                    }
                    if depth < 0 {
                        return Err(self.refused(&raw, "is a symlink that points out of the tree"));
                    }
                }
                self.symlink_bytes += entry.path.len() + entry.link.len();
                if self.symlink_bytes > MAX_SYMLINK_NAME_BYTES {
                    return Err(Error::new(
                        ErrorCode::TooLarge,
                        format!(
                            "the archive has more than {MAX_SYMLINK_NAME_BYTES} bytes of symlink names and targets"
                        ),
                    ));
                }
                let key = key(&entry.path);
                let mut beneath = key.clone();
                beneath.push(0);
                if self.symlinks.range(beneath.clone()..).next().is_some_and(|(k, _)| k.starts_with(&beneath)) {
                    return Err(
                        self.refused(&raw, "is a symlink over a directory holding other symlinks of the archive")
                    );
                }
                self.symlinks.insert(key, entry.link.clone());
            }
            Kind::HardLink => {
                let link = std::mem::take(&mut entry.link);
                entry.link = self.normalize(&link).map_err(|_| self.refused(&raw, "is a hard link out of the tree"))?;
                if entry.link.is_empty() {
                    return Err(self.refused(&raw, "is a hard link to the target directory"));
                }
                if self.symlinks.contains_key(&key(&entry.link)) || self.under_symlink(&entry.link).is_some() {
                    return Err(self.refused(&raw, "is a hard link through or to a symlink of the archive"));
                }
                self.symlinks.remove(&key(&entry.path));
            }
            Kind::File | Kind::Directory => {
                self.symlinks.remove(&key(&entry.path));
            }
        }
        Ok(true)
    }

    /// The archive's symlinks that stand at the end (path, target), a
    /// directory's before those of the directories in it.
    pub(crate) fn symlinks(&self) -> impl Iterator<Item = (Vec<u8>, &[u8])> {
        self.symlinks.iter().map(|(k, t)| (path_of(k), t.as_slice()))
    }

    /// Entries checked so far (the root directory not counted).
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// Steps the resolution of this tree's symlinks may take
    /// ([`RESOLVE_STEPS_PER_ENTRY`]).
    pub(crate) fn budget(&self) -> u64 {
        RESOLVE_STEPS_FLOOR + RESOLVE_STEPS_PER_ENTRY * self.entries
    }

    /// Once the archive ended: refuses it if one of its symlinks resolves
    /// out of the tree through the others (`a -> .` then `r -> a/../x`, in
    /// either order, at any depth), judged on the archive alone (what the
    /// upload sends; the download judges the tree on disk, see
    /// [`escapes`]).
    pub(crate) fn finish(&self) -> Result<()> {
        let mut budget = self.budget();
        for (path, _) in self.symlinks() {
            let lookup = |at: &[u8]| Ok(self.symlinks.get(&key(at)).cloned());
            if escapes(&path, lookup, &mut budget)? {
                return Err(self.refused(&path, ESCAPES));
            }
        }
        Ok(())
    }

    /// `raw` as a relative path of plain names (`./` and empty parts
    /// dropped), or a refusal.
    fn normalize(&self, raw: &[u8]) -> Result<Vec<u8>> {
        if raw.starts_with(b"/") {
            return Err(self.refused(raw, "has an absolute path"));
        }
        if raw.contains(&0) {
            return Err(self.refused(raw, "has a NUL byte in its name"));
        }
        let mut out = Vec::with_capacity(raw.len());
        for part in raw.split(|b| *b == b'/') {
            match part {
                b"" | b"." => {}
                b".." => return Err(self.refused(raw, "has a `..` component")),
                _ if part.len() > NAME_BYTES => {
                    return Err(self.refused(raw, &format!("has a name over {NAME_BYTES} bytes")))
                }
                _ => {
                    if !out.is_empty() {
                        out.push(b'/');
                    }
                    out.extend_from_slice(part);
                }
            }
        }
        if out.len() > PATH_BYTES {
            return Err(self.refused(raw, &format!("has a path over {PATH_BYTES} bytes")));
        }
        Ok(out)
    }

    /// The proper prefix of `path` that is a symlink of the archive. One
    /// lookup, whatever the depth: the symlink a path is under is the last
    /// key before it (a key between them would be under that symlink too).
    fn under_symlink<'p>(&self, path: &'p [u8]) -> Option<&'p [u8]> {
        let (before, _) = self.symlinks.range(..key(path)).next_back()?;
        (path.len() > before.len() && path[before.len()] == b'/' && key(&path[..before.len()]) == *before)
            .then(|| &path[..before.len()])
    }
}

/// A checked path as [`Rules`] keys it: `/` as NUL (which no name holds),
/// so what is under a path sorts right after it, before its siblings
/// (`a/b` before `a.b`).
fn key(path: &[u8]) -> Vec<u8> {
    path.iter().map(|b| if *b == b'/' { 0 } else { *b }).collect()
}

/// The path a [`key`] stands for.
fn path_of(key: &[u8]) -> Vec<u8> {
    key.iter().map(|b| if *b == 0 { b'/' } else { *b }).collect()
}

/// Why [`escapes`] refuses a symlink.
pub(crate) const ESCAPES: &str =
    "is a symlink that resolves out of the tree through other symlinks (or through over 40 of them)";

/// Whether the symlink at `link` (a checked path in the tree) resolves out
/// of the tree: its target is followed component by component, each one
/// looked up with `lookup` (a path in the tree to the target of the symlink
/// there, `None` for anything else, missing included), every symlink met on
/// the way followed in turn. Out is an absolute target, a `..` above the
/// root at any point (even one that comes back in: nothing outside is ever
/// looked at), or more than [`MAX_LINK_HOPS`] links. What is missing is
/// walked through by name: a directory made there later must not open a
/// way out. `budget` counts the steps (the link itself, then each component
/// walked), shared by every resolution of one tree ([`Rules::budget`]);
/// spent, it is `too_large`.
pub(crate) fn escapes(
    link: &[u8],
    mut lookup: impl FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    budget: &mut u64,
) -> Result<bool> {
    // Where the walk is (a path from the root, and where each of its
    // components starts), and what is left to walk, last component first.
    let mut at = link.to_vec();
    let mut starts: Vec<usize> = std::iter::once(0).chain(memchr::memchr_iter(b'/', link).map(|i| i + 1)).collect();
    let mut left: Vec<Vec<u8>> = Vec::new();
    let mut hops = 0;
    let mut look = true;
    let step = |budget: &mut u64| -> Result<()> {
        *budget = budget.checked_sub(1).ok_or_else(|| {
            Error::new(
                ErrorCode::TooLarge,
                format!(
                    "the archive's symlinks take too many steps to resolve (over {RESOLVE_STEPS_PER_ENTRY} per entry of the archive, and {RESOLVE_STEPS_FLOOR})"
                ),
            )
        })?;
        Ok(())
    };
    step(budget)?;
    loop {
        if look {
            if let Some(target) = lookup(&at)? {
                hops += 1;
                if hops > MAX_LINK_HOPS || target.starts_with(b"/") {
                    return Ok(true);
                }
                up(&mut at, &mut starts);
                left.extend(target.split(|b| *b == b'/').rev().map(<[u8]>::to_vec));
            }
        }
        let Some(part) = left.pop() else { return Ok(false) };
        step(budget)?;
        look = false;
        match part.as_slice() {
            b"" | b"." => {}
            b".." => {
                if starts.is_empty() {
                    return Ok(true);
                }
                up(&mut at, &mut starts);
            }
            _ => {
                starts.push(if at.is_empty() { 0 } else { at.len() + 1 });
                if !at.is_empty() {
                    at.push(b'/');
                }
                at.extend_from_slice(&part);
                look = true;
            }
        }
    }
}

/// Drops the last component of `at` (whose components start at `starts`).
fn up(at: &mut Vec<u8>, starts: &mut Vec<usize>) {
    if let Some(start) = starts.pop() {
        at.truncate(start.saturating_sub(1));
    }
}

/// The header block(s) of a checked entry: a GNU long name (`L`) and long
/// link (`K`) record first when they do not fit the 100-byte fields.
/// Ownership is not carried (uid and gid 0, no names).
pub(crate) fn encode_header(entry: &Entry, out: &mut Vec<u8>) {
    let mut path = entry.path.clone();
    if entry.kind == Kind::Directory {
        path.push(b'/');
    }
    if path.len() > 100 {
        long_record(b'L', &path, out);
    }
    if entry.link.len() > 100 {
        long_record(b'K', &entry.link, out);
    }
    let mut header = Header::new_gnu();
    let fields = header.as_old_mut();
    let n = path.len().min(100);
    fields.name[..n].copy_from_slice(&path[..n]);
    let n = entry.link.len().min(100);
    fields.linkname[..n].copy_from_slice(&entry.link[..n]);
    header.set_entry_type(match entry.kind {
        Kind::File => EntryType::Regular,
        Kind::Directory => EntryType::Directory,
        Kind::Symlink => EntryType::Symlink,
        Kind::HardLink => EntryType::Link,
    });
    header.set_mode(entry.mode);
    header.set_size(entry.size);
    header.set_mtime(entry.mtime);
    header.set_uid(0);
    header.set_gid(0);
    header.set_cksum();
    out.extend_from_slice(header.as_bytes());
}

fn long_record(kind: u8, name: &[u8], out: &mut Vec<u8>) {
    let mut header = Header::new_gnu();
    header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    header.set_entry_type(EntryType::new(kind));
    header.set_mode(0o644);
    header.set_size(name.len() as u64 + 1);
    header.set_cksum();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(name);
    out.push(0);
    out.resize(out.len() + padding(name.len() as u64 + 1), 0);
}

/// Zero padding after `size` data bytes of an entry.
pub(crate) fn encode_padding(size: u64, out: &mut Vec<u8>) {
    out.resize(out.len() + padding(size), 0);
}

/// The end-of-archive marker, padded so the whole archive (`written`
/// bytes before it) fills whole records.
pub(crate) fn encode_end(written: u64, out: &mut Vec<u8>) {
    let total = written + 2 * BLOCK as u64;
    let records = total.div_ceil(RECORD as u64);
    out.resize(out.len() + (records * RECORD as u64 - written) as usize, 0);
}

#[cfg(test)]
pub(crate) mod tests;
