//! Finding where a message body ends as its bytes pass (RFC 9112 §6–§7), for bodies edge forwards
//! without buffering: Content-Length counts down, chunked runs the [`ChunkedDecoder`], close-delimited
//! ends only when the caller sees EOF. Sans-IO.

use std::ops::Range;

use super::{
    chunked::{ChunkError, ChunkedDecoder},
    framing::Body,
};

/// Body progress for one message.
#[derive(Clone, Debug)]
pub struct BodyScanner {
    kind: Body,
    left: u64,
    decoder: ChunkedDecoder,
    done: bool,
}

impl BodyScanner {
    /// A scanner at the start of a body framed as `kind`; a body of no bytes is done at once.
    pub fn new(kind: Body) -> Self {
        let left = if let Body::Length(n) = kind { n } else { 0 };
        let done = matches!(kind, Body::None | Body::Length(0));
        BodyScanner {
            kind,
            left,
            decoder: ChunkedDecoder::new(),
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

    /// Marks a close-delimited body complete (the sender closed).
    pub fn finish(&mut self) {
        self.done = true;
    }

    /// How many bytes at the start of `data` belong to the body (the rest is the next message);
    /// `on_data` receives the ranges of `data` that are payload (all of it except chunk framing).
    ///
    /// # Errors
    /// [`ChunkError`] for malformed chunked framing.
    pub fn scan(
        &mut self,
        data: &[u8],
        mut on_data: impl FnMut(Range<usize>),
    ) -> Result<usize, ChunkError> {
        if self.done {
            return Ok(0);
        }
        match self.kind {
            Body::Length(_) => {
                let n = self.left.min(data.len() as u64) as usize;
                self.left -= n as u64;
                self.done = self.left == 0;
                on_data(0..n);
                Ok(n)
            }
            Body::Chunked => {
                let p = self.decoder.feed(data, on_data)?;
                self.done = p.done;
                Ok(p.consumed)
            }
            Body::CloseDelimited => {
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
}
