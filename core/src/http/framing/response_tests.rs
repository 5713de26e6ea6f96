//! Tests of the response framing decision: one row per rule of DESIGN.md "HTTP/1.1 rules", and what
//! bodyless responses tell the client.

use super::*;
use crate::http::head::{parse_response, Fields};

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

/// Parses a response head and returns (body framing, the Content-Length the client gets, reuse).
fn bodyless(text: &str, head_req: bool) -> (Result<Body, BadResponse>, Option<u64>, bool) {
    let mut f = Fields::new();
    let b = text.as_bytes();
    let h = parse_response(b, &mut f).unwrap().unwrap();
    (
        response_body(b, &h, &f, head_req),
        bodyless_content_length(b, &h, &f),
        response_keeps_alive(b, &h, &f),
    )
}

/// RFC 9110 §8.6, RFC 9112 §6.1 / §6.3 rule 1: no body on 1xx, 204, 304 or HEAD responses; 1xx and 204
/// never carry a length on, a 304 and a HEAD response keep theirs; a 1xx or 204 announcing a body is
/// not reused.
#[test]
fn bodyless_responses_framing_fields_and_reuse() {
    let none = Ok(Body::None);
    for (text, head_req, want) in [
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            false,
            (none, None, false),
        ),
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
            false,
            (none, None, true),
        ),
        (
            "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            (none, None, false),
        ),
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n",
            false,
            (none, None, false),
        ),
        ("HTTP/1.1 204 No Content\r\n\r\n", true, (none, None, true)),
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            true,
            (none, None, false),
        ),
        (
            "HTTP/1.1 103 Early Hints\r\nContent-Length: 9\r\n\r\n",
            false,
            (none, None, false),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            false,
            (none, Some(9), true),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 9, 9\r\n\r\n",
            false,
            (none, Some(9), true),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            (none, None, true),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\n\r\n",
            true,
            (none, None, true),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
            true,
            (none, Some(1234), true),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            true,
            (none, None, true),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            true,
            (none, None, true),
        ),
        ("HTTP/1.1 200 OK\r\n\r\n", true, (none, None, true)),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            false,
            (none, Some(0), true),
        ),
        // A length the client would get must be as well-formed as on a body.
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5, 6\r\n\r\n",
            false,
            (Err(BadResponse), None, true),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            (Err(BadResponse), Some(5), true),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            true,
            (Err(BadResponse), None, true),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            true,
            (Err(BadResponse), None, true),
        ),
    ] {
        assert_eq!(bodyless(text, head_req), want, "{text} (HEAD: {head_req})");
    }
}
