//! Request path normalisation (DESIGN.md "Routing", RFC 3986 §6.2.2): the path routes match and the
//! path forwarded upstream. Done once per request, before routing:
//!
//! - percent-encodings of unreserved characters (ALPHA, DIGIT, `-`, `.`, `_`, `~`; RFC 3986 §2.3) are
//!   decoded (`/%7Euser` → `/~user`), every other one has its hex digits upper-cased (`%2f` → `%2F`,
//!   RFC 3986 §6.2.2.1); `%2F`, `%5C` and the rest stay encoded, so an encoded slash never splits a
//!   segment;
//! - `.` and `..` segments are removed (RFC 3986 §5.2.4, §6.2.2.3), after decoding, so `%2E%2E` is a
//!   `..` too; a `..` above the root is [`BadPath`] (400 `bad_path`), never clamped;
//! - an encoded NUL (`%00`) is [`BadPath`]: no origin should ever see one;
//! - an invalid percent-encoding (`%zz`, a `%` with fewer than two hex digits after it) is [`BadPath`],
//!   as nginx answers 400: its meaning differs between servers, so it is not guessed;
//! - repeated slashes are kept (`//` is matched and forwarded as written), other bytes are not touched,
//!   and the query is not part of the input.
//!
//! [`normalise`] checks first, without copying, whether the path is already normal (the common case), and
//! only then writes the normal form into a caller's reusable buffer. The writing side is a small state
//! machine ([`Normaliser`]) that may be fed in pieces; every split of an input gives the same result.

/// A path that cannot be normalised: 400 `bad_path` (DESIGN.md "Status codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadPath;

/// The normal form of `path` (the target's path, query excluded), per the module rules.
///
/// Returns `path` itself when it is already normal (no copy: the result is the same slice, which
/// `std::ptr::eq` tells); otherwise the normal form written into `scratch` (cleared first, grown as
/// needed and kept by the caller, so steady state allocates nothing). A path that does not start with `/`
/// (the asterisk-form `*`) is returned as it is; an empty path (an absolute-form target with no path) is
/// `/` (RFC 9112 §3.2.2), in `scratch`.
///
/// # Errors
/// [`BadPath`] for a `..` above the root, an encoded NUL, or an invalid percent-encoding.
pub fn normalise<'a>(path: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], BadPath> {
    if path.is_empty() {
        scratch.clear();
        scratch.push(b'/');
        return Ok(scratch);
    }
    if path[0] != b'/' || is_normal(path) {
        return Ok(path);
    }
    let mut n = Normaliser::new(scratch);
    n.feed(path)?;
    n.finish()?;
    Ok(scratch)
}

/// Whether `path` (starting with `/`) is already in normal form: every `%` starts a valid upper-case
/// encoding of a byte that is neither unreserved nor NUL, and no segment is `.` or `..`. Allocates
/// nothing; an invalid path is "not normal" (the [`Normaliser`] then reports it).
pub fn is_normal(path: &[u8]) -> bool {
    let escapes_normal =
        memchr::memchr_iter(b'%', path).all(|i| match (path.get(i + 1), path.get(i + 2)) {
            (Some(&h), Some(&l)) => match (upper_hex(h), upper_hex(l)) {
                (Some(h), Some(l)) => {
                    let b = (h << 4) | l;
                    b != 0 && !is_unreserved(b)
                }
                _ => false,
            },
            _ => false,
        });
    // Each dot that starts a segment: the segment must not be `.` or `..`.
    escapes_normal
        && memchr::memchr_iter(b'.', path).all(|i| {
            if i == 0 || path[i - 1] != b'/' {
                return true;
            }
            match path.get(i + 1) {
                None | Some(b'/') => false,
                Some(b'.') => !matches!(path.get(i + 2), None | Some(b'/')),
                Some(_) => true,
            }
        })
}

/// RFC 3986 §2.3: ALPHA / DIGIT / "-" / "." / "_" / "~".
pub fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The value of a hex digit, either case.
pub fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The value of an upper-case hex digit (the normal form's).
fn upper_hex(b: u8) -> Option<u8> {
    match b {
        b'a'..=b'f' => None,
        _ => hex(b),
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Where the normaliser is inside a percent-encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    /// Not inside one.
    None,
    /// After `%`.
    Percent,
    /// After `%` and one hex digit (its value).
    Digit(u8),
}

/// The writing side of [`normalise`]: a state machine fed a path (starting with `/`) in any number of
/// pieces, writing its normal form into a borrowed buffer. Feeding the same bytes split anywhere gives
/// the same output and the same error.
///
/// The output always holds the normal form of the complete segments fed so far, each complete segment
/// followed by its `/`, then the current segment's bytes; a segment is checked for `.` / `..` when it
/// ends (at a `/` or at [`Normaliser::finish`]).
pub struct Normaliser<'s> {
    out: &'s mut Vec<u8>,
    /// Start of the current segment in `out`.
    segment: usize,
    escape: Escape,
    failed: bool,
}

impl<'s> Normaliser<'s> {
    /// A normaliser writing into `out` (cleared).
    pub fn new(out: &'s mut Vec<u8>) -> Self {
        out.clear();
        Normaliser {
            out,
            segment: 0,
            escape: Escape::None,
            failed: false,
        }
    }

    /// Takes the next piece of the path.
    ///
    /// # Errors
    /// [`BadPath`] as soon as the bytes fed so far show it; the normaliser then refuses every later
    /// piece.
    pub fn feed(&mut self, piece: &[u8]) -> Result<(), BadPath> {
        if self.failed {
            return Err(BadPath);
        }
        for &b in piece {
            if let Err(e) = self.byte(b) {
                self.failed = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Ends the path: checks its last segment.
    ///
    /// # Errors
    /// [`BadPath`] when an earlier piece failed, the path ends inside a percent-encoding, or its last
    /// segment is a `..` above the root.
    pub fn finish(mut self) -> Result<(), BadPath> {
        if self.failed || self.escape != Escape::None {
            return Err(BadPath);
        }
        self.end_segment(false)
    }

    fn byte(&mut self, b: u8) -> Result<(), BadPath> {
        match self.escape {
            Escape::None if b == b'%' => self.escape = Escape::Percent,
            Escape::None if b == b'/' => {
                self.end_segment(true)?;
            }
            Escape::None => self.out.push(b),
            Escape::Percent => self.escape = Escape::Digit(hex(b).ok_or(BadPath)?),
            Escape::Digit(high) => {
                let value = (high << 4) | hex(b).ok_or(BadPath)?;
                self.escape = Escape::None;
                match value {
                    0 => return Err(BadPath),
                    v if is_unreserved(v) => self.out.push(v),
                    v => self.out.extend_from_slice(&[
                        b'%',
                        HEX_UPPER[usize::from(v >> 4)],
                        HEX_UPPER[usize::from(v & 15)],
                    ]),
                }
            }
        }
        Ok(())
    }

    /// The current segment ends, followed by a `/` (`slash`) or by the end of the path: a `.` is
    /// dropped, a `..` drops it and the segment before it (RFC 3986 §5.2.4), anything else stays; then
    /// the `/` is written unless the output already ends with the one a dropped segment left.
    fn end_segment(&mut self, slash: bool) -> Result<(), BadPath> {
        let dots = match &self.out[self.segment..] {
            b"." => 1,
            b".." => 2,
            _ => 0,
        };
        if dots == 0 {
            if slash {
                self.out.push(b'/');
                self.segment = self.out.len();
            }
            return Ok(());
        }
        self.out.truncate(self.segment);
        if dots == 2 {
            // `out` is "/", or ends with "/segment/": drop that segment, keep the "/" before it.
            let before = self.segment.checked_sub(1).ok_or(BadPath)?;
            let previous = self.out[..before]
                .iter()
                .rposition(|&b| b == b'/')
                .ok_or(BadPath)?;
            self.out.truncate(previous + 1);
        }
        self.segment = self.out.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
