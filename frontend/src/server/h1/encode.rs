//! The HTTP/1.1 response heads edge writes to a client (RFC 9112 §6.1, RFC 9110 §15.2, DESIGN.md
//! "HTTP/1.1 rules"): the final head with the framing fields of the framing edge chose and no others,
//! interim (1xx) heads, and the `101 Switching Protocols` head of an upgrade; hop-by-hop fields removed,
//! the fields edge adds (Via) written where the request pipeline decides them
//! ([`ResponseFields`]).

use edge_core::http::{
    framing::bodyless_content_length,
    head::{Field, ResponseHead},
    hop::{end_to_end_fields_kept, field, upgrade_fields},
    write::push_dec,
};

use crate::request::ResponseFields;

/// Writes an interim (1xx) response head for the client (RFC 9110 §15.2): end-to-end fields only
/// (hop-by-hop fields and Content-Length removed), plus the fields edge adds (`added`: Via).
pub fn interim_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    added: &ResponseFields<'_>,
) {
    status_and_fields(out, buf, head, fields, added);
    added_fields(out, added, fields);
    out.extend_from_slice(b"\r\n");
}

/// Writes a `101 Switching Protocols` head for the client (RFC 9110 §15.2.2): end-to-end fields, the
/// fields edge adds (`added`: Via), and the upstream's Upgrade with `Connection: upgrade` (hop-by-hop,
/// but they are what a 101 means).
pub fn switching_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    added: &ResponseFields<'_>,
) {
    status_and_fields(out, buf, head, fields, added);
    added_fields(out, added, fields);
    upgrade_fields(out, buf, fields, false);
    out.extend_from_slice(b"\r\n");
}

/// The fields edge adds to a forwarded response (the request pipeline's phase 6, [`ResponseFields`])
/// whose own fields are `fields`.
fn added_fields(out: &mut Vec<u8>, added: &ResponseFields<'_>, fields: &[Field]) {
    for (name, value) in added.each(fields) {
        field(out, name, value);
    }
}

/// The status line (always HTTP/1.1) and the end-to-end fields of a response head, without
/// Content-Length: the caller writes the framing it decided.
fn status_and_fields(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    added: &ResponseFields<'_>,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_dec(out, u64::from(head.status));
    out.push(b' ');
    out.extend_from_slice(&buf[head.reason.clone()]);
    out.extend_from_slice(b"\r\n");
    end_to_end_fields_kept(out, buf, fields, |name| added.keeps(name));
}

/// How edge frames the response body it sends to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFraming {
    /// No body (HEAD, 1xx, 204, 304, or a length of 0): never Transfer-Encoding; Content-Length only as
    /// [`bodyless_content_length`] says (a HEAD's or 304's length, a 0; none on 1xx and 204).
    None,
    /// Content-Length: n.
    Length(u64),
    /// Transfer-Encoding: chunked (passed through, or re-chunked from a close-delimited upstream body).
    Chunked,
    /// Close-delimited (HTTP/1.0 client and no length known).
    Close,
}

/// Writes the client response head with the framing fields of `framing` and no others (RFC 9112 §6.1,
/// DESIGN.md "HTTP/1.1 rules"), after the fields edge adds (`added`: Via). `keep_alive_10` adds
/// `Connection: keep-alive` for an HTTP/1.0 client that asked for it; `close` adds `Connection: close`.
#[allow(clippy::too_many_arguments)]
pub fn response_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    added: &ResponseFields<'_>,
    framing: OutFraming,
    close: bool,
    keep_alive_10: bool,
) {
    status_and_fields(out, buf, head, fields, added);
    added_fields(out, added, fields);
    let length = match framing {
        OutFraming::Length(n) => Some(n),
        OutFraming::None => bodyless_content_length(buf, head, fields),
        OutFraming::Chunked | OutFraming::Close => None,
    };
    if let Some(n) = length {
        out.extend_from_slice(b"Content-Length: ");
        push_dec(out, n);
        out.extend_from_slice(b"\r\n");
    }
    if framing == OutFraming::Chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if keep_alive_10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::http::head::{parse_response, Fields};

    #[test]
    fn interim_and_switching_heads() {
        let text = "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nContent-Length: 0\r\nConnection: x\r\nX: 1\r\n\r\n";
        let mut f = Fields::new();
        let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        let mut out = Vec::new();
        interim_head(
            &mut out,
            text.as_bytes(),
            &h,
            &f,
            &ResponseFields::forwarded(b""),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nVia: 1.1 edge\r\n\r\n"
        );
        let text = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: a\r\n\r\n";
        let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        let mut out = Vec::new();
        switching_head(
            &mut out,
            text.as_bytes(),
            &h,
            &f,
            &ResponseFields::forwarded(b""),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: a\r\nVia: 1.1 edge\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        );
    }

    #[test]
    fn response_head_rewrites_framing() {
        let via = "Via: 1.1 edge\r\n";
        let chunked = "200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nServer: o";
        for (upstream, framing, want) in [
            (
                chunked,
                OutFraming::Chunked,
                format!("200 OK\r\nServer: o\r\n{via}Transfer-Encoding: chunked\r\n"),
            ),
            (
                "204 No Content\r\nContent-Length: 5\r\nX: 1",
                OutFraming::None,
                format!("204 No Content\r\nX: 1\r\n{via}"),
            ),
            (
                "204 No Content\r\nTransfer-Encoding: chunked",
                OutFraming::None,
                format!("204 No Content\r\n{via}"),
            ),
            (
                "304 Not Modified\r\nContent-Length: 9, 9",
                OutFraming::None,
                format!("304 Not Modified\r\n{via}Content-Length: 9\r\n"),
            ),
            (
                "304 Not Modified\r\nTransfer-Encoding: chunked",
                OutFraming::None,
                format!("304 Not Modified\r\n{via}"),
            ),
            (
                "200 OK\r\nContent-Length: 0",
                OutFraming::None,
                format!("200 OK\r\n{via}Content-Length: 0\r\n"),
            ),
        ] {
            let text = format!("HTTP/1.1 {upstream}\r\n\r\n");
            let mut f = Fields::new();
            let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
            let mut out = Vec::new();
            let added = ResponseFields::forwarded(b"");
            response_head(
                &mut out,
                text.as_bytes(),
                &h,
                &f,
                &added,
                framing,
                false,
                false,
            );
            let out = String::from_utf8(out).unwrap();
            assert_eq!(out, format!("HTTP/1.1 {want}\r\n"), "{upstream}");
        }
    }
}
