//! The upstream request head (RFC 9110 §7.6, DESIGN.md "HTTP/1.1 rules"): always HTTP/1.1, hop-by-hop
//! fields removed and framing re-derived, Via added, X-Forwarded-For / X-Forwarded-Proto appended to from
//! trusted peers and replaced otherwise (with Forwarded and X-Real-IP dropped), the request id sent, and
//! a `traceparent` edge started or replaced sent in place of the received trace context.
//! Encoded from a protocol-neutral [`RequestView`], into a reused buffer: no allocation once the buffer
//! has grown.
//!
//! HTTP/1.1 syntax is the protocol-neutral form of the forwarded head: every upstream session
//! ([`crate::session::UpstreamSession::send_head`]) takes it, the HTTP/1.1 one as it is, an HTTP/2 one
//! turned into HEADERS (as the downstream HTTP/2 session turns a stream's HEADERS into this syntax).

use std::net::IpAddr;

use edge_core::http::{
    framing::Body,
    head::list_elements,
    head::FieldKind,
    hop::{connection_names_fields, field, is_hop_by_hop, upgrade_fields, FieldLines, VIA},
    view::{RequestView, Version},
    write::{push_dec, push_ip},
};
use edge_core::policy::headers::HeaderRules;

/// What the forwarded request needs besides the head itself.
pub struct RequestRewrite<'a> {
    /// The client's address.
    pub peer: IpAddr,
    /// Whether the peer is in `trusted_proxies`.
    pub trusted: bool,
    /// The client connection came over TLS: `X-Forwarded-Proto: https` (DESIGN.md "TLS") unless a
    /// trusted peer sent its own.
    pub https: bool,
    /// The request id to send (written once per request, see [`edge_core::http::request_id::RequestId::write`]).
    pub id: &'a [u8],
    /// Body framing to declare upstream (same as the client's: chunked bodies are forwarded as they are).
    pub body: Body,
    /// Forward the client's Upgrade (without `h2c`) with `Connection: upgrade` (RFC 9110 §7.8); see
    /// `RequestInfo::upgrade`.
    pub upgrade: bool,
    /// The Max-Forwards value received on an OPTIONS or TRACE request; it goes upstream decremented
    /// (RFC 9110 §7.6.2). The caller answers a 0 itself.
    pub max_forwards: Option<u64>,
    /// The normalised path to send in place of the received one when they differ (DESIGN.md
    /// "Routing"); the received query, from its `?`, follows it. `None`: the target as received.
    pub path: Option<&'a [u8]>,
    /// The route's `host_rewrite`: sent as Host in place of the received one (DESIGN.md "Request
    /// pipeline and traffic rules", phase 4).
    pub host: Option<&'a [u8]>,
    /// The route's `request_headers`: the received fields they remove or replace are left out, and so
    /// are edge's own forwarding fields of those names (X-Forwarded-*, X-Request-Id, Via), which a rule
    /// may override.
    pub rules: Option<&'a HeaderRules>,
    /// The rules' fields, filled for this request, as `Name: value\r\n` lines written after edge's own.
    pub added: &'a [u8],
    /// W3C trace context (DESIGN.md "Observability", `log.traceparent = "propagate"`): a `traceparent`
    /// edge started or put in place of an invalid one; the received `traceparent` and `tracestate`
    /// fields are dropped and this one sent. `None`: both go upstream as received.
    pub traceparent: Option<&'a [u8]>,
}

impl RequestRewrite<'_> {
    /// Whether a rule removes or replaces the field `name`.
    fn drops(&self, name: &[u8]) -> bool {
        self.rules.is_some_and(|r| r.drops(name))
    }
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
    if let Some(normal) = rw.path {
        out.extend_from_slice(normal);
        if let Some(q) = path.iter().position(|&b| b == b'?') {
            out.extend_from_slice(&path[q..]);
        }
    } else {
        if !path.starts_with(b"/") && path != b"*" {
            out.push(b'/');
        }
        out.extend_from_slice(path);
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let named = connection_names_fields(buf, fields);
    let mut xff_prev = false;
    let mut proto_kept = false;
    let mut max_forwards_done = false;
    let mut lines = FieldLines::default();
    let mut host_done = false;
    for f in fields {
        if is_hop_by_hop(buf, fields, f, named) || rw.drops(f.name(buf)) {
            continue;
        }
        match f.kind {
            FieldKind::ContentLength => continue, // re-derived below
            FieldKind::Expect if req.version == Version::Http10 => continue,
            FieldKind::MaxForwards if rw.max_forwards.is_some() => {
                if !max_forwards_done {
                    max_forwards_done = true;
                    lines.flush(out, buf);
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
            FieldKind::TraceParent | FieldKind::TraceState if rw.traceparent.is_some() => continue,
            FieldKind::Host => {
                let host = rw.host.or(head.authority.as_ref().map(|a| &buf[a.clone()]));
                if let Some(host) = host {
                    lines.flush(out, buf);
                    if !host_done {
                        field(out, b"Host", host);
                    }
                    host_done = true;
                    continue;
                }
            }
            _ => {}
        }
        lines.push(out, buf, f);
    }
    lines.flush(out, buf);
    if let (Some(host), false) = (rw.host, host_done) {
        field(out, b"Host", host);
    }
    forwarding_fields(out, req, rw, xff_prev, proto_kept);
    // The route's `request_headers` come after edge's own fields (which they may replace).
    out.extend_from_slice(rw.added);
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

/// edge's forwarding fields (DESIGN.md "HTTP/1.1 rules"): X-Forwarded-For (the received list, when
/// trusted, then the client), X-Forwarded-Proto unless a trusted peer sent one, X-Request-Id, the
/// traceparent edge started, Via; each left out when a route's `request_headers` rule removes or
/// replaces it.
fn forwarding_fields(
    out: &mut Vec<u8>,
    req: &RequestView<'_>,
    rw: &RequestRewrite<'_>,
    xff_prev: bool,
    proto_kept: bool,
) {
    let (buf, fields) = (req.buf, req.fields);
    if !rw.drops(b"x-forwarded-for") {
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
    }
    if !proto_kept && !rw.drops(b"x-forwarded-proto") {
        out.extend_from_slice(if rw.https {
            b"X-Forwarded-Proto: https\r\n"
        } else {
            b"X-Forwarded-Proto: http\r\n"
        });
    }
    if !rw.drops(b"x-request-id") {
        field(out, b"X-Request-Id", rw.id);
    }
    if let Some(t) = rw.traceparent.filter(|_| !rw.drops(b"traceparent")) {
        field(out, b"traceparent", t);
    }
    if !rw.drops(b"via") {
        field(out, b"Via", VIA);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::http::head::{parse_request, Field, Fields, RequestHead};

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

    /// The rewrite of a request from untrusted client 10.0.0.9 with id `id` and no body, nothing
    /// else changed; tests set what they exercise on top of it.
    fn plain<'a>() -> RequestRewrite<'a> {
        RequestRewrite {
            peer: "10.0.0.9".parse().unwrap(),
            trusted: false,
            https: false,
            id: b"id",
            body: Body::None,
            upgrade: false,
            max_forwards: None,
            path: None,
            host: None,
            rules: None,
            added: b"",
            traceparent: None,
        }
    }

    fn rewrite(text: &str, trusted: bool) -> String {
        rewrite_traced(text, trusted, None)
    }

    fn rewrite_traced(text: &str, trusted: bool, traceparent: Option<&[u8]>) -> String {
        let mut f = Fields::new();
        let h = parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        let mut id = Vec::new();
        edge_core::http::request_id::RequestId::of(text.as_bytes(), &f, (0xabc, 1, 7)).write(
            text.as_bytes(),
            &f,
            &mut id,
        );
        let info = edge_core::http::framing::request_info(text.as_bytes(), &h, &f).unwrap();
        let rw = RequestRewrite {
            trusted,
            id: &id,
            body: Body::Length(3),
            upgrade: info.upgrade,
            max_forwards: info.max_forwards,
            traceparent,
            ..plain()
        };
        let mut out = Vec::new();
        request_head(&mut out, &view(text.as_bytes(), &h, &f), &rw);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_replaced_traceparent_drops_the_received_trace_context() {
        let text =
            "GET / HTTP/1.1\r\nHost: a\r\ntraceparent: bad\r\ntracestate: k=v\r\nX-Keep: y\r\n\r\n";
        let new = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let out = rewrite_traced(text, false, Some(new));
        assert!(!out.contains("bad") && !out.contains("tracestate"), "{out}");
        assert_eq!(out.matches("traceparent: ").count(), 1, "{out}");
        assert!(out
            .contains("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\r\n"));
        // Without a replacement both go as received.
        let out = rewrite(text, false);
        assert!(
            out.contains("traceparent: bad\r\ntracestate: k=v\r\n"),
            "{out}"
        );
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

    #[test]
    fn a_normalised_path_replaces_the_received_one_and_keeps_its_query() {
        let text = "GET /x/../v2/%7ea?q=/../1 HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut f = Fields::new();
        let h = parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        let rw = RequestRewrite {
            path: Some(b"/v2/~a"),
            ..plain()
        };
        let mut out = Vec::new();
        request_head(&mut out, &view(text.as_bytes(), &h, &f), &rw);
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with("GET /v2/~a?q=/../1 HTTP/1.1\r\nHost: a\r\n"),
            "{out}"
        );
        let text = "GET http://a HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        let rw = RequestRewrite {
            path: Some(b"/"),
            ..rw
        };
        let mut out = Vec::new();
        request_head(&mut out, &view(text.as_bytes(), &h, &f), &rw);
        assert!(out.starts_with(b"GET / HTTP/1.1\r\n"));
    }

    #[test]
    fn route_rules_rewrite_host_and_fields_after_edges_own() {
        use edge_core::policy::headers::{Direction, HeaderRules};
        let rules = HeaderRules::new(
            Direction::Request,
            &["x-debug".into()],
            &[("X-Forwarded-Proto".into(), "https".into())],
            &[("X-Env".into(), "prod".into())],
        )
        .unwrap();
        let text = "GET /a HTTP/1.1\r\nHost: public.example\r\nX-Debug: 1\r\nX-Keep: k\r\nX-Forwarded-Proto: ftp\r\n\r\n";
        let mut f = Fields::new();
        let h = parse_request(text.as_bytes(), 100, &mut f)
            .unwrap()
            .unwrap();
        let rw = RequestRewrite {
            host: Some(b"internal.api"),
            rules: Some(&rules),
            added: b"X-Forwarded-Proto: https\r\nX-Env: prod\r\n",
            ..plain()
        };
        let mut out = Vec::new();
        request_head(&mut out, &view(text.as_bytes(), &h, &f), &rw);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            "GET /a HTTP/1.1\r\nHost: internal.api\r\nX-Keep: k\r\nX-Forwarded-For: 10.0.0.9\r\n\
             X-Request-Id: id\r\nVia: 1.1 edge\r\nX-Forwarded-Proto: https\r\nX-Env: prod\r\n\r\n"
        );
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
                id: b"id-1",
                body: info.body,
                ..plain()
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
