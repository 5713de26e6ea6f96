//! The two framing decisions of RFC 9112 §6.3: how long a request body is and how long a response body
//! is. Nothing else in edge looks at Content-Length or Transfer-Encoding. Both reject ambiguity
//! (DESIGN.md "HTTP/1.1 rules") instead of guessing.

use super::head::{list_elements, Field, FieldKind, RequestHead, ResponseHead};

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// No body.
    None,
    /// Exactly this many bytes (Content-Length).
    Length(u64),
    /// Chunked transfer coding (RFC 9112 §7.1).
    Chunked,
    /// Until the sender closes (responses only, RFC 9112 §6.3 rule 8).
    CloseDelimited,
}

/// Why a request's framing is rejected; the mapping to status and counter label is in DESIGN.md
/// "Status codes".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// 400 `bad_framing`: both CL and TE, differing or malformed CL, TE in HTTP/1.0, a final coding that
    /// is not chunked, chunked twice.
    BadFraming,
    /// 400 `bad_host`: Host missing or repeated in HTTP/1.1, or more than one Host.
    BadHost,
    /// 501 `transfer_coding`: chunked last after codings edge does not implement.
    TransferCoding,
    /// 413 `body_too_large`: a well-formed Content-Length too large for a u64, more than any
    /// `max_body_bytes` allows ("none" means up to `u64::MAX` bytes). A Content-Length that fits is
    /// compared with `max_body_bytes` by the caller, before any body byte is read.
    BodyTooLarge,
}

/// What the request head says about the connection and the exchange, gathered in one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    /// Body framing.
    pub body: Body,
    /// Index of the Host field, if any.
    pub host: Option<usize>,
    /// The client asked to close (`Connection: close`), or HTTP/1.0 without `keep-alive`.
    pub close: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// The client asks for a protocol upgrade edge can forward (RFC 9110 §7.8): HTTP/1.1, `upgrade` listed
    /// in Connection, and an Upgrade field naming a protocol other than `h2c` (edge speaks HTTP/1.1
    /// upstream, so h2c is stripped). An HTTP/1.0 request's Upgrade is ignored (RFC 9110 §7.8).
    pub upgrade: bool,
    /// Max-Forwards of an OPTIONS or TRACE request (RFC 9110 §7.6.2): the first field's value when it is
    /// plain digits (a malformed value is forwarded unchanged, as if edge did not understand it). `None`
    /// for other methods.
    pub max_forwards: Option<u64>,
}

/// Whether an Upgrade list element names `h2c` (with or without a version suffix), which edge strips.
pub fn is_h2c(protocol: &[u8]) -> bool {
    let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
    name.eq_ignore_ascii_case(b"h2c")
}

/// Parses a Content-Length value: one or more ASCII digits and nothing else (no sign, no whitespace or
/// underscore inside, no hex), overflow of u64 checked (RFC 9110 §8.6). Leading zeros are allowed.
pub fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// A well-formed Content-Length value (RFC 9110 §8.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Length<'a> {
    /// A length that fits a u64.
    Bytes(u64),
    /// Digits of a length over `u64::MAX`, leading zeros removed (so equal lengths compare equal).
    Huge(&'a [u8]),
}

/// Parses one Content-Length list element: ASCII digits only (see [`parse_content_length`]), whatever
/// their number.
fn length_value(v: &[u8]) -> Option<Length<'_>> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(match parse_content_length(v) {
        Some(n) => Length::Bytes(n),
        None => Length::Huge(&v[v.iter().take_while(|&&d| d == b'0').count()..]),
    })
}

/// Combined Content-Length of all CL fields (RFC 9110 §8.6, RFC 9112 §6.3 rule 5): a field may be a list
/// of identical values ("5, 5") and identical fields fold into one; differing values, a malformed value
/// or an empty list element are an error.
fn content_length<'a>(buf: &'a [u8], fields: &[Field]) -> Result<Option<Length<'a>>, ()> {
    let mut found = None;
    for f in fields.iter().filter(|f| f.kind == FieldKind::ContentLength) {
        for e in f.value(buf).split(|&b| b == b',') {
            let n = length_value(super::head::trim(e)).ok_or(())?;
            if found.is_some_and(|m| m != n) {
                return Err(());
            }
            found = Some(n);
        }
    }
    Ok(found)
}

/// What the Transfer-Encoding fields of a message say, all lines taken as one list (RFC 9112 §6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codings {
    /// No Transfer-Encoding field.
    Absent,
    /// Exactly `chunked`.
    Chunked,
    /// Chunked last, after other codings.
    ChunkedAfterOthers,
    /// A final coding that is not chunked (or an empty list).
    NotChunkedLast,
    /// Chunked listed more than once.
    ChunkedTwice,
}

/// Classifies the Transfer-Encoding list (empty elements ignored, names case-insensitive).
fn transfer_encoding(buf: &[u8], fields: &[Field]) -> Codings {
    let mut any = false;
    let mut codings = 0usize;
    let mut chunked_seen = false;
    let mut last_is_chunked = false;
    for f in fields
        .iter()
        .filter(|f| f.kind == FieldKind::TransferEncoding)
    {
        any = true;
        for coding in list_elements(f.value(buf)) {
            let is_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if is_chunked && chunked_seen {
                return Codings::ChunkedTwice;
            }
            codings += 1;
            chunked_seen |= is_chunked;
            last_is_chunked = is_chunked;
        }
    }
    match (any, last_is_chunked, codings) {
        (false, _, _) => Codings::Absent,
        (true, false, _) => Codings::NotChunkedLast,
        (true, true, 1) => Codings::Chunked,
        (true, true, _) => Codings::ChunkedAfterOthers,
    }
}

/// Whether a Connection field lists `token` (case-insensitive).
pub fn connection_has(buf: &[u8], fields: &[Field], token: &[u8]) -> bool {
    fields
        .iter()
        .filter(|f| f.kind == FieldKind::Connection)
        .flat_map(|f| list_elements(f.value(buf)))
        .any(|t| t.eq_ignore_ascii_case(token))
}

/// The request framing decision (RFC 9112 §6.3 and DESIGN.md "HTTP/1.1 rules").
///
/// # Errors
/// [`FramingError`] for every ambiguous or unsupported framing.
pub fn request_info(
    buf: &[u8],
    head: &RequestHead,
    fields: &[Field],
) -> Result<RequestInfo, FramingError> {
    let mut host = None;
    let mut hosts = 0;
    let mut expect_continue = false;
    let mut upgrade_protocol = false;
    let mut max_forwards = None;
    let method = &buf[head.method.clone()];
    let counts_hops = method == b"OPTIONS" || method == b"TRACE";
    let mut max_forwards_seen = false;
    for (i, f) in fields.iter().enumerate() {
        match f.kind {
            FieldKind::Host => {
                hosts += 1;
                host = Some(i);
            }
            FieldKind::Expect => {
                expect_continue |= f.value(buf).eq_ignore_ascii_case(b"100-continue")
            }
            FieldKind::Upgrade => {
                upgrade_protocol |= list_elements(f.value(buf)).any(|p| !is_h2c(p));
            }
            FieldKind::MaxForwards if counts_hops && !max_forwards_seen => {
                max_forwards_seen = true;
                max_forwards = parse_content_length(super::head::trim(f.value(buf)));
            }
            _ => {}
        }
    }
    if hosts > 1 || (head.minor == 1 && hosts == 0) {
        return Err(FramingError::BadHost);
    }
    if let Some(i) = host {
        if !valid_host(fields[i].value(buf)) {
            return Err(FramingError::BadHost);
        }
    }
    // An absolute-form target's authority replaces Host (RFC 9112 §3.2.2): it must be a valid host too.
    if let Some(a) = &head.authority {
        if !valid_host(&buf[a.clone()]) {
            return Err(FramingError::BadHost);
        }
    }
    let te = transfer_encoding(buf, fields);
    if te != Codings::Absent && head.minor == 0 {
        // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing.
        return Err(FramingError::BadFraming);
    }
    let cl = content_length(buf, fields).map_err(|()| FramingError::BadFraming)?;
    let body = match (te, cl) {
        // RFC 9112 §6.1: a sender MUST NOT send both; edge rejects instead of picking one (CL.TE / TE.CL).
        (Codings::Absent, Some(Length::Bytes(0)) | None) => Body::None,
        (Codings::Absent, Some(Length::Bytes(n))) => Body::Length(n),
        (Codings::Absent, Some(Length::Huge(_))) => return Err(FramingError::BodyTooLarge),
        (_, Some(_)) | (Codings::NotChunkedLast | Codings::ChunkedTwice, None) => {
            return Err(FramingError::BadFraming)
        }
        (Codings::ChunkedAfterOthers, None) => return Err(FramingError::TransferCoding),
        (Codings::Chunked, None) => Body::Chunked,
    };
    let close = if head.minor == 0 {
        !connection_has(buf, fields, b"keep-alive")
    } else {
        connection_has(buf, fields, b"close")
    };
    let upgrade = head.minor == 1 && upgrade_protocol && connection_has(buf, fields, b"upgrade");
    Ok(RequestInfo {
        body,
        host,
        close,
        expect_continue,
        upgrade,
        max_forwards,
    })
}

/// Host syntax check (RFC 9110 §7.2, RFC 3986 §3.2.2): no whitespace, controls, `/`, `@`, `?`, `#` or
/// `\`; may be empty only in HTTP/1.0 style absolute-form requests, which edge treats as invalid.
fn valid_host(v: &[u8]) -> bool {
    !v.is_empty()
        && v.iter().all(|&b| {
            b.is_ascii_graphic()
                && !matches!(b, b'/' | b'@' | b'?' | b'#' | b'\\' | b'"' | b'<' | b'>')
        })
}

/// Why a response's framing is rejected: 502 `bad_response`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadResponse;

/// The response framing decision (RFC 9112 §6.3 rules 1–8). `head_request` marks a response to HEAD;
/// HEAD, 1xx, 204 and 304 responses have no body whatever their fields say (rules 1–2). The
/// Content-Length of a HEAD or 304 response reaches the client (see [`bodyless_content_length`]), so it
/// must be as well-formed as on any response; a 1xx's or 204's is never sent on, so it is not judged.
///
/// # Errors
/// [`BadResponse`] for malformed or differing Content-Length values, CL together with TE, Transfer-Encoding
/// in an HTTP/1.0 response with a body (RFC 9112 §6.1, §6.3), or any coding list but exactly `chunked`
/// on a body (edge implements no other transfer coding, and Transfer-Encoding is hop-by-hop).
pub fn response_body(
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    head_request: bool,
) -> Result<Body, BadResponse> {
    if never_framed(head.status) {
        return Ok(Body::None);
    }
    let te = transfer_encoding(buf, fields);
    let cl = content_length(buf, fields).map_err(|()| BadResponse)?;
    if head_request || head.status == 304 {
        // RFC 9112 §6.1 lets a HEAD or 304 response carry Transfer-Encoding (the coding a GET would get);
        // it is hop-by-hop and dropped. Content-Length beside it is the same ambiguity as on a body.
        return match (te, cl) {
            (_, Some(Length::Huge(_))) => Err(BadResponse),
            (Codings::Absent, _) | (_, None) => Ok(Body::None),
            _ => Err(BadResponse),
        };
    }
    if te != Codings::Absent && head.minor == 0 {
        // RFC 9112 §6.1: faulty framing; edge does not guess.
        return Err(BadResponse);
    }
    match (te, cl) {
        (Codings::Absent, Some(Length::Bytes(0))) => Ok(Body::None),
        (Codings::Absent, Some(Length::Bytes(n))) => Ok(Body::Length(n)),
        (Codings::Absent, None) => Ok(Body::CloseDelimited),
        (Codings::Chunked, None) => Ok(Body::Chunked),
        // Any other coding: edge implements only chunked and removes Transfer-Encoding (hop-by-hop), so
        // it could not tell the client how the body is coded. Refused, as nginx does. A length over
        // u64::MAX cannot be relayed either.
        _ => Err(BadResponse),
    }
}

/// Statuses whose responses never carry Content-Length or Transfer-Encoding to the client: 1xx and 204
/// (RFC 9110 §8.6, RFC 9112 §6.1: a server MUST NOT send them there).
fn never_framed(status: u16) -> bool {
    status < 200 || status == 204
}

/// The Content-Length edge writes on a response that has no body ([`response_body`] said
/// [`Body::None`]): none on 1xx and 204, whatever the upstream sent (RFC 9110 §8.6); on a 304 the
/// representation's length and on a HEAD response the length a GET would have, as the upstream gave it
/// (RFC 9110 §8.6, §9.3.2); on any other status the upstream's `0`. One value, written once.
pub fn bodyless_content_length(buf: &[u8], head: &ResponseHead, fields: &[Field]) -> Option<u64> {
    if never_framed(head.status) {
        return None;
    }
    match content_length(buf, fields) {
        Ok(Some(Length::Bytes(n))) => Some(n),
        _ => None,
    }
}

/// Whether edge may reuse the upstream connection after this response: HTTP/1.1 without
/// `Connection: close`, or HTTP/1.0 with `Connection: keep-alive`; and not after a 1xx or 204 that
/// declares a body (a Content-Length other than 0, or Transfer-Encoding), because its sender may still be
/// writing that body, which edge would read as the next response (DESIGN.md "HTTP/1.1 rules"). Bytes that
/// arrive with any bodyless head are the caller's to check: they too forbid reuse.
pub fn response_keeps_alive(buf: &[u8], head: &ResponseHead, fields: &[Field]) -> bool {
    let declares_body = never_framed(head.status)
        && (transfer_encoding(buf, fields) != Codings::Absent
            || !matches!(
                content_length(buf, fields),
                Ok(None | Some(Length::Bytes(0)))
            ));
    if declares_body {
        false
    } else if head.minor == 0 {
        connection_has(buf, fields, b"keep-alive")
    } else {
        !connection_has(buf, fields, b"close")
    }
}

/// The `timeout=N` parameter of a response's Keep-Alive field, in seconds.
pub fn keep_alive_timeout(buf: &[u8], fields: &[Field]) -> Option<u64> {
    fields
        .iter()
        .filter(|f| f.kind == FieldKind::KeepAlive)
        .flat_map(|f| list_elements(f.value(buf)))
        .find_map(|p| {
            let (k, v) = p.split_at(p.iter().position(|&b| b == b'=')?);
            super::head::trim(k)
                .eq_ignore_ascii_case(b"timeout")
                .then(|| parse_content_length(super::head::trim(&v[1..])))?
        })
}

#[cfg(test)]
mod response_tests;
#[cfg(test)]
mod tests;
