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
//! then the deadlines (the route's `client_request_timeout` and `request_timeout`, which a gRPC call's
//! `grpc-timeout` shortens: [`grpc`]) and retry-safety (RFC 9110 §9.2.2). Before phase 1 the request gets its id and its W3C trace context ([`trace`]), so
//! every answer, local ones included, carries the id. Phase 6, what is added to the response head (Via,
//! X-Request-Id, then the route's response rules), is decided here too ([`ResponseFields`]) and written
//! by each session. What the access line needs of the head is noted in the request's
//! [`RequestFacts`]. Nothing here allocates per request: the request id is written into a buffer the
//! connection (or the HTTP/2 stream task) keeps, and so are the facts.

pub mod grpc;
pub mod limit;
pub mod local;
pub mod response;
pub mod rewrite;
pub mod route;
pub mod trace;
pub mod vars;

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
pub use rewrite::Rewrite;

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
    /// An HTTP/2 connection shed at accept (and why): its stream is shed unless it is a health probe.
    pub shed: Option<edge_core::metrics::ShedReason>,
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
    /// Answered by edge itself (phase 1, or phase 3: a rate limit, the route's `redirect` / `respond`).
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
    /// Its index in the worker's upstreams.
    pub upstream_index: usize,
    /// The request's hash for the upstream's `balance = "hash"` (`None`: not hashed).
    pub hash_key: Option<u64>,
    /// `request_timeout` for this route (`None` = unlimited), shortened by a gRPC call's `grpc-timeout`.
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
    let normalised = routed.rewritten;
    let id: &'a [u8] = id;
    let vars = vars::RequestVars {
        peer: r.peer,
        host,
        target,
        https: r.https,
        id,
        buf,
        fields: r.fields,
    };
    // Phase 3: the route's rate limits, then its `redirect` / `respond`.
    let keyed = limit::Keyed {
        peer: r.peer,
        buf,
        fields: r.fields,
    };
    if let Some((secs, i)) = limit::check(w, &live.cfg.rate_limits, &live.limited, route, &keyed) {
        let log = RequestLog {
            line,
            id,
            upstream: None,
            trace: facts.trace_id(),
        };
        let name = &live.cfg.rate_limits.0[i].name;
        crate::warn_limited!(w, log, event = "request.limited", limit = %name, route = %route.label, retry_after = secs);
        return Admission::Local(Local::Limited {
            retry_after: local::Digits::of(secs),
            fields: local::route_fields(&route.rules.response_headers, &vars),
        });
    }
    if let Some(rule) = &route.rules.local {
        let answer = local::route_answer(rule, &route.rules.response_headers, &vars);
        return Admission::Local(answer);
    }
    // Phase 5: the upstream (the route's one, or its weighted split's pick for this worker), chosen
    // before the phase 4 plan only because the plan borrows the request's facts for good.
    let upstream_index = match (&route.rules.split, route.upstream) {
        (Some(split), _) => split.next(),
        (None, Some(u)) => u,
        // A route has an upstream, a split or a local answer (checked at load).
        (None, None) => return Admission::Refused(Failure::NoRoute),
    };
    let upstream = &live.upstreams[upstream_index];
    facts.upstream = Some(upstream_index);
    let facts: &'a RequestFacts = facts;
    let hash_key = upstream
        .hash_key
        .as_ref()
        .and_then(|k| vars::hash_key(k, &vars));
    // Phase 4: the rewrite plan (the normalised path, then the route's path, host and header rules;
    // the trace context edge started or replaced).
    let traceparent = facts.trace_started.then_some(&facts.traceparent[..]);
    let rewrite = rewrite::plan(&route.rules, path, normalised, scratch, &vars, traceparent);
    let configured_timeout = route
        .request_timeout
        .unwrap_or(upstream.config.request_timeout)
        .0;
    Admission::Forward(Admitted {
        info: r.info,
        is_head: method == b"HEAD",
        idempotent: retry_safe_method(method),
        cfg: &live.cfg,
        route,
        upstream,
        upstream_index,
        hash_key,
        request_timeout: match facts.grpc {
            true => grpc::request_timeout(buf, r.fields, configured_timeout),
            false => configured_timeout,
        },
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
        response: ResponseFields::forwarded(id).with_rules(
            (!route.rules.response_headers.is_empty()).then_some(&route.rules.response_headers),
            rewrite.response_lines,
        ),
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
    facts.grpc = grpc::is_call(r.buf, r.fields);
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
