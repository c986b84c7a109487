//! Reading a process's stored output: sequence numbers, the per-stream
//! reader that strips the trailer and applies the cap, and the state line the
//! scripts print first.
//!
//! A chunk's `sequence` encodes how far both streams had been read once the
//! chunk was delivered: `stdout_offset × (2^26 + 1) + stderr_offset`. Each
//! chunk moves one offset forward, so sequences increase in delivery order;
//! and any sequence decodes back to the two offsets, so a reader that passes
//! the last one it saw resumes both streams exactly where it stopped, on any
//! host, with no gap and no duplicate. Offsets are bounded by the cap (at
//! most 64 MiB per stream), which keeps sequences below 2^53 (exact in JS).

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::exec::trailer::TrailerScanner;
use crate::exec::Stream;

/// Largest cap of one stream's stored output, in bytes.
pub const MAX_CAP: u64 = 1 << 26;
const BASE: u64 = MAX_CAP + 1;

/// Where a reader stands in a process's two streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Bytes of stdout already delivered.
    pub stdout: u64,
    /// Bytes of stderr already delivered.
    pub stderr: u64,
}

impl Cursor {
    /// The sequence number of this position.
    pub(crate) fn sequence(self) -> u64 {
        self.stdout * BASE + self.stderr
    }

    /// The position a sequence number stands for; `invalid_request` for
    /// numbers no chunk can carry.
    pub(crate) fn from_sequence(sequence: u64) -> Result<Cursor> {
        let cursor = Cursor { stdout: sequence / BASE, stderr: sequence % BASE };
        if cursor.stdout > MAX_CAP {
            return Err(Error::invalid_request(format!("{sequence} is not a sequence number of process output")));
        }
        Ok(cursor)
    }
}

/// One piece of a process's output.
#[derive(Debug, Clone)]
pub struct ProcessChunk {
    /// The position after this chunk (see the module doc): pass the last one
    /// seen to resume.
    pub sequence: u64,
    /// Which stream.
    pub stream: Stream,
    /// The bytes.
    pub data: Bytes,
}

/// The state line the read and wait scripts print first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// The process's directory is gone: its pod went (suspend, deletion) or
    /// the record was removed after its retention.
    Gone,
    /// The process is known.
    Known {
        /// The `x` file: `None` while the waiter has not recorded an exit.
        exit: Option<String>,
        /// The waiter is still alive.
        waiter_alive: bool,
        /// The cap per stream.
        cap: u64,
    },
}

impl State {
    pub(crate) fn parse(line: &[u8]) -> Option<State> {
        let line = std::str::from_utf8(line).ok()?;
        if line == "gone" {
            return Some(State::Gone);
        }
        let f: Vec<&str> = line.split(' ').collect();
        let [x, w, cap] = f.as_slice() else { return None };
        // The script checked these, but they come from files the sandbox
        // can write: checked again, the cap clamped so sequences stay exact.
        let token = |t: &str| t.len() <= 16 && !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric());
        Some(State::Known {
            exit: (*x != "-" && token(x)).then(|| (*x).to_owned()),
            waiter_alive: *w == "1",
            cap: cap.parse::<u64>().ok()?.min(MAX_CAP),
        })
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessExit {
    /// Exit status as the shell reports it (128+n for a signal it died of by
    /// itself); `None` when the provider killed it (timeout, `kill`) or its
    /// end is unknown (`lost`).
    pub exit_code: Option<i32>,
    /// The signal the provider killed it with (`kill`, or TERM/KILL on a
    /// timeout), as its number.
    pub signal: Option<u8>,
    /// The process's timeout fired and killed it.
    pub timed_out: bool,
    /// The process ended with its pod (suspend, deletion) or its waiter was
    /// killed, so its exit status is unknown.
    pub lost: bool,
}

impl ProcessExit {
    pub(crate) const LOST: ProcessExit = ProcessExit { exit_code: None, signal: None, timed_out: false, lost: true };

    /// [`ProcessExit::signal`] by name (`SIGKILL`; `SIG42` for a number
    /// without one).
    pub fn signal_name(&self) -> Option<String> {
        let names = [(1, "HUP"), (2, "INT"), (3, "QUIT"), (9, "KILL"), (10, "USR1"), (12, "USR2"), (15, "TERM")];
        self.signal.map(|n| match names.iter().find(|(k, _)| *k == n) {
            Some((_, name)) => format!("SIG{name}"),
            None => format!("SIG{n}"),
        })
    }

    /// From the status token of the `x` file: an exit status, `timeout`,
    /// or `s<n>` (killed by the provider with signal `n`).
    pub(crate) fn from_token(token: &str) -> ProcessExit {
        let ended = ProcessExit { exit_code: None, signal: None, timed_out: false, lost: false };
        match token {
            "timeout" => ProcessExit { timed_out: true, ..ended },
            t => match (t.strip_prefix('s').map(str::parse::<u8>), t.parse::<i32>()) {
                (Some(Ok(n)), _) if (1..=64).contains(&n) => ProcessExit { signal: Some(n), ..ended },
                (None, Ok(code)) if (0..=255).contains(&code) => ProcessExit { exit_code: Some(code), ..ended },
                _ => ProcessExit::LOST,
            },
        }
    }
}

/// Reads one stream of a process from an offset on: strips the trailer,
/// drops what lies beyond the cap.
#[derive(Debug)]
pub(crate) struct StreamReader {
    offset: u64,
    cap: u64,
    scanner: TrailerScanner,
    truncated: bool,
}

impl StreamReader {
    pub(crate) fn new(id: &str, offset: u64, cap: u64) -> Self {
        StreamReader { offset, cap, scanner: TrailerScanner::new(id), truncated: false }
    }

    /// Feeds bytes read from the file at the current position; `emit` gets
    /// the output pieces (with the offset after each).
    pub(crate) fn feed(&mut self, data: Bytes, mut emit: impl FnMut(Bytes, u64)) {
        let (offset, cap, truncated) = (&mut self.offset, self.cap, &mut self.truncated);
        self.scanner.feed(data, |piece| {
            let room = cap.saturating_sub(*offset);
            let keep = (piece.len() as u64).min(room) as usize;
            if keep < piece.len() {
                *truncated = true;
            }
            if keep > 0 {
                *offset += keep as u64;
                emit(piece.slice(..keep), *offset);
            }
        });
    }

    /// The trailer's status token, once seen.
    pub(crate) fn trailer(&self) -> Option<&str> {
        self.scanner.status()
    }

    /// Nothing more will come: the trailer was seen, or the cap reached (the
    /// relay keeps only [`crate::exec::trailer::MAX_TRAILER`] bytes past it).
    pub(crate) fn complete(&self) -> bool {
        self.trailer().is_some() || self.offset >= self.cap
    }

    /// Bytes delivered so far.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Output beyond the cap was seen and dropped.
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_increase_and_decode() {
        let mut c = Cursor::default();
        let mut last = c.sequence();
        for (o, e) in [(5, 0), (5, 3), (MAX_CAP, 3), (MAX_CAP, MAX_CAP)] {
            c = Cursor { stdout: o, stderr: e };
            assert!(c.sequence() > last);
            last = c.sequence();
            assert_eq!(Cursor::from_sequence(c.sequence()).unwrap(), c);
        }
        assert!(last < 1 << 53, "exact in a JS number");
        assert!(Cursor::from_sequence(u64::MAX).is_err());
    }

    #[test]
    fn reader_strips_the_trailer_and_caps() {
        let mut r = StreamReader::new("p1", 0, 10);
        let mut got = Vec::new();
        r.feed(Bytes::from_static(b"0123456"), |b, at| got.push((b, at)));
        r.feed(Bytes::from_static(b"789abc\x1easb p1 0\nafter"), |b, at| got.push((b, at)));
        assert_eq!(got.iter().map(|(b, _)| b.as_ref()).collect::<Vec<_>>(), [&b"0123456"[..], b"789"]);
        assert_eq!(got.last().unwrap().1, 10);
        assert!(r.truncated() && r.complete());
        assert_eq!(r.trailer(), Some("0"));
        let mut r = StreamReader::new("p1", 0, 10);
        r.feed(Bytes::from_static(b"0123"), |_, _| {});
        assert!(!r.complete());
    }

    #[test]
    fn exit_tokens() {
        assert_eq!(ProcessExit::from_token("0").exit_code, Some(0));
        assert_eq!(ProcessExit::from_token("137").exit_code, Some(137));
        let killed = ProcessExit::from_token("s9");
        assert_eq!((killed.exit_code, killed.signal, killed.lost), (None, Some(9), false));
        assert!(ProcessExit::from_token("timeout").timed_out);
        for forged in ["-1", "256", "s0", "s65", "s", "99999999999", "x"] {
            assert!(ProcessExit::from_token(forged).lost, "{forged}");
        }
    }

    #[test]
    fn forged_state_lines_are_bounded() {
        let Some(State::Known { cap, .. }) = State::parse(b"- 1 18446744073709551615") else { panic!() };
        assert_eq!(cap, MAX_CAP);
        let Some(State::Known { exit, .. }) = State::parse(b"../x 0 5") else { panic!() };
        assert_eq!(exit, None);
        assert_eq!(State::parse(b"- 1 -5"), None);
    }

    #[test]
    fn states() {
        assert_eq!(State::parse(b"gone"), Some(State::Gone));
        assert_eq!(State::parse(b"- 1 33554432"), Some(State::Known { exit: None, waiter_alive: true, cap: 33554432 }));
        assert_eq!(
            State::parse(b"timeout 0 5").and_then(|s| match s {
                State::Known { exit, .. } => exit,
                State::Gone => None,
            }),
            Some("timeout".to_owned())
        );
        assert_eq!(State::parse(b"1 2"), None);
        assert_eq!(ProcessExit::from_token("3").exit_code, Some(3));
        assert!(ProcessExit::from_token("timeout").timed_out);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn state_lines_round_trip(x in prop_oneof![Just(None), "[0-9a-z]{1,8}".prop_map(Some)], alive in any::<bool>(), cap in any::<u64>()) {
            let line = format!("{} {} {cap}", x.as_deref().unwrap_or("-"), u8::from(alive));
            prop_assert_eq!(State::parse(line.as_bytes()), Some(State::Known { exit: x, waiter_alive: alive, cap: cap.min(MAX_CAP) }));
        }

        /// A state file the sandbox rewrote (any exit field, any number as
        /// the cap) still gives a bounded state: the cap clamped, a foreign
        /// exit field dropped. Lines of three fields, so most parse.
        #[test]
        fn any_state_line_gives_a_bounded_state(x in "[^ ]{1,24}", w in "[0-9]{0,2}", cap in "[0-9]{1,30}") {
            let line = format!("{x} {w} {cap}");
            match State::parse(line.as_bytes()) {
                Some(State::Known { cap: parsed, exit, waiter_alive }) => {
                    prop_assert_eq!(parsed, cap.parse::<u64>().unwrap().min(MAX_CAP));
                    let token = x.len() <= 16 && x.bytes().all(|b| b.is_ascii_alphanumeric());
                    prop_assert_eq!(exit, token.then(|| x.clone()));
                    prop_assert_eq!(waiter_alive, w == "1");
                }
                other => prop_assert!(x == "gone" || cap.parse::<u64>().is_err(), "{line:?}: {other:?}"),
            }
        }

        #[test]
        fn cursors_round_trip_through_sequences(stdout in 0..=MAX_CAP, stderr in 0..=MAX_CAP) {
            let cursor = Cursor { stdout, stderr };
            prop_assert_eq!(Cursor::from_sequence(cursor.sequence()).unwrap(), cursor);
            prop_assert!(cursor.sequence() < 1 << 53, "an exact JS number");
        }
    }
}
