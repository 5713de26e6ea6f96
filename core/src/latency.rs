//! `edge_request_duration_seconds{worker}` and `edge_tls_handshake_duration_seconds{worker}` as per-worker
//! fixed buckets (DESIGN.md "Metrics": buckets
//! 0.0005 s to 60 s). The Prometheus exporter's own histograms store every sample and allocate a block
//! per 64 of them; a request must not allocate in steady state, so each worker counts into its own
//! buckets instead, and the admin thread renders them beside the exporter's text.
//!
//! Each histogram has exactly one writer (its worker thread; a restarted worker takes over the dead one's
//! histogram), so recording is a relaxed load and store per field, never a read-modify-write that
//! another core contends for. The admin thread only reads.

use std::{
    fmt::Write,
    sync::{
        atomic::{AtomicU64, Ordering::Relaxed},
        Arc, Mutex,
    },
    time::Duration,
};

/// Upper bounds of the buckets, seconds (`le` labels); a last `+Inf` bucket follows.
pub const BOUNDS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

const fn nanos(secs: f64) -> u64 {
    (secs * 1e9) as u64
}

const BOUNDS_NANOS: [u64; 16] = {
    let mut out = [0u64; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = nanos(BOUNDS[i]);
        i += 1;
    }
    out
};

/// One worker's request durations: a count per bucket (not cumulative) and the sum.
#[derive(Debug, Default)]
pub struct DurationHistogram {
    buckets: [AtomicU64; 17],
    sum_nanos: AtomicU64,
}

impl DurationHistogram {
    /// Records one request duration. Must be called from the owning worker only (single writer).
    pub fn record(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BOUNDS_NANOS.iter().position(|&b| n <= b).unwrap_or(16);
        bump(&self.buckets[i], 1);
        bump(&self.sum_nanos, n);
    }

    /// Cumulative bucket counts (the last is `+Inf`, the total) and the sum in seconds.
    pub fn snapshot(&self) -> ([u64; 17], f64) {
        let mut cumulative = [0u64; 17];
        let mut total = 0u64;
        for (c, b) in cumulative.iter_mut().zip(&self.buckets) {
            total += b.load(Relaxed);
            *c = total;
        }
        (cumulative, self.sum_nanos.load(Relaxed) as f64 / 1e9)
    }
}

/// Single-writer increment: a plain load and store (no locked instruction on the request path).
fn bump(a: &AtomicU64, by: u64) {
    a.store(a.load(Relaxed).wrapping_add(by), Relaxed);
}

/// One histogram series name with a histogram per worker.
struct Family {
    name: &'static str,
    help: &'static str,
    workers: Mutex<Vec<(usize, Arc<DurationHistogram>)>>,
}

static REQUESTS: Family = Family {
    name: "edge_request_duration_seconds",
    help: "Request duration, first byte to last byte of the response.",
    workers: Mutex::new(Vec::new()),
};

static TLS_HANDSHAKES: Family = Family {
    name: "edge_tls_handshake_duration_seconds",
    help: "TLS handshake duration, accept to finished handshake.",
    workers: Mutex::new(Vec::new()),
};

impl Family {
    fn for_worker(&self, id: usize) -> Arc<DurationHistogram> {
        let mut reg = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, h)) = reg.iter().find(|(w, _)| *w == id) {
            return h.clone();
        }
        let h = Arc::new(DurationHistogram::default());
        reg.push((id, h.clone()));
        reg.sort_by_key(|(w, _)| *w);
        h
    }

    fn render(&self, out: &mut String) {
        let reg = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if reg.is_empty() {
            return;
        }
        let name = self.name;
        let _ = writeln!(out, "# HELP {name} {}", self.help);
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (w, h) in reg.iter() {
            let (cumulative, sum) = h.snapshot();
            for (le, c) in BOUNDS.iter().zip(&cumulative) {
                let _ = writeln!(out, "{name}_bucket{{worker=\"{w}\",le=\"{le}\"}} {c}");
            }
            let total = cumulative[16];
            let _ = writeln!(out, "{name}_bucket{{worker=\"{w}\",le=\"+Inf\"}} {total}");
            let _ = writeln!(out, "{name}_sum{{worker=\"{w}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{worker=\"{w}\"}} {total}");
        }
    }
}

/// The request-duration histogram of worker `id`, created on first use; a restarted worker gets its
/// predecessor's, so the series keeps counting up. Called at worker start only (takes a lock).
pub fn for_worker(id: usize) -> Arc<DurationHistogram> {
    REQUESTS.for_worker(id)
}

/// The TLS handshake-duration histogram of worker `id` (`edge_tls_handshake_duration_seconds`), as
/// [`for_worker`].
pub fn tls_handshakes_for_worker(id: usize) -> Arc<DurationHistogram> {
    TLS_HANDSHAKES.for_worker(id)
}

/// Appends every worker's histograms to `out` in the Prometheus text format (version 0.0.4).
pub fn render(out: &mut String) {
    REQUESTS.render(out);
    TLS_HANDSHAKES.render(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_upper_bounds_inclusive_and_cumulative() {
        let h = DurationHistogram::default();
        let ms = Duration::from_millis;
        for d in [
            Duration::from_micros(500),
            ms(1),
            ms(2),
            ms(70_000),
            ms(60_000),
        ] {
            h.record(d);
        }
        let (c, sum) = h.snapshot();
        assert_eq!(c[0], 1, "0.5 ms falls in le=0.0005");
        assert_eq!(c[1], 2, "1 ms falls in le=0.001");
        assert_eq!(c[2], 3, "2 ms falls in le=0.0025");
        assert_eq!(c[15], 4, "60 s falls in le=60");
        assert_eq!(c[16], 5, "70 s only in +Inf");
        assert!((sum - 130.0035).abs() < 1e-6, "{sum}");
    }

    #[test]
    fn render_is_prometheus_text() {
        let h = for_worker(7);
        h.record(Duration::from_millis(3));
        assert!(
            Arc::ptr_eq(&h, &for_worker(7)),
            "a restarted worker keeps its histogram"
        );
        let mut out = String::new();
        render(&mut out);
        assert!(out.contains("# TYPE edge_request_duration_seconds histogram\n"));
        assert!(
            out.contains("edge_request_duration_seconds_bucket{worker=\"7\",le=\"0.0025\"} 0\n")
        );
        assert!(out.contains("edge_request_duration_seconds_bucket{worker=\"7\",le=\"0.005\"} 1\n"));
        assert!(out.contains("edge_request_duration_seconds_bucket{worker=\"7\",le=\"+Inf\"} 1\n"));
        assert!(out.contains("edge_request_duration_seconds_count{worker=\"7\"} 1\n"));
    }
}
