//! Admission (DESIGN.md "Request pipeline and traffic rules"), written once for every protocol: an
//! HTTP/1.1 request and an HTTP/2 stream both reach [`admit`] as a checked head in HTTP/1.1 syntax (the
//! protocol-neutral form their sessions produce), and leave it as one of three outcomes: a local answer
//! ([`Local`]), a refusal from the status table, or an [`Admitted`] request that the orchestrator
//! ([`crate::proxy::run`]) forwards. The phases run in the order of DESIGN.md:
//!
//! 1. local answers before any rule ([`local`]);
//! 2. route ([`route`]) on the normalised path (400 `bad_path` when it cannot be normalised); no
//!    route: 404;
//! 3. the route's request-phase rules (rate limits, then `redirect` / `respond`);
//! 4. the request rewrite plan;
//! 5. upstream choice;
//!
//! then the deadlines (the route's `client_request_timeout` and `request_timeout`) and retry-safety
//! (RFC 9110 §9.2.2). Before phase 1 the request gets its id and its W3C trace context ([`trace`]), so
//! every answer, local ones included, carries the id. Phase 6, what is added to the response head (Via,
//! X-Request-Id, then the route's response rules), is decided here too ([`ResponseFields`]) and written
//! by each session. What the access line needs of the head is noted in the request's
//! [`RequestFacts`]. Nothing here allocates per request: the request id is written into a buffer the
//! connection (or the HTTP/2 stream task) keeps, and so are the facts.

pub mod local;
pub mod response;
pub mod route;
pub mod trace;

use std::{net::SocketAddr, rc::Rc, time::Duration};

use edge_core::{
    config::{Resolved, ResolvedRoute},
    http::{
        framing::RequestInfo,
        head::{FieldKind, Fields, RequestHead},
        request_id::RequestId,
    },
    metrics::InvalidReason,
};
use edge_upstream::Upstream;
use monoio::time::Instant;

pub use local::Local;
pub use response::ResponseFields;

use crate::{
    context::{Live, Worker},
    log::{facts, RequestFacts, RequestLog, UpstreamTag},
    respond::Failure,
};

/// A checked request head and what admission needs to know of its connection.
pub struct Incoming<'b> {
    /// The head in HTTP/1.1 syntax; `head` and `fields` index into it.
    pub buf: &'b [u8],
    /// The parsed head.
    pub head: &'b RequestHead,
    /// Its fields.
    pub fields: &'b Fields,
    /// Framing and connection semantics (RFC 9112 §6.3, decided by the session).
    pub info: RequestInfo,
    /// The client's address (the PROXY header's source when there was one).
    pub peer: SocketAddr,
    /// The connection's local address, when an upstream needs it (`send_proxy_protocol`).
    pub local: Option<SocketAddr>,
    /// The connection came over TLS.
    pub https: bool,
    /// An HTTP/2 connection accepted over capacity: its stream is shed unless it is a health probe.
    pub shed: bool,
    /// The client connection closes after this response (HTTP/1.1: asked for, draining, or
    /// `max_requests_per_connection`).
    pub close: bool,
    /// When the request's first byte (HTTP/2: its HEADERS) arrived.
    pub started: Instant,
}

/// How admission ended.
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per request and matched at once; boxing `Admitted` would allocate per request"
)]
pub enum Admission<'a> {
    /// Answered by edge itself (phase 1, later the route's `redirect` / `respond`).
    Local(Local),
    /// Refused from the status table before anything was forwarded (no route: 404).
    Refused(Failure),
    /// To be forwarded by the orchestrator.
    Forward(Admitted<'a>),
}

/// An admitted request: everything the orchestrator needs besides the downstream session.
pub struct Admitted<'a> {
    /// Framing and connection semantics of the request.
    pub info: RequestInfo,
    /// HEAD request: the response has no body.
    pub is_head: bool,
    /// Idempotent method (RFC 9110 §9.2.2): may be retried.
    pub idempotent: bool,
    /// The configuration the request started on (it finishes on it across a reload).
    pub cfg: &'a Resolved,
    /// The route that matched.
    pub route: &'a ResolvedRoute,
    /// The upstream chosen for it.
    pub upstream: &'a Upstream,
    /// `request_timeout` for this route (`None` = unlimited).
    pub request_timeout: Option<Duration>,
    /// The client's `request` deadline for the rest of the request (the route's
    /// `client_request_timeout` from the first byte when it has one).
    pub client_deadline: Instant,
    /// Edge will close the client connection after this response.
    pub close: bool,
    /// The client's address.
    pub peer: SocketAddr,
    /// The client connection's local address, when an upstream needs it (`send_proxy_protocol`).
    pub local: Option<SocketAddr>,
    /// The client connection came over TLS.
    pub https: bool,
    /// Method, target, request id and trace id, for log lines.
    pub log: RequestLog<'a>,
    /// What is changed in the request on its way upstream.
    pub rewrite: Rewrite<'a>,
    /// What is added to the response on its way to the client (phase 6).
    pub response: ResponseFields<'a>,
    /// The request's facts for its access line: the orchestrator notes attempts, endpoint, time to
    /// first byte and body bytes in them.
    pub facts: &'a RequestFacts,
}

/// The request rewrite plan (DESIGN.md "Request pipeline and traffic rules", phase 4): what the
/// upstream request head carries in place of what was received.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rewrite<'a> {
    /// The normalised path, when it differs from the received one (DESIGN.md "Routing"): sent in place
    /// of the received path, followed by the received query.
    pub path: Option<&'a [u8]>,
    /// A `traceparent` edge started or replaced, sent in place of the received trace context
    /// ([`trace`]).
    pub traceparent: Option<&'a [u8]>,
}

/// Admits the request `r` on the configuration snapshot `live` (phases 1 to 5 of DESIGN.md "Request
/// pipeline and traffic rules"). `line` is the request's method and target for log lines; the request
/// id (the client's `X-Request-Id` when valid, else a generated one) is written into `id` whatever the
/// outcome, the normalised path into `scratch` when it differs from the received one, and what the
/// access line needs into `facts` (cleared first). The buffers belong to the connection (or the HTTP/2
/// stream task) and are reused, so admission allocates nothing per request.
pub fn admit<'a>(
    w: &Worker,
    live: &'a Rc<Live>,
    r: &Incoming<'_>,
    line: &'a [u8],
    id: &'a mut Vec<u8>,
    scratch: &'a mut Vec<u8>,
    facts: &'a mut RequestFacts,
) -> Admission<'a> {
    let server = &live.cfg.config.server;
    let buf = r.buf;
    let method = &buf[r.head.method.clone()];
    // Origin-form (the path of an absolute-form target, whose authority replaces Host: RFC 9112 §3.2.2).
    let target = &buf[r.head.path.clone()];
    let path = target.split(|&b| b == b'?').next().unwrap_or(target);
    let host = match &r.head.authority {
        Some(a) => Some(&buf[a.clone()]),
        None => r.info.host.map(|i| r.fields[i].value(buf)),
    };
    // The request's id and trace context, and what its access line needs, before any answer.
    id.clear();
    RequestId::of(buf, r.fields, w.next_request_id()).write(buf, r.fields, id);
    note_facts(w, live, r, target, host, facts);
    // Phase 1: local answers, before any rule.
    let probe = local::Probe {
        path,
        target,
        host,
        method,
        info: &r.info,
        https: r.https,
        shed: r.shed,
    };
    if let Some(answer) = local::local_answer(w, server, &probe) {
        return Admission::Local(answer);
    }
    crate::faults::on_request(path);
    // Phase 2: the route, on the normalised path (400 `bad_path` when it cannot be normalised).
    let routing = route::Target {
        method,
        host,
        target,
        head: buf,
        fields: r.fields,
    };
    let routed = match route::find(&live.routes, &routing, scratch) {
        Ok(routed) => routed,
        Err(_) => return Admission::Refused(Failure::Invalid(InvalidReason::BadPath)),
    };
    let Some(route) = routed.route else {
        return Admission::Refused(Failure::NoRoute);
    };
    facts.route = Some(route.index);
    // Phase 3, the route's request-phase rules (limits, then redirect / respond), goes here: a rule
    // returns an `Admission::Local` or `Admission::Refused` to answer.
    // Phase 4: the rewrite plan. Today the normalised path, sent in place of the received one; the
    // route's path, host and header rewrites join it here.
    // Phase 5: the upstream.
    let upstream = &live.upstreams[route.upstream];
    facts.upstream = Some(route.upstream);
    let facts: &'a RequestFacts = facts;
    let rewrite = Rewrite {
        path: routed.rewritten.then_some(scratch.as_slice()),
        traceparent: facts.trace_started.then_some(&facts.traceparent[..]),
    };
    let id: &'a [u8] = id;
    Admission::Forward(Admitted {
        info: r.info,
        is_head: method == b"HEAD",
        idempotent: retry_safe_method(method),
        cfg: &live.cfg,
        route,
        upstream,
        request_timeout: route
            .request_timeout
            .unwrap_or(upstream.config.request_timeout)
            .0,
        client_deadline: r.started
            + route
                .client_request_timeout
                .unwrap_or(server.timeouts.request.0),
        close: r.close,
        peer: r.peer,
        local: r.local,
        https: r.https,
        log: RequestLog {
            line,
            id,
            upstream: Some(UpstreamTag::of(upstream)),
            trace: facts.trace_id(),
        },
        rewrite,
        response: ResponseFields::forwarded(id),
        facts,
    })
}

/// Notes in `facts` what the request's access line and log lines need of its head: the snapshot it
/// runs on, its trace context ([`trace::note`]), its query length, and (only while `log.access` is on,
/// copies of at most 256 bytes) its host, user agent and referer.
fn note_facts(
    w: &Worker,
    live: &Rc<Live>,
    r: &Incoming<'_>,
    target: &[u8],
    host: Option<&[u8]>,
    facts: &mut RequestFacts,
) {
    facts.clear();
    facts.live = Some(live.clone());
    let log = &live.cfg.config.log;
    trace::note(w, log.traceparent, r.buf, r.fields, facts);
    facts.query_len = target
        .iter()
        .position(|&b| b == b'?')
        .map_or(0, |q| target.len() - q - 1);
    if !log.access {
        return;
    }
    facts::keep(&mut facts.host, host.unwrap_or_default());
    for f in r.fields.iter() {
        match f.kind {
            FieldKind::UserAgent => facts::keep(&mut facts.user_agent, f.value(r.buf)),
            FieldKind::Referer => facts::keep(&mut facts.referer, f.value(r.buf)),
            _ => {}
        }
    }
}

/// Whether `method` is idempotent (RFC 9110 §9.2.2), so a request that failed on a reused connection
/// before any response byte may be sent again.
pub fn retry_safe_method(method: &[u8]) -> bool {
    matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"
    )
}

#[cfg(test)]
mod tests {
    use super::retry_safe_method;

    #[test]
    fn idempotent_methods_are_retry_safe() {
        for m in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"] {
            assert!(retry_safe_method(m.as_bytes()), "{m}");
        }
        for m in ["POST", "PATCH", "CONNECT", "get"] {
            assert!(!retry_safe_method(m.as_bytes()), "{m}");
        }
    }
}
