//! A sans-IO decoder for the chunked transfer coding (RFC 9112 §7.1): an explicit state machine over
//! byte slices, one step per state, checked arithmetic on sizes. edge forwards chunked bodies as they
//! are (the decoder only finds where the body ends and validates it) or, for HTTP/1.0 clients, copies
//! out the data ranges.
//!
//! Strict, because a proxy that reads a chunked body differently from the origin behind it can be made
//! to forward a smuggled request (RFC 9112 §11.2):
//! - a chunk size is one or more hex digits and nothing else (no sign, no `0x`); the whole size line is
//!   at most 4 KiB;
//! - a body may declare at most its limit ([`ChunkedDecoder::with_limit`], `max_body_bytes` for requests,
//!   DESIGN.md "Configuration"): each chunk's size is checked, digit by digit, against what the earlier
//!   chunks left of it, so a size that passes the limit, or that does not fit a u64 (more than 16
//!   significant digits), is [`ChunkError::TooLarge`] at the first digit that shows it, before any of its
//!   data, whatever digits follow; nothing wraps;
//! - extensions follow `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )` exactly, with
//!   no CR or LF inside, and take at most 4 KiB in the whole body;
//! - every line, and every chunk's data, ends in exactly CRLF;
//! - trailer fields are `token ":" value` lines like header fields (no obs-fold, no whitespace before
//!   the colon, no control characters but HTAB), at most 16 KiB in all.

use std::ops::Range;

/// Bytes of one chunk-size line (size plus extensions) edge accepts.
const MAX_SIZE_LINE: usize = 4096;
/// Bytes of chunk extensions edge accepts in one body, all chunks together.
const MAX_EXTENSIONS: usize = 4096;
/// Total trailer section bytes edge accepts.
const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body is rejected (DESIGN.md "Status codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// Malformed framing, or a size line, extensions or trailers over their bounds: 400 `bad_chunk` on
    /// requests, 502 `bad_response` on responses.
    Malformed,
    /// A chunk's declared size takes the body past the decoder's limit, or past `u64::MAX`: 413
    /// `body_too_large` on requests, 502 `bad_response` on responses.
    TooLarge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// At the start of a chunk-size line: a hex digit must come.
    SizeStart,
    /// Reading the hex digits of a chunk size.
    Size,
    /// BWS after the size or an extension value: only more whitespace or `;` may follow.
    ExtBws,
    /// After `;`: BWS, then an extension name.
    ExtNameStart,
    /// Inside an extension name.
    ExtName,
    /// BWS after an extension name: `=`, `;` or whitespace may follow.
    ExtAfterName,
    /// After `=`: BWS, then a token or a quoted string.
    ExtValueStart,
    /// Inside a token extension value.
    ExtToken,
    /// Inside a quoted-string extension value.
    ExtQuoted,
    /// After a backslash inside a quoted string.
    ExtQuotedPair,
    /// After the closing quote of an extension value.
    ExtAfterQuoted,
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
    /// Inside a trailer field name.
    TrailerName,
    /// Inside a trailer field value.
    TrailerValue,
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
    /// The size of the chunk whose size line is being read (0 elsewhere).
    size: u64,
    /// Payload bytes declared by the chunks whose size lines are complete; never above `limit`.
    declared: u64,
    /// Most payload bytes the body may declare.
    limit: u64,
    /// Bytes of the current size line.
    line: usize,
    /// Extension bytes in the whole body.
    extensions: usize,
    /// Trailer section bytes.
    trailers: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// `tchar` (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `qdtext` (RFC 9110 §5.6.4): HTAB, SP, VCHAR but `"` and `\`, obs-text.
fn is_qdtext(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | b'!' | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff)
}

/// A field-value byte (RFC 9110 §5.5): HTAB, SP, VCHAR, obs-text.
fn is_field_byte(b: u8) -> bool {
    matches!(b, b'\t' | b' '..=b'~' | 0x80..=0xff)
}

impl ChunkedDecoder {
    /// A decoder at the start of a body whose chunks may declare up to `u64::MAX` bytes in all.
    pub fn new() -> Self {
        Self::with_limit(u64::MAX)
    }

    /// A decoder at the start of a body whose chunks may declare at most `limit` payload bytes in all;
    /// one more is [`ChunkError::TooLarge`] (see the module doc).
    pub fn with_limit(limit: u64) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            size: 0,
            declared: 0,
            limit,
            line: 0,
            extensions: 0,
            trailers: 0,
        }
    }

    /// Whether the whole body has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Payload bytes the body has declared so far: the sizes of every chunk whose size digits have been
    /// read, the one being read included. Known as each size line arrives, before the chunk's data, and
    /// never above the limit.
    pub fn declared(&self) -> u64 {
        // `size` is within `limit - declared`: see `push_digit`.
        self.declared.saturating_add(self.size)
    }

    /// Feeds bytes; `on_data` receives ranges of `input` that are chunk data, in order. Bytes after the
    /// end of the body are not consumed. The same body split anywhere gives the same result.
    ///
    /// # Errors
    /// [`ChunkError::Malformed`] on any syntax violation or exceeded bound, [`ChunkError::TooLarge`] as
    /// soon as a chunk size passes the limit; the decoder must not be used afterwards.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(Range<usize>),
    ) -> Result<Progress, ChunkError> {
        let mut i = 0;
        while i < input.len() {
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
                State::EndLf => {
                    if input[i] != b'\n' {
                        return Err(ChunkError::Malformed);
                    }
                    self.state = State::Done;
                    i += 1;
                    break;
                }
                _ => self.step(input[i])?,
            }
            i += 1;
        }
        Ok(Progress {
            consumed: i,
            done: self.state == State::Done,
        })
    }

    /// One byte outside chunk data.
    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        if self.in_size_line() {
            self.line += 1;
            if self.line > MAX_SIZE_LINE {
                return Err(ChunkError::Malformed);
            }
        }
        if self.in_extension() {
            self.extensions += 1;
            if self.extensions > MAX_EXTENSIONS {
                return Err(ChunkError::Malformed);
            }
        }
        if matches!(
            self.state,
            TrailerStart | TrailerName | TrailerValue | TrailerLf
        ) {
            self.trailers += 1;
            if self.trailers > MAX_TRAILERS {
                return Err(ChunkError::Malformed);
            }
        }
        if let (SizeStart | Size, Some(d)) = (self.state, hex(b)) {
            self.push_digit(d)?;
            self.state = Size;
            return Ok(());
        }
        self.state = match (self.state, b) {
            (Size | ExtName | ExtToken | ExtAfterQuoted, b'\r') => SizeLf,
            (Size | ExtToken | ExtAfterQuoted | ExtBws, b' ' | b'\t') => ExtBws,
            (Size | ExtBws | ExtName | ExtAfterName | ExtToken | ExtAfterQuoted, b';') => {
                ExtNameStart
            }
            (ExtNameStart, b' ' | b'\t') => ExtNameStart,
            (ExtNameStart | ExtName, _) if is_tchar(b) => ExtName,
            (ExtName | ExtAfterName, b' ' | b'\t') => ExtAfterName,
            (ExtName | ExtAfterName, b'=') => ExtValueStart,
            (ExtValueStart, b' ' | b'\t') => ExtValueStart,
            (ExtValueStart, b'"') => ExtQuoted,
            (ExtValueStart | ExtToken, _) if is_tchar(b) => ExtToken,
            (ExtQuoted, b'"') => ExtAfterQuoted,
            (ExtQuoted, b'\\') => ExtQuotedPair,
            (ExtQuoted, _) if is_qdtext(b) => ExtQuoted,
            (ExtQuotedPair, _) if is_field_byte(b) => ExtQuoted,
            (SizeLf, b'\n') => {
                self.line = 0;
                let size = std::mem::take(&mut self.size);
                self.declared = self
                    .declared
                    .checked_add(size)
                    .ok_or(ChunkError::TooLarge)?;
                if size == 0 {
                    TrailerStart
                } else {
                    Data(size)
                }
            }
            (DataCr, b'\r') => DataLf,
            (DataLf, b'\n') => SizeStart,
            (TrailerStart, b'\r') => EndLf,
            (TrailerStart | TrailerName, _) if is_tchar(b) => TrailerName,
            (TrailerName, b':') => TrailerValue,
            (TrailerValue, b'\r') => TrailerLf,
            (TrailerValue, _) if is_field_byte(b) => TrailerValue,
            (TrailerLf, b'\n') => TrailerStart,
            // Everything else: a bare CR or LF, a control character, whitespace before a colon, obs-fold
            // (a trailer line starting with whitespace), a sign or `0x` prefix, an empty size.
            _ => return Err(ChunkError::Malformed),
        };
        Ok(())
    }

    /// Appends hex digit `d` to the size being read. A size only grows as digits come, so it is refused
    /// at the first digit that takes it past what the earlier chunks left of the limit, or past
    /// `u64::MAX` (the 17th significant digit), whatever follows.
    ///
    /// # Errors
    /// [`ChunkError::TooLarge`].
    fn push_digit(&mut self, d: u8) -> Result<(), ChunkError> {
        let size = self
            .size
            .checked_mul(16)
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(ChunkError::TooLarge)?;
        // `declared` never passes `limit`: every size is checked here before it counts.
        if size > self.limit.saturating_sub(self.declared) {
            return Err(ChunkError::TooLarge);
        }
        self.size = size;
        Ok(())
    }

    fn in_size_line(&self) -> bool {
        matches!(self.state, State::SizeStart | State::Size) || self.in_extension()
    }

    fn in_extension(&self) -> bool {
        use State::*;
        matches!(
            self.state,
            ExtBws
                | ExtNameStart
                | ExtName
                | ExtAfterName
                | ExtValueStart
                | ExtToken
                | ExtQuoted
                | ExtQuotedPair
                | ExtAfterQuoted
        )
    }
}

/// The last chunk with an empty trailer section (RFC 9112 §7.1).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Appends `data` to `out` as one chunk (RFC 9112 §7.1); nothing for empty data, which would read as
/// the last chunk. Allocates only when `out` must grow.
pub fn encode_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let mut digits = [0u8; 16];
    let mut n = data.len() as u64;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
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
mod tests;

/// The trailer section's field lines (each ending in CRLF) in `tail`, the bytes of a complete chunked
/// body after its last data byte: the CRLF ending the last data chunk (when present), the last-chunk
/// line (`0`, maybe with extensions), the field lines, the final CRLF (RFC 9112 §7.1.2). `None` when
/// there are no fields.
pub fn trailer_lines(tail: &[u8]) -> Option<&[u8]> {
    let t = tail.strip_prefix(b"\r\n").unwrap_or(tail);
    let line = t.windows(2).position(|w| w == b"\r\n")? + 2;
    let fields = t.get(line..t.len().checked_sub(2)?)?;
    (!fields.is_empty()).then_some(fields)
}
