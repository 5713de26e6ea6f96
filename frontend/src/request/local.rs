//! Phase 1 of the request pipeline (DESIGN.md "Request pipeline and traffic rules"): the requests edge
//! answers itself before any rule, decided once for every protocol and described as data ([`Local`]) that
//! each protocol's session writes in its own framing. In order: `health_path` (readiness), a stream of a
//! connection accepted over capacity (DESIGN.md "Capacity"; an HTTP/1.1 connection over capacity is
//! answered by its session before admission), OPTIONS and TRACE with `Max-Forwards: 0` (RFC 9110
//! §7.6.2), and `redirect_plain` on the plain listener (DESIGN.md "TLS").

use std::sync::atomic::Ordering;

use std::net::SocketAddr;

use edge_core::{
    http::{framing::RequestInfo, grpc::Code},
    metrics::ShedReason,
};

use crate::context::Worker;

/// The methods edge forwards, for `Allow` (RFC 9110 §10.2.1) on a 405 and on its own answer to
/// `OPTIONS` with `Max-Forwards: 0`. CONNECT is refused; TRACE is forwarded but never answered by edge.
pub const ALLOW: &[u8] = b"GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE";

/// A request edge answers itself: phase 1's answers, and phase 3's (a route's rate limit, `redirect`
/// or `respond`).
#[derive(Debug, PartialEq, Eq)]
pub enum Local {
    /// `health_path`: 200 `ok`, or 503 + `Retry-After: 1` while draining or while a worker is stale.
    Health {
        /// Whether the process is ready.
        ready: bool,
    },
    /// The request of a connection shed at accept: at `max_connections` with nothing evictable (503,
    /// `limit`) or its client at `max_connections_per_client` (429, `client_limit`), with
    /// `Retry-After: 1`, counted as a shed connection.
    Shed(ShedReason),
    /// OPTIONS with `Max-Forwards: 0`: edge is the final recipient (RFC 9110 §7.6.2, §9.3.7): 200 with
    /// `Allow` ([`ALLOW`]) and no content.
    Options,
    /// TRACE with `Max-Forwards: 0`: 405. edge never reflects a request (an echoed request hands cookies
    /// and credentials back to scripts, "cross-site tracing"; nginx refuses TRACE the same way), though
    /// it forwards TRACE with a higher Max-Forwards for the origin to decide.
    Trace,
    /// `redirect_plain` on the plain listener: 308 Permanent Redirect (RFC 9110 §15.4.9: method and
    /// body kept) to this `Location` ([`redirect_location`]).
    Redirect(Vec<u8>),
    /// A route's rate limit refused the request: 429 Too Many Requests (RFC 6585 §4) with
    /// `Retry-After` in whole seconds (DESIGN.md "Request pipeline and traffic rules").
    Limited {
        /// `Retry-After`, as decimal digits.
        retry_after: Digits,
        /// The route's `response_headers` lines (empty, unallocated, when it has none).
        fields: Vec<u8>,
    },
    /// A route's `redirect`: its status and the `Location` filled for this request (in a buffer of
    /// the worker's pool, given back when the answer is dropped).
    RouteRedirect {
        /// 301, 302, 303, 307 or 308.
        status: u16,
        /// The Location value.
        location: Vec<u8>,
        /// The route's `response_headers` lines.
        fields: Vec<u8>,
    },
    /// A route's `respond`: status, and its Content-Type followed by the body filled for this request
    /// (one pooled buffer, given back when the answer is dropped).
    RouteRespond {
        /// The status.
        status: u16,
        /// Content-Type, then the body.
        text: Vec<u8>,
        /// Where the body starts in `text`.
        body_at: usize,
        /// The route's `response_headers` lines.
        fields: Vec<u8>,
    },
}

impl Drop for Local {
    fn drop(&mut self) {
        match self {
            Local::RouteRedirect {
                location: b,
                fields,
                ..
            }
            | Local::RouteRespond {
                text: b, fields, ..
            } => {
                edge_core::buf::give(std::mem::take(b));
                edge_core::buf::give(std::mem::take(fields));
            }
            Local::Limited { fields, .. } if fields.capacity() > 0 => {
                edge_core::buf::give(std::mem::take(fields))
            }
            _ => {}
        }
    }
}

/// A number as decimal digits in place (for `Retry-After`), so the answer borrows no buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digits {
    buf: [u8; 20],
    len: u8,
}

impl Digits {
    /// The digits of `n`.
    pub fn of(mut n: u64) -> Digits {
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        buf.copy_within(at.., 0);
        Digits {
            buf,
            len: (20 - at) as u8,
        }
    }

    /// The digits.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl Local {
    /// The status code.
    pub fn status(&self) -> u16 {
        match self {
            Local::Health { ready: true } | Local::Options => 200,
            Local::Shed(ShedReason::ClientLimit) => 429,
            Local::Health { ready: false } | Local::Shed(_) => 503,
            Local::Trace => 405,
            Local::Redirect(_) => 308,
            Local::Limited { .. } => 429,
            Local::RouteRedirect { status, .. } | Local::RouteRespond { status, .. } => *status,
        }
    }

    /// The gRPC status of the answer to a gRPC call, when this answer becomes a gRPC one (DESIGN.md
    /// "Status codes", its gRPC paragraph; the text body is its `grpc-message`): a rate limit and a
    /// shed stream are 8 RESOURCE_EXHAUSTED. The others keep their HTTP answer: the health probe and
    /// the `Max-Forwards: 0` answers are no calls, and a route's `redirect` / `respond` and
    /// `redirect_plain` are the configuration's explicit answers (docs/grpc.md).
    pub fn grpc_code(&self) -> Option<Code> {
        match self {
            Local::Limited { .. } | Local::Shed(_) => Some(Code::ResourceExhausted),
            _ => None,
        }
    }

    /// The body (empty: no content).
    pub fn body(&self) -> &[u8] {
        match self {
            Local::Health { ready: true } => b"ok",
            Local::Health { ready: false } => b"not ready\n",
            Local::Shed(ShedReason::ClientLimit) => b"too many connections from this client\n",
            Local::Shed(_) => b"service unavailable: connection limit reached\n",
            Local::Trace => {
                b"method not allowed: edge does not answer TRACE itself (Max-Forwards: 0)\n"
            }
            Local::Limited { .. } => b"too many requests\n",
            Local::RouteRespond { text, body_at, .. } => &text[*body_at..],
            Local::Options | Local::Redirect(_) | Local::RouteRedirect { .. } => b"",
        }
    }

    /// The body's Content-Type (when it has one).
    pub fn content_type(&self) -> &str {
        match self {
            Local::RouteRespond { text, body_at, .. } => {
                std::str::from_utf8(&text[..*body_at]).unwrap_or("text/plain; charset=utf-8")
            }
            _ => "text/plain; charset=utf-8",
        }
    }

    /// The route's `response_headers` fields for this answer, as `Name: value\r\n` lines (phase 6
    /// applies to edge's own answers for the route too).
    pub fn route_fields(&self) -> &[u8] {
        match self {
            Local::Limited { fields, .. }
            | Local::RouteRedirect { fields, .. }
            | Local::RouteRespond { fields, .. } => fields,
            _ => b"",
        }
    }

    /// The field the answer carries besides the framing ones: `Location`, `Allow` or `Retry-After`
    /// (name in its usual case; HTTP/2 lower-cases it).
    pub fn field(&self) -> Option<(&'static str, &[u8])> {
        match self {
            Local::Health { ready: false } | Local::Shed(_) => Some(("Retry-After", b"1")),
            Local::Options | Local::Trace => Some(("Allow", ALLOW)),
            Local::Redirect(location) => Some(("Location", location)),
            Local::RouteRedirect { location, .. } => Some(("Location", location)),
            Local::Limited { retry_after, .. } => Some(("Retry-After", retry_after.as_bytes())),
            Local::Health { ready: true } | Local::RouteRespond { .. } => None,
        }
    }
}

/// The `connection.shed` line of a connection shed at accept (rate-limited per worker).
pub fn log_shed(w: &Worker, peer: SocketAddr, reason: ShedReason) {
    if !w.log_limit.allow() {
        return;
    }
    let why = match reason {
        ShedReason::ClientLimit => "the client is at max_connections_per_client",
        _ => "at max_connections with nothing evictable",
    };
    tracing::warn!(event = "connection.shed", worker = w.id, peer = %peer, reason = reason.as_str(), "{why}");
}

/// What phase 1 needs to know of a request.
pub struct Probe<'a> {
    /// The path, without the query, as received.
    pub path: &'a [u8],
    /// The origin-form target as received (path and query), for a redirect's `Location`.
    pub target: &'a [u8],
    /// The Host, or the authority of an absolute-form target or of `:authority`.
    pub host: Option<&'a [u8]>,
    /// The method.
    pub method: &'a [u8],
    /// Framing and `Max-Forwards` of the head.
    pub info: &'a RequestInfo,
    /// The connection came over TLS.
    pub https: bool,
    /// The connection was shed at accept, and why (only an HTTP/2 connection gets this far).
    pub shed: Option<ShedReason>,
}

/// Whether `p` is answered locally, and how (DESIGN.md "Request pipeline and traffic rules", phase 1).
pub fn local_answer(
    w: &Worker,
    server: &edge_core::config::Server,
    p: &Probe<'_>,
) -> Option<Local> {
    if p.path == server.health_path.as_bytes() {
        return Some(Local::Health {
            ready: w.shared.ready(),
        });
    }
    if let Some(reason) = p.shed {
        return Some(Local::Shed(reason));
    }
    if p.info.max_forwards == Some(0) {
        return Some(match p.method {
            b"TRACE" => Local::Trace,
            _ => Local::Options,
        });
    }
    if !p.https && server.tls.as_ref().is_some_and(|t| t.redirect_plain) {
        let port = w.shared.tls_port.load(Ordering::Relaxed);
        return Some(Local::Redirect(redirect_location(p.host, p.target, port)));
    }
    None
}

/// Where `redirect_plain` sends a plain request (DESIGN.md "TLS"): `https://` + the request's host
/// (without its port; `localhost` when it has none) + `:port` unless 443 + the target as received.
pub fn redirect_location(host: Option<&[u8]>, target: &[u8], port: u16) -> Vec<u8> {
    let mut location = Vec::with_capacity(64 + target.len());
    location.extend_from_slice(b"https://");
    let host = host.unwrap_or(b"localhost");
    // Strip a port; a bracketed IPv6 literal keeps its brackets.
    let name = match host.iter().rposition(|&b| b == b':') {
        Some(i) if !host[i..].contains(&b']') => &host[..i],
        _ => host,
    };
    location.extend_from_slice(name);
    if port != 443 && port != 0 {
        location.extend_from_slice(format!(":{port}").as_bytes());
    }
    location.extend_from_slice(target);
    location
}

/// The answer of a route's `redirect` or `respond` (phase 3), its value and the route's
/// `response_headers` (phase 6) filled for this request into buffers of the worker's pool (no
/// allocation once the pool holds buffers).
pub fn route_answer(
    rule: &edge_core::config::LocalRule,
    response_headers: &edge_core::policy::headers::HeaderRules,
    vars: &super::vars::RequestVars<'_>,
) -> Local {
    use edge_core::config::LocalRule;
    let mut out = edge_core::buf::take();
    let fields = route_fields(response_headers, vars);
    match rule {
        LocalRule::Redirect { to, status } => {
            to.fill(vars, &mut out);
            Local::RouteRedirect {
                status: *status,
                location: out,
                fields,
            }
        }
        LocalRule::Respond {
            status,
            body,
            content_type,
        } => {
            out.extend_from_slice(content_type.as_bytes());
            let body_at = out.len();
            body.fill(vars, &mut out);
            Local::RouteRespond {
                status: *status,
                text: out,
                body_at,
                fields,
            }
        }
    }
}

/// A route's `response_headers` filled for an answer edge makes for the route (a pooled buffer; an
/// empty, unallocated one when the route has none).
pub fn route_fields(
    rules: &edge_core::policy::headers::HeaderRules,
    vars: &super::vars::RequestVars<'_>,
) -> Vec<u8> {
    if rules.is_empty() {
        return Vec::new();
    }
    let mut fields = edge_core::buf::take();
    super::rewrite::fill_lines(rules, vars, &mut fields);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_location_drops_the_port_and_keeps_the_target() {
        let l = |h: Option<&str>, port| {
            String::from_utf8(redirect_location(h.map(str::as_bytes), b"/a?b", port)).unwrap()
        };
        assert_eq!(l(Some("example.com:8080"), 443), "https://example.com/a?b");
        assert_eq!(l(Some("[::1]:80"), 8443), "https://[::1]:8443/a?b");
        assert_eq!(l(None, 0), "https://localhost/a?b");
    }

    #[test]
    fn every_answer_has_its_status_and_field() {
        assert_eq!(
            Local::Health { ready: false }.field(),
            Some(("Retry-After", &b"1"[..]))
        );
        assert_eq!(Local::Options.field(), Some(("Allow", ALLOW)));
        assert_eq!(Local::Trace.status(), 405);
        assert_eq!(Local::Redirect(b"https://x/".to_vec()).status(), 308);
        let limited = Local::Limited {
            retry_after: Digits::of(30),
            fields: Vec::new(),
        };
        assert_eq!(
            (limited.status(), limited.field()),
            (429, Some(("Retry-After", &b"30"[..])))
        );
        for n in [0, 7, 10, 12345, u64::MAX] {
            assert_eq!(Digits::of(n).as_bytes(), n.to_string().as_bytes());
        }
    }
}
