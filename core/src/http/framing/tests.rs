//! Tests of the request framing decision: one row per rule of DESIGN.md "HTTP/1.1 rules" (the response
//! side is in `response_tests`).

use super::*;
use crate::http::head::{parse_request, Fields};

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
    assert_eq!(
        req(
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
        ),
        Err(BadFraming)
    );
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

/// One row per request-framing rule of DESIGN.md "HTTP/1.1 rules", with the exact error.
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
            "CL overflowing u64 beside TE",
            "Content-Length: 18446744073709551616\r\nTransfer-Encoding: chunked\r\n",
            BadFraming,
        ),
        (
            "differing CL values overflowing u64",
            "Content-Length: 18446744073709551616, 18446744073709551617\r\n",
            BadFraming,
        ),
        (
            "CL overflowing u64 and a small one",
            "Content-Length: 18446744073709551616\r\nContent-Length: 5\r\n",
            BadFraming,
        ),
    ] {
        assert_eq!(req(&format!("{p}{fields}\r\n")), Err(want), "{rule}");
    }
}

/// More field rows of [`request_rejection_table`].
#[test]
fn request_rejection_table_more_fields() {
    use FramingError::*;
    let p = "POST / HTTP/1.1\r\nHost: a\r\n";
    for (rule, fields, want) in [
        (
            "CL of many digits with a sign",
            "Content-Length: +99999999999999999999999\r\n",
            BadFraming,
        ),
        (
            "CL overflows u64",
            "Content-Length: 18446744073709551616\r\n",
            BodyTooLarge,
        ),
        (
            "CL of 40 nines",
            "Content-Length: 9999999999999999999999999999999999999999\r\n",
            BodyTooLarge,
        ),
        (
            "identical CL values overflowing u64",
            "Content-Length: 18446744073709551616, 0018446744073709551616\r\n",
            BodyTooLarge,
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
}

/// The rows of [`request_rejection_table`] whose request line or version matters, as whole heads.
#[test]
fn request_rejection_table_whole_heads() {
    use FramingError::*;
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
