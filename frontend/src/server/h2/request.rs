//! The request view of one HTTP/2 stream (DESIGN.md "HTTP/2"): its pseudo-headers and fields written as
//! an HTTP/1.1-syntax head, so routing, framing, the forwarding rules and the status table see one shape
//! whatever the client spoke (`edge_core::http::view`). Sans-IO: bytes in, bytes out.
//!
//! - `:method` and `:path` become the request line; `:authority` becomes Host (RFC 9113 §8.3.1); a Host
//!   field that differs from `:authority` is refused (400 `bad_host`).
//! - Connection-specific fields (RFC 9113 §8.2.2: Connection, Keep-Alive, Proxy-Connection,
//!   Transfer-Encoding, Upgrade, and TE other than `trailers`) are refused (400 `bad_head`); h2 itself
//!   already resets such streams with PROTOCOL_ERROR, this is the second line.
//! - Cookie fields are joined into one with `"; "` (RFC 9113 §8.2.3).
//! - A body without Content-Length is framed chunked toward the upstream.
//! - An extended CONNECT for WebSocket (RFC 8441 §4: `:protocol websocket`) is written as the HTTP/1.1
//!   opening handshake (RFC 6455 §4.1, RFC 8441 §5): `GET :path` with `Connection: Upgrade`,
//!   `Upgrade: websocket`, a Sec-WebSocket-Key edge made, Sec-WebSocket-Version (13 unless the client
//!   sent one) and no body framing: the stream's DATA is the tunnel's, after the upstream's `101`.
//! - [`malformed`]: what h2 lets through but RFC 9113 calls malformed (a field value with leading or
//!   trailing whitespace, CONNECT without `:authority`) is a stream error, not a 400.

use edge_core::{http::hop::field, metrics::InvalidReason};
use http::{header, request::Parts};

use crate::respond::Failure;

/// Fields that are connection-specific in HTTP/2 (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// The request is malformed in RFC 9113's terms although h2 let it through: a field value that starts
/// or ends with SP or HTAB (§8.2.1), or a CONNECT without `:authority` (§8.5). Such a request "MUST be
/// treated as a stream error of type PROTOCOL_ERROR" (§8.1.1), as h2 itself treats the other malformed
/// requests (uppercase or connection-specific fields, missing pseudo-headers): the caller resets the
/// stream rather than answering 400.
pub fn malformed(req: &Parts) -> bool {
    let ws = |b: &u8| *b == b' ' || *b == b'\t';
    if req.method == http::Method::CONNECT && req.uri.authority().is_none() {
        return true;
    }
    req.headers.values().any(|v| {
        let v = v.as_bytes();
        v.first().is_some_and(ws) || v.last().is_some_and(ws)
    })
}

/// Whether `req` is an extended CONNECT for WebSocket (RFC 8441 §4: `:protocol websocket`, compared
/// case-insensitively as the Upgrade token it stands for, RFC 9110 §7.8).
pub fn is_websocket(req: &Parts) -> bool {
    req.method == http::Method::CONNECT
        && req
            .extensions
            .get::<h2::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
}

/// Writes the HTTP/1.1-syntax head of `req` into `out` (request line, Host, fields, the empty line).
/// `end_stream`: the HEADERS frame ended the stream (no body); otherwise a body without Content-Length
/// gets `Transfer-Encoding: chunked`. `websocket`: `req` is an extended CONNECT for WebSocket
/// ([`is_websocket`]) and this is the Sec-WebSocket-Key to send: the head is the opening handshake of
/// RFC 6455 §4.1 instead (see the module's text), without the client's Content-Length or key.
///
/// # Errors
/// 400 `bad_host` (no `:authority` and no Host, or a Host that differs from `:authority`), 400
/// `bad_head` (a connection-specific field, a method or path that cannot be written).
pub fn write_head(
    out: &mut Vec<u8>,
    req: &Parts,
    end_stream: bool,
    websocket: Option<&[u8]>,
) -> Result<(), Failure> {
    let bad = |r| Failure::Invalid(r);
    let authority = req.uri.authority().map(|a| a.as_str().as_bytes());
    let host = req.headers.get(header::HOST).map(|h| h.as_bytes());
    let host = match (authority, host) {
        (Some(a), Some(h)) if !a.eq_ignore_ascii_case(h) => {
            return Err(bad(InvalidReason::BadHost))
        }
        (Some(a), _) => a,
        (None, Some(h)) => h,
        (None, None) => return Err(bad(InvalidReason::BadHost)),
    };
    if req.headers.get_all(header::HOST).iter().count() > 1 {
        return Err(bad(InvalidReason::BadHost));
    }
    let path = req.uri.path_and_query().map_or("/", |p| p.as_str());
    if path.is_empty() || path.bytes().any(|b| b <= b' ') {
        return Err(bad(InvalidReason::BadHead));
    }
    let method = match websocket {
        Some(_) => "GET",
        None => req.method.as_str(),
    };
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    field(out, b"Host", host);
    let mut cookie = false;
    let mut length = false;
    let mut version = false;
    for (name, value) in &req.headers {
        let n = name.as_str();
        if CONNECTION_SPECIFIC.contains(&n) {
            return Err(bad(InvalidReason::BadHead));
        }
        match *name {
            header::HOST | header::COOKIE => continue,
            header::CONTENT_LENGTH | header::SEC_WEBSOCKET_KEY if websocket.is_some() => continue,
            header::SEC_WEBSOCKET_VERSION => version = true,
            header::TE if value.as_bytes().eq_ignore_ascii_case(b"trailers") => continue,
            header::TE => return Err(bad(InvalidReason::BadHead)),
            header::CONTENT_LENGTH => length = true,
            _ => {}
        }
        field(out, n.as_bytes(), value.as_bytes());
    }
    for (i, v) in req.headers.get_all(header::COOKIE).iter().enumerate() {
        if i == 0 {
            out.extend_from_slice(b"Cookie: ");
            cookie = true;
        } else {
            out.extend_from_slice(b"; ");
        }
        out.extend_from_slice(v.as_bytes());
    }
    if cookie {
        out.extend_from_slice(b"\r\n");
    }
    match websocket {
        Some(key) => {
            out.extend_from_slice(b"Connection: Upgrade\r\nUpgrade: websocket\r\n");
            field(out, b"Sec-WebSocket-Key", key);
            if !version {
                out.extend_from_slice(b"Sec-WebSocket-Version: 13\r\n");
            }
        }
        None if !end_stream && !length => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        None => {}
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(build: http::request::Builder) -> Parts {
        build.body(()).unwrap().into_parts().0
    }

    fn head(p: &Parts, end: bool) -> Result<String, Failure> {
        let mut out = Vec::new();
        write_head(&mut out, p, end, None).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn pseudo_headers_become_request_line_and_host_and_cookies_are_joined() {
        let p = parts(
            http::Request::post("https://Example.com:8443/a/b?q=1")
                .header("cookie", "a=1")
                .header("x-one", "1")
                .header("cookie", "b=2")
                .header("te", "trailers"),
        );
        assert_eq!(
            head(&p, false).unwrap(),
            "POST /a/b?q=1 HTTP/1.1\r\nHost: Example.com:8443\r\nx-one: 1\r\nCookie: a=1; b=2\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        let p = parts(http::Request::get("https://e.test/").header("content-length", "0"));
        assert_eq!(
            head(&p, true).unwrap(),
            "GET / HTTP/1.1\r\nHost: e.test\r\ncontent-length: 0\r\n\r\n"
        );
    }

    #[test]
    fn host_must_match_authority() {
        let same = parts(http::Request::get("https://e.test/").header("host", "E.TEST"));
        assert!(head(&same, true).is_ok());
        let other = parts(http::Request::get("https://e.test/").header("host", "other.test"));
        assert_eq!(
            head(&other, true),
            Err(Failure::Invalid(InvalidReason::BadHost))
        );
        let host_only = parts(http::Request::get("/x").header("host", "h.test"));
        assert!(head(&host_only, true).unwrap().contains("Host: h.test\r\n"));
        let neither = parts(http::Request::get("/x"));
        assert_eq!(
            head(&neither, true),
            Err(Failure::Invalid(InvalidReason::BadHost))
        );
    }

    #[test]
    fn whitespace_around_a_value_and_connect_without_authority_are_malformed() {
        let ok = parts(http::Request::get("https://e.test/").header("x-a", "a b"));
        assert!(!malformed(&ok));
        for value in [" a", "a ", "\ta", "a\t"] {
            let p = parts(http::Request::get("https://e.test/").header("x-a", value));
            assert!(malformed(&p), "{value:?}");
        }
        let connect = parts(http::Request::connect("e.test:443"));
        assert!(!malformed(&connect));
        let no_authority = parts(http::Request::connect("/"));
        assert!(malformed(&no_authority));
    }

    #[test]
    fn an_extended_connect_for_websocket_is_the_http11_opening_handshake() {
        let mut build = http::Request::connect("https://e.test/chat?room=1")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat, superchat")
            .header("sec-websocket-key", "from the client")
            .header("content-length", "0")
            .header("origin", "https://e.test")
            .header("cookie", "a=1")
            .header("cookie", "b=2");
        build = build.extension(h2::ext::Protocol::from_static("WebSocket"));
        let p = parts(build);
        assert!(is_websocket(&p));
        let mut out = Vec::new();
        write_head(&mut out, &p, false, Some(b"dGhlIHNhbXBsZSBub25jZQ==")).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /chat?room=1 HTTP/1.1\r\nHost: e.test\r\nsec-websocket-version: 13\r\n\
             sec-websocket-protocol: chat, superchat\r\norigin: https://e.test\r\n\
             Cookie: a=1; b=2\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        // Without the client's version: 13 (RFC 8441 §5 asks for 13 on the stream too).
        let p = parts(
            http::Request::connect("https://e.test/chat")
                .extension(h2::ext::Protocol::from_static("websocket")),
        );
        let mut out = Vec::new();
        write_head(&mut out, &p, false, Some(b"k")).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with("Sec-WebSocket-Key: k\r\nSec-WebSocket-Version: 13\r\n\r\n"));
        // Another protocol, or none, is no WebSocket stream.
        let other = parts(
            http::Request::connect("https://e.test/x")
                .extension(h2::ext::Protocol::from_static("connect-udp")),
        );
        assert!(!is_websocket(&other));
        assert!(!is_websocket(&parts(http::Request::connect("e.test:443"))));
    }

    #[test]
    fn connection_specific_fields_are_refused() {
        for (name, value) in [
            ("connection", "close"),
            ("keep-alive", "5"),
            ("proxy-connection", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("te", "gzip"),
        ] {
            let p = parts(http::Request::get("https://e.test/").header(name, value));
            assert_eq!(
                head(&p, true),
                Err(Failure::Invalid(InvalidReason::BadHead)),
                "{name}"
            );
        }
    }
}
