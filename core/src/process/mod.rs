//! Background processes: started by one call, found again from any
//! connection, provider object or host process, their output kept in the
//! sandbox and read by sequence number, their exit status kept after they
//! end (see [`scripts`] for the files, [`stream`] for sequences).
//!
//! Nothing is installed in the image: a detached shell (the waiter) starts
//! the command and records its exit, relays copy its output into files, and
//! readers are ordinary execs. A process survives every connection ending,
//! the provider process dying and the API server restarting; it ends with its
//! pod (suspend, deletion), after which its handle reports `lost`.

mod follow;
mod poller;
mod reader;
pub mod scripts;
mod spawn;
pub(crate) mod stream;

use std::time::Duration;

use bytes::Bytes;

pub(crate) use follow::Followed;
pub use follow::{exec_reattached, follow, wait};
pub(crate) use poller::{Answer, Pollers};
pub use spawn::spawn;
pub(crate) use spawn::spawn_with;
pub(crate) use stream::Cursor;
pub use stream::{ProcessChunk, ProcessExit, MAX_CAP};

use crate::error::{Error, ErrorCode, Result};
use crate::exec::output::HeaderLine;
use crate::exec::wrapper::script_argv;
use crate::exec::{
    script_failed, script_status, Call, ExecEngine, ExecTarget, Flow, OutputChunk, Program, RunOptions, ScriptOutput,
    Sink,
};
use reader::Reader;

/// Default cap of each stream's stored output.
pub const DEFAULT_CAP: u64 = 32 * 1024 * 1024;
/// Most bytes of each stream one [`poll`] returns; the rest comes with the
/// next. Bounds what one call can make the host hold, whatever the sandbox
/// wrote into the output files.
pub const POLL_PAGE: u64 = 8 * 1024 * 1024;
/// Most processes [`list`] returns; more is `too_large`.
pub(crate) const MAX_LISTED: usize = 1000;
/// Most bytes of a command text a listing shows.
pub(crate) const LISTED_COMMAND_BYTES: usize = 16 * 1024;
/// Most bytes of an entry's line in a listing (`<id> <pid> <started ms>
/// <exit> <0|1>`, from a record of at most 256 bytes: list.sh).
const LISTED_LINE_BYTES: usize = 320;
/// Most bytes a listing may take in all: `MAX_LISTED` entries, each at its
/// limits (about 16 MiB), so that the sandbox's content can make a listing
/// `too_large` only by the number of its entries.
const MAX_LIST_BYTES: usize = MAX_LISTED * (LISTED_LINE_BYTES + LISTED_COMMAND_BYTES + 1) + 8;

/// What a spawned process reads on stdin.
#[derive(Debug, Clone, Default)]
pub enum SpawnStdin {
    /// Nothing (EOF at once).
    #[default]
    None,
    /// These bytes, then EOF.
    Bytes(Bytes),
    /// Kept open for [`write_stdin`] until [`close_stdin`].
    Open,
}

/// A command to start in the background.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Shell command line, run by `/bin/sh` from a file in the process's
    /// directory (see `scripts::SPAWN`).
    pub command: String,
    /// Working directory; empty keeps the exec's default.
    pub cwd: String,
    /// Extra environment over the pod's own (names must be shell identifiers).
    pub env: Vec<(String, String)>,
    /// Stdin.
    pub stdin: SpawnStdin,
    /// Killed (TERM, 2 s, KILL) this long after it started, by a timer in
    /// the sandbox: it holds whether or not anyone is connected.
    pub timeout: Option<Duration>,
    /// Bytes of each of stdout and stderr kept; later output is dropped and
    /// reads say `truncated`. At most [`MAX_CAP`].
    pub max_output_bytes: u64,
}

impl SpawnRequest {
    /// A request with defaults: no env, no stdin, no timeout, 32 MiB per stream.
    pub fn new(command: impl Into<String>, cwd: impl Into<String>) -> Self {
        SpawnRequest {
            command: command.into(),
            cwd: cwd.into(),
            env: Vec::new(),
            stdin: SpawnStdin::None,
            timeout: None,
            max_output_bytes: DEFAULT_CAP,
        }
    }
}

/// A process as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its id (20 hex digits; in start order).
    pub id: String,
    /// Pid of the command's shell in the sandbox.
    pub pid: u32,
    /// The command line (in a listing, at most its first
    /// `LISTED_COMMAND_BYTES` bytes).
    pub command: String,
    /// When it started (ms since the epoch, the starter's clock).
    pub started_at_ms: u64,
    /// How it ended, once it has.
    pub exit: Option<ProcessExit>,
}

/// What [`poll`] returns.
#[derive(Debug, Clone)]
pub struct ProcessPoll {
    /// The chunks after the requested sequence, in order: at most
    /// [`POLL_PAGE`] bytes of each stream, the rest on the next poll.
    pub chunks: Vec<ProcessChunk>,
    /// Set once the process has exited and every chunk was delivered.
    pub exit: Option<ProcessExit>,
    /// Output past the cap was dropped.
    pub truncated: bool,
}

/// Signals [`kill`] accepts.
pub(crate) const SIGNALS: [&str; 9] = ["TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"];

/// What [`kill`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kill {
    /// End the whole tree for sure: TERM, 2 s of grace, then KILL to what is
    /// left (as an exec's timeout does). What `kill()` without a signal does,
    /// as Rivet's helpers expect of it.
    Terminate,
    /// One signal (one of `SIGNALS`), sent to the whole tree.
    Signal(&'static str),
}

impl Kill {
    /// A signal name (`TERM`, `SIGTERM`); `invalid_request` for others.
    pub fn signal(name: &str) -> Result<Kill> {
        let bare = name.strip_prefix("SIG").unwrap_or(name);
        SIGNALS.iter().find(|s| **s == bare).map(|s| Kill::Signal(s)).ok_or_else(|| {
            Error::invalid_request(format!(
                "signal must be one of {}, got {}",
                SIGNALS.join(", "),
                crate::error::quoted(name)
            ))
        })
    }

    fn arg(self) -> &'static str {
        match self {
            Kill::Terminate => "terminate",
            Kill::Signal(s) => s,
        }
    }
}

/// A fresh process id: the start time in ms and 32 random bits, as 20 hex
/// digits, so ids sort by start time and never collide in practice.
fn new_id(started_at_ms: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(started_at_ms);
    h.write_u32(std::process::id());
    format!("{started_at_ms:012x}{:08x}", h.finish() as u32)
}

/// Checks a process id from a caller: exactly what `new_id` makes.
pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.len() == 20 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(Error::invalid_request(format!("{id:?} is not a process id (20 hex digits, as spawn returns)")))
    }
}

/// Every process the sandbox keeps (running, or exited within the
/// retention), in start order; `too_large` past `MAX_LISTED`.
pub async fn list(engine: &ExecEngine, target: &ExecTarget, call: &Call) -> Result<Vec<ProcessInfo>> {
    list_matching(engine, target, call, "").await
}

/// One process, or `None` if the sandbox does not know it (or `id` could not
/// name one).
pub async fn find(engine: &ExecEngine, target: &ExecTarget, call: &Call, id: &str) -> Result<Option<ProcessInfo>> {
    if check_id(id).is_err() {
        return Ok(None);
    }
    Ok(list_matching(engine, target, call, id).await?.into_iter().next())
}

async fn list_matching(engine: &ExecEngine, target: &ExecTarget, call: &Call, id: &str) -> Result<Vec<ProcessInfo>> {
    let too_large = || {
        Error::new(
            ErrorCode::TooLarge,
            format!(
                "the sandbox keeps more than {MAX_LISTED} processes (or {MAX_LIST_BYTES} bytes of commands); \
                 find one with process(id)"
            ),
        )
    };
    let mut out = Vec::new();
    let args = [id.to_owned(), MAX_LISTED.to_string(), LISTED_COMMAND_BYTES.to_string()];
    let mut sink = ScriptOutput::new(|c: Bytes| {
        if out.len() + c.len() > MAX_LIST_BYTES {
            return Err(too_large());
        }
        out.extend_from_slice(&c);
        Ok(())
    });
    let program = Program::Argv(script_argv(scripts::LIST, args));
    let exit = engine.run(target, program, RunOptions::call(call, None), &mut sink).await?;
    script_status(exit, "listing processes", sink.into_stderr())?;
    parse_list(&out)?.ok_or_else(too_large)
}

/// The list script's output; `None` when it stopped at its limit (`more`).
///
/// The sandbox writes every file the script reads, so anything can come
/// between the entries: a command text with NULs of its own ends at the
/// first (what follows it up to the next entry is skipped, a `.` or `more`
/// line in it too: the script's marker is the output's last line), and an
/// entry whose line does not parse (a pid past `u32`) is skipped with its
/// text. Linear in the output, and no message quotes it: only an output cut
/// short of its end marker fails.
fn parse_list(out: &[u8]) -> Result<Option<Vec<ProcessInfo>>> {
    let (mut rest, complete) = match (out.strip_suffix(b".\n"), out.strip_suffix(b"more\n")) {
        (Some(body), _) if body.is_empty() || body.ends_with(b"\0") => (body, true),
        (_, Some(body)) if body.ends_with(b"\0") => (body, false),
        _ => {
            return Err(Error::internal(format!(
                "the process listing ended before its end marker ({} bytes); was the listing script killed?",
                out.len()
            )))
        }
    };
    let mut list = Vec::new();
    while !rest.is_empty() {
        // A line comes before any NUL and within its limit, else this is
        // the rest of a text or a malformed entry: skip past its NUL.
        let head = &rest[..rest.len().min(LISTED_LINE_BYTES)];
        let line = memchr::memchr2(b'\n', 0, head).filter(|&end| head[end] == b'\n').map(|end| &head[..end]);
        let Some(line) = line else {
            rest = memchr::memchr(0, rest).map_or(&[][..], |nul| &rest[nul + 1..]);
            continue;
        };
        rest = &rest[line.len() + 1..];
        let text_end = memchr::memchr(0, rest).unwrap_or(rest.len());
        let text = &rest[..text_end];
        rest = &rest[(text_end + 1).min(rest.len())..];
        if let Some(info) = listed(line, text) {
            list.push(info);
        }
    }
    Ok(complete.then_some(list))
}

/// An entry of a listing from its line `<id> <pid> <started ms> <exit
/// token or -> <waiter alive 0|1>` and its command text; `None` when the
/// line does not parse.
fn listed(line: &[u8], text: &[u8]) -> Option<ProcessInfo> {
    let line = std::str::from_utf8(line).ok()?;
    let f: Vec<&str> = line.split(' ').collect();
    let [id, pid, at, x, waiter] = f.as_slice() else { return None };
    check_id(id).ok()?;
    let exit = match (*x, *waiter) {
        ("-", "1") => None,
        ("-", _) => Some(ProcessExit::LOST),
        (token, _) => Some(ProcessExit::from_token(token)),
    };
    Some(ProcessInfo {
        id: (*id).to_owned(),
        pid: pid.parse().ok()?,
        command: String::from_utf8_lossy(text).into_owned(),
        started_at_ms: at.parse().ok()?,
        exit,
    })
}

/// The chunks after `after` (a chunk's sequence; `None`: from the start)
/// that the sandbox has now, at most [`POLL_PAGE`] bytes of each stream, and
/// the exit once the process has exited and all its output is in the chunks.
pub async fn poll(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    id: &str,
    after: Option<u64>,
) -> Result<ProcessPoll> {
    check_id(id)?;
    let cursor = after.map(Cursor::from_sequence).transpose()?.unwrap_or_default();
    let args =
        [id.to_owned(), cursor.stdout.to_string(), cursor.stderr.to_string(), "poll".to_owned(), POLL_PAGE.to_string()];
    let mut sink = PollSink { reader: Reader::new(id, cursor).with_page(POLL_PAGE), chunks: Vec::new() };
    let program = Program::Argv(script_argv(scripts::READ, args));
    let exit = engine.run(target, program, RunOptions::call(call, None), &mut sink).await?;
    // Both streams are the process's output: no stderr of the script's own.
    match exit.status("reading the process output")? {
        0 => {}
        code => return Err(Error::internal(format!("reading the process output failed (exit {code})"))),
    }
    let PollSink { reader, chunks } = sink;
    Ok(ProcessPoll { chunks, exit: reader.exit_after_all(), truncated: reader.truncated() })
}

/// Feeds a poll's output to a [`Reader`], keeping the chunks.
struct PollSink {
    reader: Reader,
    chunks: Vec<ProcessChunk>,
}

impl Sink for PollSink {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        let chunks = &mut self.chunks;
        self.reader.feed(chunk, |c| chunks.push(c));
        Ok(Flow::More)
    }
}

/// Checks the arguments of [`poll`] (as it does) without reading anything.
pub(crate) fn check_poll(id: &str, after: Option<u64>) -> Result<()> {
    check_id(id)?;
    after.map(Cursor::from_sequence).transpose().map(drop)
}

/// Writes bytes to a process's stdin (spawned with [`SpawnStdin::Open`]).
/// Waits while the process does not read and its pipe is full.
pub async fn write_stdin(engine: &ExecEngine, target: &ExecTarget, call: &Call, id: &str, data: Bytes) -> Result<()> {
    check_id(id)?;
    if data.is_empty() {
        return Ok(());
    }
    let args = [id.to_owned(), "write".to_owned(), data.len().to_string()];
    stdin_call(engine, target, call, id, args.to_vec(), Some(data)).await
}

/// Closes a process's stdin: it reads EOF once it has read what was written.
pub async fn close_stdin(engine: &ExecEngine, target: &ExecTarget, call: &Call, id: &str) -> Result<()> {
    check_id(id)?;
    stdin_call(engine, target, call, id, vec![id.to_owned(), "close".to_owned()], None).await
}

async fn stdin_call(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    id: &str,
    args: Vec<String>,
    data: Option<Bytes>,
) -> Result<()> {
    let mut reply = HeaderLine::default();
    let mut sink = ScriptOutput::new(|c| {
        reply.feed(c);
        Ok(())
    });
    let program = Program::Argv(script_argv(scripts::STDIN, args));
    let exit = engine.run(target, program, RunOptions::call(call, data), &mut sink).await?;
    let stderr = sink.into_stderr();
    let state = |what: &str| Error::new(ErrorCode::InvalidState, format!("process {id}: {what}"));
    const WHAT: &str = "writing to the process's stdin";
    match exit.status(WHAT)? {
        0 if reply.line() == Some(b"gone") => {
            Err(state("it no longer exists (its pod was suspended or deleted, or its record expired)"))
        }
        0 => Ok(()),
        scripts::STDIN_NOT_OPEN => Err(state("it was spawned without `stdin: true`")),
        scripts::STDIN_CLOSED => Err(state("its stdin was closed")),
        scripts::PROCESS_EXITED => Err(state("it has exited")),
        code => Err(script_failed(WHAT, code, stderr)),
    }
}

/// Sends `kill` to the process and every process it started, grandchildren
/// whose parent died included. Resolves once sent ([`Kill::Terminate`]:
/// once the tree is gone, at most the grace later); a process that already
/// ended is not an error. A death this causes is reported as the
/// provider's: `exit_code: None` with the signal.
pub async fn kill(engine: &ExecEngine, target: &ExecTarget, call: &Call, id: &str, kill: Kill) -> Result<()> {
    check_id(id)?;
    let argv = script_argv(scripts::SIGNAL, [id.to_owned(), kill.arg().to_owned()]);
    let mut sink = ScriptOutput::new(|_| Ok(()));
    let exit = engine.run(target, Program::Argv(argv), RunOptions::call(call, None), &mut sink).await?;
    script_status(exit, "signalling the process", sink.into_stderr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        let id = new_id(1_764_582_000_123);
        check_id(&id).unwrap();
        assert!(id.starts_with("019ad94885fb"), "{id}");
        assert!(new_id(1) < new_id(2));
        for bad in
            ["", "x", "0123456789abcdef012", "0123456789ABCDEF0123", "../../../etc/passwd0", "0123456789abcdef012 "]
        {
            assert_eq!(check_id(bad).unwrap_err().code, ErrorCode::InvalidRequest, "{bad:?}");
        }
    }

    #[test]
    fn list_parses_commands_of_any_bytes() {
        let out = b"0000000000010000000a 12 5 - 1\nls\n\x000000000000020000000b 13 6 0 0\na\nb\n\x00.\n";
        let l = parse_list(out).unwrap().unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].command.as_str(), l[0].exit), ("ls\n", None));
        assert_eq!((l[1].command.as_str(), l[1].exit.unwrap().exit_code), ("a\nb\n", Some(0)));
        assert_eq!(parse_list(b".\n").unwrap(), Some(vec![]));
        assert_eq!(parse_list(b"0000000000010000000a 12 5 - 1\nls\x00more\n").unwrap(), None);
        for cut in [&b"x\n"[..], b"", b"0000000000010000000a 12 5 - 1\nls", b"0000000000010000000a 12 5 - 1\nls."] {
            let e = parse_list(cut).unwrap_err();
            assert_eq!(e.code, ErrorCode::Internal);
            assert!(!e.message.contains("ls") && !e.message.contains('x'), "{}", e.message);
        }
    }

    #[test]
    fn a_hostile_listing_keeps_its_good_entries_and_quotes_nothing() {
        let good = |n: u8| format!("0000000000010000000{n:x} 12 5 - 1\n");
        let mut out = Vec::new();
        // A command text of NULs, with a forged end marker and a forged
        // `more` after them, then a malformed text with a newline.
        out.extend_from_slice(good(1).as_bytes());
        out.extend_from_slice(b"head");
        out.extend_from_slice(&[0; 70_000]);
        out.extend_from_slice(b"x\n.\n\0more\n\0junk\nmore junk\0");
        // Entries whose line does not parse: a pid past u32, an id that is
        // a path, a line longer than any the script prints.
        out.extend_from_slice(b"0000000000010000000b 99999999999 5 - 1\ntext\0");
        out.extend_from_slice(b"../../etc/passwd0000 1 1 - 1\nx\0");
        out.extend_from_slice(format!("0000000000010000000c {} 5 - 1\nt\0", "1".repeat(400)).as_bytes());
        out.extend_from_slice(good(2).as_bytes());
        out.extend_from_slice(b"last\0.\n");
        let list = parse_list(&out).unwrap().unwrap();
        let seen: Vec<_> = list.iter().map(|p| (p.id.as_str(), p.command.as_str())).collect();
        assert_eq!(seen, [("00000000000100000001", "head"), ("00000000000100000002", "last")]);
        // Cut short after that: an error that quotes none of it.
        let e = parse_list(&out[..out.len() - 2]).unwrap_err();
        assert!(e.message.is_ascii() && !e.message.contains("head") && !e.message.contains('\0'), "{}", e.message);
    }

    #[test]
    fn kill_signals() {
        assert_eq!(Kill::signal("SIGKILL").unwrap(), Kill::Signal("KILL"));
        assert_eq!(Kill::signal("TERM").unwrap().arg(), "TERM");
        assert_eq!(Kill::Terminate.arg(), "terminate");
        for bad in ["", "terminate", "9", "SIGFOO", "KILL; rm -rf /"] {
            assert_eq!(Kill::signal(bad).unwrap_err().code, ErrorCode::InvalidRequest, "{bad}");
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// One entry of the list script's output: `id pid at x waiter len`.
    fn entry() -> impl Strategy<Value = (String, u32, u64, String, bool, Vec<u8>)> {
        (
            "[0-9a-f]{20}",
            any::<u32>(),
            any::<u64>(),
            prop_oneof![Just("-".to_string()), "[0-9]{1,3}", Just("timeout".to_string())],
            any::<bool>(),
            prop::collection::vec(1u8..=255, 0..64),
        )
    }

    proptest! {
        #[test]
        fn listings_round_trip(entries in prop::collection::vec(entry(), 0..8)) {
            let mut out = Vec::new();
            for (id, pid, at, x, waiter, text) in &entries {
                out.extend_from_slice(format!("{id} {pid} {at} {x} {}\n", u8::from(*waiter)).as_bytes());
                out.extend_from_slice(text);
                out.push(0);
            }
            out.extend_from_slice(b".\n");
            let list = parse_list(&out).unwrap().unwrap();
            prop_assert_eq!(list.len(), entries.len());
            for (info, (id, pid, at, x, waiter, text)) in list.iter().zip(&entries) {
                prop_assert_eq!((&info.id, info.pid, info.started_at_ms), (id, *pid, *at));
                prop_assert_eq!(&info.command, &String::from_utf8_lossy(text));
                let exit = match (x.as_str(), waiter) {
                    ("-", true) => None,
                    ("-", false) => Some(ProcessExit::LOST),
                    (token, _) => Some(ProcessExit::from_token(token)),
                };
                prop_assert_eq!(info.exit, exit);
            }
        }
    }
}
