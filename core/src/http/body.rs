//! Finding where a message body ends as its bytes pass (RFC 9112 §6–§7), for bodies edge forwards
//! without buffering: Content-Length counts down, chunked runs the [`ChunkedDecoder`], close-delimited
//! ends only when the caller sees EOF. A limit (`max_body_bytes` for requests, DESIGN.md "Configuration")
//! is judged on what the body declares, as soon as it declares it: a Content-Length at the start, each
//! chunk's size as its digits arrive. Sans-IO.

use std::ops::Range;

use super::{
    chunked::{ChunkError, ChunkedDecoder},
    framing::Body,
};

/// Why a body is refused while it passes (DESIGN.md "Status codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Malformed chunked framing: 400 `bad_chunk` on requests, 502 `bad_response` on responses.
    BadChunk,
    /// The body declares more than the limit (a Content-Length, or a chunk size on top of the chunks
    /// before it, including one too large for a u64), or a close-delimited body passed it: 413
    /// `body_too_large` on requests.
    TooLarge,
}

impl From<ChunkError> for BodyError {
    fn from(e: ChunkError) -> Self {
        match e {
            ChunkError::Malformed => BodyError::BadChunk,
            ChunkError::TooLarge => BodyError::TooLarge,
        }
    }
}

/// Body progress for one message.
#[derive(Clone, Debug)]
pub struct BodyScanner {
    kind: Body,
    left: u64,
    decoder: ChunkedDecoder,
    /// Most payload bytes the body may have.
    limit: u64,
    /// Payload bytes of a close-delimited body so far (the only kind that declares no size).
    seen: u64,
    /// Payload bytes passed so far, every framing (the access line's body byte counts).
    payload: u64,
    done: bool,
}

impl BodyScanner {
    /// A scanner at the start of a body framed as `kind`, with no limit; a body of no bytes is done at
    /// once.
    pub fn new(kind: Body) -> Self {
        Self::with_limit(kind, u64::MAX)
    }

    /// A scanner for a body of at most `limit` payload bytes (chunk framing not counted). A
    /// Content-Length over it is refused at the first [`BodyScanner::scan`], before any byte; a chunk
    /// whose declared size would take the body over it, as soon as its size digits show it.
    pub fn with_limit(kind: Body, limit: u64) -> Self {
        let left = if let Body::Length(n) = kind { n } else { 0 };
        let done = matches!(kind, Body::None | Body::Length(0));
        BodyScanner {
            kind,
            left,
            decoder: ChunkedDecoder::with_limit(limit),
            limit,
            seen: 0,
            payload: 0,
            done,
        }
    }

    /// The body's framing.
    pub fn kind(&self) -> Body {
        self.kind
    }

    /// Whether the whole body has passed.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Payload bytes that passed so far (chunk framing not counted).
    pub fn payload(&self) -> u64 {
        self.payload
    }

    /// For a body of declared length (`Content-Length`) not yet complete: the bytes still to come.
    /// `None` for any other framing, or once the body is complete.
    pub fn length_left(&self) -> Option<u64> {
        match self.kind {
            Body::Length(n) if !self.done && n <= self.limit => Some(self.left),
            _ => None,
        }
    }

    /// Counts `n` bytes of a body of declared length as passed without seeing them (they went from
    /// socket to socket by splice: [`crate::io::splice`]); at most [`BodyScanner::length_left`].
    /// Returns whether the body is complete.
    pub fn skip(&mut self, n: u64) -> bool {
        if let Some(left) = self.length_left() {
            let n = n.min(left);
            self.left -= n;
            self.payload += n;
            self.done = self.left == 0;
        }
        self.done
    }

    /// Marks a close-delimited body complete (the sender closed).
    pub fn finish(&mut self) {
        self.done = true;
    }

    /// How many bytes at the start of `data` belong to the body (the rest is the next message);
    /// `on_data` receives the ranges of `data` that are payload (all of it except chunk framing). After an
    /// error the caller forwards none of `data`: `on_data` may have seen earlier chunks' payload in it,
    /// never a refused chunk's.
    ///
    /// # Errors
    /// [`BodyError::BadChunk`] for malformed chunked framing; [`BodyError::TooLarge`] when the body
    /// declares more than the limit. The scanner must not be used afterwards.
    pub fn scan(
        &mut self,
        data: &[u8],
        mut on_data: impl FnMut(Range<usize>),
    ) -> Result<usize, BodyError> {
        if self.done {
            return Ok(0);
        }
        match self.kind {
            Body::Length(n) if n > self.limit => Err(BodyError::TooLarge),
            Body::Length(_) => {
                let n = self.left.min(data.len() as u64) as usize;
                self.left -= n as u64;
                self.done = self.left == 0;
                self.payload += n as u64;
                on_data(0..n);
                Ok(n)
            }
            Body::Chunked => {
                let payload = &mut self.payload;
                let p = self.decoder.feed(data, |r: Range<usize>| {
                    *payload += r.len() as u64;
                    on_data(r)
                })?;
                self.done = p.done;
                Ok(p.consumed)
            }
            Body::CloseDelimited => {
                self.seen = self
                    .seen
                    .checked_add(data.len() as u64)
                    .filter(|&n| n <= self.limit)
                    .ok_or(BodyError::TooLarge)?;
                self.payload += data.len() as u64;
                on_data(0..data.len());
                Ok(data.len())
            }
            Body::None => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_body_stops_at_its_end() {
        let mut s = BodyScanner::new(Body::Length(5));
        assert_eq!(s.scan(b"abc", |_| {}), Ok(3));
        assert!(!s.is_done());
        assert_eq!(s.scan(b"deNEXT", |_| {}), Ok(2));
        assert!(s.is_done());
        assert_eq!(s.scan(b"more", |_| {}), Ok(0));
    }

    #[test]
    fn chunked_payload_ranges_exclude_framing() {
        let mut s = BodyScanner::new(Body::Chunked);
        let msg = b"3\r\nabc\r\n0\r\n\r\nNEXT";
        let mut payload = Vec::new();
        assert_eq!(
            s.scan(msg, |r| payload.extend_from_slice(&msg[r])),
            Ok(msg.len() - 4)
        );
        assert_eq!(payload, b"abc");
        assert!(s.is_done());
    }

    #[test]
    fn close_delimited_ends_only_on_finish() {
        let mut s = BodyScanner::new(Body::CloseDelimited);
        assert_eq!(s.scan(b"abc", |_| {}), Ok(3));
        assert!(!s.is_done());
        s.finish();
        assert!(s.is_done());
        assert!(BodyScanner::new(Body::None).is_done());
        assert!(BodyScanner::new(Body::Length(0)).is_done());
    }

    #[test]
    fn chunked_and_length_bodies_at_every_split() {
        let msg = b"4;x=\"y\"\r\nwiki\r\n5\r\npedia\r\n0\r\nT: v\r\n\r\nNEXT";
        for (kind, want_payload, want_len) in [
            (Body::Chunked, &b"wikipedia"[..], msg.len() - 4),
            (Body::Length(7), &msg[..7], 7),
        ] {
            for split in 0..=msg.len() {
                let mut s = BodyScanner::new(kind);
                let mut payload = Vec::new();
                let mut used = 0;
                for part in [&msg[..split], &msg[split..]] {
                    let n = s
                        .scan(part, |r| payload.extend_from_slice(&part[r]))
                        .unwrap();
                    used += n;
                    if s.is_done() {
                        break;
                    }
                    assert_eq!(n, part.len(), "{kind:?} split {split}: stopped early");
                }
                assert!(s.is_done(), "{kind:?} split {split}");
                assert_eq!(payload, want_payload, "{kind:?} split {split}");
                assert_eq!(used, want_len, "{kind:?} split {split}");
            }
        }
    }

    /// Feeds `msg` whole, split at every byte and byte by byte to a scanner limited to `limit`; all must
    /// agree. Returns the payload and bytes used, or the error.
    fn limited(kind: Body, limit: u64, msg: &[u8]) -> Result<(Vec<u8>, usize), BodyError> {
        let run = |parts: &mut dyn Iterator<Item = &[u8]>| {
            let mut s = BodyScanner::with_limit(kind, limit);
            let (mut payload, mut used) = (Vec::new(), 0);
            for part in parts {
                used += s.scan(part, |r| payload.extend_from_slice(&part[r]))?;
                if s.is_done() {
                    break;
                }
            }
            Ok((payload, used))
        };
        let whole = run(&mut std::iter::once(msg));
        for split in 0..=msg.len() {
            let (a, b) = msg.split_at(split);
            assert_eq!(run(&mut [a, b].into_iter()), whole, "split {split}");
        }
        assert_eq!(run(&mut msg.chunks(1)), whole, "byte by byte");
        whole
    }

    #[test]
    fn declared_sizes_over_the_limit_are_refused_before_their_data() {
        use BodyError::TooLarge;
        let ok = b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n";
        assert_eq!(
            limited(Body::Chunked, 10, ok),
            Ok((b"helloworld".to_vec(), ok.len()))
        );
        for (limit, msg) in [
            (9, &ok[..]),
            // The size line alone decides: no data follows it.
            (9, b"5\r\nhello\r\n5\r\n"),
            (1 << 20, b"100001\r\n"),
            (1 << 20, b"0000000000000000000000000000000000000100001"),
            (1 << 20, b"1ffffffffffffffff\r\n"),
            (u64::MAX, b"10000000000000000\r\n"),
        ] {
            assert_eq!(limited(Body::Chunked, limit, msg), Err(TooLarge), "{limit}");
        }
        // A Content-Length over the limit is refused before any byte; at the limit it passes.
        assert_eq!(limited(Body::Length(11), 10, b"01234567890"), Err(TooLarge));
        assert_eq!(
            limited(Body::Length(10), 10, b"0123456789NEXT"),
            Ok((b"0123456789".to_vec(), 10))
        );
        // A close-delimited body declares nothing: the bytes themselves count.
        assert_eq!(limited(Body::CloseDelimited, 3, b"abcd"), Err(TooLarge));
        let mut s = BodyScanner::with_limit(Body::CloseDelimited, u64::MAX);
        assert_eq!(s.scan(b"abcd", |_| {}), Ok(4));
    }

    #[test]
    fn malformed_chunks_are_bad_chunk() {
        assert_eq!(
            limited(Body::Chunked, 100, b"5\r\nhello\n"),
            Err(BodyError::BadChunk)
        );
    }
}
