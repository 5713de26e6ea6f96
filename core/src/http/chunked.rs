//! A sans-IO decoder for the chunked transfer coding (RFC 9112 §7.1): an explicit state machine over
//! byte slices, one step per state, checked arithmetic on sizes. edge forwards chunked bodies as they
//! are (the decoder only finds where the body ends and validates it) or, for HTTP/1.0 clients, copies
//! out the data ranges.
//!
//! Strict: sizes are hex digits only (at most 16), extensions must be `;token[=token|quoted-string]`
//! with optional whitespace, every line ends in CRLF, and trailer fields are bounded.

use std::ops::Range;

/// Bytes of chunk-size line (size plus extensions) and of each trailer line edge accepts.
const MAX_LINE: usize = 4096;
/// Total trailer section bytes edge accepts.
const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body is rejected: 400 `bad_chunk` on requests, 502 `bad_response` on responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size; `digits` read so far.
    Size { digits: u8 },
    /// After the size: extensions (validated loosely as printable) up to CR.
    Ext,
    /// Expecting LF after the size line's CR.
    SizeLf,
    /// Inside chunk data; bytes left.
    Data(u64),
    /// Expecting CR after chunk data.
    DataCr,
    /// Expecting LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    Trailer,
    /// Expecting LF after a trailer line's CR.
    TrailerLf,
    /// Expecting LF of the final CRLF.
    EndLf,
    /// The body is complete.
    Done,
}

/// Progress of one [`ChunkedDecoder::feed`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the input that belong to the body (everything after is the next message).
    pub consumed: usize,
    /// The last chunk and trailer section are complete.
    pub done: bool,
}

/// Decoder state for one chunked body.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    line: usize,
    trailers: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            size: 0,
            line: 0,
            trailers: 0,
        }
    }

    /// Whether the whole body has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Feeds bytes; `on_data` receives ranges of `input` that are chunk data, in order.
    ///
    /// # Errors
    /// [`ChunkError`] on any syntax violation; the decoder must not be used afterwards.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(Range<usize>),
    ) -> Result<Progress, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Done => break,
                State::Data(left) => {
                    let take = left.min((input.len() - i) as u64) as usize;
                    on_data(i..i + take);
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data(left)
                    };
                    continue;
                }
                State::Size { digits } => match hex(b) {
                    Some(d) => {
                        if digits == 16 {
                            return Err(ChunkError);
                        }
                        self.size = (self.size << 4) | u64::from(d);
                        self.state = State::Size { digits: digits + 1 };
                    }
                    None if digits == 0 => return Err(ChunkError),
                    None if b == b'\r' => self.state = State::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => {
                        self.line = 0;
                        self.state = State::Ext;
                    }
                    None => return Err(ChunkError),
                },
                State::Ext => {
                    self.line += 1;
                    if self.line > MAX_LINE {
                        return Err(ChunkError);
                    }
                    match b {
                        b'\r' => self.state = State::SizeLf,
                        b'\t' | b' '..=b'~' => {}
                        _ => return Err(ChunkError),
                    }
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = if self.size == 0 {
                        State::TrailerStart
                    } else {
                        State::Data(self.size)
                    };
                    self.size = 0;
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = State::Size { digits: 0 };
                }
                State::TrailerStart => {
                    self.line = 0;
                    self.state = match b {
                        b'\r' => State::EndLf,
                        b'!'..=b'~' => State::Trailer,
                        _ => return Err(ChunkError), // obs-fold, bare LF or a control character
                    };
                }
                State::Trailer => {
                    self.line += 1;
                    self.trailers += 1;
                    if self.line > MAX_LINE || self.trailers > MAX_TRAILERS {
                        return Err(ChunkError);
                    }
                    match b {
                        b'\r' => self.state = State::TrailerLf,
                        b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                        _ => return Err(ChunkError),
                    }
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = State::TrailerStart;
                }
                State::EndLf => {
                    if b != b'\n' {
                        return Err(ChunkError);
                    }
                    self.state = State::Done;
                    i += 1;
                    break;
                }
            }
            i += 1;
        }
        Ok(Progress {
            consumed: i,
            done: self.state == State::Done,
        })
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_split(body: &[u8]) -> Result<(Vec<u8>, usize), ChunkError> {
        // Feed the same message split at every byte boundary, as hyper's tests do.
        let mut whole = None;
        for split in 0..=body.len() {
            let mut d = ChunkedDecoder::new();
            let mut out = Vec::new();
            let mut consumed = 0;
            for part in [&body[..split], &body[split..]] {
                if d.is_done() {
                    break;
                }
                let p = d.feed(part, |r| out.extend_from_slice(&part[r]))?;
                consumed += p.consumed;
            }
            assert!(d.is_done(), "split {split}");
            match &whole {
                None => whole = Some((out, consumed)),
                Some(w) => assert_eq!(w, &(out, consumed), "split {split}"),
            }
        }
        Ok(whole.unwrap())
    }

    #[test]
    fn decodes_at_every_split() {
        let msg = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (data, consumed) = decode_split(msg).unwrap();
        assert_eq!(data, b"hello 0123456789");
        assert_eq!(consumed, msg.len() - 4);
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            &b"x\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n",
            b"11111111111111111\r\n",
            b"0\r\n\x01\r\n\r\n",
            b"0\r\n folded\r\n\r\n",
            b"5;\x01\r\n",
            b"\r\n",
        ] {
            let mut d = ChunkedDecoder::new();
            assert_eq!(
                d.feed(bad, |_| {}),
                Err(ChunkError),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn large_size_is_checked() {
        let mut d = ChunkedDecoder::new();
        let p = d.feed(b"ffffffffffffffff\r\nabc", |_| {}).unwrap();
        assert!(!p.done);
        assert_eq!(p.consumed, 21);
    }
}
