//! Message heads parsed with httparse into byte offsets, so the parsed head borrows nothing and the
//! buffer it came from can move through monoio operations. One pass over the fields also collects what
//! framing, hop-by-hop removal and forwarding need (RFC 9112 §2–§7, RFC 9110 §7.6).
//!
//! Parsing allocates nothing once the caller's [`Fields`] vector has grown to its working size.

use std::{mem::MaybeUninit, ops::Range};

/// Offsets of one header field inside the head buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    /// Start of the name.
    pub name_start: u32,
    /// Length of the name.
    pub name_len: u16,
    /// Start of the value (leading/trailing whitespace already trimmed by httparse).
    pub value_start: u32,
    /// Length of the value.
    pub value_len: u32,
    /// What edge knows about this field name.
    pub kind: FieldKind,
}

impl Field {
    /// The field name's bytes in `buf`.
    pub fn name<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.name_start as usize..self.name_start as usize + self.name_len as usize]
    }
    /// The field value's bytes in `buf`.
    pub fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.value_start as usize..self.value_start as usize + self.value_len as usize]
    }
}

/// Field names that edge treats specially; everything else is [`FieldKind::Other`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldKind {
    /// An end-to-end field edge forwards as is (unless `Connection` names it).
    #[default]
    Other,
    /// `Host`
    Host,
    /// `Content-Length`
    ContentLength,
    /// `Transfer-Encoding`
    TransferEncoding,
    /// `Connection`
    Connection,
    /// Other hop-by-hop fields: Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade (RFC 9110 §7.6.1).
    HopByHop,
    /// `X-Forwarded-For`
    XForwardedFor,
    /// `X-Forwarded-Proto`
    XForwardedProto,
    /// `Forwarded` and `X-Real-IP`: dropped from untrusted peers.
    ForwardedOther,
    /// `X-Request-Id`
    RequestId,
    /// `Expect`
    Expect,
    /// `Via`
    Via,
    /// `Keep-Alive` on a response (parsed for the upstream's idle timeout, then removed).
    KeepAlive,
}

fn classify(name: &[u8]) -> FieldKind {
    macro_rules! is {
        ($lit:literal) => {
            name.eq_ignore_ascii_case($lit)
        };
    }
    match name.len() {
        4 if is!(b"host") => FieldKind::Host,
        14 if is!(b"content-length") => FieldKind::ContentLength,
        17 if is!(b"transfer-encoding") => FieldKind::TransferEncoding,
        10 if is!(b"connection") => FieldKind::Connection,
        10 if is!(b"keep-alive") => FieldKind::KeepAlive,
        16 if is!(b"proxy-connection") => FieldKind::HopByHop,
        2 if is!(b"te") => FieldKind::HopByHop,
        7 if is!(b"trailer") => FieldKind::HopByHop,
        7 if is!(b"upgrade") => FieldKind::HopByHop,
        15 if is!(b"x-forwarded-for") => FieldKind::XForwardedFor,
        17 if is!(b"x-forwarded-proto") => FieldKind::XForwardedProto,
        9 if is!(b"forwarded") => FieldKind::ForwardedOther,
        9 if is!(b"x-real-ip") => FieldKind::ForwardedOther,
        12 if is!(b"x-request-id") => FieldKind::RequestId,
        6 if is!(b"expect") => FieldKind::Expect,
        3 if is!(b"via") => FieldKind::Via,
        _ => FieldKind::Other,
    }
}

/// The fields of one head, reused across requests on a connection.
pub type Fields = Vec<Field>;

/// A parsed request head: offsets into the buffer it was parsed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head including the final CRLF CRLF.
    pub len: usize,
    /// Method token.
    pub method: Range<usize>,
    /// Request target as sent.
    pub target: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
}

/// A parsed response head.
#[derive(Clone, Debug, Default)]
pub struct ResponseHead {
    /// Bytes of the head including the final CRLF CRLF.
    pub len: usize,
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
}

/// Why a head could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// Not valid HTTP/1.x syntax (RFC 9112 §2–§5); 400 `bad_head`.
    Invalid,
    /// More fields than the limit; 431 `head_too_large`.
    TooManyFields,
}

/// Most fields edge will parse in one head; `server.limits.max_headers` is capped to this.
pub const MAX_FIELDS: usize = 256;

fn offset(buf: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buf.as_ptr() as usize
}

fn collect(buf: &[u8], headers: &[httparse::Header<'_>], fields: &mut Fields) {
    fields.clear();
    for h in headers {
        let name = h.name.as_bytes();
        fields.push(Field {
            name_start: offset(buf, name) as u32,
            name_len: name.len() as u16,
            value_start: offset(buf, h.value) as u32,
            value_len: h.value.len() as u32,
            kind: classify(name),
        });
    }
}

/// Parses a request head from the start of `buf`.
///
/// Returns `Ok(None)` when the head is not complete yet. `max_fields` (at most [`MAX_FIELDS`]) bounds the
/// field count. httparse is strict: obs-fold, whitespace before a colon and control characters in a field
/// are all [`HeadError::Invalid`] (RFC 9112 §5.1, §5.2).
///
/// # Errors
/// [`HeadError`] as above.
pub fn parse_request(
    buf: &[u8],
    max_fields: usize,
    fields: &mut Fields,
) -> Result<Option<RequestHead>, HeadError> {
    // Uninitialised field storage: initialising 256 headers per parse would cost more than parsing.
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let config = httparse::ParserConfig::default();
    match config.parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut storage[..max_fields.min(MAX_FIELDS)],
    ) {
        Ok(httparse::Status::Complete(len)) => {
            let method = req.method.unwrap_or("").as_bytes();
            let target = req.path.unwrap_or("").as_bytes();
            let head = RequestHead {
                len,
                method: offset(buf, method)..offset(buf, method) + method.len(),
                target: offset(buf, target)..offset(buf, target) + target.len(),
                minor: req.version.unwrap_or(1),
            };
            collect(buf, req.headers, fields);
            Ok(Some(head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields),
        Err(_) => Err(HeadError::Invalid),
    }
}

/// Parses a response head from the start of `buf`; `Ok(None)` when incomplete.
///
/// # Errors
/// [`HeadError`]; callers answer 502 `bad_response` for either.
pub fn parse_response(buf: &[u8], fields: &mut Fields) -> Result<Option<ResponseHead>, HeadError> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut res = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    match config.parse_response_with_uninit_headers(&mut res, buf, &mut storage) {
        Ok(httparse::Status::Complete(len)) => {
            let reason = res.reason.unwrap_or("").as_bytes();
            let start = if reason.is_empty() {
                0
            } else {
                offset(buf, reason)
            };
            let head = ResponseHead {
                len,
                status: res.code.unwrap_or(0),
                reason: start..start + reason.len(),
                minor: res.version.unwrap_or(1),
            };
            collect(buf, res.headers, fields);
            Ok(Some(head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields),
        Err(_) => Err(HeadError::Invalid),
    }
}

/// Whether the request line (up to its CRLF) is complete within `buf`; used to tell 414 from 431 when the
/// head limit is hit.
pub fn request_line_complete(buf: &[u8]) -> bool {
    // Leading empty lines are allowed before the request line (RFC 9112 §2.2).
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    buf[start..].contains(&b'\n')
}

/// Iterates the comma-separated elements of a field value (RFC 9110 §5.6.1), trimmed, empty ones skipped.
pub fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|e| !e.is_empty())
}

/// Trims optional whitespace (SP / HTAB) from both ends.
pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_fields_are_classified_by_offset() {
        let buf = b"GET /a?b HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 5\r\nX-Custom: v\r\n\r\nhello";
        let mut f = Fields::new();
        let h = parse_request(buf, 100, &mut f).unwrap().unwrap();
        assert_eq!(&buf[h.target.clone()], b"/a?b");
        assert_eq!(&buf[h.method.clone()], b"GET");
        assert_eq!(h.minor, 1);
        assert_eq!(h.len, buf.len() - 5);
        assert_eq!(f[0].kind, FieldKind::Host);
        assert_eq!(f[1].kind, FieldKind::ContentLength);
        assert_eq!(f[1].value(buf), b"5");
        assert_eq!(f[2].name(buf), b"X-Custom");
    }

    #[test]
    fn partial_and_invalid_heads() {
        let mut f = Fields::new();
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n", 100, &mut f),
            Ok(None)
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 100, &mut f).unwrap_err(),
            HeadError::Invalid
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 100, &mut f).unwrap_err(),
            HeadError::Invalid
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", 1, &mut f).unwrap_err(),
            HeadError::TooManyFields
        );
    }

    #[test]
    fn list_elements_skip_empty() {
        let v: Vec<&[u8]> = list_elements(b" gzip ,, chunked,").collect();
        assert_eq!(v, vec![&b"gzip"[..], b"chunked"]);
    }

    #[test]
    fn response_head() {
        let buf = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let mut f = Fields::new();
        let h = parse_response(buf, &mut f).unwrap().unwrap();
        assert_eq!(h.status, 404);
        assert_eq!(&buf[h.reason.clone()], b"Not Found");
    }
}
