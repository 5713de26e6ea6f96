//! Heads between the seam's HTTP/1.1 syntax and HTTP/2 (RFC 9113 §8.3): the forwarded request head
//! ([`crate::head::request_head`]) becomes the pseudo-header fields and fields of a HEADERS frame, and
//! a response's HEADERS become an HTTP/1.1 head in the session's receive buffer, with the framing its
//! body will have there.

use edge_core::http::head::{parse_request, FieldKind, Fields, MAX_FIELDS};
use http::{header::HeaderName, HeaderValue, Method, Request, Uri};

/// How the request body follows the head in the seam's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// The chunked transfer coding, de-chunked into DATA.
    Chunked,
}

/// The request as h2 sends it.
pub(crate) struct H2Request {
    pub(crate) request: Request<()>,
    pub(crate) framing: Framing,
    /// Bytes of the HTTP/1.1 head in the input (the body bytes follow).
    pub(crate) head_len: usize,
    /// A HEAD request (its response has no body whatever its fields say).
    pub(crate) head_method: bool,
    /// A WebSocket upgrade, sent as an extended CONNECT (RFC 8441 §4): the Sec-WebSocket-Key the
    /// client side of the exchange checks the answer against.
    pub(crate) websocket: Option<Vec<u8>>,
}

/// Fields RFC 9113 §8.2.2 forbids in HTTP/2 (connection-specific), besides Host, which becomes
/// `:authority`.
fn connection_specific(kind: FieldKind, name: &[u8]) -> bool {
    matches!(
        kind,
        FieldKind::Host
            | FieldKind::Connection
            | FieldKind::KeepAlive
            | FieldKind::TransferEncoding
            | FieldKind::Upgrade
            | FieldKind::HopByHop
    ) || name.eq_ignore_ascii_case(b"proxy-connection")
}

/// Converts the HTTP/1.1 request head at the start of `out` into an h2 request: `:authority` from
/// Host, `:scheme` from the connection (`https` over TLS), `:path` the forwarded target, the fields
/// without the connection-specific ones; a gRPC request (content-type `application/grpc*`) carries
/// `te: trailers` (the gRPC protocol requires it; edge's HTTP/1.1 head drops TE as hop-by-hop).
///
/// # Errors
/// `None` for a head that does not parse or does not convert (never for a head
/// [`crate::head::request_head`] wrote from an admitted request).
pub(crate) fn request(out: &[u8], fields: &mut Fields, tls: bool) -> Option<H2Request> {
    let head = parse_request(out, MAX_FIELDS, fields).ok()??;
    let websocket = edge_core::websocket::upgrade_key(out, fields).map(<[u8]>::to_vec);
    let method = match websocket {
        // RFC 8441 §4: `:method CONNECT` with `:protocol websocket`, no Upgrade, no key.
        Some(_) => Method::CONNECT,
        None => Method::from_bytes(&out[head.method.clone()]).ok()?,
    };
    let mut framing = Framing::None;
    let mut authority: &[u8] = b"";
    let mut builder = Request::builder().method(method.clone());
    let mut grpc = false;
    for f in fields.iter() {
        let name = f.name(out);
        let value = f.value(out);
        match f.kind {
            FieldKind::Host if authority.is_empty() => authority = value,
            FieldKind::ContentLength => {
                framing = Framing::Length(std::str::from_utf8(value).ok()?.parse().ok()?);
            }
            FieldKind::TransferEncoding => framing = Framing::Chunked,
            _ => {}
        }
        if connection_specific(f.kind, name)
            || (websocket.is_some() && name.eq_ignore_ascii_case(b"sec-websocket-key"))
        {
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-type") && value.starts_with(b"application/grpc") {
            grpc = true;
        }
        let name = HeaderName::from_bytes(name).ok()?;
        builder = builder.header(name, HeaderValue::from_bytes(value).ok()?);
    }
    if grpc {
        builder = builder.header(http::header::TE, HeaderValue::from_static("trailers"));
    }
    let path = &out[head.path.clone()];
    let path: &[u8] = match path.first() {
        Some(b'/') | Some(b'*') => path,
        _ => b"/",
    };
    let uri = Uri::builder()
        .scheme(if tls { "https" } else { "http" })
        .authority(authority)
        .path_and_query(path)
        .build()
        .ok()?;
    let mut request = builder.uri(uri).body(()).ok()?;
    if websocket.is_some() {
        request
            .extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
    }
    Some(H2Request {
        request,
        framing,
        head_len: head.len,
        head_method: method == Method::HEAD,
        websocket,
    })
}

/// How a response body follows its head in the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// Nothing follows (HEAD, 204, 304, or the stream ended with the head).
    None,
    /// As the DATA frames come, within the head's `Content-Length`.
    Length,
    /// Chunked: each DATA frame one chunk, the trailers (RFC 9113 §8.1) in the last chunk.
    Chunked,
}

/// Writes `resp` as an HTTP/1.1 head into `out` and says how its body follows. `ended`: the stream
/// ended with the HEADERS (a trailers-only gRPC answer, or an empty body); `head_method`: the request
/// was HEAD.
pub(crate) fn response(
    resp: &http::response::Parts,
    ended: bool,
    head_method: bool,
    out: &mut Vec<u8>,
) -> BodyFraming {
    let status = resp.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Status").as_bytes());
    out.extend_from_slice(b"\r\n");
    write_fields(out, &resp.headers);
    let no_body = head_method || status.as_u16() == 204 || status.as_u16() == 304;
    let has_length = resp.headers.contains_key(http::header::CONTENT_LENGTH);
    let framing = match (no_body, ended, has_length) {
        (true, _, _) => BodyFraming::None,
        (false, true, true) => BodyFraming::None,
        (false, true, false) => {
            out.extend_from_slice(b"content-length: 0\r\n");
            BodyFraming::None
        }
        (false, false, true) => BodyFraming::Length,
        (false, false, false) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            BodyFraming::Chunked
        }
    };
    out.extend_from_slice(b"\r\n");
    framing
}

/// Writes the `101` a WebSocket upgrade reads as when an HTTP/2 upstream accepted its extended CONNECT
/// with a 2xx (`resp`): [`edge_core::websocket::write_switch_head`] of the client side's `key`,
/// then the answer's fields (Sec-WebSocket-Protocol, -Extensions, ...).
pub(crate) fn switch_head(resp: &http::response::Parts, key: &[u8], out: &mut Vec<u8>) {
    edge_core::websocket::write_switch_head(out, key);
    write_fields(out, &resp.headers);
    out.extend_from_slice(b"\r\n");
}

/// Appends `data` as one chunk of the chunked coding.
pub(crate) fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    edge_core::http::chunked::encode_chunk(out, data);
}

pub(crate) use edge_core::io::h2_stream::last_chunk;
use edge_core::io::h2_stream::write_fields;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_head_becomes_pseudo_fields_without_connection_specific_fields() {
        let head = b"POST /a/b?q=1 HTTP/1.1\r\nHost: svc.internal:8080\r\nConnection: keep-alive\r\nContent-Type: application/grpc\r\nContent-Length: 5\r\nX-Id: 7\r\n\r\nhello";
        let mut f = Fields::new();
        let r = request(head, &mut f, false).expect("converts");
        assert_eq!(r.framing, Framing::Length(5));
        assert_eq!(&head[r.head_len..], b"hello");
        let uri = r.request.uri();
        assert_eq!(uri.scheme_str(), Some("http"));
        assert_eq!(uri.authority().unwrap().as_str(), "svc.internal:8080");
        assert_eq!(uri.path_and_query().unwrap().as_str(), "/a/b?q=1");
        let h = r.request.headers();
        assert!(h.get("host").is_none() && h.get("connection").is_none());
        assert_eq!(h.get("te").unwrap(), "trailers");
        assert_eq!(h.get("x-id").unwrap(), "7");
        assert_eq!(h.get("content-length").unwrap(), "5");
    }

    #[test]
    fn chunked_request_is_marked_and_tls_sets_https() {
        let head = b"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut f = Fields::new();
        let r = request(head, &mut f, true).expect("converts");
        assert_eq!(r.framing, Framing::Chunked);
        assert_eq!(r.request.uri().scheme_str(), Some("https"));
        assert!(r.request.headers().get("transfer-encoding").is_none());
        assert!(r.request.headers().get("te").is_none());
    }

    #[test]
    fn response_framing_follows_length_end_and_method() {
        let parts = |cl: bool| {
            let mut b = http::Response::builder().status(200).header("x-a", "1");
            if cl {
                b = b.header("content-length", "3");
            }
            b.body(()).unwrap().into_parts().0
        };
        let mut out = Vec::new();
        assert_eq!(
            response(&parts(false), false, false, &mut out),
            BodyFraming::Chunked
        );
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\nx-a: 1\r\n"));
        assert!(out.ends_with(b"transfer-encoding: chunked\r\n\r\n"));
        out.clear();
        assert_eq!(
            response(&parts(true), false, false, &mut out),
            BodyFraming::Length
        );
        out.clear();
        assert_eq!(
            response(&parts(false), true, false, &mut out),
            BodyFraming::None
        );
        assert!(out.ends_with(b"content-length: 0\r\n\r\n"));
        out.clear();
        assert_eq!(
            response(&parts(false), false, true, &mut out),
            BodyFraming::None
        );
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        out.clear();
        last_chunk(&mut out, Some(&t));
        assert_eq!(out, b"0\r\ngrpc-status: 0\r\n\r\n");
    }
}
