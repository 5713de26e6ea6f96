//! A sans-IO decoder for the chunked transfer coding (RFC 9112 §7.1) that *skips* the body.
//!
//! The test origin uses it to discard chunked request bodies and the load generator uses it to find
//! the end of chunked responses; neither needs the payload, so the decoder only reports how many
//! input bytes it consumed and whether the message ended. It is an explicit state machine, one
//! small step per state, over plain byte slices, with checked arithmetic on chunk sizes, and is
//! fed arbitrary splits of the input (the tests feed every split).
//!
//! It is deliberately lenient where a benchmark peer does not care (chunk extensions and trailer
//! fields are skipped unparsed) and strict where a framing error would desynchronise the
//! connection (chunk-size digits, CRLF after the data, size overflow).

use std::fmt;

/// Where the decoder is inside the chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex digits of a chunk size; `any` says whether at least one digit was seen.
    Size { size: u64, any: bool },
    /// After the size: skipping an extension (or optional whitespace) up to CR.
    Ext { size: u64 },
    /// Expecting the LF that ends the chunk-size line.
    SizeLf { size: u64 },
    /// Inside chunk data, with this many bytes left.
    Data { left: u64 },
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field line, skipping to LF.
    TrailerLine,
    /// Expecting the LF of the final empty line.
    EndLf,
    /// The body ended.
    Done,
}

/// A framing error in a chunked body; the connection cannot be reused after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkedError {
    /// A chunk-size line without digits or with a bad character.
    BadSize,
    /// A chunk size that does not fit in 64 bits.
    SizeOverflow,
    /// Chunk data not followed by CRLF, or a line ending that is not CRLF.
    BadLineEnding,
}

impl fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            ChunkedError::BadSize => "bad chunk size",
            ChunkedError::SizeOverflow => "chunk size overflow",
            ChunkedError::BadLineEnding => "bad chunk line ending",
        };
        f.write_str(what)
    }
}

impl std::error::Error for ChunkedError {}

/// Skips one chunked body, fed in pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedSkipper {
    state: State,
    /// Payload bytes skipped so far (chunk data only).
    payload: u64,
}

impl Default for ChunkedSkipper {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedSkipper {
    /// A decoder positioned at the first chunk-size line.
    pub fn new() -> Self {
        Self {
            state: State::Size {
                size: 0,
                any: false,
            },
            payload: 0,
        }
    }

    /// True once the last chunk and the trailer section were consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Chunk-data bytes skipped so far.
    pub fn payload_bytes(&self) -> u64 {
        self.payload
    }

    /// Consumes as much of `input` as belongs to this body and returns how many bytes that was.
    /// Stops right after the body's final CRLF, so bytes after the body (a pipelined message)
    /// are left for the caller. Call again with more input while [`is_done`](Self::is_done) is false.
    ///
    /// # Errors
    /// A [`ChunkedError`] when the input is not a well-formed chunked body; the decoder should not
    /// be used after that.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkedError> {
        self.feed_with(input, |_| {})
    }

    /// Like [`feed`](Self::feed), and hands each run of chunk data to `on_data` in order (for
    /// callers that want the payload, such as the blocking probe client).
    ///
    /// # Errors
    /// As [`feed`](Self::feed).
    pub fn feed_with(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<usize, ChunkedError> {
        let mut pos = 0;
        while pos < input.len() && self.state != State::Done {
            if let State::Data { left } = self.state {
                // Fast path: skip a run of data bytes at once.
                let avail = (input.len() - pos) as u64;
                let take = left.min(avail);
                on_data(&input[pos..pos + take as usize]);
                pos += take as usize;
                self.payload += take;
                self.state = if take == left {
                    State::DataCr
                } else {
                    State::Data { left: left - take }
                };
                continue;
            }
            self.state = self.step(input[pos])?;
            pos += 1;
        }
        Ok(pos)
    }

    /// Advances the state machine by one byte outside chunk data.
    fn step(&self, b: u8) -> Result<State, ChunkedError> {
        match self.state {
            State::Size { size, any } => Self::on_size(size, any, b),
            State::Ext { size } => Ok(match b {
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(ChunkedError::BadLineEnding),
                _ => State::Ext { size },
            }),
            State::SizeLf { size } => match b {
                b'\n' if size == 0 => Ok(State::TrailerStart),
                b'\n' => Ok(State::Data { left: size }),
                _ => Err(ChunkedError::BadLineEnding),
            },
            State::DataCr => match b {
                b'\r' => Ok(State::DataLf),
                _ => Err(ChunkedError::BadLineEnding),
            },
            State::DataLf => match b {
                b'\n' => Ok(State::Size {
                    size: 0,
                    any: false,
                }),
                _ => Err(ChunkedError::BadLineEnding),
            },
            State::TrailerStart => Ok(match b {
                b'\r' => State::EndLf,
                b'\n' => return Err(ChunkedError::BadLineEnding),
                _ => State::TrailerLine,
            }),
            State::TrailerLine => Ok(match b {
                b'\n' => State::TrailerStart,
                _ => State::TrailerLine,
            }),
            State::EndLf => match b {
                b'\n' => Ok(State::Done),
                _ => Err(ChunkedError::BadLineEnding),
            },
            // `feed` handles data runs itself and stops at Done.
            State::Data { .. } | State::Done => Ok(self.state),
        }
    }

    /// One byte of a chunk-size line: a hex digit, or the end of the digits.
    fn on_size(size: u64, any: bool, b: u8) -> Result<State, ChunkedError> {
        let digit = match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        };
        match (digit, any) {
            (Some(d), _) => {
                let size = size
                    .checked_mul(16)
                    .and_then(|s| s.checked_add(u64::from(d)))
                    .ok_or(ChunkedError::SizeOverflow)?;
                Ok(State::Size { size, any: true })
            }
            (None, false) => Err(ChunkedError::BadSize),
            (None, true) => match b {
                b'\r' => Ok(State::SizeLf { size }),
                b'\n' => Err(ChunkedError::BadLineEnding),
                b';' | b' ' | b'\t' => Ok(State::Ext { size }),
                _ => Err(ChunkedError::BadSize),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` split at `at`, returning (consumed, done, payload).
    fn feed_split(input: &[u8], at: usize) -> Result<(usize, bool, u64), ChunkedError> {
        let mut d = ChunkedSkipper::new();
        let mut used = d.feed(&input[..at])?;
        if !d.is_done() {
            used += d.feed(&input[at..])?;
        }
        Ok((used, d.is_done(), d.payload_bytes()))
    }

    #[test]
    fn simple_body_every_split() {
        let body = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        for at in 0..=body.len() {
            assert_eq!(
                feed_split(body, at),
                Ok((body.len(), true, 12)),
                "split at {at}"
            );
        }
    }

    #[test]
    fn trailers_are_skipped_every_split() {
        let body = b"A\r\n0123456789\r\n0\r\nX-Trailer: a\r\nY: b\r\n\r\n";
        for at in 0..=body.len() {
            assert_eq!(
                feed_split(body, at),
                Ok((body.len(), true, 10)),
                "split at {at}"
            );
        }
    }

    #[test]
    fn stops_at_end_of_body_leaving_pipelined_bytes() {
        let mut input = b"3\r\nabc\r\n0\r\n\r\n".to_vec();
        let body_len = input.len();
        input.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let mut d = ChunkedSkipper::new();
        assert_eq!(d.feed(&input), Ok(body_len));
        assert!(d.is_done());
    }

    #[test]
    fn byte_at_a_time() {
        let body = b"1\r\na\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
        let mut d = ChunkedSkipper::new();
        for b in body.iter() {
            assert_eq!(d.feed(std::slice::from_ref(b)), Ok(1));
        }
        assert!(d.is_done());
        assert_eq!(d.payload_bytes(), 17);
    }

    #[test]
    fn rejects_bad_input() {
        let cases: [(&[u8], ChunkedError); 5] = [
            (b"\r\n", ChunkedError::BadSize),
            (b"zz\r\n", ChunkedError::BadSize),
            (b"3\r\nabcX", ChunkedError::BadLineEnding),
            (b"3\nabc", ChunkedError::BadLineEnding),
            (b"1ffffffffffffffff\r\n", ChunkedError::SizeOverflow),
        ];
        for (input, want) in cases {
            assert_eq!(ChunkedSkipper::new().feed(input), Err(want), "{input:?}");
        }
    }

    #[test]
    fn feed_with_yields_payload_every_split() {
        let body = b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
        for at in 0..=body.len() {
            let mut d = ChunkedSkipper::new();
            let mut out = Vec::new();
            let n = d
                .feed_with(&body[..at], |b| out.extend_from_slice(b))
                .unwrap();
            let m = d
                .feed_with(&body[n..], |b| out.extend_from_slice(b))
                .unwrap();
            assert_eq!(n + m, body.len());
            assert_eq!(out, b"hello, world", "split at {at}");
        }
    }

    #[test]
    fn incomplete_is_not_done() {
        let mut d = ChunkedSkipper::new();
        assert_eq!(d.feed(b"5\r\nhel"), Ok(6));
        assert!(!d.is_done());
    }
}
