//! The invariants `edge-bench matrix` checks around every case (DESIGN.md, Fault matrix): the
//! health prober and its verdict, the counters that moved and the log lines that must account for
//! them, and the fd slots a dead worker leaves behind.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::metrics::{count_events, metric_sum};
use crate::support::probe;
use crate::support::stack::HEALTH_PATH;
use crate::support::table::{ms, Quantiles};

/// A health probe slower than this fails the case (DESIGN.md, Fault matrix).
pub const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// The p99 goal for health probes (reported, not asserted).
pub const P99_GOAL: Duration = Duration::from_millis(5);

/// Time between health probes during a case.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// A counter of DESIGN.md "Status codes" and the log events that account for it.
#[derive(Debug, Clone, Copy)]
pub struct CounterEvent {
    /// Metric name.
    pub metric: &'static str,
    /// Labels a sample must carry to count.
    pub filter: &'static [(&'static str, &'static str)],
    /// Any of these events is a matching line.
    pub events: &'static [&'static str],
}

const fn ce(
    metric: &'static str,
    filter: &'static [(&'static str, &'static str)],
    events: &'static [&'static str],
) -> CounterEvent {
    CounterEvent {
        metric,
        filter,
        events,
    }
}

/// Counter → log event, from DESIGN.md's status table (plus the lifecycle counters).
pub const COUNTER_EVENTS: &[CounterEvent] = &[
    ce("edge_requests_invalid_total", &[], &["request.invalid"]),
    ce(
        "edge_connections_shed_total",
        &[("reason", "proxy_protocol")],
        &["connection.rejected"],
    ),
    ce(
        "edge_upstream_fail_open_total",
        &[],
        &["upstream.fail_open"],
    ),
    ce(
        "edge_inbound_timeouts_total",
        &[("phase", "request")],
        &["request.timeout"],
    ),
    ce(
        "edge_inbound_timeouts_total",
        &[("phase", "send")],
        &["response.truncated"],
    ),
    ce(
        "edge_upstream_errors_total",
        &[("kind", "refused")],
        &["upstream.error"],
    ),
    ce(
        "edge_upstream_errors_total",
        &[("kind", "reset")],
        &["upstream.error"],
    ),
    ce(
        "edge_upstream_errors_total",
        &[("kind", "bad_response")],
        &["upstream.error"],
    ),
    ce(
        "edge_upstream_errors_total",
        &[("kind", "closed_early")],
        &["upstream.error"],
    ),
    ce(
        "edge_upstream_errors_total",
        &[("kind", "ejected")],
        &["upstream.ejected"],
    ),
    ce(
        "edge_upstream_timeouts_total",
        &[("phase", "connect")],
        &["upstream.timeout"],
    ),
    ce(
        "edge_upstream_timeouts_total",
        &[("phase", "write")],
        &["upstream.timeout"],
    ),
    ce(
        "edge_upstream_timeouts_total",
        &[("phase", "request")],
        &["upstream.timeout"],
    ),
    ce(
        "edge_upstream_timeouts_total",
        &[("phase", "zombie")],
        &["upstream.zombie"],
    ),
    ce(
        "edge_responses_truncated_total",
        &[],
        &["response.truncated"],
    ),
    ce(
        "edge_connections_shed_total",
        &[("reason", "limit")],
        &["connection.shed"],
    ),
    ce(
        "edge_connections_shed_total",
        &[("reason", "fd_limit")],
        &["connection.shed"],
    ),
    ce("edge_requests_shed_total", &[], &["request.shed"]),
    ce("edge_connection_panics_total", &[], &["connection.panic"]),
    ce(
        "edge_http2_goaways_total",
        &[("reason", "flood")],
        &["http2.goaway"],
    ),
    ce(
        "edge_http2_resets_total",
        &[("side", "edge")],
        &["request.invalid", "response.truncated"],
    ),
    ce("edge_worker_restarts_total", &[], &["worker.restarted"]),
];

/// The summary line of rate-limited warn logs.
pub const SUPPRESSED_EVENT: &str = "log.suppressed";

/// Counters that moved between `before` and `after` (Prometheus texts) without a matching line in
/// `log` (edge's output during the case), as text; a `log.suppressed` summary in `log` accounts
/// for any counter.
pub fn unlogged_counters(before: &str, after: &str, log: &str) -> Vec<String> {
    let suppressed = count_events(log, SUPPRESSED_EVENT) > 0;
    COUNTER_EVENTS
        .iter()
        .filter_map(|c| {
            let delta =
                metric_sum(after, c.metric, c.filter) - metric_sum(before, c.metric, c.filter);
            let lines: usize = c.events.iter().map(|e| count_events(log, e)).sum();
            (delta > 0.0 && lines == 0 && !suppressed).then(|| {
                let labels: Vec<String> = c
                    .filter
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{v}\""))
                    .collect();
                format!(
                    "{}{{{}}} +{delta} but no {} log line",
                    c.metric,
                    labels.join(","),
                    c.events.join("/")
                )
            })
        })
        .collect()
}

/// The counters of [`COUNTER_EVENTS`] that moved, as `name{labels} +n` (for the report).
pub fn moved_counters(before: &str, after: &str) -> Vec<String> {
    COUNTER_EVENTS
        .iter()
        .filter_map(|c| {
            let delta =
                metric_sum(after, c.metric, c.filter) - metric_sum(before, c.metric, c.filter);
            (delta > 0.0).then(|| {
                let short = c
                    .metric
                    .trim_start_matches("edge_")
                    .trim_end_matches("_total");
                match c.filter.first() {
                    Some((_, v)) => format!("{short}{{{v}}}+{delta}"),
                    None => format!("{short}+{delta}"),
                }
            })
        })
        .collect()
}

/// The part of edge's output written after `before` was read. The output is a bounded tail, so
/// when its start was dropped the end of `before` is searched for in `after`.
pub fn log_since(before: &str, after: &str) -> String {
    if let Some(rest) = after.strip_prefix(before) {
        return rest.to_string();
    }
    let (b, a) = (before.as_bytes(), after.as_bytes());
    let key = &b[b.len().saturating_sub(512)..];
    if key.is_empty() {
        return after.to_string();
    }
    match a.windows(key.len()).rposition(|w| w == key) {
        Some(i) => String::from_utf8_lossy(&a[i + key.len()..]).into_owned(),
        None => after.to_string(),
    }
}

/// fd slots left reserved by workers that died: for each `worker.orphans_closed` line, its `downstream`
/// plus `upstream` sockets and 2 for the dead runtime's ring (or epoll) fd and eventfd.
pub fn orphaned_fds(log: &str) -> usize {
    let field = |line: &str, key: &str| -> usize {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.trim_matches('"').parse().ok())
            .unwrap_or(0)
    };
    log.lines()
        .filter(|l| l.contains("worker.orphans_closed"))
        .map(|l| field(l, "downstream=") + field(l, "upstream=") + 2)
        .sum()
}

/// Health probe samples: (latency, status or error).
pub type Samples = Vec<(Duration, Result<u16, String>)>;

/// Health verdict of a case's probes: the report text, and failures (a failed probe, a probe over
/// [`PROBE_LIMIT`], or no probe at all).
pub fn health_verdict(samples: &Samples) -> (String, Vec<String>) {
    let mut failures = Vec::new();
    let lat: Vec<Duration> = samples.iter().map(|(d, _)| *d).collect();
    let bad: Vec<&(Duration, Result<u16, String>)> =
        samples.iter().filter(|(_, r)| *r != Ok(200)).collect();
    if let Some((_, r)) = bad.first() {
        failures.push(format!(
            "{} of {} health probes failed, first: {}",
            bad.len(),
            samples.len(),
            match r {
                Ok(s) => format!("status {s}"),
                Err(e) => e.clone(),
            }
        ));
    }
    let slow = lat.iter().filter(|d| **d > PROBE_LIMIT).count();
    if slow > 0 {
        failures.push(format!("{slow} health probe(s) over {}", ms(PROBE_LIMIT)));
    }
    let text = match Quantiles::of(&lat) {
        Some(q) => format!(
            "health p99 {} n={}{}",
            ms(q.p99),
            samples.len(),
            if q.p99 <= P99_GOAL {
                ""
            } else {
                " (>5ms goal)"
            }
        ),
        None => {
            failures.push("no health probe was taken".into());
            "health: no probe".into()
        }
    };
    (text, failures)
}

/// Probes `GET /_health` on fresh connections every [`PROBE_INTERVAL`] until finished (at least
/// once).
pub struct Prober {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Samples>,
}

impl Prober {
    /// Starts probing `addr`.
    ///
    /// # Errors
    /// Thread-spawn failures.
    pub fn start(addr: SocketAddr) -> io::Result<Prober> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("matrix-prober".into())
            .spawn(move || {
                let mut out = Vec::new();
                loop {
                    let t0 = Instant::now();
                    let r = probe::get(addr, HEALTH_PATH, Duration::from_secs(2))
                        .map(|r| r.status)
                        .map_err(|e| e.to_string());
                    out.push((t0.elapsed(), r));
                    if flag.load(Ordering::SeqCst) {
                        return out;
                    }
                    std::thread::sleep(PROBE_INTERVAL.saturating_sub(t0.elapsed()));
                    if flag.load(Ordering::SeqCst) {
                        return out;
                    }
                }
            })?;
        Ok(Prober { stop, thread })
    }

    /// Stops and returns the samples.
    pub fn finish(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "edge_upstream_timeouts_total{worker=\"0\",phase=\"zombie\"} 1\n\
                          edge_requests_invalid_total{worker=\"0\",reason=\"bad_head\"} 2\n";
    const AFTER: &str = "edge_upstream_timeouts_total{worker=\"0\",phase=\"zombie\"} 2\n\
                         edge_upstream_timeouts_total{worker=\"1\",phase=\"connect\"} 1\n\
                         edge_requests_invalid_total{worker=\"0\",reason=\"bad_head\"} 2\n";

    #[test]
    fn moved_counters_need_their_event() {
        let log = "WARN event=\"upstream.zombie\" worker=0\n";
        let missing = unlogged_counters(BEFORE, AFTER, log);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].contains("phase=\"connect\""), "{missing:?}");
        let both = "event=\"upstream.zombie\"\nevent=\"upstream.timeout\" phase=\"connect\"\n";
        assert!(unlogged_counters(BEFORE, AFTER, both).is_empty());
        // A rate-limit summary accounts for suppressed lines.
        let summary = "WARN event=\"log.suppressed\" suppressed=40\n";
        assert!(unlogged_counters(BEFORE, AFTER, summary).is_empty());
        // Nothing moved: nothing is required.
        assert!(unlogged_counters(AFTER, AFTER, "").is_empty());
        assert_eq!(
            moved_counters(BEFORE, AFTER),
            vec![
                "upstream_timeouts{connect}+1",
                "upstream_timeouts{zombie}+1"
            ]
        );
    }

    #[test]
    fn every_status_table_counter_is_mapped() {
        let event_of = |m: &str, f: &[(&str, &str)]| {
            COUNTER_EVENTS
                .iter()
                .find(|c| c.metric == m && c.filter == f)
                .map(|c| c.events[0])
        };
        assert_eq!(
            event_of("edge_requests_invalid_total", &[]),
            Some("request.invalid")
        );
        assert_eq!(
            event_of("edge_inbound_timeouts_total", &[("phase", "request")]),
            Some("request.timeout")
        );
        assert_eq!(
            event_of("edge_responses_truncated_total", &[]),
            Some("response.truncated")
        );
        assert_eq!(
            event_of("edge_connections_shed_total", &[("reason", "limit")]),
            Some("connection.shed")
        );
        assert_eq!(
            event_of("edge_requests_shed_total", &[]),
            Some("request.shed")
        );
        assert_eq!(
            event_of("edge_upstream_timeouts_total", &[("phase", "zombie")]),
            Some("upstream.zombie")
        );
        assert_eq!(
            event_of("edge_upstream_errors_total", &[("kind", "refused")]),
            Some("upstream.error")
        );
    }

    #[test]
    fn log_since_survives_a_trimmed_tail() {
        assert_eq!(log_since("a\nb\n", "a\nb\nc\n"), "c\n");
        // The start of the buffer was dropped: find the end of `before` in `after`.
        let kept = "L".repeat(600) + "\n";
        assert_eq!(
            log_since(&format!("dropped{kept}"), &format!("{kept}c\n")),
            "c\n"
        );
        assert_eq!(log_since("", "c\n"), "c\n");
    }

    #[test]
    fn health_verdict_fails_only_on_errors_and_slow_probes() {
        let ms = Duration::from_millis;
        let fine: Samples = (1..=100).map(|i| (ms(i % 4), Ok(200))).collect();
        let (text, f) = health_verdict(&fine);
        assert!(
            f.is_empty() && text.contains("n=100") && !text.contains("goal"),
            "{text}"
        );
        let slowish: Samples = vec![(ms(1), Ok(200)), (ms(40), Ok(200))];
        let (text, f) = health_verdict(&slowish);
        assert!(f.is_empty() && text.contains(">5ms goal"), "{text}");
        let bad: Samples = vec![(ms(1), Ok(503)), (ms(1500), Ok(200))];
        assert_eq!(health_verdict(&bad).1.len(), 2);
        assert_eq!(health_verdict(&Vec::new()).1.len(), 1);
    }

    #[test]
    fn orphaned_fds_counts_each_dead_worker() {
        let log = "x\n2026 WARN closed the connections event=\"worker.orphans_closed\" worker=0 downstream=9 upstream=1\ny";
        assert_eq!(orphaned_fds(log), 12);
        assert_eq!(orphaned_fds("nothing"), 0);
    }
}
