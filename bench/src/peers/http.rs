//! Sans-IO HTTP/1.1 head parsing and message framing for the bench's own peers.
//!
//! The test origin parses request heads and the load generator and probe client parse response
//! heads here, on top of `httparse`, with the header array on the stack (no allocation per
//! message). Framing follows RFC 9112 §6.3 closely enough for a benchmark peer: chunked when
//! `chunked` is the last transfer coding, else Content-Length, else no body (requests) or
//! read-until-close (responses); 1xx, 204 and 304 responses and responses to HEAD have no body.
//! The proxy's own strict rules live in edge-core; this module only has to frame well-behaved
//! traffic correctly and refuse what it cannot frame.

use std::fmt;

/// Headers parsed per message; more is an error (the bench never sends that many).
pub const MAX_HEADERS: usize = 64;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the peer closes (responses only).
    UntilClose,
}

/// A head that cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// httparse rejected the head.
    Parse(httparse::Error),
    /// Content-Length / Transfer-Encoding that cannot be framed.
    Framing(&'static str),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Parse(e) => write!(f, "bad head: {e}"),
            HttpError::Framing(why) => write!(f, "bad framing: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<httparse::Error> for HttpError {
    fn from(e: httparse::Error) -> Self {
        HttpError::Parse(e)
    }
}

/// What the origin needs from a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo<'b> {
    /// Bytes of the head including the final CRLF.
    pub head_len: usize,
    /// The request target as sent.
    pub path: &'b str,
    /// Request body framing.
    pub body: BodyLen,
    /// False when the client asked to close after this exchange.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// The request is HTTP/1.0 (cannot receive a chunked response).
    pub http10: bool,
}

/// What a client needs from a response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseInfo {
    /// Bytes of the head including the final CRLF.
    pub head_len: usize,
    /// Status code.
    pub status: u16,
    /// Response body framing.
    pub body: BodyLen,
    /// False when the connection cannot carry another request after this response.
    pub keep_alive: bool,
}

/// Parses a request head at the start of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete.
///
/// # Errors
/// [`HttpError`] when the head is malformed or its framing is ambiguous.
pub fn parse_request(buf: &[u8]) -> Result<Option<RequestInfo<'_>>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let fields = Fields::scan(req.headers)?;
    let body = match (fields.chunked, fields.content_length) {
        (true, None) => BodyLen::Chunked,
        (true, Some(_)) => return Err(HttpError::Framing("Content-Length with Transfer-Encoding")),
        (false, Some(n)) => BodyLen::Length(n),
        (false, None) if fields.transfer_encoding => {
            return Err(HttpError::Framing("request coding is not chunked"))
        }
        (false, None) => BodyLen::Empty,
    };
    let http11 = req.version == Some(1);
    Ok(Some(RequestInfo {
        head_len,
        path: req.path.unwrap_or("/"),
        body,
        keep_alive: fields.keep_alive(http11),
        expect_continue: fields.expect_continue,
        http10: !http11,
    }))
}

/// Parses a response head at the start of `buf`; `head_request` says the request was HEAD.
///
/// Returns `Ok(None)` while the head is incomplete.
///
/// # Errors
/// [`HttpError`] when the head is malformed or its framing is ambiguous.
pub fn parse_response(buf: &[u8], head_request: bool) -> Result<Option<ResponseInfo>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let status = resp.code.unwrap_or(0);
    let fields = Fields::scan(resp.headers)?;
    let bodyless = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if bodyless {
        BodyLen::Empty
    } else {
        match (fields.chunked, fields.content_length) {
            (true, _) => BodyLen::Chunked,
            (false, Some(n)) if !fields.transfer_encoding => BodyLen::Length(n),
            _ => BodyLen::UntilClose,
        }
    };
    let http11 = resp.version == Some(1);
    Ok(Some(ResponseInfo {
        head_len,
        status,
        body,
        keep_alive: fields.keep_alive(http11) && body != BodyLen::UntilClose,
    }))
}

/// The framing-relevant fields of a head.
#[derive(Debug, Default)]
struct Fields {
    content_length: Option<u64>,
    transfer_encoding: bool,
    chunked: bool,
    close: bool,
    keep_alive_token: bool,
    expect_continue: bool,
}

impl Fields {
    fn scan(headers: &[httparse::Header<'_>]) -> Result<Self, HttpError> {
        let mut f = Fields::default();
        for h in headers {
            let name = h.name;
            if name.eq_ignore_ascii_case("content-length") {
                let n = parse_content_length(h.value)?;
                if f.content_length.is_some_and(|prev| prev != n) {
                    return Err(HttpError::Framing("differing Content-Length values"));
                }
                f.content_length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                f.transfer_encoding = true;
                // Only the last coding of the last field decides whether the body is chunked.
                if let Some(last) = tokens(h.value).last() {
                    f.chunked = last.eq_ignore_ascii_case(b"chunked");
                }
            } else if name.eq_ignore_ascii_case("connection") {
                for t in tokens(h.value) {
                    f.close |= t.eq_ignore_ascii_case(b"close");
                    f.keep_alive_token |= t.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case("expect") {
                f.expect_continue = trim(h.value).eq_ignore_ascii_case(b"100-continue");
            }
        }
        Ok(f)
    }

    fn keep_alive(&self, http11: bool) -> bool {
        !self.close && (http11 || self.keep_alive_token)
    }
}

/// Parses a Content-Length value: ASCII digits only, no overflow.
fn parse_content_length(value: &[u8]) -> Result<u64, HttpError> {
    let digits = trim(value);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::Framing("malformed Content-Length"));
    }
    digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(d - b'0')))
            .ok_or(HttpError::Framing("Content-Length overflow"))
    })
}

/// The non-empty, trimmed elements of a comma-separated field value.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|t| !t.is_empty())
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(raw: &str) -> ResponseInfo {
        parse_response(raw.as_bytes(), false).unwrap().unwrap()
    }

    #[test]
    fn response_content_length() {
        let r = resp("HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nhello, world\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, BodyLen::Length(13));
        assert_eq!(r.head_len, 39);
        assert!(r.keep_alive);
    }

    #[test]
    fn response_chunked_wins_and_close_is_seen() {
        let r = resp(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.body, BodyLen::Chunked);
        assert!(!r.keep_alive);
    }

    #[test]
    fn response_without_length_reads_until_close() {
        let r = resp("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n");
        assert_eq!(r.body, BodyLen::UntilClose);
        assert!(!r.keep_alive);
    }

    #[test]
    fn bodyless_statuses_and_head() {
        assert_eq!(resp("HTTP/1.1 204 No Content\r\n\r\n").body, BodyLen::Empty);
        assert_eq!(
            resp("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n").body,
            BodyLen::Empty
        );
        assert_eq!(resp("HTTP/1.1 100 Continue\r\n\r\n").body, BodyLen::Empty);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(
            parse_response(head, true).unwrap().unwrap().body,
            BodyLen::Empty
        );
    }

    #[test]
    fn http10_response_needs_keep_alive_token() {
        assert!(!resp("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").keep_alive);
        let r = resp("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n");
        assert!(r.keep_alive);
    }

    #[test]
    fn partial_heads_at_every_split() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
        for at in 0..raw.len() {
            assert_eq!(parse_response(&raw[..at], false), Ok(None), "split at {at}");
        }
    }

    #[test]
    fn bad_content_length_is_rejected() {
        for v in ["", "+1", "1 2", "0x10", "99999999999999999999"] {
            let raw = format!("HTTP/1.1 200 OK\r\nContent-Length: {v}\r\n\r\n");
            assert!(parse_response(raw.as_bytes(), false).is_err(), "{v:?}");
        }
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert!(parse_response(raw, false).is_err());
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(
            parse_response(raw, false).unwrap().unwrap().body,
            BodyLen::Length(2)
        );
    }

    #[test]
    fn request_framing() {
        let r = parse_request(b"GET /slow/x HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.path, r.body, r.keep_alive),
            ("/slow/x", BodyLen::Empty, true)
        );
        let r = parse_request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.body, BodyLen::Length(7));
        let raw = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n";
        let r = parse_request(raw).unwrap().unwrap();
        assert_eq!(r.body, BodyLen::Chunked);
        assert!(r.expect_continue);
        let r = parse_request(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!r.keep_alive);
    }

    #[test]
    fn ambiguous_request_framing_is_rejected() {
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
        assert!(parse_request(raw).is_err());
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert!(parse_request(raw).is_err());
    }
}
