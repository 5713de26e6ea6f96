//! The `# HELP` text of every metric edge exports (DESIGN.md "Metrics", "Observability": each metric has
//! a `# HELP` line), given to the recorder once at install. The two latency histograms write their own
//! (`crate::latency`).

use metrics::{describe_counter, describe_gauge};

/// Counters: (name, help).
const COUNTERS: &[(&str, &str)] = &[
    (
        "edge_requests_total",
        "Requests answered, by worker, protocol, status code and route (its name, else its index; \"-\" for a request answered before routing).",
    ),
    (
        "edge_requests_invalid_total",
        "Requests refused as invalid (400/405/413/414/431/501), by reason.",
    ),
    (
        "edge_requests_limited_total",
        "Requests refused by a rate limit (429), by worker and limit.",
    ),
    (
        "edge_mirror_requests_total",
        "Mirror copies of requests, by worker and how they ended (ok, error, timeout, dropped).",
    ),
    (
        "edge_requests_shed_total",
        "Requests refused for load (503), by reason.",
    ),
    (
        "edge_responses_truncated_total",
        "Responses cut short after their head went out.",
    ),
    (
        "edge_connections_total",
        "Client connections accepted, by worker and protocol.",
    ),
    (
        "edge_connections_evicted_total",
        "Idle client connections closed to make room near max_connections.",
    ),
    (
        "edge_connections_shed_total",
        "Client connections refused or closed for load or policy, by reason.",
    ),
    (
        "edge_connection_panics_total",
        "Connection tasks that panicked (only that connection closed).",
    ),
    (
        "edge_inbound_timeouts_total",
        "Client-side deadlines that expired, by phase.",
    ),
    (
        "edge_requests_client_closed_total",
        "Requests whose client closed its connection (or reset its HTTP/2 stream) before the response was complete, by phase: request (before edge had an answer; logged as 499), response.",
    ),
    (
        "edge_upstream_requests_total",
        "Requests sent to upstreams (attempts, retries included).",
    ),
    ("edge_upstream_errors_total", "Upstream failures, by kind."),
    (
        "edge_upstream_timeouts_total",
        "Upstream deadlines that expired (connect, write, request, zombie), by phase.",
    ),
    (
        "edge_upstream_endpoint_requests_total",
        "Attempts sent to each upstream endpoint, by the class of the response head (1xx..5xx), or error when none came.",
    ),
    (
        "edge_upstream_retries_total",
        "Requests sent again after a retry-safe upstream failure.",
    ),
    (
        "edge_upstream_tls_handshakes_total",
        "TLS handshakes with upstreams, by result.",
    ),
    (
        "edge_upstream_fail_open_total",
        "Requests served by endpoints all marked unhealthy (fail open).",
    ),
    (
        "edge_upstream_health_checks_total",
        "Active health check probes, by upstream and result.",
    ),
    (
        "edge_tls_handshakes_total",
        "TLS handshakes with clients, by result.",
    ),
    (
        "edge_http2_resets_total",
        "HTTP/2 streams reset, by the side that reset them.",
    ),
    (
        "edge_http2_goaways_total",
        "HTTP/2 connections ended with GOAWAY, by reason.",
    ),
    (
        "edge_worker_restarts_total",
        "Worker threads restarted by the supervisor.",
    ),
    (
        "edge_relay_buffer_waits_total",
        "Response relays that waited for the worker's relay-memory budget.",
    ),
    (
        "edge_relay_spliced_total",
        "Response bodies whose rest went from the upstream's socket to the client's by splice(2), with no copy through a relay buffer.",
    ),
    (
        "edge_request_spliced_total",
        "Request bodies whose rest went from the client's socket to the upstream's by splice(2), with no copy through a buffer.",
    ),
    (
        "edge_access_log_dropped_total",
        "Access lines dropped because the access-log writer was behind (or could not write), by worker.",
    ),
    (
        "edge_worker_allocations_total",
        "Allocations on a worker thread (count-alloc builds only).",
    ),
    (
        "edge_worker_reallocations_total",
        "Reallocations on a worker thread (count-alloc builds only).",
    ),
];

/// Gauges: (name, help).
const GAUGES: &[(&str, &str)] = &[
    (
        "edge_build_info",
        "Always 1; the labels carry the version and the io driver in use.",
    ),
    (
        "edge_connections_max",
        "The effective max_connections (lowered to fit the open-file limit).",
    ),
    (
        "edge_connections_active",
        "Open client connections, by worker.",
    ),
    (
        "edge_requests_in_flight",
        "Requests being forwarded, by worker.",
    ),
    (
        "edge_upstream_connections",
        "Upstream connections, by worker, state (idle, active) and protocol (http1: pooled idle and in use; h2: without and with streams in flight).",
    ),
    (
        "edge_upstream_h2_streams_active",
        "Streams in flight on HTTP/2 upstream connections, by worker.",
    ),
    (
        "edge_upstream_h2_pings_total",
        "Liveness PINGs sent on HTTP/2 upstream connections, by worker and result (answered, unanswered: judged a zombie first).",
    ),
    (
        "edge_upstream_endpoint_healthy",
        "1 when active health checks pass for the endpoint, else 0.",
    ),
    (
        "edge_http2_streams_active",
        "Open HTTP/2 streams from clients, by worker.",
    ),
    (
        "edge_relay_buffer_bytes",
        "Bytes of response relay buffers a worker holds.",
    ),
    (
        "edge_tls_certificate_expiry_timestamp_seconds",
        "Expiry of each served certificate, Unix seconds (NaN once no longer served).",
    ),
];

/// Every metric name edge exports through the recorder, for tests.
pub fn names() -> impl Iterator<Item = &'static str> {
    COUNTERS.iter().chain(GAUGES).map(|(name, _)| *name)
}

/// Gives the recorder the help text of every metric.
pub fn describe_all() {
    for (name, help) in COUNTERS {
        describe_counter!(*name, *help);
    }
    for (name, help) in GAUGES {
        describe_gauge!(*name, *help);
    }
}
