//! One upstream's counters on one worker (DESIGN.md "Observability": `edge_upstream_requests_total`,
//! `edge_upstream_errors_total` and `edge_upstream_timeouts_total` carry `upstream`; the value comes from
//! the configuration, so the label set stays bounded). Registered when the worker builds the upstream
//! (at start and at every reload), never per request; every label combination exports from the start.
//!
//! [`EndpointMetrics`]: `edge_upstream_endpoint_requests_total{worker,upstream,endpoint,status_class}`,
//! one set per endpoint, registered when the worker builds the endpoint set (at start, at reload and
//! when a re-resolution changes the addresses). `endpoint` is the endpoint's resolved address
//! (`IP:port`), as in the upstream log lines: a name resolving to several addresses gives one series per
//! address, so an operator sees which one fails. The values stay bounded by the addresses the
//! configuration's names resolve to over the process's life.

use metrics::{counter, Counter};

use super::{UpstreamErrorLabel, UpstreamPhase};

/// The counters of one upstream on one worker.
#[derive(Clone)]
pub struct UpstreamMetrics {
    /// `edge_upstream_requests_total{worker,upstream}`: attempts sent, retries included.
    pub requests: Counter,
    /// `edge_upstream_retries_total{worker,upstream}`
    pub retries: Counter,
    /// `edge_upstream_errors_total{worker,upstream,kind}`, in [`UpstreamErrorLabel::ALL`] order.
    errors: Vec<Counter>,
    /// `edge_upstream_timeouts_total{worker,upstream,phase}`, in [`UpstreamPhase::ALL`] order.
    timeouts: Vec<Counter>,
}

impl UpstreamMetrics {
    /// Registers the counters of upstream `upstream` on worker `worker`.
    pub fn register(worker: usize, upstream: &str) -> Self {
        let (w, u) = (worker.to_string(), upstream.to_string());
        let by =
            |name: &'static str, label: &'static str, values: &[&'static str]| -> Vec<Counter> {
                values
                .iter()
                .map(
                    |v| counter!(name, "worker" => w.clone(), "upstream" => u.clone(), label => *v),
                )
                .collect()
            };
        let m = UpstreamMetrics {
            requests: counter!("edge_upstream_requests_total", "worker" => w.clone(), "upstream" => u.clone()),
            retries: counter!("edge_upstream_retries_total", "worker" => w.clone(), "upstream" => u.clone()),
            errors: by(
                "edge_upstream_errors_total",
                "kind",
                UpstreamErrorLabel::NAMES,
            ),
            timeouts: by(
                "edge_upstream_timeouts_total",
                "phase",
                UpstreamPhase::NAMES,
            ),
        };
        for c in m
            .errors
            .iter()
            .chain(&m.timeouts)
            .chain([&m.requests, &m.retries])
        {
            c.increment(0);
        }
        m
    }

    /// Counters that count nowhere (tests, the health thread).
    pub fn noop() -> Self {
        UpstreamMetrics {
            requests: Counter::noop(),
            retries: Counter::noop(),
            errors: UpstreamErrorLabel::ALL
                .iter()
                .map(|_| Counter::noop())
                .collect(),
            timeouts: UpstreamPhase::ALL.iter().map(|_| Counter::noop()).collect(),
        }
    }

    /// `edge_upstream_errors_total{worker,upstream,kind}`
    pub fn error(&self, k: UpstreamErrorLabel) -> &Counter {
        &self.errors[k as usize]
    }

    /// `edge_upstream_timeouts_total{worker,upstream,phase}`
    pub fn timeout(&self, p: UpstreamPhase) -> &Counter {
        &self.timeouts[p as usize]
    }
}

label_enum!(
    /// `status_class` of `edge_upstream_endpoint_requests_total`: the class of the final response head
    /// an attempt got, or `error` for an attempt that got none (connect refused or timed out, reset,
    /// closed, malformed head, write or request timeout, zombie).
    StatusClass {
        /// 1xx (a `101 Switching Protocols`; interim responses are not counted).
        Informational = "1xx",
        /// 2xx.
        Success = "2xx",
        /// 3xx.
        Redirection = "3xx",
        /// 4xx.
        ClientError = "4xx",
        /// 5xx.
        ServerError = "5xx",
        /// No response head: the attempt failed.
        Error = "error",
    }
);

impl StatusClass {
    /// The class of `status` (100..=599; anything else counts as `error`).
    pub const fn of(status: u16) -> Self {
        match status {
            100..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirection,
            400..=499 => StatusClass::ClientError,
            500..=599 => StatusClass::ServerError,
            _ => StatusClass::Error,
        }
    }
}

/// The counters of one endpoint of one upstream on one worker:
/// `edge_upstream_endpoint_requests_total{worker,upstream,endpoint,status_class}`, one per attempt sent
/// to the endpoint (retries included), by the class of the response head it got.
#[derive(Clone)]
pub struct EndpointMetrics {
    /// In [`StatusClass::ALL`] order.
    classes: [Counter; 6],
}

impl EndpointMetrics {
    /// Registers the counters of `endpoint` (its address as text) of `upstream` on worker `worker`;
    /// every class exports 0 from here on.
    pub fn register(worker: usize, upstream: &str, endpoint: &str) -> Self {
        let (w, u, e) = (
            worker.to_string(),
            upstream.to_string(),
            endpoint.to_string(),
        );
        let classes = std::array::from_fn(|i| {
            let c = StatusClass::ALL[i];
            let counter = counter!("edge_upstream_endpoint_requests_total", "worker" => w.clone(), "upstream" => u.clone(), "endpoint" => e.clone(), "status_class" => c.as_str());
            counter.increment(0);
            counter
        });
        EndpointMetrics { classes }
    }

    /// Counters that count nowhere (tests, the health thread).
    pub fn noop() -> Self {
        EndpointMetrics {
            classes: std::array::from_fn(|_| Counter::noop()),
        }
    }

    /// Counts an attempt that got a final response head with `status`.
    pub fn answered(&self, status: u16) {
        self.classes[StatusClass::of(status) as usize].increment(1);
    }

    /// Counts an attempt that got no response head.
    pub fn failed(&self) {
        self.classes[StatusClass::Error as usize].increment(1);
    }
}
