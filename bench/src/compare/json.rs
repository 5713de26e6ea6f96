//! The JSON record of one `edge-bench compare` run, written as
//! `bench/results/compare-DATE-COMMIT.json`: machine (CPU model, CPUs), kernel (`uname -r`),
//! the io driver of each edge target, versions (edge commit, nginx, HAProxy, wrk), the CPU
//! placement, every sample, and per workload the medians with their ratios to nginx and each edge
//! target's ratios to the others (with the same-round CPU per request ratios).
//!
//! Units are in the key names (`_ms`, `_s`, `_kib`); absent values are `null`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::compare::report::{
    cdf, of_workload, ratios, summarize, vs_nginx, Sample, LOAD_BOUND_UTIL,
};

use crate::compare::RunInfo;
use crate::support::host::{cpu_model, kernel_release, online_cpus};

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn sample_json(s: &Sample) -> Value {
    json!({
        "workload": s.workload.name(),
        "round": s.round,
        "target": s.kind.name(),
        "requests": s.wrk.requests,
        "window_s": s.wrk.window.as_secs_f64(),
        "wall_s": s.wall.as_secs_f64(),
        "req_per_sec": s.wrk.req_per_sec,
        "p50_ms": ms(s.wrk.p50),
        "p99_ms": ms(s.wrk.p99),
        "p99_9_ms": s.wrk.p999().map(ms),
        "max_ms": s.wrk.max.map(ms),
        "percentiles_ms": s.wrk.percentiles.iter().map(|&(p, d)| json!([p, ms(d)])).collect::<Vec<_>>(),
        "socket_errors": s.wrk.socket_errors,
        "non_2xx": s.wrk.non_2xx,
        "protocol": s.wrk.protocol,
        "cpu_s": s.cpu.map(|c| c.as_secs_f64()),
        "cpu_s_per_100k_req": s.cpu_s_per_100k(),
        "cpu_util": s.utilisation(),
        "runq_wait_share": s.wait_share(),
        "peak_rss_kib": s.rss_kib,
        "load_bound": s.load_bound(),
        "cpu_quota_share": s.cpu_quota,
        "throttled_share": s.throttled_share(),
    })
}

fn workload_json(
    info: &RunInfo,
    samples: &[Sample],
    w: crate::compare::workload::Workload,
) -> Value {
    let these = of_workload(samples, w);
    let vs = vs_nginx(&these, &info.kinds);
    let medians: Vec<Value> = info
        .kinds
        .iter()
        .filter_map(|&k| summarize(&these, k))
        .map(|s| {
            let r = vs.iter().find(|r| r.kind == s.kind);
            json!({
                "target": s.kind.name(),
                "rounds": s.rounds,
                "load_bound_rounds": s.load_bound,
                "all_load_bound": s.all_load_bound,
                "errors": s.errors,
                "req_per_sec": s.req_per_sec,
                "p50_ms": ms(s.p50),
                "p99_ms": ms(s.p99),
                "p99_9_ms": s.p999.map(ms),
                "cpu_us_per_req": s.cpu_us_per_req,
                "cpu_s_per_100k_req": s.cpu_s_per_100k(),
                "cpu_util": s.utilisation,
                "runq_wait_share": s.wait_share,
                "peak_rss_kib": s.rss_kib,
                "vs_nginx": r.map(|r| json!({
                    "req_per_sec": r.req_per_sec,
                    "p99": r.p99,
                    "cpu_per_req": r.cpu,
                    "peak_rss": r.rss,
                })),
            })
        })
        .collect();
    let cdfs: serde_json::Map<String, Value> = info
        .kinds
        .iter()
        .map(|&k| {
            let c: Vec<Value> = cdf(&these, k)
                .iter()
                .map(|&(p, d)| json!([p, ms(d)]))
                .collect();
            (k.name().to_string(), Value::from(c))
        })
        .collect();
    json!({
        "name": w.name(),
        "description": w.describe(info.connections),
        "path": w.path(),
        "connections": w.connections(info.connections),
        "headers": w.headers(),
        "streams_per_connection": w.is_h2().then_some(crate::compare::h2load::STREAMS),
        "load_generator": if w.is_h2() { "h2load" } else if w.handshake_loader().is_some() { "edge-bench handshake loader" } else { "wrk" },
        "proxy_settings": w.is_h2().then_some(crate::compare::proxies::H2_SETTINGS),
        "medians": medians,
        "ratios": ratios_json(&these, info),
        "latency_percentiles_ms": cdfs,
    })
}

/// Each edge target against the others (and its baseline build): ratios of medians and the
/// same-round CPU per request ratios (median, lowest, highest).
fn ratios_json(these: &[Sample], info: &RunInfo) -> Vec<Value> {
    ratios(these, &info.kinds)
        .iter()
        .map(|r| {
            json!({
                "edge": r.edge.name(),
                "other": r.other.name(),
                "req_per_sec": r.req_per_sec,
                "req_per_sec_same_round_median": r.per_round,
                "cpu_per_req": r.cpu_per_req,
                "cpu_per_req_same_round": r.cpu_per_round.map(|c| json!({
                    "median": c.median,
                    "min": c.min,
                    "max": c.max,
                })),
            })
        })
        .collect()
}

/// The whole record.
pub fn document(info: &RunInfo, samples: &[Sample], date: &str, commit: &str) -> Value {
    let drivers: serde_json::Map<String, Value> = info
        .kinds
        .iter()
        .filter_map(|k| k.edge_driver().map(|d| (k.name().to_string(), json!(d))))
        .collect();
    let versions: serde_json::Map<String, Value> = info
        .versions
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "tool": "edge-bench compare",
        "date": date,
        "commit": commit,
        "machine": {
            "cpu_model": cpu_model(),
            "cpus": online_cpus(),
        },
        "kernel": kernel_release(),
        "drivers": drivers,
        "versions": versions,
        "placement": {
            "proxy_cpus": info.proxy_cpus,
            "load_cpus": info.load_cpus,
            "proxy_cpu_quota_percent": info.cpu_quota,
            "detail": info.placement.lines().map(str::trim).collect::<Vec<_>>(),
        },
        "method": {
            "rounds": info.rounds,
            "duration_s": info.duration_s,
            "connections": info.connections,
            "load_bound_below_cpu_util": LOAD_BOUND_UTIL,
            "interleaved": true,
        },
        "targets": info.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "skipped": info.skipped.iter().map(|(k, why)| json!({"target": k.name(), "reason": why})).collect::<Vec<_>>(),
        "connection_close_check": info.closes.iter().map(|(k, c)| json!({"target": k.name(), "result": c})).collect::<Vec<_>>(),
        "failures": info.failures,
        "workloads": info.workloads.iter().map(|&w| workload_json(info, samples, w)).collect::<Vec<_>>(),
        "samples": samples.iter().map(sample_json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::tests::sample;
    use crate::compare::target::TargetKind;
    use crate::compare::workload::Workload;

    #[test]
    fn record_holds_samples_and_medians() {
        let info = RunInfo {
            workloads: vec![Workload::Get64],
            kinds: vec![TargetKind::EdgeUring, TargetKind::Nginx],
            skipped: vec![(TargetKind::Haproxy, "missing".into())],
            rounds: 1,
            duration_s: 10,
            connections: 64,
            proxy_cpus: "0".into(),
            load_cpus: "1".into(),
            cpu_quota: None,
            placement: "CPU placement: x\n  origin: y\n".into(),
            versions: vec![("wrk".into(), "wrk 4.1.0".into())],
            closes: Vec::new(),
            failures: Vec::new(),
        };
        let s = vec![
            sample(1, TargetKind::EdgeUring, 60_000.0, Some(9_000)),
            sample(1, TargetKind::Nginx, 50_000.0, Some(9_000)),
        ];
        let doc = document(&info, &s, "2026-01-01", "abc1234");
        assert_eq!(doc["samples"].as_array().unwrap().len(), 2);
        assert_eq!(doc["drivers"]["edge-io_uring"], "io_uring");
        assert_eq!(doc["skipped"][0]["target"], "haproxy");
        let m = &doc["workloads"][0]["medians"][0];
        assert_eq!(m["target"], "edge-io_uring");
        assert!((m["vs_nginx"]["req_per_sec"].as_f64().unwrap() - 1.2).abs() < 1e-9);
        let r = &doc["workloads"][0]["ratios"][0];
        assert_eq!(
            (&r["edge"], &r["other"]),
            (&json!("edge-io_uring"), &json!("nginx"))
        );
        // Same CPU, 1.2x the requests: 1/1.2 the CPU per request, in the one round.
        let c = &r["cpu_per_req_same_round"];
        assert!(
            (c["median"].as_f64().unwrap() - 1.0 / 1.2).abs() < 1e-3,
            "{c}"
        );
        assert_eq!(c["min"], c["max"]);
        assert_eq!(
            doc["workloads"][0]["latency_percentiles_ms"]["nginx"][1],
            json!([99.9, 5.0])
        );
        let text = serde_json::to_string(&doc).unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_ok());
    }
}
