//! Metric names and label values of DESIGN.md "Metrics", the recorder setup, and the per-worker handle
//! set. Every series a worker writes carries `worker="N"`, so no two cores write the same atomic; handles
//! are registered once per worker (status counters on first use of a status code) and never looked up
//! per request afterwards.

use std::{
    cell::{Cell, RefCell},
    sync::Arc,
};

use metrics::{counter, gauge, Counter, Gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::latency::DurationHistogram;

pub mod help;

/// Installs the global Prometheus recorder (no HTTP listener: the admin handler renders it, followed by
/// [`crate::latency::render`] for `edge_request_duration_seconds`).
///
/// # Errors
/// When a recorder is already installed.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| e.to_string())?;
    help::describe_all();
    Ok(handle)
}

macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $var),+ }
        impl $name {
            /// Every value, in label order.
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// Every label value, in the same order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];
            /// The label value.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$var => $text),+ }
            }
        }
    };
}

// After `label_enum!`, which it uses.
mod upstream;

pub use upstream::{EndpointMetrics, StatusClass, UpstreamMetrics};

label_enum!(
    /// `reason` of `edge_requests_invalid_total` (DESIGN.md "Status codes").
    InvalidReason {
        /// 400: unparseable head.
        BadHead = "bad_head",
        /// 400: ambiguous or malformed framing.
        BadFraming = "bad_framing",
        /// 400: malformed chunked body.
        BadChunk = "bad_chunk",
        /// 400: missing, repeated or malformed Host.
        BadHost = "bad_host",
        /// 400: a path with a `..` above the root, an encoded NUL or an invalid percent-encoding
        /// (DESIGN.md "Routing").
        BadPath = "bad_path",
        /// 431: head over `max_head_bytes` or `max_headers`.
        HeadTooLarge = "head_too_large",
        /// 414: request line over the head limit.
        UriTooLong = "uri_too_long",
        /// 413: body over `max_body_bytes`.
        BodyTooLarge = "body_too_large",
        /// 501: transfer coding edge does not implement.
        TransferCoding = "transfer_coding",
        /// 405: CONNECT.
        Method = "method",
        /// 400 in plain text: plain HTTP sent to the TLS listener.
        PlainHttpOnTls = "plain_http_on_tls",
    }
);

label_enum!(
    /// `protocol` of `edge_connections_total` and `edge_requests_total` (DESIGN.md "Metrics"): the
    /// session serving the connection.
    Protocol {
        /// HTTP/1.0 or HTTP/1.1.
        Http1 = "http1",
        /// HTTP/2 (ALPN `h2`, or prior knowledge with `server.h2c`).
        H2 = "h2",
    }
);

label_enum!(
    /// `reason` of `edge_http2_goaways_total` (DESIGN.md "Metrics"): why edge sent GOAWAY.
    GoawayReason {
        /// A connection error found by h2 (PROTOCOL_ERROR and the like).
        Protocol = "protocol",
        /// A flood past h2's limits (ENHANCE_YOUR_CALM).
        Flood = "flood",
        /// `max_requests_per_connection` streams were served.
        MaxRequests = "max_requests",
        /// Graceful shutdown.
        Drain = "drain",
        /// No stream open within `idle`, or evicted while idle.
        Idle = "idle",
    }
);

label_enum!(
    /// `side` of `edge_http2_resets_total`: who reset the stream.
    ResetSide {
        /// The client (RST_STREAM from it, or it went away mid-stream).
        Client = "client",
        /// edge (a response cut short after its head: RST_STREAM INTERNAL_ERROR).
        Edge = "edge",
    }
);

label_enum!(
    /// `reason` of the shed counters.
    ShedReason {
        /// At `max_connections` with nothing evictable.
        Limit = "limit",
        /// EMFILE / ENFILE at accept.
        FdLimit = "fd_limit",
        /// Upstream `max_active` reached and `queue_timeout` expired.
        UpstreamQueue = "upstream_queue",
        /// PROXY header missing, malformed, or from a peer outside `proxy_protocol_from`.
        ProxyProtocol = "proxy_protocol",
        /// Every endpoint name of the upstream still unresolved (DESIGN.md "Observability": names that
        /// do not resolve at start or reload).
        NoEndpoint = "no_endpoint",
        /// The client already has `max_connections_per_client` connections open.
        ClientLimit = "client_limit",
    }
);

/// The `reason` values of `edge_requests_shed_total`, in registration order.
const REQUEST_SHED: [ShedReason; 2] = [ShedReason::UpstreamQueue, ShedReason::NoEndpoint];

label_enum!(
    /// `kind` label values of `edge_upstream_errors_total`; which upstream failure counts under which is
    /// decided in one place, `edge_upstream::UpstreamErrorKind::counted`.
    UpstreamErrorLabel {
        /// Connect refused.
        Refused = "refused",
        /// Reset before a complete response.
        Reset = "reset",
        /// Malformed response head or framing.
        BadResponse = "bad_response",
        /// Closed before a complete response.
        ClosedEarly = "closed_early",
        /// Endpoint skipped by passive ejection.
        Ejected = "ejected",
        /// Upstream TLS handshake or certificate verification failed.
        Tls = "tls",
        /// An HTTP/2 upstream refused a stream (RST_STREAM REFUSED_STREAM): never processed.
        RefusedStream = "refused_stream",
        /// A stream above an HTTP/2 upstream's GOAWAY last-stream-id: never processed.
        Goaway = "goaway",
    }
);

label_enum!(
    /// `result` of `edge_upstream_h2_pings_total`: a liveness PING an HTTP/2 upstream connection sent
    /// (DESIGN.md "HTTP/2 and gRPC upstreams").
    PingResult {
        /// Its ACK arrived.
        Answered = "answered",
        /// The connection was judged a zombie before the ACK arrived.
        Unanswered = "unanswered",
    }
);

label_enum!(
    /// `phase` of `edge_upstream_timeouts_total`.
    UpstreamPhase {
        /// `connect_timeout`.
        Connect = "connect",
        /// `write_timeout`.
        Write = "write",
        /// `request_timeout`.
        Request = "request",
        /// Zombie verdict.
        Zombie = "zombie",
    }
);

label_enum!(
    /// `phase` of `edge_inbound_timeouts_total`.
    InboundPhase {
        /// No request in progress.
        Idle = "idle",
        /// Head or body not complete by the `request` deadline.
        Request = "request",
        /// No progress writing to the client.
        Send = "send",
        /// TLS handshake not finished within `handshake_timeout`.
        Handshake = "handshake",
    }
);

label_enum!(
    /// `phase` of `edge_requests_client_closed_total`: when the client closed its connection (or reset
    /// its HTTP/2 stream) during a request.
    ClientClosedPhase {
        /// Before edge had an answer (mid-body, or while the upstream worked): logged with status 499.
        Request = "request",
        /// After edge had an answer, while the response went out.
        Response = "response",
    }
);

label_enum!(
    /// `result` of `edge_tls_handshakes_total` and `edge_upstream_tls_handshakes_total`.
    TlsResult {
        /// A full handshake.
        Full = "full",
        /// A resumed session (TLS 1.3 ticket or 1.2 session id).
        Resumed = "resumed",
        /// Refused: no shared version or cipher, bad record, unknown SNI with no default, bad
        /// certificate (upstream).
        Failed = "failed",
        /// Not finished in time.
        Timeout = "timeout",
    }
);

/// The `reason` values of `edge_connections_shed_total`, in registration order.
const CONNECTION_SHED: [ShedReason; 4] = [
    ShedReason::Limit,
    ShedReason::ClientLimit,
    ShedReason::FdLimit,
    ShedReason::ProxyProtocol,
];

/// Process-wide series (not per worker): written at startup and by the supervisor only.
pub fn set_process_gauges(version: &str, io_driver: &str, max_connections: usize) {
    gauge!("edge_build_info", "version" => version.to_string(), "io_driver" => io_driver.to_string()).set(1.0);
    gauge!("edge_connections_max").set(max_connections as f64);
    counter!("edge_worker_restarts_total").increment(0);
}

/// `edge_requests_limited_total{worker,limit}`: requests a `[[rate_limits]]` entry refused (429) on
/// worker `worker`; registered when the worker builds its configuration snapshot, never per request.
pub fn requests_limited(worker: usize, limit: &str) -> Counter {
    let c = counter!("edge_requests_limited_total", "worker" => worker.to_string(), "limit" => limit.to_string());
    c.increment(0);
    c
}

/// `edge_mirror_requests_total{worker,result}`: mirror copies by how they ended (`ok`, `error`,
/// `timeout`, `dropped`); registered with the worker's configuration snapshot.
pub fn mirror_requests(worker: usize, result: &str) -> Counter {
    counter!("edge_mirror_requests_total", "worker" => worker.to_string(), "result" => result.to_string())
}

/// Counts a worker restart (supervisor thread only).
pub fn count_worker_restart() {
    counter!("edge_worker_restarts_total").increment(1);
}

/// A gauge that only its worker changes, changed per request: counted in a `Cell` on the request path
/// and written to the registry by [`LocalGauge::publish`], which the worker's heartbeat calls every
/// 250 ms. The request path then writes no atomic for it (an `f64` gauge update in the `metrics` crate
/// is a compare-and-swap loop plus a generation counter); a scrape sees the value at most 250 ms old.
pub struct LocalGauge {
    value: Cell<f64>,
    published: Cell<f64>,
    gauge: Gauge,
}

impl LocalGauge {
    /// Starts at 0, published as 0 (a restarted worker starts with nothing open).
    fn new(gauge: Gauge) -> Self {
        gauge.set(0.0);
        LocalGauge {
            value: Cell::new(0.0),
            published: Cell::new(0.0),
            gauge,
        }
    }

    /// Adds `v`.
    pub fn increment(&self, v: f64) {
        self.value.set(self.value.get() + v);
    }

    /// Subtracts `v`.
    pub fn decrement(&self, v: f64) {
        self.value.set(self.value.get() - v);
    }

    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.value.set(v);
    }

    /// The value now (this worker's, unpublished).
    pub fn value(&self) -> f64 {
        self.value.get()
    }

    /// Writes the value to the registry if it changed since the last call.
    pub fn publish(&self) {
        let v = self.value.get();
        if v != self.published.get() {
            self.gauge.set(v);
            self.published.set(v);
        }
    }
}

/// One worker's metric handles.
pub struct WorkerMetrics {
    worker: String,
    status: RefCell<Vec<Option<Counter>>>,
    /// `edge_request_duration_seconds{worker}` (fixed buckets, see [`crate::latency`]).
    pub duration: Arc<DurationHistogram>,
    /// `edge_requests_in_flight{worker}`, published by the heartbeat ([`LocalGauge`]).
    pub in_flight: LocalGauge,
    invalid: Vec<Counter>,
    requests_shed: Vec<Counter>,
    connections_shed: Vec<Counter>,
    /// `edge_responses_truncated_total{worker}`
    pub truncated: Counter,
    /// `edge_connections_total{worker,protocol}`, by [`Protocol`].
    connections_total: Vec<Counter>,
    /// `edge_connections_active{worker}`
    pub connections_active: Gauge,
    /// `edge_connections_evicted_total{worker}`
    pub evicted: Counter,
    /// `edge_connection_panics_total{worker}`
    pub panics: Counter,
    inbound_timeouts: Vec<Counter>,
    client_closed: Vec<Counter>,
    /// `edge_upstream_connections{worker,state="idle",protocol="http1"}`
    pub upstream_idle: Gauge,
    /// `edge_upstream_connections{worker,state="active",protocol="http1"}`: one per HTTP/1.1 upstream
    /// exchange (and tunnel), changed per request, so published by the heartbeat ([`LocalGauge`]).
    pub upstream_active: LocalGauge,
    /// `edge_upstream_connections{worker,state="idle",protocol="h2"}`: HTTP/2 upstream connections with
    /// no stream in flight, set by the pool sweep.
    pub upstream_h2_idle: Gauge,
    /// `edge_upstream_connections{worker,state="active",protocol="h2"}`: HTTP/2 upstream connections
    /// with streams in flight, set by the pool sweep.
    pub upstream_h2_active: Gauge,
    /// `edge_upstream_h2_streams_active{worker}`: streams in flight on HTTP/2 upstream connections, set
    /// by the pool sweep.
    pub upstream_h2_streams: Gauge,
    /// `edge_upstream_h2_pings_total{worker,result}`, in [`PingResult::ALL`] order; shared with the
    /// worker's HTTP/2 upstream connections, which count their liveness PINGs into it.
    pub upstream_h2_pings: Arc<[Counter; 2]>,
    tls_handshakes: Vec<Counter>,
    /// `edge_http2_streams_active{worker}`, published by the heartbeat ([`LocalGauge`]).
    pub http2_streams_active: LocalGauge,
    http2_resets: Vec<Counter>,
    http2_goaways: Vec<Counter>,
    /// `edge_relay_buffer_bytes{worker}`: relay buffer bytes held ([`crate::pace::RelayBudget::held`]),
    /// set and published by the heartbeat ([`LocalGauge`]).
    pub relay_bytes: LocalGauge,
    /// `edge_relay_buffer_waits_total{worker}`: relays that waited for the relay budget.
    pub relay_waits: Counter,
    /// `edge_relay_spliced_total{worker}`: response bodies whose rest went from the upstream's socket
    /// to the client's by splice, with no copy through a relay buffer ([`crate::io::splice`]).
    pub relay_spliced: Counter,
    /// `edge_request_spliced_total{worker}`: request bodies whose rest went from the client's socket to
    /// the upstream's by splice ([`crate::io::splice`]).
    pub request_spliced: Counter,
    /// `edge_upstream_tls_handshakes_total{worker,result}`, in [`TlsResult::ALL`] order; shared with the
    /// worker's upstreams, which count their handshakes into it.
    pub upstream_tls_handshakes: Arc<[Counter; 4]>,
    /// `edge_tls_handshake_duration_seconds{worker}`
    pub tls_handshake_duration: Arc<DurationHistogram>,
    /// `edge_access_log_dropped_total{worker}`: access lines dropped (`crate::access_log`).
    pub access_log_dropped: Counter,
}

impl WorkerMetrics {
    /// Registers every series of worker `id` (label combinations are pre-registered so they export 0).
    pub fn register(id: usize) -> Self {
        let w = id.to_string();
        let by =
            |name: &'static str, label: &'static str, values: &[&'static str]| -> Vec<Counter> {
                values
                    .iter()
                    .map(|v| counter!(name, "worker" => w.clone(), label => *v))
                    .collect()
            };
        let m = WorkerMetrics {
            status: RefCell::new(vec![None; 600 * Protocol::ALL.len()]),
            duration: crate::latency::for_worker(id),
            in_flight: LocalGauge::new(gauge!("edge_requests_in_flight", "worker" => w.clone())),
            invalid: by(
                "edge_requests_invalid_total",
                "reason",
                InvalidReason::NAMES,
            ),
            requests_shed: by(
                "edge_requests_shed_total",
                "reason",
                &REQUEST_SHED.map(ShedReason::as_str),
            ),
            connections_shed: by(
                "edge_connections_shed_total",
                "reason",
                &CONNECTION_SHED.map(ShedReason::as_str),
            ),
            truncated: counter!("edge_responses_truncated_total", "worker" => w.clone()),
            connections_total: by("edge_connections_total", "protocol", Protocol::NAMES),
            connections_active: gauge!("edge_connections_active", "worker" => w.clone()),
            evicted: counter!("edge_connections_evicted_total", "worker" => w.clone()),
            panics: counter!("edge_connection_panics_total", "worker" => w.clone()),
            inbound_timeouts: by("edge_inbound_timeouts_total", "phase", InboundPhase::NAMES),
            client_closed: by(
                "edge_requests_client_closed_total",
                "phase",
                ClientClosedPhase::NAMES,
            ),
            upstream_idle: gauge!("edge_upstream_connections", "worker" => w.clone(), "state" => "idle", "protocol" => "http1"),
            upstream_active: LocalGauge::new(
                gauge!("edge_upstream_connections", "worker" => w.clone(), "state" => "active", "protocol" => "http1"),
            ),
            upstream_h2_idle: gauge!("edge_upstream_connections", "worker" => w.clone(), "state" => "idle", "protocol" => "h2"),
            upstream_h2_active: gauge!("edge_upstream_connections", "worker" => w.clone(), "state" => "active", "protocol" => "h2"),
            upstream_h2_streams: gauge!("edge_upstream_h2_streams_active", "worker" => w.clone()),
            upstream_h2_pings: Arc::new(
                by("edge_upstream_h2_pings_total", "result", PingResult::NAMES)
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("PingResult has two values")),
            ),
            tls_handshakes: by("edge_tls_handshakes_total", "result", TlsResult::NAMES),
            http2_streams_active: LocalGauge::new(
                gauge!("edge_http2_streams_active", "worker" => w.clone()),
            ),
            relay_bytes: LocalGauge::new(gauge!("edge_relay_buffer_bytes", "worker" => w.clone())),
            relay_waits: counter!("edge_relay_buffer_waits_total", "worker" => w.clone()),
            relay_spliced: counter!("edge_relay_spliced_total", "worker" => w.clone()),
            request_spliced: counter!("edge_request_spliced_total", "worker" => w.clone()),
            http2_resets: by("edge_http2_resets_total", "side", ResetSide::NAMES),
            http2_goaways: by("edge_http2_goaways_total", "reason", GoawayReason::NAMES),
            upstream_tls_handshakes: Arc::new(
                by(
                    "edge_upstream_tls_handshakes_total",
                    "result",
                    TlsResult::NAMES,
                )
                .try_into()
                .unwrap_or_else(|_| unreachable!("TlsResult has four values")),
            ),
            tls_handshake_duration: crate::latency::tls_handshakes_for_worker(id),
            access_log_dropped: counter!("edge_access_log_dropped_total", "worker" => w.clone()),
            worker: w,
        };
        // Every label combination exports from the start (0 until it moves). Counters are only touched,
        // never reset: a restarted worker registers again and its counters must keep counting up.
        let counters = m
            .invalid
            .iter()
            .chain(&m.requests_shed)
            .chain(&m.connections_shed)
            .chain(&m.inbound_timeouts)
            .chain(&m.client_closed);
        let counters = counters
            .chain(&m.tls_handshakes)
            .chain(&m.connections_total)
            .chain(&m.http2_resets)
            .chain(&m.http2_goaways)
            .chain(m.upstream_tls_handshakes.iter())
            .chain(m.upstream_h2_pings.iter());
        let singles = [
            &m.truncated,
            &m.evicted,
            &m.panics,
            &m.relay_waits,
            &m.relay_spliced,
            &m.request_spliced,
            &m.access_log_dropped,
        ];
        for c in counters.chain(singles) {
            c.increment(0);
        }
        // Gauges describe the worker now: a restarted worker starts with nothing open.
        m.connections_active.set(0.0);
        m.upstream_idle.set(0.0);
        m.upstream_h2_idle.set(0.0);
        m.upstream_h2_active.set(0.0);
        m.upstream_h2_streams.set(0.0);
        m
    }

    /// Publishes the worker's [`LocalGauge`]s (the heartbeat, every 250 ms).
    pub fn publish(&self) {
        self.in_flight.publish();
        self.http2_streams_active.publish();
        self.upstream_active.publish();
        self.relay_bytes.publish();
    }

    /// `edge_http2_resets_total{worker,side}`
    pub fn http2_reset(&self, side: ResetSide) -> &Counter {
        &self.http2_resets[side as usize]
    }

    /// `edge_http2_goaways_total{worker,reason}`
    pub fn http2_goaway(&self, reason: GoawayReason) -> &Counter {
        &self.http2_goaways[reason as usize]
    }

    /// `edge_tls_handshakes_total{worker,result}`
    pub fn tls_handshake(&self, r: TlsResult) -> &Counter {
        &self.tls_handshakes[r as usize]
    }

    /// Counts one request answered before routing (no route known: `route="-"`,
    /// [`NO_ROUTE`]) in `edge_requests_total{worker,protocol,status,route}`; a routed request counts in
    /// its route's [`RouteCounters`].
    pub fn count_status(&self, protocol: Protocol, status: u16) {
        let idx = protocol as usize * 600 + usize::from(status).min(599);
        let mut table = self.status.borrow_mut();
        table[idx]
            .get_or_insert_with(|| requests_total(&self.worker, protocol, status, NO_ROUTE))
            .increment(1);
    }

    /// The `edge_requests_total` handles of one route on this worker ([`RouteCounters`]); made when
    /// the worker builds its routes (at start and at each reload).
    pub fn route_counters(&self, route: &str) -> RouteCounters {
        RouteCounters {
            worker: self.worker.clone(),
            route: route.to_string(),
            seen: RefCell::new(Vec::new()),
        }
    }

    /// Counts a connection whose session started, in `edge_connections_total{worker,protocol}`: a
    /// plain one at accept (with `server.h2c`, once its first bytes tell), a TLS one once ALPN chose.
    pub fn connection_opened(&self, protocol: Protocol) {
        self.connections_total[protocol as usize].increment(1);
    }

    /// `edge_requests_invalid_total{worker,reason}`
    pub fn invalid(&self, r: InvalidReason) -> &Counter {
        &self.invalid[r as usize]
    }

    /// `edge_requests_shed_total{worker,reason}` for `upstream_queue` or `no_endpoint` (any other reason
    /// counts as `upstream_queue`: connections, not requests, are shed for it).
    pub fn request_shed(&self, r: ShedReason) -> &Counter {
        let i = REQUEST_SHED.iter().position(|&c| c == r).unwrap_or(0);
        &self.requests_shed[i]
    }

    /// `edge_connections_shed_total{worker,reason}` for `limit`, `client_limit`, `fd_limit` or `proxy_protocol`
    /// (`upstream_queue` sheds requests, not connections: it counts as `limit`).
    pub fn connection_shed(&self, r: ShedReason) -> &Counter {
        let i = CONNECTION_SHED.iter().position(|&c| c == r).unwrap_or(0);
        &self.connections_shed[i]
    }

    /// `edge_inbound_timeouts_total{worker,phase}`
    pub fn inbound_timeout(&self, p: InboundPhase) -> &Counter {
        &self.inbound_timeouts[p as usize]
    }

    /// `edge_requests_client_closed_total{worker,phase}`
    pub fn client_closed(&self, p: ClientClosedPhase) -> &Counter {
        &self.client_closed[p as usize]
    }
}

/// The `route` label of a request answered before a route was known (phase 1 answers, 400s, no route).
pub const NO_ROUTE: &str = "-";

/// `edge_requests_total{worker,protocol,status,route}` for one combination (registered once; the
/// registry hands back the same series to a later registration, so counts survive a reload).
fn requests_total(worker: &str, protocol: Protocol, status: u16, route: &str) -> Counter {
    counter!(
        "edge_requests_total",
        "worker" => worker.to_string(),
        "protocol" => protocol.as_str(),
        "status" => status.to_string(),
        "route" => route.to_string()
    )
}

/// One route's `edge_requests_total` handles on one worker (DESIGN.md "Metrics": `route` is the route's
/// name, else its index). A route sees few distinct statuses, so the handles are kept in a short list
/// registered on a status's first use and scanned per request (no lookup by name, no allocation once
/// the status was seen).
pub struct RouteCounters {
    worker: String,
    route: String,
    seen: RefCell<Vec<(u16, Protocol, Counter)>>,
}

impl RouteCounters {
    /// The `route` label value: the route's name, else its index.
    pub fn label(&self) -> &str {
        &self.route
    }

    /// Counts one answered request of this route.
    pub fn count(&self, protocol: Protocol, status: u16) {
        let mut seen = self.seen.borrow_mut();
        if let Some((_, _, c)) = seen.iter().find(|(s, p, _)| *s == status && *p == protocol) {
            return c.increment(1);
        }
        let c = requests_total(&self.worker, protocol, status, &self.route);
        c.increment(1);
        seen.push((status, protocol, c));
    }
}

// Active health checks (DESIGN.md "Upstream health, discovery and balancing"). The endpoint gauge and the
// check counters are written by the health thread alone (one process-wide thread, so no `worker` label);
// the fail-open counter by each worker.

label_enum!(
    /// `result` of `edge_upstream_health_checks_total`.
    CheckResult {
        /// A response with a status within `expect_status` before `timeout`.
        Pass = "pass",
        /// Connect error, timeout, or a status outside `expect_status`.
        Fail = "fail",
    }
);

/// `edge_upstream_endpoint_healthy{upstream,endpoint}`: 1 or 0; `endpoint` is the configured address text.
pub fn endpoint_healthy(upstream: &str, endpoint: &str) -> Gauge {
    gauge!("edge_upstream_endpoint_healthy", "upstream" => upstream.to_string(), "endpoint" => endpoint.to_string())
}

/// `edge_upstream_health_checks_total{upstream,result}`, indexed by [`CheckResult`]; both export from
/// registration on.
pub fn health_checks(upstream: &str) -> [Counter; 2] {
    [CheckResult::Pass, CheckResult::Fail].map(|r| {
        let c = counter!("edge_upstream_health_checks_total", "upstream" => upstream.to_string(), "result" => r.as_str());
        c.increment(0);
        c
    })
}

/// `edge_upstream_fail_open_total{worker}`: picks made while every endpoint of the upstream was unhealthy
/// by active checks; exports 0 from registration on.
pub fn fail_open(worker: usize) -> Counter {
    let c = counter!("edge_upstream_fail_open_total", "worker" => worker.to_string());
    c.increment(0);
    c
}
