//! Request log lines and their rate limit: [`RequestLog`] names a request in every line about it
//! (`method`, `path`, `request_id`, `trace_id`), [`finish_request`] counts and logs a finished request
//! alike for HTTP/1.1 and HTTP/2 (its access line: [`access`], [`format`]; what it needs:
//! [`facts`]; its `grpc_status`: [`grpc`]), [`warn_limited!`](crate::warn_limited) rate-limits warn-level drop logs per worker with
//! the worker's [`LogLimit`](crate::context::log_limit::LogLimit) (DESIGN.md "Status codes").

pub mod access;
pub mod facts;
pub mod format;
pub mod grpc;

use std::net::SocketAddr;

use edge_core::metrics::{Protocol, UpstreamMetrics};
use monoio::time::Instant;

pub use facts::RequestFacts;

use crate::context::Worker;

/// What the request looked like, for log lines (owned copies are made only on the logging path).
#[derive(Clone, Copy)]
pub struct RequestLog<'a> {
    /// Method and target, as received (possibly cut at 256 bytes).
    pub line: &'a [u8],
    /// The request id (`-` before one is known).
    pub id: &'a [u8],
    /// The upstream the request was admitted to (`None` before admission, or answered locally).
    pub upstream: Option<UpstreamTag<'a>>,
    /// The W3C trace id (empty: none, or `log.traceparent = "off"`).
    pub trace: &'a [u8],
}

/// Which upstream a request went to, for its log lines (`upstream=NAME`) and its counters (the
/// `upstream` label, DESIGN.md "Observability").
#[derive(Clone, Copy)]
pub struct UpstreamTag<'a> {
    /// The upstream's name from the configuration.
    pub name: &'a str,
    /// Its counters on this worker.
    pub metrics: &'a UpstreamMetrics,
}

impl<'a> UpstreamTag<'a> {
    /// The tag of `upstream`.
    pub fn of(upstream: &'a edge_upstream::Upstream) -> Self {
        UpstreamTag {
            name: &upstream.config.name,
            metrics: &upstream.metrics,
        }
    }
}

impl<'a> RequestLog<'a> {
    /// A request not admitted to an upstream (yet).
    pub fn new(line: &'a [u8], id: &'a [u8]) -> Self {
        RequestLog {
            line,
            id,
            upstream: None,
            trace: b"",
        }
    }

    /// The same request with its trace id.
    pub fn traced(self, trace: &'a [u8]) -> Self {
        RequestLog { trace, ..self }
    }

    /// The upstream's name for a log line, `-` when there is none.
    pub fn upstream_name(&self) -> &'a str {
        self.upstream.map_or("-", |u| u.name)
    }

    /// (method, path, request id, trace id) for a log line (`-` for an id not known).
    pub fn parts(&self) -> (String, String, String, String) {
        let line = String::from_utf8_lossy(self.line);
        let (method, path) = line.split_once(' ').unwrap_or((&line, ""));
        let text = |v: &[u8]| match v {
            b"" => "-".into(),
            v => String::from_utf8_lossy(v).into_owned(),
        };
        (
            method.to_string(),
            path.to_string(),
            text(self.id),
            text(self.trace),
        )
    }
}

/// Counts a finished request (`edge_requests_total{protocol,status,route}` and the duration
/// histogram) and logs it: `request.slow` (warn) when it took `log.slow_request` or longer, its access
/// line ([`access::write_line`]) when `log.access` is on (DESIGN.md "Configuration", `[log]`). One
/// function for HTTP/1.1 requests and HTTP/2 streams, so both are counted and logged alike; `peer` is
/// the client (the PROXY header's source when there was one). Formats nothing when neither line is
/// written. Every request that gets a status passes here, the locally answered ones (health probes,
/// 404, 503 shed, 400) included.
pub fn finish_request(
    w: &Worker,
    protocol: Protocol,
    log: &RequestLog<'_>,
    facts: &RequestFacts,
    peer: SocketAddr,
    status: u16,
    started: Instant,
) {
    let elapsed = started.elapsed();
    match (&facts.live, facts.route) {
        (Some(live), Some(route)) if route < live.route_counters.len() => {
            live.route_counters[route].count(protocol, status)
        }
        _ => w.metrics.count_status(protocol, status),
    }
    w.metrics.duration.record(elapsed);
    let current = w.current();
    let live = facts.live.as_ref().unwrap_or(&current);
    let settings = &live.cfg.config.log;
    let slow = elapsed >= settings.slow_request.0;
    if settings.access {
        access::write_line(
            w,
            settings.access_format,
            protocol,
            log,
            facts,
            peer,
            status,
            elapsed,
        );
    }
    if slow {
        let (method, path, request_id, trace_id) = log.parts();
        tracing::warn!(
            event = "request.slow",
            worker = w.id,
            protocol = protocol.as_str(),
            method,
            path,
            request_id,
            trace_id,
            status,
            duration_ms = elapsed.as_millis() as u64
        );
    }
}

thread_local! {
    /// The facts of a request that has none of its own (a connection accepted over capacity).
    static NO_FACTS: RequestFacts = RequestFacts::default();
}

/// Runs `f` with `facts`, or with empty facts when there are none.
pub fn with_facts<R>(facts: Option<&RequestFacts>, f: impl FnOnce(&RequestFacts) -> R) -> R {
    match facts {
        Some(facts) => f(facts),
        None => NO_FACTS.with(f),
    }
}

/// A warn-level drop log, rate-limited per worker ([`LogLimit`](crate::context::log_limit::LogLimit)): `warn_limited!(w, req_log, event =
/// "...", ...)` adds `worker`, `method`, `path`, `request_id` and `trace_id`.
#[macro_export]
macro_rules! warn_limited {
    ($w:expr, $log:expr, $($field:tt)*) => {
        if $w.log_limit.allow() {
            let (method, path, request_id, trace_id) = $log.parts();
            tracing::warn!(worker = $w.id, method, path, request_id, trace_id, $($field)*);
        }
    };
}
