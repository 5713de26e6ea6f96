//! Rewriting heads as they cross the proxy (RFC 9110 §7.6, DESIGN.md "HTTP/1.1 rules"): hop-by-hop fields
//! (Connection and every field it names, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding,
//! Upgrade) are removed both ways and framing is re-derived; Via is added; X-Forwarded-For /
//! X-Forwarded-Proto are appended to from trusted peers and replaced otherwise (with Forwarded and
//! X-Real-IP dropped); X-Request-Id is forwarded or generated. Writes into a reused buffer: no allocation
//! once the buffer has grown.

use std::net::IpAddr;

use edge_core::http::{
    framing::{bodyless_content_length, connection_has, is_h2c, Body},
    head::{list_elements, Field, FieldKind, ResponseHead},
    view::{RequestView, Version},
    write::{push_dec, push_hex, push_ip},
};

/// The Via value edge adds (RFC 9110 §7.6.3).
pub const VIA: &[u8] = b"1.1 edge";

/// Longest X-Request-Id edge forwards as received.
const MAX_REQUEST_ID: usize = 128;

/// Whether field `f` must not be forwarded because it is hop-by-hop or named by Connection. Connection can
/// never remove Host, framing fields or the forwarding fields edge sets.
fn is_hop_by_hop(buf: &[u8], fields: &[Field], f: &Field, named: bool) -> bool {
    match f.kind {
        FieldKind::Connection
        | FieldKind::HopByHop
        | FieldKind::Upgrade
        | FieldKind::KeepAlive
        | FieldKind::TransferEncoding => true,
        FieldKind::Other
        | FieldKind::Expect
        | FieldKind::MaxForwards
        | FieldKind::Via
        | FieldKind::RequestId
        | FieldKind::ForwardedOther => named && connection_has(buf, fields, f.name(buf)),
        _ => false,
    }
}

/// Whether any Connection field names something other than close / keep-alive (so per-field checks are
/// needed).
fn connection_names_fields(buf: &[u8], fields: &[Field]) -> bool {
    fields
        .iter()
        .filter(|f| f.kind == FieldKind::Connection)
        .flat_map(|f| list_elements(f.value(buf)))
        .any(|t| !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"))
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The request id of one request: the client's, when valid, or one edge made.
#[derive(Clone, Copy, Debug)]
pub enum RequestId {
    /// Index of the client's X-Request-Id field.
    Given(usize),
    /// Generated: (process prefix, worker, counter).
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

/// What the forwarded request needs besides the head itself.
pub struct RequestRewrite<'a> {
    /// The client's address.
    pub peer: IpAddr,
    /// Whether the peer is in `trusted_proxies`.
    pub trusted: bool,
    /// The request id to send (written once per request, see [`RequestId::write`]).
    pub id: &'a [u8],
    /// Body framing to declare upstream (same as the client's: chunked bodies are forwarded as they are).
    pub body: Body,
    /// Forward the client's Upgrade (without `h2c`) with `Connection: upgrade` (RFC 9110 §7.8); see
    /// `RequestInfo::upgrade`.
    pub upgrade: bool,
    /// The Max-Forwards value received on an OPTIONS or TRACE request; it goes upstream decremented
    /// (RFC 9110 §7.6.2). The caller answers a 0 itself.
    pub max_forwards: Option<u64>,
}

/// Writes the upstream request head: always HTTP/1.1, keep-alive to the upstream (`Connection: upgrade`
/// instead for a forwarded upgrade). Expect goes upstream for HTTP/1.1 requests only: an HTTP/1.0
/// client's `100-continue` must be ignored (RFC 9110 §10.1.1), and edge speaks HTTP/1.1 upstream.
pub fn request_head(out: &mut Vec<u8>, req: &RequestView<'_>, rw: &RequestRewrite<'_>) {
    let (buf, head, fields) = (req.buf, req.head, req.fields);
    out.extend_from_slice(&buf[head.method.clone()]);
    out.push(b' ');
    // Absolute-form goes upstream in origin-form with its authority as Host (RFC 9112 §3.2.2).
    let path = &buf[head.path.clone()];
    if !path.starts_with(b"/") && path != b"*" {
        out.push(b'/');
    }
    out.extend_from_slice(path);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let named = connection_names_fields(buf, fields);
    let mut xff_prev = false;
    let mut proto_kept = false;
    let mut max_forwards_done = false;
    for f in fields {
        if is_hop_by_hop(buf, fields, f, named) {
            continue;
        }
        match f.kind {
            FieldKind::ContentLength => continue, // re-derived below
            FieldKind::Expect if req.version == Version::Http10 => continue,
            FieldKind::MaxForwards if rw.max_forwards.is_some() => {
                if !max_forwards_done {
                    max_forwards_done = true;
                    let n = rw.max_forwards.unwrap_or(1).saturating_sub(1);
                    out.extend_from_slice(b"Max-Forwards: ");
                    push_dec(out, n);
                    out.extend_from_slice(b"\r\n");
                }
                continue;
            }
            FieldKind::XForwardedFor | FieldKind::ForwardedOther if !rw.trusted => continue,
            FieldKind::XForwardedProto if !rw.trusted => continue,
            FieldKind::XForwardedFor => {
                xff_prev = true;
                continue; // folded into one field below
            }
            FieldKind::XForwardedProto => proto_kept = true,
            FieldKind::RequestId => continue, // written below
            FieldKind::Host => {
                if let Some(a) = &head.authority {
                    field(out, b"Host", &buf[a.clone()]);
                    continue;
                }
            }
            _ => {}
        }
        out.extend_from_slice(
            &buf[f.name_start as usize..f.value_start as usize + f.value_len as usize],
        );
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"X-Forwarded-For: ");
    if xff_prev {
        for f in fields.iter().filter(|f| f.kind == FieldKind::XForwardedFor) {
            for e in list_elements(f.value(buf)) {
                out.extend_from_slice(e);
                out.extend_from_slice(b", ");
            }
        }
    }
    push_ip(out, rw.peer);
    out.extend_from_slice(b"\r\n");
    if !proto_kept {
        out.extend_from_slice(b"X-Forwarded-Proto: http\r\n");
    }
    out.extend_from_slice(b"X-Request-Id: ");
    out.extend_from_slice(rw.id);
    out.extend_from_slice(b"\r\n");
    field(out, b"Via", VIA);
    match rw.body {
        Body::Length(n) => {
            out.extend_from_slice(b"Content-Length: ");
            push_dec(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Body::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Body::None | Body::CloseDelimited => {}
    }
    if rw.upgrade {
        upgrade_fields(out, buf, fields, true);
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes one `Upgrade` field listing the protocols of every Upgrade field in `fields` (without `h2c`
/// when `strip_h2c`), then `Connection: upgrade` (RFC 9110 §7.8).
fn upgrade_fields(out: &mut Vec<u8>, buf: &[u8], fields: &[Field], strip_h2c: bool) {
    out.extend_from_slice(b"Upgrade: ");
    let mut first = true;
    for f in fields.iter().filter(|f| f.kind == FieldKind::Upgrade) {
        for p in list_elements(f.value(buf)).filter(|p| !(strip_h2c && is_h2c(p))) {
            if !first {
                out.extend_from_slice(b", ");
            }
            first = false;
            out.extend_from_slice(p);
        }
    }
    out.extend_from_slice(b"\r\nConnection: upgrade\r\n");
}

/// Writes an interim (1xx) response head for the client (RFC 9110 §15.2): end-to-end fields only
/// (hop-by-hop fields and Content-Length removed), plus Via.
pub fn interim_head(out: &mut Vec<u8>, buf: &[u8], head: &ResponseHead, fields: &[Field]) {
    status_and_fields(out, buf, head, fields);
    field(out, b"Via", VIA);
    out.extend_from_slice(b"\r\n");
}

/// Writes a `101 Switching Protocols` head for the client (RFC 9110 §15.2.2): end-to-end fields, Via,
/// and the upstream's Upgrade with `Connection: upgrade` (hop-by-hop, but they are what a 101 means).
pub fn switching_head(out: &mut Vec<u8>, buf: &[u8], head: &ResponseHead, fields: &[Field]) {
    status_and_fields(out, buf, head, fields);
    field(out, b"Via", VIA);
    upgrade_fields(out, buf, fields, false);
    out.extend_from_slice(b"\r\n");
}

/// The status line (always HTTP/1.1) and the end-to-end fields of a response head, without
/// Content-Length: the caller writes the framing it decided.
fn status_and_fields(out: &mut Vec<u8>, buf: &[u8], head: &ResponseHead, fields: &[Field]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_dec(out, u64::from(head.status));
    out.push(b' ');
    out.extend_from_slice(&buf[head.reason.clone()]);
    out.extend_from_slice(b"\r\n");
    let named = connection_names_fields(buf, fields);
    for f in fields {
        if is_hop_by_hop(buf, fields, f, named) || f.kind == FieldKind::ContentLength {
            continue;
        }
        out.extend_from_slice(
            &buf[f.name_start as usize..f.value_start as usize + f.value_len as usize],
        );
        out.extend_from_slice(b"\r\n");
    }
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
/// DESIGN.md "HTTP/1.1 rules"). `keep_alive_10` adds `Connection: keep-alive` for an HTTP/1.0 client
/// that asked for it; `close` adds `Connection: close`.
pub fn response_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    framing: OutFraming,
    close: bool,
    keep_alive_10: bool,
) {
    status_and_fields(out, buf, head, fields);
    field(out, b"Via", VIA);
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
    use edge_core::http::head::{parse_request, parse_response, Fields, RequestHead};

    fn view<'a>(buf: &'a [u8], head: &'a RequestHead, fields: &'a [Field]) -> RequestView<'a> {
        let version = match head.minor {
            0 => Version::Http10,
            _ => Version::Http11,
        };
        RequestView {
            buf,
            head,
            fields,
            version,
        }
    }

    fn rewrite(text: &str, trusted: bool) -> String {
        let mut f = Fields::new();
        let h = parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        let mut id = Vec::new();
        RequestId::of(text.as_bytes(), &f, (0xabc, 1, 7)).write(text.as_bytes(), &f, &mut id);
        let info = edge_core::http::framing::request_info(text.as_bytes(), &h, &f).unwrap();
        let rw = RequestRewrite {
            peer: "10.0.0.9".parse().unwrap(),
            trusted,
            id: &id,
            body: Body::Length(3),
            upgrade: info.upgrade,
            max_forwards: info.max_forwards,
        };
        let mut out = Vec::new();
        request_head(&mut out, &view(text.as_bytes(), &h, &f), &rw);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn hop_by_hop_fields_are_removed_and_framing_rederived() {
        let out = rewrite(
            "POST /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: ws\r\nContent-Length: 3\r\nX-Keep: y\r\n\r\n",
            false,
        );
        assert!(
            out.starts_with("POST /x HTTP/1.1\r\nHost: a\r\nX-Keep: y\r\n"),
            "{out}"
        );
        for gone in ["Connection", "X-Secret", "Keep-Alive", "TE:", "Upgrade"] {
            assert!(!out.contains(gone), "{gone} in {out}");
        }
        assert!(out.contains("Content-Length: 3\r\n"));
        assert!(out.contains("X-Forwarded-For: 10.0.0.9\r\n"));
        assert!(out.contains("X-Forwarded-Proto: http\r\n"));
        assert!(out.contains("X-Request-Id: 00000abc-1-7\r\n"));
        assert!(out.contains("Via: 1.1 edge\r\n"));
        assert!(out.ends_with("\r\n\r\n"));
    }

    #[test]
    fn upgrade_is_forwarded_only_when_asked_and_without_h2c() {
        let out = rewrite(
            "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c, websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
            false,
        );
        assert!(
            out.ends_with("Upgrade: websocket\r\nConnection: upgrade\r\n\r\n"),
            "{out}"
        );
        assert!(out.contains("Sec-WebSocket-Key: k\r\n"));
        assert_eq!(out.matches("Upgrade").count(), 1, "{out}");
        for text in [
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
        ] {
            let out = rewrite(text, false);
            assert!(!out.to_ascii_lowercase().contains("upgrade"), "{out}");
            assert!(!out.contains("HTTP2-Settings"), "{out}");
        }
    }

    #[test]
    fn expect_goes_upstream_for_http11_only() {
        let with = |v: &str| {
            rewrite(
                &format!("POST / HTTP/1.{v}\r\nHost: a\r\nExpect: 100-continue\r\n\r\n"),
                false,
            )
        };
        assert!(with("1").contains("Expect: 100-continue\r\n"));
        assert!(!with("0").contains("Expect"));
    }

    #[test]
    fn max_forwards_is_decremented_on_options_and_trace() {
        let out = rewrite(
            "OPTIONS * HTTP/1.1\r\nHost: a\r\nMax-Forwards: 5\r\nMax-Forwards: 9\r\n\r\n",
            false,
        );
        assert!(out.contains("Max-Forwards: 4\r\n"), "{out}");
        assert_eq!(out.matches("Max-Forwards").count(), 1, "{out}");
        let out = rewrite(
            "GET / HTTP/1.1\r\nHost: a\r\nMax-Forwards: 5\r\n\r\n",
            false,
        );
        assert!(out.contains("Max-Forwards: 5\r\n"), "{out}");
        let out = rewrite(
            "TRACE / HTTP/1.1\r\nHost: a\r\nMax-Forwards: x\r\n\r\n",
            false,
        );
        assert!(out.contains("Max-Forwards: x\r\n"), "{out}");
    }

    #[test]
    fn interim_and_switching_heads() {
        let text = "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nContent-Length: 0\r\nConnection: x\r\nX: 1\r\n\r\n";
        let mut f = Fields::new();
        let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        let mut out = Vec::new();
        interim_head(&mut out, text.as_bytes(), &h, &f);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nVia: 1.1 edge\r\n\r\n"
        );
        let text = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: a\r\n\r\n";
        let h = parse_response(text.as_bytes(), &mut f).unwrap().unwrap();
        let mut out = Vec::new();
        switching_head(&mut out, text.as_bytes(), &h, &f);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: a\r\nVia: 1.1 edge\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        );
    }

    #[test]
    fn connection_cannot_remove_host_or_forwarding() {
        let out = rewrite(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: host, x-forwarded-for\r\n\r\n",
            false,
        );
        assert!(out.contains("Host: a\r\n"));
        assert!(out.contains("X-Forwarded-For: 10.0.0.9\r\n"));
    }

    #[test]
    fn forwarding_fields_from_untrusted_and_trusted_peers() {
        let req = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Proto: https\r\nX-Real-IP: 1.1.1.1\r\nX-Request-Id: abc\r\n\r\n";
        let untrusted = rewrite(req, false);
        assert!(
            untrusted.contains("X-Forwarded-For: 10.0.0.9\r\n"),
            "{untrusted}"
        );
        assert!(untrusted.contains("X-Forwarded-Proto: http\r\n"));
        assert!(!untrusted.contains("X-Real-IP"));
        assert!(untrusted.contains("X-Request-Id: abc\r\n"));
        let trusted = rewrite(req, true);
        assert!(
            trusted.contains("X-Forwarded-For: 1.1.1.1, 10.0.0.9\r\n"),
            "{trusted}"
        );
        assert!(trusted.contains("X-Forwarded-Proto: https\r\n"));
        assert!(!trusted.contains("X-Forwarded-Proto: http\r\n"));
    }

    /// Framing fields are re-derived (RFC 9112 §6.1): bodyless responses carry no Transfer-Encoding, and
    /// Content-Length only on a 304 or HEAD response (or a 0), written once (RFC 9110 §8.6).
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
            response_head(&mut out, text.as_bytes(), &h, &f, framing, false, false);
            let out = String::from_utf8(out).unwrap();
            assert_eq!(out, format!("HTTP/1.1 {want}\r\n"), "{upstream}");
        }
    }

    #[test]
    fn absolute_form_goes_upstream_in_origin_form_with_its_authority_as_host() {
        let out = rewrite(
            "GET http://a.example:81/x?y HTTP/1.1\r\nHost: other\r\nX-K: v\r\n\r\n",
            false,
        );
        assert!(
            out.starts_with("GET /x?y HTTP/1.1\r\nHost: a.example:81\r\nX-K: v\r\n"),
            "{out}"
        );
        let out = rewrite("GET HTTP://a?y HTTP/1.1\r\nHost: a\r\n\r\n", false);
        assert!(out.starts_with("GET /?y HTTP/1.1\r\nHost: a\r\n"), "{out}");
        let out = rewrite("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", false);
        assert!(out.starts_with("OPTIONS * HTTP/1.1\r\n"), "{out}");
    }

    use edge_core::http::framing::request_info;
    use proptest::prelude::*;

    fn token() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[A-Za-z0-9!#$%&'*+.^_`|~-]{1,10}").unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Edge's rewrite of a valid request parses back (strictly) to the same method and target, the
        /// same end-to-end fields in the same order, and the same body framing.
        #[test]
        fn rewritten_request_parses_back(
            method in token(),
            path in proptest::string::string_regex("/[A-Za-z0-9/?=&%._~-]{0,20}").unwrap(),
            extra in proptest::collection::vec(
                (token(), proptest::string::string_regex("[ -~]{0,16}").unwrap()), 0..6),
            chunked in any::<bool>(),
        ) {
            let mut text = format!("{method} {path} HTTP/1.1\r\nHost: h.example\r\n");
            for (n, v) in &extra {
                text.push_str(&format!("X-{n}: {}\r\n", v.trim_matches([' ', '\t'])));
            }
            text.push_str(if chunked { "Transfer-Encoding: chunked\r\n" } else { "Content-Length: 3\r\n" });
            text.push_str("\r\n");
            let buf = text.as_bytes();
            let mut f = Fields::new();
            let h = parse_request(buf, 100, &mut f).unwrap().unwrap();
            let info = request_info(buf, &h, &f).unwrap();
            let rw = RequestRewrite {
                peer: "10.0.0.9".parse().unwrap(),
                trusted: false,
                id: b"id-1",
                body: info.body,
                upgrade: false,
                max_forwards: None,
            };
            let mut out = Vec::new();
            request_head(&mut out, &view(buf, &h, &f), &rw);
            let mut f2 = Fields::new();
            let h2 = parse_request(&out, 100, &mut f2).unwrap().unwrap();
            prop_assert_eq!(h2.len, out.len());
            prop_assert_eq!(&out[h2.method.clone()], method.as_bytes());
            prop_assert_eq!(&out[h2.target.clone()], path.as_bytes());
            prop_assert_eq!(request_info(&out, &h2, &f2).unwrap().body, info.body);
            let others = |b: &[u8], f: &[Field]| -> Vec<(Vec<u8>, Vec<u8>)> {
                f.iter()
                    .filter(|f| f.kind == FieldKind::Other || f.kind == FieldKind::Host)
                    .map(|f| (f.name(b).to_vec(), f.value(b).to_vec()))
                    .collect()
            };
            prop_assert_eq!(others(&out, &f2), others(buf, &f));
        }
    }
}
