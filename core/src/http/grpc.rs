//! The parts of the gRPC wire protocol edge needs without speaking gRPC itself (gRPC's
//! "PROTOCOL-HTTP2.md"; DESIGN.md "Status codes" and "HTTP/2 and gRPC upstreams"): whether a request is
//! a gRPC call ([`is_grpc`]), its `grpc-timeout` ([`parse_timeout`]), the status codes edge answers
//! with ([`Code`]), the percent-encoding of `grpc-message` ([`push_message`]) and the reading of a
//! `grpc-status` value ([`parse_status`]). All sans-IO, nothing allocates.

use std::time::Duration;

/// Whether a request with this `content-type` value is a gRPC call: it starts with `application/grpc`
/// (`application/grpc`, `application/grpc+proto`, `application/grpc-web`...; ASCII case-insensitive,
/// as media types are, RFC 9110 §8.3.1).
pub fn is_grpc(content_type: &[u8]) -> bool {
    const PREFIX: &[u8] = b"application/grpc";
    content_type.len() >= PREFIX.len() && content_type[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
}

/// The duration a `grpc-timeout` value asks for: `TimeoutValue TimeoutUnit`, 1 to 8 ASCII digits then
/// one of `H` (hours), `M` (minutes), `S` (seconds), `m` (milliseconds), `u` (microseconds), `n`
/// (nanoseconds), nothing else (no sign, no spaces; gRPC's "PROTOCOL-HTTP2.md", Requests).
///
/// # Errors
/// `None` for a value that does not have that form (edge then ignores the field: see docs/grpc.md).
pub fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The gRPC status codes edge answers with itself (gRPC's "statuscodes.md").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    /// 4: the deadline expired before the operation completed (upstream timeouts, zombie, a
    /// `grpc-timeout` that ran out, the inbound `request` deadline).
    DeadlineExceeded = 4,
    /// 8: a resource ran out (rate limit, shed, body too large).
    ResourceExhausted = 8,
    /// 12: the method is not served (no route).
    Unimplemented = 12,
    /// 13: an internal error (a request edge could not accept: 400, 414, 431, 501...).
    Internal = 13,
    /// 14: the service is unavailable, a transient condition (upstream refused, reset, unresolved,
    /// TLS, bad response).
    Unavailable = 14,
}

impl Code {
    /// The code as the `grpc-status` value (decimal digits).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::DeadlineExceeded => "4",
            Code::ResourceExhausted => "8",
            Code::Unimplemented => "12",
            Code::Internal => "13",
            Code::Unavailable => "14",
        }
    }

    /// The code as a number.
    pub fn as_u16(self) -> u16 {
        self as u16
    }
}

/// Appends `message` percent-encoded for `grpc-message`: every byte outside the printable ASCII range
/// (0x20 to 0x7E), and `%` itself, becomes `%XX` with upper-case hex digits; the rest is kept (gRPC's
/// "PROTOCOL-HTTP2.md", Responses: the message is UTF-8, then percent-encoded).
pub fn push_message(out: &mut Vec<u8>, message: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in message {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Whether [`push_message`] leaves `message` as it is (so it can go out as a static field value).
pub fn message_is_plain(message: &[u8]) -> bool {
    message
        .iter()
        .all(|&b| (0x20..=0x7e).contains(&b) && b != b'%')
}

/// The number a `grpc-status` value carries: 1 to 5 ASCII digits, at most 65535 (the codes are 0 to
/// 16; a larger one is kept as sent, clients read it as UNKNOWN).
///
/// # Errors
/// `None` for anything else (not noted in the access line).
pub fn parse_status(v: &[u8]) -> Option<u16> {
    if v.is_empty() || v.len() > 5 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = v.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    u16::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        for t in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc+json",
            "Application/GRPC",
            "application/grpc-web",
        ] {
            assert!(is_grpc(t.as_bytes()), "{t}");
        }
        for t in ["", "application/json", "application/grp", "text/plain"] {
            assert!(!is_grpc(t.as_bytes()), "{t}");
        }
    }

    #[test]
    fn grpc_timeout_values() {
        let ok: &[(&str, Duration)] = &[
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("1S", Duration::from_secs(1)),
            ("0S", Duration::ZERO),
            ("250m", Duration::from_millis(250)),
            ("99999999u", Duration::from_micros(99_999_999)),
            ("1000000n", Duration::from_millis(1)),
            ("00000010S", Duration::from_secs(10)),
            ("99999999H", Duration::from_secs(99_999_999 * 3600)),
        ];
        for (v, d) in ok {
            assert_eq!(parse_timeout(v.as_bytes()), Some(*d), "{v}");
        }
        let bad = [
            "",
            "S",
            "1",
            "10",
            "1s",
            "1h",
            "1 S",
            " 1S",
            "1S ",
            "-1S",
            "+1S",
            "1.5S",
            "123456789S",
            "1x",
            "１S",
        ];
        for v in bad {
            assert_eq!(parse_timeout(v.as_bytes()), None, "{v:?}");
        }
    }

    #[test]
    fn grpc_message_percent_encoding() {
        let cases: &[(&[u8], &str)] = &[
            (b"no route for this request", "no route for this request"),
            (b"100% done", "100%25 done"),
            (b"line\nbreak\r", "line%0Abreak%0D"),
            (b"tab\there", "tab%09here"),
            ("caf\u{e9}".as_bytes(), "caf%C3%A9"),
            (b"\x7f~ ", "%7F~ "),
            (b"", ""),
        ];
        for (message, want) in cases {
            let mut out = Vec::new();
            push_message(&mut out, message);
            assert_eq!(out, want.as_bytes(), "{message:?}");
            assert_eq!(message_is_plain(message), out == *message, "{message:?}");
        }
    }

    #[test]
    fn grpc_status_values() {
        assert_eq!(parse_status(b"0"), Some(0));
        assert_eq!(parse_status(b"14"), Some(14));
        assert_eq!(parse_status(b"65535"), Some(65535));
        for v in ["", "65536", "-1", "1 ", "x", "123456"] {
            assert_eq!(parse_status(v.as_bytes()), None, "{v:?}");
        }
        for c in [
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
        ] {
            assert_eq!(c.as_str().parse::<u16>().unwrap(), c.as_u16());
        }
    }
}
