//! edge's own HTTP/1.1 answers, written whole into a send buffer: error responses of the status table
//! ([`error_response`]), the request pipeline's local answers ([`local_answer`]), and short answers of
//! the admin API ([`simple`], [`local`]); to a gRPC call, both kinds of answer are [`grpc_answer`].

use std::io::Write;

use edge_core::http::grpc::{push_message, Code};

use crate::{
    request::{local::ALLOW, Local},
    respond::Failure,
};

/// Writes a complete short response (Content-Length, text body) into `out`.
pub fn simple(
    out: &mut Vec<u8>,
    status: u16,
    body: &str,
    close: bool,
    retry_after: bool,
    head_only: bool,
) {
    local(
        out,
        status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        close,
        retry_after,
        head_only,
    );
}

/// Writes a complete response edge answers itself (errors, health, admin): Content-Length framing,
/// `Cache-Control: no-store`, `Retry-After: 1` on request, `Allow` on 405 (RFC 9110 §15.5.6).
pub fn local(
    out: &mut Vec<u8>,
    status: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
    retry_after: bool,
    head_only: bool,
) {
    let retry: &[(&str, &[u8])] = match retry_after {
        true => &[("Retry-After", b"1")],
        false => &[],
    };
    let allow: &[(&str, &[u8])] = match status {
        405 => &[("Allow", ALLOW)],
        _ => &[],
    };
    let text = Text { content_type, body };
    write_answer(
        out,
        status,
        Some(text),
        &[retry, allow],
        b"",
        close,
        head_only,
    );
}

/// A text body and its type.
#[derive(Clone, Copy)]
struct Text<'a> {
    content_type: &'a str,
    body: &'a [u8],
}

/// The one writer of edge's own HTTP/1.1 answers: status line, `Content-Type` when there is a body,
/// `Content-Length`, `Cache-Control: no-store`, `fields`, `Connection: close` when the connection closes
/// after it, then the body unless `head_only` (HEAD keeps the length).
fn write_answer(
    out: &mut Vec<u8>,
    status: u16,
    text: Option<Text<'_>>,
    fields: &[&[(&str, &[u8])]],
    lines: &[u8],
    close: bool,
    head_only: bool,
) {
    let body = text.map_or(&b""[..], |t| t.body);
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    if let Some(t) = text {
        let _ = write!(out, "Content-Type: {}\r\n", t.content_type);
    }
    let _ = write!(
        out,
        "Content-Length: {}\r\nCache-Control: no-store\r\n",
        body.len()
    );
    for (name, value) in fields.iter().copied().flatten() {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    // A route's `response_headers` lines, complete with their CRLF.
    out.extend_from_slice(lines);
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// The error response for `f` (503 carries `Retry-After: 1`, 405 `Allow`) with the request's id
/// (`X-Request-Id`, DESIGN.md "Observability"; none when `id` is empty) and the route's
/// `response_headers` lines (`lines`, empty before a route was found).
pub fn error_response(out: &mut Vec<u8>, f: Failure, close: bool, id: &[u8], lines: &[u8]) {
    let status = f.status();
    let retry: &[(&str, &[u8])] = match status {
        503 => &[("Retry-After", b"1")],
        _ => &[],
    };
    let allow: &[(&str, &[u8])] = match status {
        405 => &[("Allow", ALLOW)],
        _ => &[],
    };
    let id = [("X-Request-Id", id)];
    let id = if id[0].1.is_empty() {
        &id[..0]
    } else {
        &id[..]
    };
    let text = Text {
        content_type: "text/plain; charset=utf-8",
        body: f.text().as_bytes(),
    };
    write_answer(
        out,
        status,
        Some(text),
        &[retry, allow, id],
        lines,
        close,
        false,
    );
}

/// edge's own answer to a gRPC call (DESIGN.md "Status codes", its gRPC paragraph), in HTTP/1.1: a
/// trailers-only response, `200 OK` with `Content-Type: application/grpc`, `grpc-status: code`,
/// `grpc-message` (`message` percent-encoded, [`push_message`]), `Content-Length: 0`,
/// `Cache-Control: no-store`, `extra` (a rate limit's `Retry-After`), the request's `X-Request-Id`
/// (none when `id` is empty), the route's `response_headers` lines and `Connection: close` when the
/// connection closes after it.
pub fn grpc_answer(
    out: &mut Vec<u8>,
    code: Code,
    message: &[u8],
    extra: Option<(&str, &[u8])>,
    close: bool,
    id: &[u8],
    lines: &[u8],
) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc\r\ngrpc-status: ");
    out.extend_from_slice(code.as_str().as_bytes());
    out.extend_from_slice(b"\r\ngrpc-message: ");
    push_message(out, message);
    out.extend_from_slice(b"\r\nContent-Length: 0\r\nCache-Control: no-store\r\n");
    let id = Some(("X-Request-Id", id)).filter(|(_, v)| !v.is_empty());
    for (name, value) in extra.into_iter().chain(id) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(lines);
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        410 => "Gone",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        308 => "Permanent Redirect",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Writes a local answer of the request pipeline's first phase ([`Local`]): its status, the text body
/// (`text/plain`) or none, `Cache-Control: no-store`, its one extra field, and `Connection: close` when
/// the connection closes after it, and the request's `X-Request-Id` (none when `id` is empty).
/// `head_only` (HEAD) leaves the body out but keeps its length.
pub fn local_answer(out: &mut Vec<u8>, answer: &Local, close: bool, head_only: bool, id: &[u8]) {
    let text = Some(answer.body())
        .filter(|t| !t.is_empty())
        .map(|body| Text {
            content_type: answer.content_type(),
            body,
        });
    let field = answer.field();
    let fields = field.as_slice();
    let id = [("X-Request-Id", id)];
    let id = if id[0].1.is_empty() {
        &id[..0]
    } else {
        &id[..]
    };
    let lines = answer.route_fields();
    write_answer(
        out,
        answer.status(),
        text,
        &[fields, id],
        lines,
        close,
        head_only,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_answer_is_trailers_only_with_an_encoded_message() {
        let mut out = Vec::new();
        let lines = b"X-Env: prod\r\n";
        grpc_answer(
            &mut out,
            Code::Unavailable,
            b"100% down\n",
            Some(("Retry-After", b"3")),
            true,
            b"id-1",
            lines,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: application/grpc\r\ngrpc-status: 14\r\n\
             grpc-message: 100%25 down%0A\r\nContent-Length: 0\r\nCache-Control: no-store\r\n\
             Retry-After: 3\r\nX-Request-Id: id-1\r\nX-Env: prod\r\nConnection: close\r\n\r\n"
        );
        let mut out = Vec::new();
        grpc_answer(
            &mut out,
            Code::Unimplemented,
            b"no route",
            None,
            false,
            b"",
            b"",
        );
        assert!(out.ends_with(
            b"grpc-message: no route\r\nContent-Length: 0\r\nCache-Control: no-store\r\n\r\n"
        ));
    }
}
