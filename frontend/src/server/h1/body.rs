//! The two body pumps of an exchange, on top of core's sans-IO [`BodyScanner`]: [`RequestBody`] passes
//! the client's body upstream as it is (validating chunked framing and `max_body_bytes` on the way), and
//! [`ResponseBody`] carries the upstream's body to the client in the client's framing (as is; de-chunked
//! for an HTTP/1.0 client; re-chunked when the upstream delimits by closing).

use edge_core::{
    buf::{RecvBuf, BUF_SIZE},
    http::{
        body::{BodyError, BodyScanner},
        chunked::{encode_chunk, LAST_CHUNK},
        framing::Body,
    },
    metrics::InvalidReason,
};

use super::encode::OutFraming;
use crate::respond::Failure;

/// The client's request body on its way upstream.
pub struct RequestBody {
    scan: BodyScanner,
}

impl RequestBody {
    /// `max` is `max_body_bytes` (`u64::MAX` for "none"), judged on what the body declares (DESIGN.md
    /// "Configuration"): a Content-Length over it is refused before the exchange starts (and here
    /// again), a chunk whose size would take the body over it as soon as its size line shows it.
    pub fn new(kind: Body, max: u64) -> Self {
        RequestBody {
            scan: BodyScanner::with_limit(kind, max),
        }
    }

    /// Whether the whole body has passed.
    pub fn done(&self) -> bool {
        self.scan.is_done()
    }

    /// Payload bytes that passed so far.
    pub fn payload(&self) -> u64 {
        self.scan.payload()
    }

    /// For a body of declared length within `max`: the bytes still to come
    /// ([`BodyScanner::length_left`]). `None` for any other body.
    pub fn length_left(&self) -> Option<u64> {
        self.scan.length_left()
    }

    /// Counts `n` body bytes that went upstream by splice; returns whether the body is complete.
    pub fn skip(&mut self, n: u64) -> bool {
        self.scan.skip(n)
    }

    /// How many bytes at the start of `data` belong to the body. On an error none of `data` may go
    /// upstream.
    ///
    /// # Errors
    /// 400 `bad_chunk` for malformed chunked framing; 413 `body_too_large` once the body declares more
    /// than `max` (a chunk size too large for a u64 included).
    pub fn scan(&mut self, data: &[u8]) -> Result<usize, Failure> {
        self.scan.scan(data, |_| {}).map_err(failure)
    }

    /// Moves the body bytes already in `rb`, at most [`BUF_SIZE`] of them, to `out` (they go upstream with
    /// the head; the rest, if any, is streamed from `rb`). The cap keeps `out` within a pooled buffer's
    /// size class when `rb` is a large buffer; when the bytes do not fit, `out` moves to the pooled
    /// buffer of the class that holds them ([`edge_core::buf::reserve_pooled`]) rather than growing
    /// out of its class (which would unbalance the pools, [`edge_core::buf::give`]). Every body byte
    /// in `rb` is judged first, so a refusal that those bytes already decide comes before anything of
    /// the request goes upstream.
    ///
    /// # Errors
    /// As [`RequestBody::scan`].
    pub fn take_available(&mut self, rb: &mut RecvBuf, out: &mut Vec<u8>) -> Result<(), Failure> {
        let data = rb.data();
        if data.len() > BUF_SIZE {
            self.scan.clone().scan(data, |_| {}).map_err(failure)?;
        }
        let n = self.scan(&data[..data.len().min(BUF_SIZE)])?;
        edge_core::buf::reserve_pooled(out, n);
        out.extend_from_slice(&rb.data()[..n]);
        rb.consume(n);
        Ok(())
    }
}

/// The answer to a request body refused on its way (DESIGN.md "Status codes").
fn failure(e: BodyError) -> Failure {
    Failure::Invalid(match e {
        BodyError::BadChunk => InvalidReason::BadChunk,
        BodyError::TooLarge => InvalidReason::BodyTooLarge,
    })
}

/// Malformed framing in the upstream's response body (502 before the head is sent, truncation after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadBody;

/// The upstream's response body on its way to the client.
pub struct ResponseBody {
    scan: BodyScanner,
    client: OutFraming,
    /// De-chunking: the bytes since the last data byte (a pooled buffer, taken at the first), which
    /// hold the last chunk and the trailer section once the body is done ([`ResponseBody::trailers`]).
    tail: Vec<u8>,
}

impl ResponseBody {
    /// A relay from the upstream's framing to the client's.
    pub fn new(upstream: Body, client: OutFraming) -> Self {
        ResponseBody {
            scan: BodyScanner::new(upstream),
            client,
            tail: Vec::new(),
        }
    }

    /// Whether the whole body has passed.
    pub fn done(&self) -> bool {
        self.scan.is_done()
    }

    /// Payload bytes that passed so far.
    pub fn payload(&self) -> u64 {
        self.scan.payload()
    }

    /// Bytes go to the client exactly as received (no re-framing), so they can be written straight from
    /// the receive buffer.
    pub fn passthrough(&self) -> bool {
        match self.scan.kind() {
            Body::Chunked => self.client == OutFraming::Chunked,
            Body::CloseDelimited => self.client == OutFraming::Close,
            Body::Length(_) | Body::None => true,
        }
    }

    /// For an upstream body of declared length (which goes to the client unchanged, whatever its
    /// framing: [`ResponseBody::passthrough`]): the bytes still to come
    /// ([`edge_core::http::body::BodyScanner::length_left`]). `None` for any other body.
    pub fn length_left(&self) -> Option<u64> {
        self.scan.length_left()
    }

    /// Counts `n` body bytes that went to the client by splice; returns whether the body is complete.
    pub fn skip(&mut self, n: u64) -> bool {
        self.scan.skip(n)
    }

    /// For pass-through framing: how many bytes at the start of `data` belong to the body.
    ///
    /// # Errors
    /// [`BadBody`] for malformed chunked framing.
    pub fn scan(&mut self, data: &[u8]) -> Result<usize, BadBody> {
        self.scan.scan(data, |_| {}).map_err(|_| BadBody)
    }

    /// Moves what is buffered into `out` in the client's framing; returns whether the body is complete
    /// (a close-delimited body completes only at EOF, see [`ResponseBody::finish`]).
    ///
    /// # Errors
    /// [`BadBody`] for malformed chunked framing.
    pub fn take_available(&mut self, b: &mut RecvBuf, out: &mut Vec<u8>) -> Result<bool, BadBody> {
        let data = b.data();
        let rechunk =
            self.scan.kind() == Body::CloseDelimited && self.client == OutFraming::Chunked;
        let n = if self.passthrough() {
            let n = self.scan(data)?;
            out.extend_from_slice(&data[..n]);
            n
        } else if rechunk {
            encode_chunk(out, data);
            self.scan(data)?
        } else {
            // Chunked upstream body to an HTTP/1.0 or HTTP/2 client: de-chunk, keeping what follows
            // the last data byte for the trailer section.
            let mut last_data = 0;
            let n = self
                .scan
                .scan(data, |r| {
                    last_data = r.end;
                    out.extend_from_slice(&data[r])
                })
                .map_err(|_| BadBody)?;
            if last_data > 0 {
                self.tail.clear();
            }
            if n > last_data {
                if self.tail.capacity() == 0 {
                    self.tail = edge_core::buf::take();
                }
                self.tail.extend_from_slice(&data[last_data..n]);
            }
            n
        };
        b.consume(n);
        Ok(self.done())
    }

    /// The trailer section of a de-chunked body once it is done (RFC 9112 §7.1.2): its field lines,
    /// each ending in CRLF; `None` when there is none.
    pub fn trailers(&self) -> Option<&[u8]> {
        if !self.done() || self.tail.is_empty() {
            return None;
        }
        edge_core::http::chunked::trailer_lines(&self.tail)
    }

    /// The upstream closed a close-delimited body: it is complete (with the last chunk when re-chunking).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.client == OutFraming::Chunked && !self.done() {
            out.extend_from_slice(LAST_CHUNK);
        }
        self.scan.finish();
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if self.tail.capacity() > 0 {
            edge_core::buf::give(std::mem::take(&mut self.tail));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::buf::{take_head, HEAD_BUF_SIZE, LARGE_BUF_SIZE};

    /// The body bytes that came with a request head move the head buffer to a pooled class, whatever
    /// the size of the read buffer they came in: no `Vec` growth out of a class.
    #[test]
    fn a_body_prefix_moves_the_head_buffer_to_a_pooled_class() {
        for prefix in [100, HEAD_BUF_SIZE, BUF_SIZE, LARGE_BUF_SIZE] {
            let mut rb = RecvBuf::default();
            rb.append_with(|v| v.extend_from_slice(&vec![b'x'; prefix]));
            let mut out = take_head();
            out.extend_from_slice(&[b'h'; 300]);
            let mut body = RequestBody::new(Body::Length(prefix as u64 * 2), u64::MAX);
            body.take_available(&mut rb, &mut out).unwrap();
            let taken = prefix.min(BUF_SIZE);
            assert_eq!(out.len(), 300 + taken);
            let class = match 300 + taken {
                n if n <= HEAD_BUF_SIZE => HEAD_BUF_SIZE,
                n if n <= BUF_SIZE => BUF_SIZE,
                _ => LARGE_BUF_SIZE,
            };
            assert_eq!(out.capacity(), class, "prefix {prefix}");
            assert_eq!(rb.len(), prefix - taken);
        }
    }
}
