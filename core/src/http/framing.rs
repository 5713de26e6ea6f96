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

/// Combined Content-Length of all CL fields (RFC 9110 §8.6, RFC 9112 §6.3 rule 5): a field may be a list
/// of identical values ("5, 5") and identical fields fold into one; differing values, a malformed value
/// or an empty list element are an error.
fn content_length(buf: &[u8], fields: &[Field]) -> Result<Option<u64>, ()> {
    let mut found = None;
    for f in fields.iter().filter(|f| f.kind == FieldKind::ContentLength) {
        for e in f.value(buf).split(|&b| b == b',') {
            let n = parse_content_length(super::head::trim(e)).ok_or(())?;
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
        (Codings::Absent, Some(0) | None) => Body::None,
        (Codings::Absent, Some(n)) => Body::Length(n),
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
/// HEAD, 1xx, 204 and 304 responses have no body whatever their fields say (rules 1–2).
///
/// # Errors
/// [`BadResponse`] for malformed or differing Content-Length values, CL together with TE, Transfer-Encoding
/// in an HTTP/1.0 response (RFC 9112 §6.1, §6.3), or any coding list but exactly `chunked` (edge
/// implements no other transfer coding, and Transfer-Encoding is hop-by-hop).
pub fn response_body(
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    head_request: bool,
) -> Result<Body, BadResponse> {
    if head_request || head.status < 200 || head.status == 204 || head.status == 304 {
        return Ok(Body::None);
    }
    let te = transfer_encoding(buf, fields);
    if te != Codings::Absent && head.minor == 0 {
        // RFC 9112 §6.1: faulty framing; edge does not guess.
        return Err(BadResponse);
    }
    let cl = content_length(buf, fields).map_err(|()| BadResponse)?;
    match (te, cl) {
        (Codings::Absent, Some(0)) => Ok(Body::None),
        (Codings::Absent, Some(n)) => Ok(Body::Length(n)),
        (Codings::Absent, None) => Ok(Body::CloseDelimited),
        (Codings::Chunked, None) => Ok(Body::Chunked),
        // Any other coding: edge implements only chunked and removes Transfer-Encoding (hop-by-hop), so
        // it could not tell the client how the body is coded. Refused, as nginx does.
        _ => Err(BadResponse),
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
    fn upgrade_needs_http11_connection_upgrade_and_a_protocol_other_than_h2c() {
        let up = |t: &str| req(t).unwrap().upgrade;
        assert!(up(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        ));
        assert!(up(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, upgrade\r\nUpgrade: h2c, websocket\r\n\r\n"
        ));
        assert!(!up(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n"
        ));
        assert!(!up(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: H2C/1\r\n\r\n"
        ));
        assert!(!up(
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"
        ));
        assert!(!up(
            "GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"
        ));
    }

    #[test]
    fn max_forwards_only_for_options_and_trace() {
        let mf = |t: &str| req(t).unwrap().max_forwards;
        assert_eq!(
            mf("OPTIONS * HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0\r\n\r\n"),
            Some(0)
        );
        assert_eq!(
            mf("TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 07\r\nMax-Forwards: 0\r\n\r\n"),
            Some(7)
        );
        assert_eq!(
            mf("OPTIONS / HTTP/1.1\r\nHost: a\r\nMax-Forwards: -1\r\n\r\n"),
            None
        );
        assert_eq!(
            mf("GET / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 0\r\n\r\n"),
            None
        );
        assert_eq!(mf("OPTIONS / HTTP/1.1\r\nHost: a\r\n\r\n"), None);
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

    /// One row per request-framing rule of issue 5 / DESIGN.md "HTTP/1.1 rules", with the exact error.
    #[test]
    fn request_rejection_table() {
        use FramingError::*;
        let p = "POST / HTTP/1.1\r\nHost: a\r\n";
        for (rule, fields, want) in [
            (
                "CL and TE (CL.TE)",
                "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
                BadFraming,
            ),
            (
                "TE and CL (TE.CL)",
                "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                BadFraming,
            ),
            (
                "CL and non-chunked TE",
                "Content-Length: 3\r\nTransfer-Encoding: gzip\r\n",
                BadFraming,
            ),
            (
                "differing CL fields",
                "Content-Length: 5\r\nContent-Length: 6\r\n",
                BadFraming,
            ),
            ("differing CL list", "Content-Length: 5, 6\r\n", BadFraming),
            (
                "CL list with an empty element",
                "Content-Length: 5,\r\n",
                BadFraming,
            ),
            ("CL of commas", "Content-Length: ,\r\n", BadFraming),
            ("CL empty", "Content-Length: \r\n", BadFraming),
            ("CL plus sign", "Content-Length: +5\r\n", BadFraming),
            ("CL minus sign", "Content-Length: -5\r\n", BadFraming),
            ("CL hex", "Content-Length: 0x5\r\n", BadFraming),
            ("CL underscore", "Content-Length: 1_0\r\n", BadFraming),
            ("CL space inside", "Content-Length: 1 0\r\n", BadFraming),
            ("CL decimal point", "Content-Length: 5.0\r\n", BadFraming),
            (
                "CL overflows u64",
                "Content-Length: 18446744073709551616\r\n",
                BadFraming,
            ),
            (
                "CL non-ASCII digit",
                "Content-Length: \u{661}\r\n",
                BadFraming,
            ),
            (
                "final coding not chunked",
                "Transfer-Encoding: gzip\r\n",
                BadFraming,
            ),
            (
                "obfuscated chunked (xchunked)",
                "Transfer-Encoding: xchunked\r\n",
                BadFraming,
            ),
            (
                "chunked with a parameter",
                "Transfer-Encoding: chunked;q=1\r\n",
                BadFraming,
            ),
            (
                "quoted chunked",
                "Transfer-Encoding: \"chunked\"\r\n",
                BadFraming,
            ),
            ("identity", "Transfer-Encoding: identity\r\n", BadFraming),
            ("empty TE", "Transfer-Encoding: \r\n", BadFraming),
            (
                "chunked then gzip",
                "Transfer-Encoding: chunked, gzip\r\n",
                BadFraming,
            ),
            (
                "chunked twice",
                "Transfer-Encoding: chunked, chunked\r\n",
                BadFraming,
            ),
            (
                "chunked twice on two lines",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                BadFraming,
            ),
            (
                "chunked after gzip",
                "Transfer-Encoding: gzip, chunked\r\n",
                TransferCoding,
            ),
            (
                "chunked after gzip on two lines",
                "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                TransferCoding,
            ),
            ("second Host", "Host: b\r\n", BadHost),
            ("identical second Host", "Host: a\r\n", BadHost),
        ] {
            assert_eq!(req(&format!("{p}{fields}\r\n")), Err(want), "{rule}");
        }
        for (rule, text, want) in [
            (
                "TE in HTTP/1.0",
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                BadFraming,
            ),
            (
                "TE gzip, chunked in HTTP/1.0",
                "POST / HTTP/1.0\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                BadFraming,
            ),
            ("no Host in HTTP/1.1", "GET / HTTP/1.1\r\n\r\n", BadHost),
            ("empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", BadHost),
            (
                "Host with a path",
                "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
                BadHost,
            ),
            (
                "Host with userinfo",
                "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n",
                BadHost,
            ),
            (
                "Host with a space",
                "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
                BadHost,
            ),
            (
                "two Hosts in HTTP/1.0",
                "GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
                BadHost,
            ),
            (
                "absolute-form without Host",
                "GET http://a/ HTTP/1.1\r\n\r\n",
                BadHost,
            ),
            (
                "absolute-form empty authority",
                "GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n",
                BadHost,
            ),
            (
                "absolute-form userinfo",
                "GET http://u@a/x HTTP/1.1\r\nHost: a\r\n\r\n",
                BadHost,
            ),
        ] {
            assert_eq!(req(text), Err(want), "{rule}");
        }
    }

    #[test]
    fn request_framing_accepts() {
        for (text, body) in [
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n",
                Body::Length(7),
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n",
                Body::Length(u64::MAX),
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                Body::None,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n",
                Body::Chunked,
            ),
            (
                "POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
                Body::Length(2),
            ),
            ("GET http://a:1/x HTTP/1.1\r\nHost: b\r\n\r\n", Body::None),
        ] {
            assert_eq!(req(text).map(|i| i.body), Ok(body), "{text}");
        }
    }

    fn res(text: &str, head_req: bool) -> Result<Body, BadResponse> {
        let mut f = Fields::new();
        let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        response_body(text.as_bytes(), &h, &f, head_req)
    }

    #[test]
    fn response_framing_table() {
        for (text, head_req, want) in [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
                false,
                Ok(Body::Length(3)),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
                false,
                Ok(Body::Length(3)),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
                true,
                Ok(Body::None),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                true,
                Ok(Body::None),
            ),
            ("HTTP/1.1 204 No Content\r\n\r\n", false, Ok(Body::None)),
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 4\r\n\r\n",
                false,
                Ok(Body::None),
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                false,
                Ok(Body::None),
            ),
            (
                "HTTP/1.1 103 Early Hints\r\nContent-Length: 9\r\n\r\n",
                false,
                Ok(Body::None),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
                Ok(Body::Chunked),
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", false, Ok(Body::CloseDelimited)),
            ("HTTP/1.0 200 OK\r\n\r\n", false, Ok(Body::CloseDelimited)),
            // Rejections: each is 502 bad_response and the upstream connection is not reused.
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
                false,
                Err(BadResponse),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
                Err(BadResponse),
            ),
        ] {
            assert_eq!(res(text, head_req), want, "{text}");
        }
    }

    #[test]
    fn keep_alive_timeout_param() {
        let text = "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\n\r\n";
        let mut f = Fields::new();
        parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        assert_eq!(keep_alive_timeout(text.as_bytes(), &f), Some(5));
    }
}
