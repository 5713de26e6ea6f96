//! The request id of DESIGN.md "HTTP/1.1 rules": the client's X-Request-Id when valid (printable, at most
//! 128 bytes), else one edge makes from (worker prefix, worker, counter), e.g. `1f3a9c2e-0-2a`.

use super::{
    head::{Field, FieldKind},
    write::{push_dec, push_hex},
};

/// Longest X-Request-Id edge forwards as received.
const MAX_REQUEST_ID: usize = 128;

/// The request id of one request: the client's, when valid, or one edge made.
#[derive(Clone, Copy, Debug)]
pub enum RequestId {
    /// Index of the client's X-Request-Id field.
    Given(usize),
    /// Generated: (worker prefix, worker, counter).
    Generated(u32, u16, u64),
}

impl RequestId {
    /// Picks the client's valid X-Request-Id (printable, at most 128 bytes) or generates one.
    pub fn of(buf: &[u8], fields: &[Field], generated: (u32, u16, u64)) -> RequestId {
        fields
            .iter()
            .position(|f| {
                f.kind == FieldKind::RequestId && {
                    let v = f.value(buf);
                    !v.is_empty() && v.len() <= MAX_REQUEST_ID && v.iter().all(u8::is_ascii_graphic)
                }
            })
            .map_or(
                RequestId::Generated(generated.0, generated.1, generated.2),
                RequestId::Given,
            )
    }

    /// Writes the id.
    pub fn write(&self, buf: &[u8], fields: &[Field], out: &mut Vec<u8>) {
        match *self {
            RequestId::Given(i) => out.extend_from_slice(fields[i].value(buf)),
            RequestId::Generated(p, w, n) => {
                push_hex(out, u64::from(p), 8);
                out.push(b'-');
                push_dec(out, u64::from(w));
                out.push(b'-');
                push_hex(out, n, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::head::{parse_request, Fields};

    fn id_of(text: &str) -> String {
        let mut f = Fields::new();
        parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        RequestId::of(text.as_bytes(), &f, (0xabc, 1, 0x2a)).write(text.as_bytes(), &f, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_valid_client_id_is_kept_else_one_is_generated() {
        assert_eq!(
            id_of("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc\r\n\r\n"),
            "abc"
        );
        assert_eq!(id_of("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), "00000abc-1-2a");
        let long = "x".repeat(129);
        let text = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: {long}\r\n\r\n");
        assert_eq!(id_of(&text), "00000abc-1-2a");
    }
}
