//! The results of `edge-bench scale` (sans-IO): the rows of its three parts, the arithmetic
//! behind them (RSS per connection, how many connections fit the fd limit), the Markdown tables
//! and the JSON document written under `bench/results/`.

use serde::Serialize;

use crate::support::table::Table;

/// Largest `max_connections` edge keeps under an fd limit: it wants `2 × max + 256` fds and
/// lowers `max_connections` to fit (core/src/runtime/listen.rs, `fit_max_connections`).
pub fn edge_effective_max(configured: u64, fd_limit: u64) -> u64 {
    if fd_limit >= 2 * configured + 256 {
        configured
    } else {
        (fd_limit.saturating_sub(256) / 2).max(1)
    }
}

/// Connections edge holds without evicting: eviction starts when fewer than 1/16 of
/// `max_connections` are free (DESIGN.md, Capacity); 64 more are kept free for probes.
pub fn edge_capacity(configured: u64, fd_limit: u64) -> u64 {
    let max = edge_effective_max(configured, fd_limit);
    (max - max / 16).saturating_sub(64)
}

/// `max_connections` to configure for `n` connections: `n` plus the 64 kept free stay within
/// 15/16 of it, so [`edge_capacity`] of the result is at least `n` when the fd limit allows.
pub fn edge_max_connections_for(n: u64) -> u64 {
    ((n + 64) * 16).div_ceil(15)
}

/// Busy connections one nginx worker serves under an fd limit: a proxied request holds a client
/// and an upstream socket; 128 fds are kept for listeners, logs and the upstream keepalive pool.
pub fn nginx_busy_capacity(fd_limit: u64) -> u64 {
    fd_limit.saturating_sub(128) / 2
}

/// Idle keep-alive connections one nginx worker holds (one fd each, upstream ones pooled).
pub fn nginx_idle_capacity(fd_limit: u64) -> u64 {
    fd_limit.saturating_sub(256)
}

/// Client sockets edge-bench itself can hold (its own fds, pipes and the admin probes aside).
pub fn client_capacity(fd_limit: u64) -> u64 {
    fd_limit.saturating_sub(256)
}

/// The count actually used for a requested one, and why it is lower when it is.
pub fn clamp_count(requested: u64, limits: &[(u64, &str)]) -> (u64, Option<String>) {
    let mut n = requested;
    let mut why = None;
    for &(cap, reason) in limits {
        if cap < n {
            n = cap;
            why = Some(format!("{requested} requested, {cap} fit: {reason}"));
        }
    }
    (n, why)
}

/// Resident-memory growth per connection, bytes: `(rss − baseline) / n` (0 for n = 0; negative
/// when the process shrank).
pub fn rss_per_conn(baseline: u64, rss: u64, n: u64) -> i64 {
    if n == 0 {
        return 0;
    }
    (rss as i64 - baseline as i64) / n as i64
}

/// Where and what the run was.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunInfo {
    /// `edge-bench scale`.
    pub tool: String,
    /// UTC date, `YYYY-MM-DD`.
    pub date: String,
    /// Short commit of the working tree (`-dirty` when it has changes).
    pub commit: String,
    /// CPU model, CPU count and memory.
    pub machine: String,
    /// `uname -r`.
    pub kernel: String,
    /// Versions of edge, nginx and edge-bench.
    pub versions: Vec<(String, String)>,
    /// CPU placement, in words.
    pub placement: String,
    /// RLIMIT_NOFILE soft and hard of edge-bench (children inherit it).
    pub fd_limit: (u64, u64),
    /// The command line.
    pub command: String,
}

/// One open-loop run of one target at one rate.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RateRow {
    /// Target name (`edge-io_uring`, `edge-epoll`, `nginx`).
    pub target: String,
    /// Target rate, requests/s.
    pub rate: f64,
    /// Keep-alive connections.
    pub connections: u64,
    /// Requests due in the run.
    pub scheduled: u64,
    /// Complete responses.
    pub responses: u64,
    /// Complete responses per second.
    pub achieved: f64,
    /// Failed exchanges, non-2xx/3xx and unsent requests.
    pub errors: u64,
    /// Requests never sent by the end of the run (included in `errors`).
    pub unsent: u64,
    /// Latency from the scheduled send time, ms.
    pub p50_ms: f64,
    /// Same, p99.
    pub p99_ms: f64,
    /// Same, p99.9.
    pub p999_ms: f64,
    /// Same, max.
    pub max_ms: f64,
    /// p99 from the actual send (what a closed-loop tool would report), ms.
    pub service_p99_ms: f64,
    /// p99 of the generator's own lateness (due → write), ms.
    pub send_lag_p99_ms: f64,
    /// Proxy CPU over the run, 1.0 = one CPU (None when unreadable).
    pub proxy_cpu: Option<f64>,
}

/// One closed-loop run of one target at one connection count.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConnRow {
    /// Target name.
    pub target: String,
    /// Connections asked for.
    pub requested: u64,
    /// Connections used (lower when the fd limit does not fit the request).
    pub connections: u64,
    /// Why `connections` is lower than `requested`.
    pub note: Option<String>,
    /// Complete responses per second.
    pub rps: f64,
    /// Latency p50, ms (closed loop: from the write).
    pub p50_ms: f64,
    /// Latency p99, ms.
    pub p99_ms: f64,
    /// Failed exchanges and non-2xx/3xx.
    pub errors: u64,
    /// Proxy CPU over the run, 1.0 = one CPU.
    pub proxy_cpu: Option<f64>,
}

/// Resident memory of one target holding a number of idle keep-alive connections.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IdleRow {
    /// Target name.
    pub target: String,
    /// Connections asked for.
    pub requested: u64,
    /// Connections opened and held (each served one request).
    pub reached: u64,
    /// Why `reached` is lower than `requested`.
    pub note: Option<String>,
    /// VmRSS before any connection (nginx: master + worker), bytes.
    pub baseline_rss: u64,
    /// VmRSS holding `reached` connections, bytes.
    pub rss: u64,
    /// `(rss − baseline_rss) / reached`, bytes.
    pub per_conn: i64,
}

/// A target that was not measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Skipped {
    /// Target name.
    pub target: String,
    /// Why.
    pub reason: String,
}

/// The whole result, as written to `bench/results/scale-DATE-COMMIT.json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScaleReport {
    /// Where and what.
    pub run: RunInfo,
    /// Latency at fixed rates (open loop).
    pub rate: Vec<RateRow>,
    /// Requests/s and p99 against connection count (closed loop).
    pub connections: Vec<ConnRow>,
    /// RSS against idle connection count.
    pub idle: Vec<IdleRow>,
    /// Targets not measured, with the reason.
    pub skipped: Vec<Skipped>,
}

impl ScaleReport {
    /// Pretty JSON.
    ///
    /// # Panics
    /// Never: every field serialises (non-finite floats become `null`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serialises")
    }
}

fn f_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn f_cpu(c: Option<f64>) -> String {
    c.map_or("–".into(), |c| format!("{:.0} %", c * 100.0))
}

/// Thousands separated by a thin space, as the other tables of bench/README.md do.
pub fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Bytes as `3 855 B` below 10 KiB, else KiB.
fn f_bytes(v: i64) -> String {
    if v.unsigned_abs() < 10 * 1024 {
        format!("{v} B")
    } else {
        format!("{:.1} KiB", v as f64 / 1024.0)
    }
}

/// Latency at rate.
pub fn rate_table(rows: &[RateRow]) -> Table {
    let mut t = Table::new(&[
        "target",
        "rate",
        "achieved",
        "p50",
        "p99",
        "p99.9",
        "max",
        "p99 from send",
        "send lag p99",
        "proxy CPU",
        "errors (unsent)",
    ]);
    for r in rows {
        t.row([
            r.target.clone(),
            thousands(r.rate),
            thousands(r.achieved),
            f_ms(r.p50_ms),
            f_ms(r.p99_ms),
            f_ms(r.p999_ms),
            f_ms(r.max_ms),
            f_ms(r.service_p99_ms),
            f_ms(r.send_lag_p99_ms),
            f_cpu(r.proxy_cpu),
            format!("{} ({})", r.errors, r.unsent),
        ]);
    }
    t
}

/// Throughput against connections.
pub fn conn_table(rows: &[ConnRow]) -> Table {
    let mut t = Table::new(&[
        "target",
        "connections",
        "req/s",
        "p50",
        "p99",
        "proxy CPU",
        "errors",
    ]);
    for r in rows {
        let conns = if r.connections == r.requested {
            r.connections.to_string()
        } else {
            format!("{} (of {})", r.connections, r.requested)
        };
        t.row([
            r.target.clone(),
            conns,
            thousands(r.rps),
            f_ms(r.p50_ms),
            f_ms(r.p99_ms),
            f_cpu(r.proxy_cpu),
            r.errors.to_string(),
        ]);
    }
    t
}

/// Memory against idle connections.
pub fn idle_table(rows: &[IdleRow]) -> Table {
    let mut t = Table::new(&[
        "target",
        "idle connections",
        "VmRSS before",
        "VmRSS held",
        "per connection",
    ]);
    for r in rows {
        let n = if r.reached == r.requested {
            r.reached.to_string()
        } else {
            format!("{} (of {})", r.reached, r.requested)
        };
        t.row([
            r.target.clone(),
            n,
            f_bytes(r.baseline_rss as i64),
            f_bytes(r.rss as i64),
            f_bytes(r.per_conn),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_per_connection() {
        assert_eq!(rss_per_conn(5_000_000, 43_000_000, 10_000), 3800);
        assert_eq!(rss_per_conn(5_000_000, 4_000_000, 1000), -1000);
        assert_eq!(rss_per_conn(1, 2, 0), 0);
    }

    #[test]
    fn what_fits_a_20000_fd_limit() {
        // edge lowers 10 731 to (20000 − 256) / 2 = 9872 and evicts below 1/16 free.
        assert_eq!(edge_effective_max(10_731, 20_000), 9872);
        assert_eq!(edge_effective_max(1000, 20_000), 1000);
        assert_eq!(edge_capacity(10_731, 20_000), 9872 - 617 - 64);
        for n in [1, 16, 256, 1000, 10_000, 50_000] {
            assert!(
                edge_capacity(edge_max_connections_for(n), 1 << 20) >= n,
                "{n}"
            );
        }
        assert_eq!(nginx_busy_capacity(20_000), 9936);
        assert_eq!(nginx_idle_capacity(20_000), 19_744);
        let (n, why) = clamp_count(10_000, &[(19_744, "client fds"), (9191, "edge fds")]);
        assert_eq!(n, 9191);
        assert!(why.unwrap().contains("edge fds"));
        assert_eq!(clamp_count(256, &[(9191, "x")]), (256, None));
    }

    #[test]
    fn thousands_separator() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(79_256.0), "79 256");
        assert_eq!(thousands(1_234_567.0), "1 234 567");
    }

    fn sample() -> ScaleReport {
        ScaleReport {
            run: RunInfo {
                tool: "edge-bench scale".into(),
                date: "2026-11-29".into(),
                commit: "abc1234".into(),
                machine: "2 CPUs".into(),
                kernel: "6.18".into(),
                versions: vec![("edge".into(), "0.1.0".into())],
                placement: "proxy CPU 0".into(),
                fd_limit: (20_000, 20_000),
                command: "edge-bench scale".into(),
            },
            rate: vec![RateRow {
                target: "nginx".into(),
                rate: 10_000.0,
                connections: 64,
                scheduled: 100_000,
                responses: 100_000,
                achieved: 10_000.0,
                errors: 0,
                unsent: 0,
                p50_ms: 0.5,
                p99_ms: 1.5,
                p999_ms: 3.0,
                max_ms: 9.0,
                service_p99_ms: 1.0,
                send_lag_p99_ms: 0.9,
                proxy_cpu: Some(0.4),
            }],
            connections: vec![ConnRow {
                target: "edge-epoll".into(),
                requested: 10_000,
                connections: 9191,
                note: Some("fd limit".into()),
                rps: 60_000.0,
                p50_ms: 100.0,
                p99_ms: 300.0,
                errors: 0,
                proxy_cpu: None,
            }],
            idle: vec![IdleRow {
                target: "edge-io_uring".into(),
                requested: 1000,
                reached: 1000,
                note: None,
                baseline_rss: 5_000_000,
                rss: 8_900_000,
                per_conn: 3900,
            }],
            skipped: vec![Skipped {
                target: "nginx".into(),
                reason: "not installed".into(),
            }],
        }
    }

    #[test]
    fn json_shape() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        for key in ["run", "rate", "connections", "idle", "skipped"] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        let run = &v["run"];
        for key in [
            "date",
            "commit",
            "machine",
            "kernel",
            "versions",
            "placement",
        ] {
            assert!(run.get(key).is_some(), "missing run.{key}");
        }
        assert_eq!(run["fd_limit"][1], 20_000);
        assert_eq!(run["versions"][0][0], "edge");
        assert_eq!(v["rate"][0]["p99_ms"], 1.5);
        assert_eq!(v["rate"][0]["proxy_cpu"], 0.4);
        assert_eq!(v["connections"][0]["connections"], 9191);
        assert!(v["connections"][0]["proxy_cpu"].is_null());
        assert_eq!(v["idle"][0]["per_conn"], 3900);
        assert!(v["idle"][0]["note"].is_null());
        assert_eq!(v["skipped"][0]["reason"], "not installed");
    }

    #[test]
    fn tables_show_clamped_counts() {
        let r = sample();
        let c = conn_table(&r.connections).render_markdown_numeric();
        assert!(c.contains("9191 (of 10000)"), "{c}");
        let i = idle_table(&r.idle).render_markdown_numeric();
        assert!(i.contains("3900 B"), "{i}");
        let t = rate_table(&r.rate).render_markdown_numeric();
        assert!(t.starts_with("| target | rate |"), "{t}");
        assert!(
            t.lines().nth(1).unwrap().starts_with("| --- | ---: |"),
            "{t}"
        );
        assert!(t.contains("10 000") && t.contains("1.50 ms"), "{t}");
    }
}
