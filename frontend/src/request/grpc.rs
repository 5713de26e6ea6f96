//! What admission reads of a gRPC call (DESIGN.md "HTTP/2 and gRPC upstreams"): whether the request is
//! one ([`is_call`]: edge's own answers to it are then gRPC answers, DESIGN.md "Status codes"), and
//! the `request_timeout` its `grpc-timeout` leaves ([`request_timeout`]).

use std::time::Duration;

use edge_core::http::{
    grpc::{is_grpc, parse_timeout},
    head::{first_value, Field},
};

/// Whether the head in `buf` (its `fields`) is a gRPC call: its first `content-type` starts with
/// `application/grpc`.
pub fn is_call(buf: &[u8], fields: &[Field]) -> bool {
    first_value(buf, fields, b"content-type").is_some_and(is_grpc)
}

/// The `request_timeout` of a gRPC call whose route and upstream give `configured` (`None`:
/// unlimited): its `grpc-timeout` shortens it, never lengthens it. A `grpc-timeout` that does not
/// parse ([`parse_timeout`]) is ignored, as gRPC servers do with a malformed one (docs/grpc.md).
pub fn request_timeout(
    buf: &[u8],
    fields: &[Field],
    configured: Option<Duration>,
) -> Option<Duration> {
    let asked = first_value(buf, fields, b"grpc-timeout").and_then(parse_timeout);
    match (asked, configured) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::http::head::{parse_request, Fields};

    fn head(extra: &str) -> (Vec<u8>, Fields) {
        let buf = format!("POST /a.B/C HTTP/1.1\r\nHost: x\r\n{extra}\r\n").into_bytes();
        let mut fields = Fields::new();
        parse_request(&buf, 64, &mut fields).unwrap().unwrap();
        (buf, fields)
    }

    #[test]
    fn a_grpc_call_is_told_by_its_content_type() {
        let (b, f) = head("Content-Type: application/grpc+proto\r\n");
        assert!(is_call(&b, &f));
        let (b, f) = head("Content-Type: application/json\r\n");
        assert!(!is_call(&b, &f));
        let (b, f) = head("");
        assert!(!is_call(&b, &f));
    }

    #[test]
    fn grpc_timeout_shortens_request_timeout_and_never_lengthens_it() {
        let s = Duration::from_secs;
        let cases: &[(&str, Option<Duration>, Option<Duration>)] = &[
            ("grpc-timeout: 1S\r\n", Some(s(60)), Some(s(1))),
            ("grpc-timeout: 5M\r\n", Some(s(60)), Some(s(60))),
            (
                "grpc-timeout: 250m\r\n",
                None,
                Some(Duration::from_millis(250)),
            ),
            ("grpc-timeout: 1x\r\n", Some(s(60)), Some(s(60))),
            ("grpc-timeout: 123456789S\r\n", None, None),
            ("", Some(s(3)), Some(s(3))),
            ("", None, None),
        ];
        for (field, configured, want) in cases {
            let (b, f) = head(field);
            assert_eq!(
                request_timeout(&b, &f, *configured),
                *want,
                "{field:?} {configured:?}"
            );
        }
    }
}
