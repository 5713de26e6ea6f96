//! The Markdown tables `edge-bench compare` prints: every run of a workload, per-target medians
//! with their ratio to nginx, edge against each other target, and the summary of ratios to nginx
//! over all workloads. The statistics come from [`crate::compare::report`].

use crate::compare::report::{ratios, summarize, vs_nginx, Sample, VsNginx, LOAD_BOUND_UTIL};
use crate::compare::target::TargetKind;
use crate::compare::workload::Workload;
use crate::support::table::{ms, Table};

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |u| format!("{:.0} %", u * 100.0))
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |c| format!("{c:.2}"))
}

fn x(v: Option<f64>) -> String {
    v.filter(|r| r.is_finite())
        .map_or("-".to_string(), |r| format!("{r:.2}x"))
}

/// KiB as MiB with one decimal.
fn mib(kib: Option<f64>) -> String {
    kib.map_or("-".to_string(), |k| format!("{:.1} MiB", k / 1024.0))
}

fn opt_ms(d: Option<std::time::Duration>) -> String {
    d.map_or("-".to_string(), ms)
}

/// Every run of one workload, in the order it ran.
pub fn rounds_table(samples: &[Sample]) -> Table {
    let mut t = Table::new(&[
        "round",
        "target",
        "req/s",
        "p50",
        "p99",
        "p99.9",
        "CPU s/100k req",
        "CPU util",
        "runq wait",
        "peak RSS",
        "note",
    ]);
    for s in samples {
        let mut note = Vec::new();
        if s.load_bound() {
            let starved = s.utilisation().unwrap_or(0.0) + s.wait_share().unwrap_or(0.0);
            note.push(if starved >= LOAD_BOUND_UTIL * s.cpu_allowance() {
                "load-bound (CPU shared: see runq wait)".to_string()
            } else {
                "load-bound".to_string()
            });
        }
        if let Some(t) = s.throttled_share() {
            note.push(format!("throttled {:.0} %", t * 100.0));
        }
        if s.wrk.errors() > 0 {
            note.push(format!("errors: {}", s.wrk.error_detail()));
        }
        if let Some(n) = s.workload.messages_per_answer().filter(|&n| n > 1) {
            note.push(format!(
                "{:.0} messages/s ({n} per answer)",
                s.wrk.req_per_sec * n as f64
            ));
        }
        if let Some(c) = s.upstream_conns {
            note.push(format!("upstream conns {c}"));
        }
        t.row([
            s.round.to_string(),
            s.kind.name().to_string(),
            format!("{:.0}", s.wrk.req_per_sec),
            ms(s.wrk.p50),
            ms(s.wrk.p99),
            opt_ms(s.wrk.p999()),
            num(s.cpu_s_per_100k()),
            pct(s.utilisation()),
            pct(s.wait_share()),
            mib(s.rss_kib.map(|k| k as f64)),
            note.join("; "),
        ]);
    }
    t
}

/// Per-target medians of one workload, with req/s and CPU per request against nginx.
pub fn summary_table(samples: &[Sample], kinds: &[TargetKind]) -> Table {
    let mut t = Table::new(&[
        "target",
        "req/s",
        "vs nginx",
        "p50",
        "p99",
        "p99.9",
        "CPU s/100k req",
        "vs nginx",
        "CPU util",
        "runq wait",
        "peak RSS",
        "load-bound",
        "errors",
    ]);
    let vs = vs_nginx(samples, kinds);
    for s in kinds.iter().filter_map(|&k| summarize(samples, k)) {
        let mark = if s.all_load_bound { " *" } else { "" };
        let r = vs.iter().find(|r| r.kind == s.kind);
        t.row([
            format!("{}{mark}", s.kind.name()),
            format!("{:.0}", s.req_per_sec),
            x(r.and_then(|r| r.req_per_sec)),
            ms(s.p50),
            ms(s.p99),
            opt_ms(s.p999),
            num(s.cpu_s_per_100k()),
            x(r.and_then(|r| r.cpu)),
            pct(s.utilisation),
            pct(s.wait_share),
            mib(s.rss_kib),
            if s.kind.is_proxy() {
                format!("{}/{}", s.load_bound, s.rounds)
            } else {
                "n/a".to_string()
            },
            s.errors.to_string(),
        ]);
    }
    t
}

/// edge over nginx, HAProxy and direct, in one workload.
pub fn ratio_table(samples: &[Sample], kinds: &[TargetKind]) -> Table {
    let mut t = Table::new(&[
        "ratio",
        "req/s (medians)",
        "req/s (same-round median)",
        "CPU per request",
        "CPU per request (same-round median, range)",
    ]);
    for r in ratios(samples, kinds) {
        let mark = if r.load_bound { " *" } else { "" };
        t.row([
            format!("{}/{}{mark}", r.edge.name(), r.other.name()),
            x(Some(r.req_per_sec)),
            x(r.per_round),
            x(r.cpu_per_req),
            match r.cpu_per_round {
                Some(c) => format!("{} ({:.2}-{:.2})", x(Some(c.median)), c.min, c.max),
                None => "n/a".to_string(),
            },
        ]);
    }
    t
}

/// Ratios to nginx over all workloads: one row per target other than nginx, one column per
/// workload, each cell `req/s ×, CPU/request ×, p99 ×`.
pub fn nginx_summary_table(
    samples: &[Sample],
    kinds: &[TargetKind],
    workloads: &[Workload],
) -> Table {
    let mut header = vec!["target (req/s · CPU/req · p99, vs nginx)".to_string()];
    header.extend(workloads.iter().map(|w| w.name().to_string()));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&header);
    let per_workload: Vec<Vec<VsNginx>> = workloads
        .iter()
        .map(|&w| vs_nginx(&crate::compare::report::of_workload(samples, w), kinds))
        .collect();
    for &k in kinds.iter().filter(|&&k| k != TargetKind::Nginx) {
        let mut row = vec![k.name().to_string()];
        for vs in &per_workload {
            row.push(match vs.iter().find(|r| r.kind == k) {
                Some(r) => format!("{} · {} · {}", x(r.req_per_sec), x(r.cpu), x(r.p99)),
                None => "-".to_string(),
            });
        }
        t.row(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::tests::sample;

    #[test]
    fn all_load_bound_is_marked() {
        let s = vec![sample(1, TargetKind::Haproxy, 10_000.0, Some(1_000))];
        let text = summary_table(&s, &[TargetKind::Haproxy]).render_markdown();
        assert!(text.contains("| haproxy * |"), "{text}");
        assert!(text.contains("| 5.000 ms |"), "p99.9 missing: {text}");
    }

    #[test]
    fn nginx_summary_cells() {
        use TargetKind::*;
        let s = vec![
            sample(1, EdgeUring, 60_000.0, Some(9_000)),
            sample(1, Nginx, 50_000.0, Some(9_000)),
        ];
        let t = nginx_summary_table(&s, &[EdgeUring, Nginx], &[Workload::Get64, Workload::Close])
            .render_markdown();
        assert!(
            t.contains("| edge-io_uring | 1.20x · 0.83x · 1.00x | - |"),
            "{t}"
        );
        assert!(!t.contains("| nginx |"), "{t}");
    }
}
