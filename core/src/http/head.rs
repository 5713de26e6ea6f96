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
    pub name_len: u32,
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

/// The value of the first of `fields` named `name` (case-insensitive, RFC 9110 §5.1), read from `buf`.
pub fn first_value<'a>(buf: &'a [u8], fields: &[Field], name: &[u8]) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|f| f.name(buf).eq_ignore_ascii_case(name))
        .map(|f| f.value(buf))
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
    /// Other hop-by-hop fields: Proxy-Connection, TE, Trailer (RFC 9110 §7.6.1).
    HopByHop,
    /// `Upgrade` (RFC 9110 §7.8): hop-by-hop, forwarded only for a real upgrade.
    Upgrade,
    /// `Max-Forwards` (RFC 9110 §7.6.2): decremented on OPTIONS and TRACE.
    MaxForwards,
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
    /// `traceparent` (W3C trace context, DESIGN.md "Observability").
    TraceParent,
    /// `tracestate` (W3C trace context): forwarded with a valid `traceparent`, dropped with a replaced one.
    TraceState,
    /// `User-Agent`, for the access line.
    UserAgent,
    /// `Referer`, for the access line's combined format.
    Referer,
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
        7 if is!(b"upgrade") => FieldKind::Upgrade,
        15 if is!(b"x-forwarded-for") => FieldKind::XForwardedFor,
        17 if is!(b"x-forwarded-proto") => FieldKind::XForwardedProto,
        9 if is!(b"forwarded") => FieldKind::ForwardedOther,
        9 if is!(b"x-real-ip") => FieldKind::ForwardedOther,
        12 if is!(b"x-request-id") => FieldKind::RequestId,
        12 if is!(b"max-forwards") => FieldKind::MaxForwards,
        6 if is!(b"expect") => FieldKind::Expect,
        3 if is!(b"via") => FieldKind::Via,
        11 if is!(b"traceparent") => FieldKind::TraceParent,
        10 if is!(b"tracestate") => FieldKind::TraceState,
        10 if is!(b"user-agent") => FieldKind::UserAgent,
        7 if is!(b"referer") => FieldKind::Referer,
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
    /// The target as edge routes and forwards it (RFC 9112 §3.2): the whole target in origin-form and
    /// asterisk-form; in absolute-form the part after the authority, which may be empty or start with
    /// `?` (the forwarder then writes `/` before it).
    pub path: Range<usize>,
    /// The authority of an absolute-form target. It replaces the Host field for routing and is sent
    /// upstream as Host (RFC 9112 §3.2.2); its syntax is checked with Host's in the framing decision.
    pub authority: Option<Range<usize>>,
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
    /// More fields than the limit, or a head of 4 GiB or more (its offsets are u32; `max_head_bytes`
    /// stops a request long before); 431 `head_too_large`.
    TooManyFields,
}

/// Most fields edge will parse in one head; `server.limits.max_headers` is capped to this.
pub const MAX_FIELDS: usize = 256;

fn offset(buf: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buf.as_ptr() as usize
}

/// Records the fields of a complete head of `len` bytes at the start of `buf`, checking that every
/// line ends in CRLF (see [`crlf_lines`]).
///
/// # Errors
/// [`HeadError::TooManyFields`] when `len` does not fit the u32 offsets (every offset is below `len`,
/// so none is truncated); [`HeadError::Invalid`] for a bare LF.
fn collect(
    buf: &[u8],
    len: usize,
    headers: &[httparse::Header<'_>],
    fields: &mut Fields,
) -> Result<(), HeadError> {
    let at = |part: &[u8]| offset(buf, part) as u32;
    u32::try_from(len).map_err(|_| HeadError::TooManyFields)?;
    if !crlf_lines(buf, len, headers) {
        return Err(HeadError::Invalid);
    }
    fields.clear();
    for h in headers {
        let name = h.name.as_bytes();
        fields.push(Field {
            name_start: at(name),
            name_len: name.len() as u32,
            value_start: at(h.value),
            value_len: h.value.len() as u32,
            kind: classify(name),
        });
    }
    Ok(())
}

/// Whether every line of a complete head of `len` bytes that httparse parsed into `headers` ends in
/// CRLF.
///
/// RFC 9112 §2.2 lets a recipient accept a bare LF as a line terminator; edge does not. A proxy that
/// accepts bare LF while the origin behind it does not (or the reverse) sees different field lines in the
/// same bytes, which is one way to smuggle a request. httparse accepts bare LF, so edge checks after it,
/// without scanning the field lines again: httparse allows no CR or LF inside a name or a value (and
/// no obs-fold, as configured here), and trims only SP and HTAB after a value, so a field line ends
/// in CRLF exactly when the first byte after its value that is not SP or HTAB is a CR (httparse
/// checked that an LF follows a CR). An empty value points at its line's end. The start line (and any
/// empty lines before it) is scanned with [`crlf_only`], and the final empty line is CRLF when the byte
/// two before the end is a CR (a bare LF would leave the previous line's LF there). Scanning the whole
/// head instead is the largest user-space item of a proxied request's profile (bench/README.md
/// "Per-request user time"); the fuzz targets compare this with [`crlf_only`] over the whole head.
fn crlf_lines(buf: &[u8], len: usize, headers: &[httparse::Header<'_>]) -> bool {
    let start_line_end = headers
        .first()
        .map_or(len, |h| offset(buf, h.name.as_bytes()));
    if !crlf_only(&buf[..start_line_end]) {
        return false;
    }
    let ends_in_cr = |mut at: usize| {
        while let Some(b' ' | b'\t') = buf.get(at) {
            at += 1;
        }
        buf.get(at) == Some(&b'\r')
    };
    headers
        .iter()
        .all(|h| ends_in_cr(offset(buf, h.value) + h.value.len()))
        && len >= 2
        && buf[len - 2] == b'\r'
}

/// Whether every LF in `head` ends a CRLF, found with `memchr`.
pub fn crlf_only(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).all(|i| i > 0 && head[i - 1] == b'\r')
}

/// The target forms of RFC 9112 §3.2 that a reverse proxy serves, as (path, authority); `None` when the
/// target is invalid: a `#` anywhere (a fragment is never sent, RFC 9112 §3.2), authority-form (CONNECT
/// only, answered 405 by the caller), asterisk-form on any method but OPTIONS, an absolute-form scheme
/// other than http or https, or anything else that does not start with `/`.
fn target_form(
    method: &[u8],
    target: Range<usize>,
    buf: &[u8],
) -> Option<(Range<usize>, Option<Range<usize>>)> {
    let t = &buf[target.clone()];
    if t.contains(&b'#') {
        return None;
    }
    if t.first() == Some(&b'/') || (t == b"*" && method == b"OPTIONS") {
        return Some((target, None));
    }
    let scheme = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
        7
    } else if t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
        8
    } else {
        return None;
    };
    let rest = &t[scheme..];
    let auth_len = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let auth_start = target.start + scheme;
    Some((
        auth_start + auth_len..target.end,
        Some(auth_start..auth_start + auth_len),
    ))
}

/// Parses a request head from the start of `buf`.
///
/// Returns `Ok(None)` when the head is not complete yet. `max_fields` (at most [`MAX_FIELDS`]) bounds the
/// field count. Strict where RFC 9112 allows leniency:
/// - every line ends in CRLF: a bare LF is [`HeadError::Invalid`] (RFC 9112 §2.2; see `crlf_lines`);
/// - methods and field names are tokens, there is no whitespace between a field name and its colon, no
///   obs-fold, and field values hold no NUL, CR, LF or other control character but HTAB (RFC 9112 §3,
///   §5.1, §5.2; httparse checks these);
/// - the target has no `#` and is in origin-form, absolute-form (http or https) or, for OPTIONS,
///   asterisk-form (RFC 9112 §3.2). CONNECT's target is not checked: the caller answers 405.
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
            let target = offset(buf, target)..offset(buf, target) + target.len();
            let (path, authority) = if method == b"CONNECT" {
                (target.clone(), None)
            } else {
                target_form(method, target.clone(), buf).ok_or(HeadError::Invalid)?
            };
            let head = RequestHead {
                len,
                method: offset(buf, method)..offset(buf, method) + method.len(),
                target,
                path,
                authority,
                minor: req.version.unwrap_or(1),
            };
            collect(buf, len, req.headers, fields)?;
            Ok(Some(head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields),
        Err(_) => Err(HeadError::Invalid),
    }
}

/// Parses a response head from the start of `buf`; `Ok(None)` when incomplete.
///
/// As strict as [`parse_request`]: CRLF line endings only, token field names, no whitespace before a
/// colon, no obs-fold, no control characters in values (RFC 9112 §2.2, §4, §5); and a status code of
/// 100 to 999 (RFC 9110 §15).
///
/// # Errors
/// [`HeadError`]; callers answer 502 `bad_response` for either.
pub fn parse_response(buf: &[u8], fields: &mut Fields) -> Result<Option<ResponseHead>, HeadError> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut res = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    match config.parse_response_with_uninit_headers(&mut res, buf, &mut storage) {
        Ok(httparse::Status::Complete(len)) => {
            if res.code.unwrap_or(0) < 100 {
                return Err(HeadError::Invalid);
            }
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
            collect(buf, len, res.headers, fields)?;
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
mod tests;
