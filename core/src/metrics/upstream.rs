//! One upstream's counters on one worker (DESIGN.md "Observability": `edge_upstream_requests_total`,
//! `edge_upstream_errors_total` and `edge_upstream_timeouts_total` carry `upstream`; the value comes from
//! the configuration, so the label set stays bounded). Registered when the worker builds the upstream
//! (at start and at every reload), never per request; every label combination exports from the start.

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
