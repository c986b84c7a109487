//! The trailer that marks the end of a command's output in a stream.
//!
//! A child that a command leaves running in the background keeps the exec's
//! stdout and stderr open, and the pod's runtime sends the exit status only
//! once every holder of those pipes has closed them. So the engine's scripts
//! write, after the command's own process has exited, one trailer line to
//! each stream: `\x1e asb <id> <status>\n` (without the spaces after `\x1e`
//! and before `asb`), in a single write of well under `PIPE_BUF` bytes, so a
//! child writing at the same moment cannot split it. Everything before it is
//! what the command wrote before exiting; the trailer and whatever a leftover
//! child writes after it are not output.
//!
//! `<id>` is the run's or process's id (unique, `[0-9a-z.]`), so the trailer
//! of one command cannot be mistaken for another's (a follower prints a
//! process's files, which hold that process's trailer, inside its own run).
//! The scanner hands output on as it arrives and holds back only a chunk's
//! last bytes when they could be the start of a trailer (they begin with
//! `\x1e`, which output rarely contains), until the next chunk settles it.

use bytes::{Bytes, BytesMut};

/// First byte of every trailer (ASCII record separator).
const MARK: u8 = 0x1e;
/// Longest status token accepted (`timeout`, a number, `cwd`, …: `[0-9a-z]`).
const MAX_STATUS: usize = 16;
/// Upper bound of a trailer's length for ids of up to 40 bytes; the process
/// relays keep this much room past their cap for it.
pub const MAX_TRAILER: usize = 64;

/// The bytes that start the trailer of `id`.
pub fn needle(id: &str) -> Vec<u8> {
    let mut n = Vec::with_capacity(id.len() + 6);
    n.push(MARK);
    n.extend_from_slice(b"asb ");
    n.extend_from_slice(id.as_bytes());
    n.push(b' ');
    n
}

/// Finds the trailer in one stream and strips it.
#[derive(Debug)]
pub(crate) struct TrailerScanner {
    needle: Vec<u8>,
    /// Bytes held back: a possible start of the trailer, or a trailer whose
    /// status line is not complete yet.
    held: BytesMut,
    /// The status token once the whole trailer has arrived.
    status: Option<String>,
}

impl TrailerScanner {
    /// A scanner for the trailer of `id`.
    pub(crate) fn new(id: &str) -> Self {
        TrailerScanner { needle: needle(id), held: BytesMut::new(), status: None }
    }

    /// The status token, once the trailer has been seen.
    pub(crate) fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// Feeds a chunk; calls `emit` with the output it contains (zero, one or
    /// two pieces, in order). After the trailer, everything is dropped.
    pub(crate) fn feed(&mut self, chunk: Bytes, mut emit: impl FnMut(Bytes)) {
        if self.status.is_some() || chunk.is_empty() {
            return;
        }
        let data = if self.held.is_empty() {
            chunk
        } else {
            // Rare (a chunk ended in `\x1e…`): join the held bytes with the
            // new chunk so a trailer split across them is found.
            self.held.extend_from_slice(&chunk);
            self.held.split().freeze()
        };
        match memchr::memmem::find(&data, &self.needle) {
            Some(at) => {
                if at > 0 {
                    emit(data.slice(..at));
                }
                self.trailer(data.slice(at..), emit);
            }
            None => {
                let keep = self.partial_suffix(&data);
                let cut = data.len() - keep;
                if cut > 0 {
                    emit(data.slice(..cut));
                }
                self.held.extend_from_slice(&data[cut..]);
            }
        }
    }

    /// `data` starts with the needle: completes the status or holds it.
    fn trailer(&mut self, data: Bytes, mut emit: impl FnMut(Bytes)) {
        let rest = &data[self.needle.len()..];
        let token = |t: &[u8]| t.len() <= MAX_STATUS && t.iter().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
        // On a terminal the line may end in CRLF (its output processing).
        let line = |end: usize| rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
        match memchr::memchr(b'\n', rest) {
            Some(end) if !line(end).is_empty() && token(line(end)) => {
                self.status = Some(String::from_utf8_lossy(line(end)).into_owned());
            }
            None if token(rest.strip_suffix(b"\r").unwrap_or(rest)) => self.held.extend_from_slice(&data),
            // Not a trailer our scripts write: it is output after all.
            _ => {
                emit(data.slice(..1));
                self.feed(data.slice(1..), emit);
            }
        }
    }

    /// Length of the longest suffix of `data` that is a proper prefix of the
    /// needle (0 almost always: it has to start with `\x1e`).
    fn partial_suffix(&self, data: &[u8]) -> usize {
        let from = data.len().saturating_sub(self.needle.len() - 1);
        let tail = &data[from..];
        let mut at = 0;
        while let Some(i) = memchr::memchr(MARK, &tail[at..]) {
            let start = at + i;
            let suffix = &tail[start..];
            if self.needle.starts_with(suffix) {
                return suffix.len();
            }
            at = start + 1;
        }
        0
    }

    /// At the end of the stream without a trailer: the held bytes were output.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        (self.status.is_none() && !self.held.is_empty()).then(|| self.held.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, chunks: &[&[u8]]) -> (Vec<u8>, Option<String>, usize) {
        let mut s = TrailerScanner::new(id);
        let mut out = Vec::new();
        let mut pieces = 0;
        for c in chunks {
            s.feed(Bytes::copy_from_slice(c), |b| {
                pieces += 1;
                out.extend_from_slice(&b)
            });
        }
        if let Some(rest) = s.finish() {
            out.extend_from_slice(&rest);
        }
        (out, s.status.clone(), pieces)
    }

    #[test]
    fn trailer_in_one_chunk_is_stripped_with_what_follows() {
        let (out, status, _) = run("a.1", &[b"hello\n\x1easb a.1 0\nleftover child output"]);
        assert_eq!(out, b"hello\n");
        assert_eq!(status.as_deref(), Some("0"));
    }

    #[test]
    fn trailer_split_at_every_position() {
        let all: &[u8] = b"out\x1e\x1easb x.7 \x1easb x.7 137\nlate";
        for cut in 0..all.len() {
            let (out, status, _) = run("x.7", &[&all[..cut], &all[cut..]]);
            assert_eq!(out, b"out\x1e\x1easb x.7 ", "cut at {cut}");
            assert_eq!(status.as_deref(), Some("137"), "cut at {cut}");
        }
        // One byte at a time.
        let chunks: Vec<&[u8]> = all.chunks(1).collect();
        let (out, status, _) = run("x.7", &chunks);
        assert_eq!(out, b"out\x1e\x1easb x.7 ");
        assert_eq!(status.as_deref(), Some("137"));
    }

    #[test]
    fn output_without_a_trailer_is_kept_whole() {
        let (out, status, _) = run("a.1", &[b"ends with a mark \x1e", b"\x1easb", b" a.2 0\n"]);
        assert_eq!(out, b"ends with a mark \x1e\x1easb a.2 0\n");
        assert_eq!(status, None);
        // A chunk ending in the needle's prefix is held only until the stream ends.
        let (out, _, _) = run("a.1", &[b"x\x1easb a"]);
        assert_eq!(out, b"x\x1easb a");
    }

    #[test]
    fn another_ids_trailer_is_output() {
        let (out, status, _) = run("a.1", &[b"\x1easb a.10 0\n\x1easb a.1 3\n"]);
        assert_eq!(out, b"\x1easb a.10 0\n");
        assert_eq!(status.as_deref(), Some("3"));
    }

    #[test]
    fn an_overlong_status_is_output_not_a_trailer() {
        let long = format!("\x1easb a.1 {}\n", "9".repeat(40));
        let (out, status, _) = run("a.1", &[long.as_bytes()]);
        assert_eq!(out, long.as_bytes());
        assert_eq!(status, None);
    }

    #[test]
    fn plain_chunks_pass_through_as_they_are() {
        let (out, _, pieces) = run("a.1", &[b"abc", b"def"]);
        assert_eq!(out, b"abcdef");
        assert_eq!(pieces, 2);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    const ID: &str = "r1a2b3.4";

    /// Output rich in what could confuse the scanner: `\x1e`, prefixes of the
    /// needle, other ids' trailers, newlines.
    fn tricky_output() -> impl Strategy<Value = Vec<u8>> {
        let needle = needle(ID);
        let pieces = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            (1..needle.len()).prop_map(move |n| needle[..n].to_vec()),
            Just(b"\x1easb other 0\n".to_vec()),
            Just(b"\x1easb r1a2b3.4 NOT-A-TOKEN\n".to_vec()),
            Just(vec![MARK, MARK, b'\n']),
        ];
        prop::collection::vec(pieces, 0..20).prop_map(|p| p.concat())
    }

    /// `data` cut at the given points (each taken modulo the length).
    fn chunks(data: &[u8], cuts: &[usize]) -> Vec<Bytes> {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        points.extend([0, data.len()]);
        points.sort_unstable();
        points.windows(2).map(|w| Bytes::copy_from_slice(&data[w[0]..w[1]])).collect()
    }

    fn scan(chunks: Vec<Bytes>) -> (Vec<u8>, Option<String>) {
        let mut scanner = TrailerScanner::new(ID);
        let mut out = Vec::new();
        for chunk in chunks {
            scanner.feed(chunk, |piece| out.extend_from_slice(&piece));
        }
        out.extend_from_slice(&scanner.finish().unwrap_or_default());
        (out, scanner.status().map(str::to_owned))
    }

    proptest! {
        #[test]
        fn output_before_a_trailer_survives_any_chunking(
            output in tricky_output(),
            status in "[0-9a-z]{1,16}",
            after in prop::collection::vec(any::<u8>(), 0..64),
            cuts in prop::collection::vec(any::<usize>(), 0..12),
        ) {
            prop_assume!(memchr::memmem::find(&output, &needle(ID)).is_none());
            let mut data = output.clone();
            data.extend_from_slice(&needle(ID));
            data.extend_from_slice(status.as_bytes());
            data.push(b'\n');
            data.extend_from_slice(&after);
            let (out, seen) = scan(chunks(&data, &cuts));
            prop_assert_eq!(out, output);
            prop_assert_eq!(seen, Some(status));
        }

        #[test]
        fn without_a_trailer_every_byte_is_output(
            output in tricky_output(),
            cuts in prop::collection::vec(any::<usize>(), 0..12),
        ) {
            prop_assume!(memchr::memmem::find(&output, &needle(ID)).is_none());
            let (out, seen) = scan(chunks(&output, &cuts));
            prop_assert_eq!(out, output);
            prop_assert_eq!(seen, None);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_lose_nothing_before_a_status(
            data in prop::collection::vec(any::<u8>(), 0..512),
            cuts in prop::collection::vec(any::<usize>(), 0..12),
        ) {
            let (out, seen) = scan(chunks(&data, &cuts));
            if seen.is_none() {
                prop_assert_eq!(out, data);
            } else {
                prop_assert!(data.starts_with(&out));
            }
        }
    }
}
