//! Scraping a running [`Edge`]'s admin `/metrics`: one metric's sum, bounded polls for a value, and the
//! end-of-test checks built on them (a drop path counted and logged, nothing left active upstream).

use std::{
    thread,
    time::{Duration, Instant},
};

use super::{Client, Edge};

impl Edge {
    /// The admin `/metrics` text.
    pub fn metrics(&self) -> String {
        let r = Client::connect(self.admin).get("/metrics");
        assert_eq!(r.status, 200);
        String::from_utf8(r.body).unwrap()
    }

    /// Sum of a metric over all label sets matching every `labels` substring (e.g. `reason="bad_head"`).
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        metric_sum(&self.metrics(), name, labels)
    }

    /// Polls (every 20 ms, at most `limit`) until `pred(metric(name, labels))` holds; returns the last value.
    pub fn wait_metric_where(
        &self,
        name: &str,
        labels: &[&str],
        limit: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> f64 {
        let until = Instant::now() + limit;
        loop {
            let v = self.metric(name, labels);
            if pred(v) || Instant::now() > until {
                return v;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls until `metric(name, labels) == want` (5 s max); returns the last value seen.
    pub fn wait_metric(&self, name: &str, labels: &[&str], want: f64) -> f64 {
        self.wait_metric_where(name, labels, Duration::from_secs(5), |v| v == want)
    }

    /// Asserts a drop path was counted and logged (DESIGN.md "Status codes"): `metric{labels}` reaches
    /// `want` and a line with `event` appears, each waited on with a bound.
    pub fn assert_counted_and_logged(&self, metric: &str, labels: &[&str], want: f64, event: &str) {
        assert_eq!(
            self.wait_metric(metric, labels, want),
            want,
            "{metric}{labels:?}"
        );
        assert!(
            self.wait_log(event, Duration::from_secs(2)).is_some(),
            "no {event} log line"
        );
    }

    /// No upstream exchange is left active and no request in flight (fault cases end with nothing leaked).
    pub fn assert_upstream_settled(&self) {
        assert_eq!(
            self.wait_metric("edge_upstream_connections", &["state=\"active\""], 0.0),
            0.0,
            "an upstream exchange stayed active"
        );
        assert_eq!(
            self.wait_metric("edge_requests_in_flight", &[], 0.0),
            0.0,
            "a request stayed in flight"
        );
    }
}

/// Sums the samples of `name` whose label text contains every `labels` entry.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' '))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
