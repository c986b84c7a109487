//! Output plumbing: chunks as they arrive, the capped result buffers, and the
//! header line the engine's scripts print before anything else.

use bytes::Bytes;

/// Which stream a chunk came from. The numbers are the pods/exec channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Channel 1.
    Stdout = 1,
    /// Channel 2.
    Stderr = 2,
}

/// A piece of output, in the order the engine read it from the connection.
#[derive(Debug, Clone)]
pub struct OutputChunk {
    /// The stream.
    pub stream: Stream,
    /// The bytes; shared, not copied, on the way to the consumer.
    pub data: Bytes,
}

/// A result buffer that keeps the first `limit` bytes and notes whether more
/// arrived. Keeping the head (not the tail) matches what a user sees first and
/// keeps memory bounded however long a command runs.
#[derive(Debug)]
pub(crate) struct HeadBuffer {
    data: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl HeadBuffer {
    /// An empty buffer keeping at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        HeadBuffer { data: Vec::new(), limit, truncated: false }
    }

    /// Appends what fits; marks the buffer truncated if anything did not.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.data.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        self.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// Whether bytes were dropped.
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes.
    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.data
    }
}

/// Longest header line accepted; a script's header is a few bytes.
const MAX_HEADER: usize = 64;

/// Splits the first line off a stream that may arrive in any chunking.
#[derive(Debug, Default)]
pub(crate) struct HeaderLine {
    buf: Vec<u8>,
    line: Option<Vec<u8>>,
}

impl HeaderLine {
    /// Feeds a chunk; returns the bytes that follow the header line, if any.
    /// Once the header is complete every later chunk is returned unchanged.
    pub(crate) fn feed(&mut self, chunk: Bytes) -> Option<Bytes> {
        if self.line.is_some() {
            return Some(chunk);
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.buf.extend_from_slice(&chunk[..i]);
                self.line = Some(std::mem::take(&mut self.buf));
                let rest = chunk.slice(i + 1..);
                (!rest.is_empty()).then_some(rest)
            }
            None => {
                // Bounded: a script that misbehaves cannot make us buffer its output.
                let room = MAX_HEADER.saturating_sub(self.buf.len());
                self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
                None
            }
        }
    }

    /// The header line without its newline, once complete.
    pub(crate) fn line(&self) -> Option<&[u8]> {
        self.line.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_buffer_keeps_the_head() {
        let mut b = HeadBuffer::new(5);
        b.push(b"abc");
        assert!(!b.truncated());
        b.push(b"de");
        assert!(!b.truncated());
        b.push(b"f");
        b.push(b"");
        assert!(b.truncated());
        assert_eq!(b.into_inner(), b"abcde");
        let mut b = HeadBuffer::new(2);
        b.push(b"abc");
        assert!(b.truncated());
        assert_eq!(b.into_inner(), b"ab");
        let mut b = HeadBuffer::new(0);
        b.push(b"");
        assert!(!b.truncated());
    }

    #[test]
    fn header_in_one_chunk_with_output() {
        let mut h = HeaderLine::default();
        assert_eq!(h.feed(Bytes::from_static(b"0\nhello")).as_deref(), Some(&b"hello"[..]));
        assert_eq!(h.line(), Some(&b"0"[..]));
        assert_eq!(h.feed(Bytes::from_static(b"x\n")).as_deref(), Some(&b"x\n"[..]));
    }

    #[test]
    fn header_split_across_chunks() {
        let mut h = HeaderLine::default();
        assert!(h.feed(Bytes::from_static(b"12")).is_none());
        assert!(h.line().is_none());
        assert!(h.feed(Bytes::from_static(b"34\n")).is_none());
        assert_eq!(h.line(), Some(&b"1234"[..]));
        assert_eq!(h.feed(Bytes::from_static(b"rest")).as_deref(), Some(&b"rest"[..]));
    }

    #[test]
    fn header_is_bounded() {
        let mut h = HeaderLine::default();
        h.feed(Bytes::from(vec![b'a'; 1000]));
        h.feed(Bytes::from_static(b"\n"));
        assert_eq!(h.line().unwrap().len(), MAX_HEADER);
    }
}
