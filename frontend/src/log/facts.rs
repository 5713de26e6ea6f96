//! [`RequestFacts`]: what a request's access line and metrics need beyond its log line, gathered as the
//! request goes: admission fills in what the request head says (host, user agent, query length, trace
//! context, route, upstream; [`crate::request::admit`]), the orchestrator what the exchange did
//! (attempts, endpoint, time to first byte, body bytes; [`crate::proxy::run`]). One lives in each
//! HTTP/1.1 connection and each HTTP/2 stream task and is reused from one request to the next, so
//! gathering allocates nothing in steady state.
//!
//! Host, user agent and referer are copied (at most [`FIELD_MAX`] bytes each) because the head's buffer
//! is reused for the body before the line is written; they are copied only while `log.access` is on.

use std::{cell::Cell, net::SocketAddr, rc::Rc, time::Duration};

use edge_core::http::trace::TRACEPARENT_LEN;

use crate::context::Live;

/// Most bytes of host, user agent and referer kept for the access line.
pub const FIELD_MAX: usize = 256;

/// One request's facts for its access line, its `route` label and its log lines' trace id.
pub struct RequestFacts {
    /// The configuration snapshot the request was admitted on: the one its route and upstream indices
    /// refer to (`None` before admission).
    pub live: Option<Rc<Live>>,
    /// Index of the route that matched (`None`: answered before routing, `route="-"`).
    pub route: Option<usize>,
    /// Index of the upstream the request was sent to.
    pub upstream: Option<usize>,
    /// Host or `:authority` as received (when `log.access` is on).
    pub host: Vec<u8>,
    /// User-Agent as received (when `log.access` is on).
    pub user_agent: Vec<u8>,
    /// Referer as received (when `log.access` is on).
    pub referer: Vec<u8>,
    /// Bytes of the target's query.
    pub query_len: usize,
    /// The W3C trace id, 32 hex digits, when there is one to log (`trace_len` is 32 then).
    trace_id: [u8; 32],
    trace_len: usize,
    /// A `traceparent` edge made (started, or in place of an invalid one): sent upstream in place of
    /// the received trace context when `trace_started`.
    pub traceparent: [u8; TRACEPARENT_LEN],
    /// Whether `traceparent` is to be sent.
    pub trace_started: bool,
    /// Upstream attempts made.
    pub attempts: Cell<u32>,
    /// The endpoint of the last attempt.
    pub endpoint: Cell<Option<SocketAddr>>,
    /// Time from the request head written upstream to the response head, on the attempt that answered.
    pub ttfb: Cell<Option<Duration>>,
    /// Request body payload bytes taken from the client.
    pub request_bytes: Cell<u64>,
    /// Response body payload bytes sent to the client.
    pub response_bytes: Cell<u64>,
    /// The request is a gRPC call (`content-type: application/grpc*`): edge's own answers to it are
    /// gRPC answers (DESIGN.md "Status codes").
    pub grpc: bool,
    /// The `grpc-status` the client got, for the access line: edge's own gRPC answer's, or the one an
    /// upstream sent in a response head or trailers ([`super::grpc::note_status`]).
    pub grpc_status: Cell<Option<u16>>,
}

impl Default for RequestFacts {
    fn default() -> Self {
        RequestFacts {
            live: None,
            route: None,
            upstream: None,
            host: Vec::new(),
            user_agent: Vec::new(),
            referer: Vec::new(),
            query_len: 0,
            trace_id: [0; 32],
            trace_len: 0,
            traceparent: [0; TRACEPARENT_LEN],
            trace_started: false,
            attempts: Cell::new(0),
            endpoint: Cell::new(None),
            ttfb: Cell::new(None),
            request_bytes: Cell::new(0),
            response_bytes: Cell::new(0),
            grpc: false,
            grpc_status: Cell::new(None),
        }
    }
}

impl RequestFacts {
    /// Forgets the previous request (keeping the buffers' memory).
    pub fn clear(&mut self) {
        self.live = None;
        self.route = None;
        self.upstream = None;
        self.host.clear();
        self.user_agent.clear();
        self.referer.clear();
        self.query_len = 0;
        self.trace_len = 0;
        self.trace_started = false;
        self.attempts.set(0);
        self.endpoint.set(None);
        self.ttfb.set(None);
        self.request_bytes.set(0);
        self.response_bytes.set(0);
        self.grpc = false;
        self.grpc_status.set(None);
    }

    /// The trace id to log (empty: none).
    pub fn trace_id(&self) -> &[u8] {
        &self.trace_id[..self.trace_len]
    }

    /// Records the trace id to log (32 hex digits).
    pub fn set_trace_id(&mut self, id: &[u8; 32]) {
        self.trace_id = *id;
        self.trace_len = 32;
    }

    /// The route's label (its name, else its index) and the upstream's name, from the snapshot the
    /// request ran on: `("-", "")` before routing.
    pub fn names(&self) -> (&str, &str) {
        let Some(live) = &self.live else {
            return (edge_core::metrics::NO_ROUTE, "");
        };
        let route = self
            .route
            .and_then(|i| live.route_counters.get(i))
            .map_or(edge_core::metrics::NO_ROUTE, |c| c.label());
        let upstream = self
            .upstream
            .and_then(|i| live.upstreams.get(i))
            .map_or("", |u| u.config.name.as_str());
        (route, upstream)
    }
}

/// Copies `v` into `out`, at most [`FIELD_MAX`] bytes.
pub fn keep(out: &mut Vec<u8>, v: &[u8]) {
    out.clear();
    out.extend_from_slice(&v[..v.len().min(FIELD_MAX)]);
}
