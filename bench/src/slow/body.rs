//! One slow reader's bytes, checked as they arrive (sans-IO): the response head, then the body
//! against its `Content-Length` (the size asked for) and against the origin's pattern
//! ([`DEFAULT_BODY`] repeated from the first body byte, what edge-bench's origin sends and what the
//! nginx origin's file holds). [`Reception`] says when the body is complete, and how a client
//! ended ([`End`]) when the connection ends first or the answer is wrong.

use std::sync::OnceLock;

use crate::peers::http::{parse_response, BodyLen};
use crate::peers::origin::DEFAULT_BODY;

/// Longest response head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// How one client ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Status 200, exactly `Content-Length` (= the size asked for) pattern bytes.
    Complete,
    /// A 200 head, then fewer body bytes than its length; why.
    Truncated(String),
    /// No connection, no 200 head, other framing, bytes past the length or a wrong byte; why.
    Failed(String),
}

/// One client's bytes so far: the response head, then the body checked against its length and
/// the origin's pattern (sans-IO).
#[derive(Debug, Default)]
pub struct Reception {
    /// Head bytes until the head is complete.
    head: Vec<u8>,
    /// The declared body length, once the head is in.
    length: Option<u64>,
    /// Body bytes so far.
    body: u64,
}

impl Reception {
    /// Takes `data`, the next bytes of the answer to a request for `size` bytes: `Ok(true)` when
    /// the body is complete, `Ok(false)` when more is due, `Err` with the end when the answer is
    /// wrong.
    ///
    /// # Errors
    /// [`End::Failed`] for a head that is not a 200 framed by `Content-Length: size`, bytes past
    /// the length, and a byte off the pattern.
    pub fn feed(&mut self, size: u64, data: &[u8]) -> Result<bool, End> {
        if self.length.is_some() {
            return self.take_body(data);
        }
        self.head.extend_from_slice(data);
        let info = match parse_response(&self.head, false) {
            Ok(Some(info)) => info,
            Ok(None) if self.head.len() > MAX_HEAD => {
                return Err(End::Failed(format!("no head end in {MAX_HEAD} bytes")))
            }
            Ok(None) => return Ok(false),
            Err(e) => return Err(End::Failed(format!("bad response head: {e:?}"))),
        };
        if info.status != 200 {
            return Err(End::Failed(format!("status {}", info.status)));
        }
        if info.body != BodyLen::Length(size) {
            return Err(End::Failed(format!(
                "framing {:?}, expected Content-Length {size}",
                info.body
            )));
        }
        self.length = Some(size);
        let head = std::mem::take(&mut self.head);
        self.take_body(&head[info.head_len..])
    }

    fn take_body(&mut self, data: &[u8]) -> Result<bool, End> {
        let length = self.length.unwrap_or(0);
        if self.body + data.len() as u64 > length {
            return Err(End::Failed(format!(
                "{} bytes past Content-Length {length}",
                self.body + data.len() as u64 - length
            )));
        }
        if let Some(at) = pattern_mismatch(self.body, data) {
            return Err(End::Failed(format!("wrong byte at body offset {at}")));
        }
        self.body += data.len() as u64;
        Ok(self.body == length)
    }

    /// The end when the connection ends (EOF, error, or the run limit: `why`) before
    /// [`feed`](Self::feed) said complete.
    pub fn cut(&self, why: &str) -> End {
        match self.length {
            None => End::Failed(format!("{why} before a complete head")),
            Some(n) => End::Truncated(format!("{why} after {} of {n} body bytes", self.body)),
        }
    }

    /// Body bytes so far.
    pub fn body(&self) -> u64 {
        self.body
    }
}

/// Bytes one comparison of [`pattern_mismatch`] covers.
const SPAN: usize = 64 * 1024;

/// The pattern over [`SPAN`] bytes plus one period: a window of up to `SPAN` bytes at any phase is
/// one slice of it.
fn long_pattern() -> &'static [u8] {
    static PATTERN: OnceLock<Vec<u8>> = OnceLock::new();
    PATTERN.get_or_init(|| pattern_body(SPAN + DEFAULT_BODY.len()))
}

/// The body offset of the first byte of `data` (starting at body offset `offset`) that is not the
/// origin's pattern ([`DEFAULT_BODY`] repeated).
pub fn pattern_mismatch(offset: u64, data: &[u8]) -> Option<u64> {
    let p = long_pattern();
    let period = DEFAULT_BODY.len() as u64;
    let mut done = 0usize;
    while done < data.len() {
        let phase = ((offset + done as u64) % period) as usize;
        let take = SPAN.min(data.len() - done);
        let (got, want) = (&data[done..done + take], &p[phase..phase + take]);
        // One memcmp per window; the byte is looked for only on a miss.
        if got != want {
            let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
            return Some(offset + (done + i) as u64);
        }
        done += take;
    }
    None
}

/// The body bytes of `size` in the origin's pattern (what an nginx origin serves as a file).
pub fn pattern_body(size: usize) -> Vec<u8> {
    DEFAULT_BODY.iter().copied().cycle().take(size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(size: usize) -> Vec<u8> {
        let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n").into_bytes();
        a.extend(pattern_body(size));
        a
    }

    #[test]
    fn complete_at_every_split() {
        let a = answer(100);
        for cut in 0..a.len() {
            let mut rx = Reception::default();
            let first = rx.feed(100, &a[..cut]);
            assert_eq!(first, Ok(false), "cut {cut}");
            assert_eq!(rx.feed(100, &a[cut..]), Ok(true), "cut {cut}");
        }
    }

    #[test]
    fn wrong_answers_fail() {
        let mut rx = Reception::default();
        let e = rx.feed(10, b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        assert!(matches!(e, Err(End::Failed(w)) if w.contains("502")));
        let mut rx = Reception::default();
        let e = rx.feed(10, &answer(9));
        assert!(matches!(e, Err(End::Failed(w)) if w.contains("Content-Length 10")));
        let mut rx = Reception::default();
        let mut a = answer(10);
        a.push(b'x');
        assert!(matches!(rx.feed(10, &a), Err(End::Failed(w)) if w.contains("past")));
        let mut rx = Reception::default();
        let mut a = answer(30);
        let last = a.len() - 3;
        a[last] = b'#';
        assert!(matches!(rx.feed(30, &a), Err(End::Failed(w)) if w.contains("offset 27")));
    }

    #[test]
    fn cut_short_is_truncated() {
        let a = answer(50);
        let mut rx = Reception::default();
        assert_eq!(rx.feed(50, &a[..a.len() - 5]), Ok(false));
        assert!(matches!(rx.cut("EOF"), End::Truncated(w) if w.contains("45 of 50")));
        let rx = Reception::default();
        assert!(matches!(rx.cut("EOF"), End::Failed(_)));
    }

    #[test]
    fn pattern_offsets() {
        let body = pattern_body(3 * SPAN);
        assert_eq!(pattern_mismatch(0, &body), None);
        let mut bad = body.clone();
        bad[2 * SPAN + 5] = b'#';
        assert_eq!(pattern_mismatch(0, &bad), Some(2 * SPAN as u64 + 5));
        assert_eq!(pattern_mismatch(7, &body[7..]), None);
        assert_eq!(pattern_mismatch(6, &body[7..]), Some(6));
    }
}
