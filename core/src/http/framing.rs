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
}

/// Parses a Content-Length value: ASCII digits only, no sign, no whitespace inside (RFC 9110 §8.6).
pub fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Combined Content-Length of all CL fields: identical repeats fold into one; differing or malformed
/// values are an error.
fn content_length(buf: &[u8], fields: &[Field]) -> Result<Option<u64>, ()> {
    let mut found = None;
    for f in fields.iter().filter(|f| f.kind == FieldKind::ContentLength) {
        // A single field may itself be a list ("5, 5").
        for e in list_elements(f.value(buf)).chain(f.value(buf).is_empty().then_some(&b""[..])) {
            let n = parse_content_length(e).ok_or(())?;
            if found.is_some_and(|m| m != n) {
                return Err(());
            }
            found = Some(n);
        }
    }
    Ok(found)
}

/// Classifies the Transfer-Encoding list: `Ok(None)` when absent, `Ok(Some(true))` when exactly chunked.
fn transfer_encoding(buf: &[u8], fields: &[Field]) -> Result<Option<()>, FramingError> {
    let mut any = false;
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
                return Err(FramingError::BadFraming);
            }
            chunked_seen |= is_chunked;
            last_is_chunked = is_chunked;
        }
    }
    match (any, chunked_seen, last_is_chunked) {
        (false, _, _) => Ok(None),
        (true, _, false) => Err(FramingError::BadFraming),
        (true, true, true) => {
            // Exactly `chunked` is fine; chunked after other codings we do not implement is 501.
            let only = fields
                .iter()
                .filter(|f| f.kind == FieldKind::TransferEncoding)
                .flat_map(|f| list_elements(f.value(buf)))
                .count()
                == 1;
            if only {
                Ok(Some(()))
            } else {
                Err(FramingError::TransferCoding)
            }
        }
        (true, false, true) => unreachable!("last_is_chunked implies chunked_seen"),
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
    for (i, f) in fields.iter().enumerate() {
        match f.kind {
            FieldKind::Host => {
                hosts += 1;
                host = Some(i);
            }
            FieldKind::Expect => {
                expect_continue |= f.value(buf).eq_ignore_ascii_case(b"100-continue")
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
    let te = transfer_encoding(buf, fields)?;
    let cl = content_length(buf, fields).map_err(|()| FramingError::BadFraming)?;
    let body = match (te, cl) {
        (Some(()), Some(_)) => return Err(FramingError::BadFraming),
        (Some(()), None) if head.minor == 0 => return Err(FramingError::BadFraming),
        (Some(()), None) => Body::Chunked,
        (None, Some(0)) | (None, None) => Body::None,
        (None, Some(n)) => Body::Length(n),
    };
    let close = if head.minor == 0 {
        !connection_has(buf, fields, b"keep-alive")
    } else {
        connection_has(buf, fields, b"close")
    };
    Ok(RequestInfo {
        body,
        host,
        close,
        expect_continue,
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

/// The response framing decision (RFC 9112 §6.3 rules 1–8). `head_request` marks a response to HEAD.
///
/// # Errors
/// [`BadResponse`] for malformed or differing Content-Length values, or CL together with TE.
pub fn response_body(
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    head_request: bool,
) -> Result<Body, BadResponse> {
    if head_request || head.status < 200 || head.status == 204 || head.status == 304 {
        return Ok(Body::None);
    }
    let chunked_last = {
        let mut any = false;
        let mut last = false;
        for f in fields
            .iter()
            .filter(|f| f.kind == FieldKind::TransferEncoding)
        {
            for coding in list_elements(f.value(buf)) {
                any = true;
                last = coding.eq_ignore_ascii_case(b"chunked");
            }
        }
        any.then_some(last)
    };
    let cl = content_length(buf, fields).map_err(|()| BadResponse)?;
    match (chunked_last, cl) {
        (Some(_), Some(_)) => Err(BadResponse),
        (Some(true), None) if head.minor == 1 => Ok(Body::Chunked),
        (Some(_), None) => Ok(Body::CloseDelimited),
        (None, Some(0)) => Ok(Body::None),
        (None, Some(n)) => Ok(Body::Length(n)),
        (None, None) => Ok(Body::CloseDelimited),
    }
}

/// Whether the upstream lets edge reuse the connection after this response: HTTP/1.1 without
/// `Connection: close`, or HTTP/1.0 with `Connection: keep-alive`.
pub fn response_keeps_alive(buf: &[u8], head: &ResponseHead, fields: &[Field]) -> bool {
    if head.minor == 0 {
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
mod tests {
    use super::*;
    use crate::http::head::{parse_request, parse_response, Fields};

    fn req(text: &str) -> Result<RequestInfo, FramingError> {
        let mut f = Fields::new();
        let h = parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        request_info(text.as_bytes(), &h, &f)
    }

    #[test]
    fn request_framing_table() {
        use FramingError::*;
        assert_eq!(
            req("GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap().body,
            Body::None
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
                .unwrap()
                .body,
            Body::Length(5)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
                .unwrap()
                .body,
            Body::Length(5)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n")
                .unwrap()
                .body,
            Body::Length(5)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            Err(BadFraming)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"),
            Err(BadFraming)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n"),
            Err(BadFraming)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap()
                .body,
            Body::Chunked
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,Chunked,\r\n\r\n")
                .unwrap()
                .body,
            Body::Chunked
        );
        assert_eq!(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"), Err(BadFraming));
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(BadFraming)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"),
            Err(BadFraming)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Err(TransferCoding)
        );
        assert_eq!(req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"), Err(TransferCoding));
        assert_eq!(
            req("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(BadFraming)
        );
        assert_eq!(req("GET / HTTP/1.1\r\n\r\n"), Err(BadHost));
        assert_eq!(
            req("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Err(BadHost)
        );
        assert_eq!(req("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), Err(BadHost));
        assert!(req("GET / HTTP/1.0\r\n\r\n").unwrap().close);
        assert!(
            !req("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .close
        );
        assert!(
            req("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n")
                .unwrap()
                .close
        );
    }

    fn res(text: &str, head_req: bool) -> Result<Body, BadResponse> {
        let mut f = Fields::new();
        let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        response_body(text.as_bytes(), &h, &f, head_req)
    }

    #[test]
    fn response_framing_table() {
        assert_eq!(
            res("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", false),
            Ok(Body::Length(3))
        );
        assert_eq!(
            res("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true),
            Ok(Body::None)
        );
        assert_eq!(
            res("HTTP/1.1 204 No Content\r\n\r\n", false),
            Ok(Body::None)
        );
        assert_eq!(
            res(
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                false
            ),
            Ok(Body::None)
        );
        assert_eq!(
            res(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false
            ),
            Ok(Body::Chunked)
        );
        assert_eq!(
            res("HTTP/1.1 200 OK\r\n\r\n", false),
            Ok(Body::CloseDelimited)
        );
        assert_eq!(
            res("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false),
            Ok(Body::CloseDelimited)
        );
        assert_eq!(
            res("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false),
            Err(BadResponse)
        );
        assert_eq!(
            res(
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                false
            ),
            Err(BadResponse)
        );
    }

    #[test]
    fn keep_alive_timeout_param() {
        let text = "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\n\r\n";
        let mut f = Fields::new();
        parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        assert_eq!(keep_alive_timeout(text.as_bytes(), &f), Some(5));
    }
}
