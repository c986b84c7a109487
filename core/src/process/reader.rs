//! Turning the output of a read script (the state line, then the two
//! files' bytes on stdout and stderr) into sequenced chunks and, once both
//! streams are complete, the exit.

use bytes::Bytes;

use super::stream::{Cursor, ProcessChunk, ProcessExit, State, StreamReader};
use crate::exec::output::HeaderLine;
use crate::exec::{OutputChunk, Stream};

/// Turns a read script's output into chunks: the state line, then each
/// stream through its [`StreamReader`].
pub(crate) struct Reader {
    id: String,
    start: Cursor,
    header: HeaderLine,
    state: Option<State>,
    /// stdout, stderr.
    streams: Option<[StreamReader; 2]>,
    /// Stderr that arrived before the state line.
    early: Vec<Bytes>,
    /// Most bytes of each stream this read takes (a poll's page); later
    /// bytes are left for the next read.
    page: u64,
    /// Bytes taken of each stream (stdout, stderr).
    taken: [u64; 2],
}

impl Reader {
    pub(crate) fn new(id: &str, start: Cursor) -> Self {
        Reader {
            id: id.to_owned(),
            start,
            header: HeaderLine::default(),
            state: None,
            streams: None,
            early: Vec::new(),
            page: u64::MAX,
            taken: [0; 2],
        }
    }

    /// Takes at most `page` bytes of each stream: the read script stops
    /// there too, but its files are the sandbox's, so the host counts.
    pub(crate) fn with_page(mut self, page: u64) -> Self {
        self.page = page;
        self
    }

    /// Feeds one chunk of a read script's output.
    pub(crate) fn feed(&mut self, chunk: OutputChunk, mut emit: impl FnMut(ProcessChunk)) {
        match (chunk.stream, &self.streams) {
            (Stream::Stdout, None) => {
                let rest = self.header.feed(chunk.data);
                let Some(line) = self.header.line() else { return };
                self.state = State::parse(line);
                let cap = match &self.state {
                    Some(State::Known { cap, .. }) => *cap,
                    _ => 0,
                };
                self.streams = Some([
                    StreamReader::new(&self.id, self.start.stdout, cap),
                    StreamReader::new(&self.id, self.start.stderr, cap),
                ]);
                for early in std::mem::take(&mut self.early) {
                    self.feed_stream(Stream::Stderr, early, &mut emit);
                }
                if let Some(rest) = rest {
                    self.feed_stream(Stream::Stdout, rest, &mut emit);
                }
            }
            (Stream::Stderr, None) => self.early.push(chunk.data),
            (stream, Some(_)) => self.feed_stream(stream, chunk.data, &mut emit),
        }
    }

    fn feed_stream(&mut self, stream: Stream, mut data: Bytes, emit: &mut impl FnMut(ProcessChunk)) {
        let Some(streams) = &mut self.streams else { return };
        let (mine, other) = match stream {
            Stream::Stdout => (0, 1),
            Stream::Stderr => (1, 0),
        };
        let room = self.page.saturating_sub(self.taken[mine]);
        data.truncate(usize::try_from(room).unwrap_or(usize::MAX));
        self.taken[mine] += data.len() as u64;
        let other_offset = streams[other].offset();
        streams[mine].feed(data, |data, offset| {
            let cursor = match stream {
                Stream::Stdout => Cursor { stdout: offset, stderr: other_offset },
                Stream::Stderr => Cursor { stdout: other_offset, stderr: offset },
            };
            emit(ProcessChunk { sequence: cursor.sequence(), stream, data });
        });
    }

    /// Where the reader stands now.
    pub(crate) fn cursor(&self) -> Cursor {
        match &self.streams {
            Some([o, e]) => Cursor { stdout: o.offset(), stderr: e.offset() },
            None => self.start,
        }
    }

    /// The exit, once both streams are complete (trailer seen, or the cap
    /// reached) and the waiter has recorded it and gone; or the process is
    /// lost. The exit comes from the `x` file the waiter writes after the
    /// command is done, never from a trailer: the command knows its id and
    /// can print a trailer itself (that only ends its own output early), and
    /// while the waiter lives an `x` the command wrote is not believed.
    pub(crate) fn exit_after_all(&self) -> Option<ProcessExit> {
        let (state, streams) = match (&self.state, &self.streams) {
            (Some(State::Gone), _) => return Some(ProcessExit::LOST),
            (Some(state @ State::Known { .. }), Some(streams)) => (state, streams),
            _ => return None,
        };
        let State::Known { exit, waiter_alive, .. } = state else { return None };
        let complete = streams.iter().all(StreamReader::complete);
        match (complete, exit, waiter_alive) {
            (true, Some(token), false) => Some(ProcessExit::from_token(token)),
            // The waiter died without recording an exit: killed, or its pod went.
            (_, None, false) => Some(ProcessExit::LOST),
            _ => None,
        }
    }

    /// Whether both streams have their trailer (or cap) in what was read.
    pub(crate) fn complete(&self) -> bool {
        self.exit_after_all().is_some()
    }

    /// Output past the cap was seen.
    pub(crate) fn truncated(&self) -> bool {
        self.streams.as_ref().is_some_and(|s| s.iter().any(StreamReader::truncated))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(stream: Stream, data: &'static [u8]) -> OutputChunk {
        OutputChunk { stream, data: Bytes::from_static(data) }
    }

    #[test]
    fn reader_sequences_resume_exactly() {
        let id = "00000000000100000001";
        let trailer = b"\x1easb 00000000000100000001 0\n";
        let mut r = Reader::new(id, Cursor::default());
        let mut got = Vec::new();
        r.feed(chunk(Stream::Stderr, b"E1"), |c| got.push(c));
        r.feed(chunk(Stream::Stdout, b"0 0 100\nO1"), |c| got.push(c));
        r.feed(chunk(Stream::Stdout, b"O2"), |c| got.push(c));
        assert!(!r.complete());
        let mut o = b"O3".to_vec();
        o.extend_from_slice(trailer);
        r.feed(OutputChunk { stream: Stream::Stdout, data: o.into() }, |c| got.push(c));
        r.feed(OutputChunk { stream: Stream::Stderr, data: Bytes::copy_from_slice(trailer) }, |c| got.push(c));
        assert_eq!(r.exit_after_all().unwrap().exit_code, Some(0));
        let seqs: Vec<u64> = got.iter().map(|c| c.sequence).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        // Resuming after the second chunk gives exactly the rest.
        let resume = Cursor::from_sequence(got[1].sequence).unwrap();
        assert_eq!(resume, Cursor { stdout: 2, stderr: 2 });
    }

    #[test]
    fn a_forged_trailer_or_exit_is_no_exit_while_the_waiter_lives() {
        let id = "00000000000100000001";
        let forged = b"\x1easb 00000000000100000001 0\n";
        for state in [&b"- 1 100\n"[..], b"0 1 100\n"] {
            let mut r = Reader::new(id, Cursor::default());
            r.feed(chunk(Stream::Stdout, state), |_| {});
            r.feed(OutputChunk { stream: Stream::Stdout, data: Bytes::copy_from_slice(forged) }, |_| {});
            r.feed(OutputChunk { stream: Stream::Stderr, data: Bytes::copy_from_slice(forged) }, |_| {});
            assert_eq!(r.exit_after_all(), None, "{state:?}");
        }
    }

    #[test]
    fn a_page_bounds_what_one_read_takes() {
        let mut r = Reader::new("00000000000100000001", Cursor::default()).with_page(3);
        let mut got = Vec::new();
        r.feed(chunk(Stream::Stdout, b"- 1 100\nabcdef"), |c| got.push(c));
        r.feed(chunk(Stream::Stderr, b"xy"), |c| got.push(c));
        r.feed(chunk(Stream::Stderr, b"zw"), |c| got.push(c));
        assert_eq!(r.cursor(), Cursor { stdout: 3, stderr: 3 });
        let data: Vec<&[u8]> = got.iter().map(|c| c.data.as_ref()).filter(|d| !d.is_empty()).collect();
        assert_eq!(data, [&b"abc"[..], b"xy", b"z"]);
    }

    #[test]
    fn a_gone_or_orphaned_process_is_lost() {
        let mut r = Reader::new("00000000000100000001", Cursor::default());
        r.feed(chunk(Stream::Stdout, b"gone\n"), |_| {});
        assert_eq!(r.exit_after_all(), Some(ProcessExit::LOST));
        let mut r = Reader::new("00000000000100000001", Cursor::default());
        r.feed(chunk(Stream::Stdout, b"- 0 100\n"), |_| {});
        assert_eq!(r.exit_after_all(), Some(ProcessExit::LOST));
    }
}
