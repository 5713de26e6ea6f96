//! `edge-bench matrix`: every case of DESIGN.md "Fault matrix" (groups a, b, c, d) against the
//! real `edge` binary and scripted origins, each with its expected client-visible outcome, and the
//! invariants checked around every case:
//!
//! - health: `GET /_health` on a fresh connection every 50 ms while the case runs; a failed probe
//!   or one over 1 s fails the case, the p99 is reported against the 5 ms goal (as `hol`);
//! - slots: `edge_connections_active`, `edge_upstream_connections{state="active"}` and
//!   `edge_requests_in_flight` return to their values before the case;
//! - file descriptors: `/proc/PID/fd` returns to its count before the case, plus any growth of
//!   pooled idle upstream connections;
//! - memory: VmRSS within [`RSS_SLACK`] of its value before the case;
//! - logs: every counter of [`COUNTER_EVENTS`] that moved has a matching log line in edge's output
//!   during the case (or a `log.suppressed` summary: warn lines are rate-limited per worker).
//!
//! This module owns the runner, the invariants and the report; the cases live in
//! [`crate::matrix::sender`] (groups a, b) and [`crate::matrix::lifecycle`] (groups c, d), the scripted
//! origin and raw client in [`crate::matrix::origin`].

pub mod lifecycle;
pub mod origin;
pub mod sender;

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::edge_config::TempConfig;
use crate::support::edge_proc::{locate_edge_bin, EdgeProcess};
use crate::support::metrics::{count_events, fetch_metrics, metric_sum};
use crate::support::probe;
use crate::support::procfs::read_rss;
use crate::support::stack::{free_port, HEALTH_PATH, HEALTH_TIMEOUT};
use crate::support::table::{ms, Quantiles, Table};

/// A health probe slower than this fails the case (DESIGN.md, Fault matrix).
pub const PROBE_LIMIT: Duration = Duration::from_secs(1);
/// The p99 goal for health probes (reported, not asserted).
pub const P99_GOAL: Duration = Duration::from_millis(5);
/// Time between health probes during a case.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Allowed VmRSS growth over a case.
pub const RSS_SLACK: u64 = 8 << 20;
/// How long slots, fds and log lines get to settle after a case.
pub const SETTLE: Duration = Duration::from_secs(6);
/// SIGTERM-to-SIGKILL grace when a group's edge is stopped (its config has a 1 s drain).
pub const STOP_GRACE: Duration = Duration::from_secs(3);

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
    ce("edge_connections_shed_total", &[], &["connection.shed"]),
    ce("edge_requests_shed_total", &[], &["request.shed"]),
    ce("edge_connection_panics_total", &[], &["connection.panic"]),
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

/// An `edge` child on free loopback ports with a temp config.
#[derive(Debug)]
pub struct Edge {
    /// The process.
    pub proc: EdgeProcess,
    /// Traffic listener.
    pub traffic: SocketAddr,
    /// Admin listener.
    pub admin: SocketAddr,
    /// The arguments it was started with (an upgrade starts a second process with them).
    pub args: Vec<String>,
    _config: TempConfig,
}

impl Edge {
    /// Writes `toml` to a temp file and starts `bin --config FILE --listen … --admin-listen …
    /// extra…` with `envs`, waiting until `/_health` answers 200.
    ///
    /// # Errors
    /// Config write, spawn, and health-wait failures (edge's output goes to stderr then).
    pub fn start(
        bin: &Path,
        name: &str,
        toml: &str,
        extra: &[String],
        envs: &[(&str, &str)],
    ) -> io::Result<Edge> {
        let config = TempConfig::write(name, toml)?;
        let (traffic, admin) = (free_port()?, free_port()?);
        let mut args = config.args();
        args.extend([
            "--listen".into(),
            traffic.to_string(),
            "--admin-listen".into(),
            admin.to_string(),
        ]);
        args.extend_from_slice(extra);
        let mut proc = EdgeProcess::start_env(bin, &args, envs)?;
        if let Err(e) = proc.wait_healthy(traffic, HEALTH_PATH, HEALTH_TIMEOUT) {
            eprintln!("--- edge output ---\n{}\n--- end ---", proc.output());
            return Err(e);
        }
        Ok(Edge {
            proc,
            traffic,
            admin,
            args,
            _config: config,
        })
    }

    /// The admin metrics text ("" when unavailable).
    pub fn metrics(&self) -> String {
        fetch_metrics(self.admin).unwrap_or_default()
    }

    /// A metric summed over samples carrying `filter`.
    pub fn metric(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics(), name, filter)
    }

    /// Polls (20 ms) until `pred(metric)` holds or `limit` passes; returns the last value.
    pub fn wait_metric(
        &self,
        name: &str,
        filter: &[(&str, &str)],
        limit: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> f64 {
        let until = Instant::now() + limit;
        loop {
            let v = self.metric(name, filter);
            if pred(v) || Instant::now() >= until {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Open file descriptors of the process.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.proc.pid())).map_or(0, |d| d.count())
    }

    /// VmRSS in bytes (0 when unreadable).
    pub fn rss(&self) -> u64 {
        read_rss(self.proc.pid()).map_or(0, |r| r.total)
    }

    /// Stops edge (SIGTERM, SIGKILL after [`STOP_GRACE`]).
    pub fn stop(mut self) {
        let _ = self.proc.stop(STOP_GRACE);
    }
}

/// One row of the report.
#[derive(Debug, Clone)]
pub struct Row {
    /// Group letter (with a suffix such as `/epoll` for re-runs).
    pub group: String,
    /// Case name.
    pub case: String,
    /// Expected client-visible outcome.
    pub expected: String,
    /// What was seen, with the invariants' summary.
    pub observed: String,
    /// `Some(false)` failed, `Some(true)` passed, `None` skipped.
    pub pass: Option<bool>,
    /// Why it failed (or was skipped).
    pub notes: Vec<String>,
}

impl Row {
    /// A skipped row.
    pub fn skipped(group: &str, case: &str, expected: &str, why: &str) -> Row {
        Row {
            group: group.into(),
            case: case.into(),
            expected: expected.into(),
            observed: format!("skipped: {why}"),
            pass: None,
            notes: Vec::new(),
        }
    }
}

/// What a case body reports: its observation and failed expectations.
#[derive(Debug, Clone, Default)]
pub struct Check {
    /// What the client saw.
    pub observed: String,
    /// Expectations that did not hold.
    pub failures: Vec<String>,
}

impl Check {
    /// A check with this observation and no failure yet.
    pub fn seen(observed: impl Into<String>) -> Check {
        Check {
            observed: observed.into(),
            failures: Vec::new(),
        }
    }

    /// Records `why` as a failure unless `ok`.
    pub fn expect(&mut self, ok: bool, why: impl FnOnce() -> String) -> &mut Self {
        if !ok {
            self.failures.push(why());
        }
        self
    }
}

/// Whether a case holds the health invariant strictly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthRule {
    /// Any failed or > 1 s probe fails the case.
    Strict,
    /// Reported only (the case makes edge unready on purpose, e.g. a dead worker).
    ReportOnly,
}

/// Runs one case with the invariants around it.
pub fn run_case(
    edge: &Edge,
    group: &str,
    case: &str,
    expected: &str,
    rule: HealthRule,
    body: impl FnOnce(&Edge) -> io::Result<Check>,
) -> Row {
    print!("  {group} {case} … ");
    let _ = io::stdout().flush();
    let started = Instant::now();
    let metrics0 = edge.metrics();
    let out0 = edge.proc.output();
    let (fds0, rss0) = (edge.fds(), edge.rss());
    let slot = |m: &str, name: &str, f: &[(&str, &str)]| metric_sum(m, name, f);
    let active0 = slot(&metrics0, "edge_connections_active", &[]);
    let idle0 = slot(&metrics0, "edge_upstream_connections", &[("state", "idle")]);
    let prober = Prober::start(edge.traffic);
    let check = body(edge).unwrap_or_else(|e| Check {
        observed: format!("error: {e}"),
        failures: vec![format!("case error: {e}")],
    });
    let samples = prober.map(Prober::finish).unwrap_or_default();
    let mut failures = check.failures.clone();
    let (health, mut hf) = health_verdict(&samples);
    if rule == HealthRule::Strict {
        failures.append(&mut hf);
    }

    // Slots back to baseline.
    let until = Instant::now() + SETTLE;
    let settled = loop {
        let m = edge.metrics();
        let a = slot(&m, "edge_connections_active", &[]);
        let u = slot(&m, "edge_upstream_connections", &[("state", "active")]);
        let f = slot(&m, "edge_requests_in_flight", &[]);
        if (a <= active0 && u == 0.0 && f == 0.0) || Instant::now() >= until {
            break (a, u, f, m);
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let (a, u, f, _) = &settled;
    if *a > active0 || *u != 0.0 || *f != 0.0 {
        failures.push(format!(
            "slots not back: connections_active {a} (was {active0}), upstream active {u}, in flight {f}"
        ));
    }
    // File descriptors, allowing new pooled idle upstream connections, and the fd slots a dead worker
    // leaves behind: its sockets are shut down and released but their fd numbers stay reserved (pointing
    // at /dev/null), and its io_uring ring and eventfd leak with its runtime (edge README, "Supervision").
    let orphaned = orphaned_fds(&edge.proc.output()[out0.len()..]);
    let fd_until = Instant::now() + SETTLE;
    let (fds1, allowed) = loop {
        let idle1 = edge.metric("edge_upstream_connections", &[("state", "idle")]);
        let allowed = fds0 + (idle1 - idle0).max(0.0) as usize + orphaned;
        let n = edge.fds();
        if n <= allowed || Instant::now() >= fd_until {
            break (n, allowed);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if fds1 > allowed {
        failures.push(format!(
            "fds {fds0} -> {fds1} (allowed {allowed} with pooled idle)"
        ));
    }
    let rss1 = edge.rss();
    if rss1 > rss0 + RSS_SLACK {
        failures.push(format!("VmRSS grew {} -> {} KiB", rss0 >> 10, rss1 >> 10));
    }
    // Every counter that moved has its log line (rate-limit summaries come from the worker timer).
    let log_until = Instant::now() + Duration::from_millis(2500);
    let (moved, unlogged) = loop {
        let m = edge.metrics();
        let log = log_since(&out0, &edge.proc.output());
        let missing = unlogged_counters(&metrics0, &m, &log);
        if missing.is_empty() || Instant::now() >= log_until {
            break (moved_counters(&metrics0, &m), missing);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    failures.extend(unlogged);
    if let Ok(Some(st)) = edge.proc_exited() {
        failures.push(format!("edge exited ({st})"));
    }

    let counters = if moved.is_empty() {
        String::new()
    } else {
        format!("; {}", moved.join(" "))
    };
    let pass = failures.is_empty();
    println!(
        "{} ({:.1} s)",
        if pass { "ok" } else { "FAIL" },
        started.elapsed().as_secs_f64()
    );
    Row {
        group: group.into(),
        case: case.into(),
        expected: expected.into(),
        observed: format!(
            "{}; {health}; fds {fds0}->{fds1}; rss {:+} KiB{counters}",
            check.observed,
            (rss1 as i64 - rss0 as i64) / 1024
        ),
        pass: Some(pass),
        notes: failures,
    }
}

impl Edge {
    /// The exit status if edge has exited (see [`EdgeProcess::exited`]); needs `&self` for the
    /// runner, so it only reads `/proc`: `Some` when the process is gone or a zombie.
    pub fn proc_exited(&self) -> io::Result<Option<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.proc.pid()));
        Ok(match stat {
            Err(_) => Some("gone".into()),
            Ok(s)
                if s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')) =>
            {
                Some("zombie".into())
            }
            Ok(_) => None,
        })
    }
}

/// Options of `edge-bench matrix`.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    /// Groups to run, among `a`, `b`, `c`, `d`.
    pub groups: Vec<String>,
    /// `--io-driver` for edge (edge's default when unset).
    pub io_driver: Option<String>,
    /// The edge binary; found or built when `None`.
    pub edge_bin: Option<PathBuf>,
    /// The edge binary for the injected-fault rows of group d (default: `edge_bin`); they need a
    /// debug build.
    pub faults_edge_bin: Option<PathBuf>,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        Self {
            groups: ["a", "b", "c", "d"].map(String::from).to_vec(),
            io_driver: None,
            edge_bin: None,
            faults_edge_bin: None,
        }
    }
}

/// What every group's edge shares: the short timeouts that keep cases short.
pub fn base_config(extra_server: &str) -> String {
    format!(
        "[server]\n{extra_server}\n[server.timeouts]\nrequest = \"2s\"\nidle = \"3s\"\nsend = \"2s\"\n\
         drain_delay = \"0s\"\ndrain = \"1s\"\n"
    )
}

/// Runs the groups, prints the table, returns whether every case passed.
///
/// # Errors
/// Setup failures (no edge binary, edge not starting).
pub fn run(opts: &MatrixOptions) -> io::Result<bool> {
    let started = Instant::now();
    let (soft, _) = crate::support::procfs::raise_nofile_limit()?;
    let bin = locate_edge_bin(opts.edge_bin.as_deref())?;
    let faults_bin = match &opts.faults_edge_bin {
        Some(p) => locate_edge_bin(Some(p))?,
        None => bin.clone(),
    };
    let driver: Vec<String> = opts
        .io_driver
        .iter()
        .flat_map(|d| ["--io-driver".to_string(), d.clone()])
        .collect();
    println!(
        "matrix: edge {}, groups {}, io driver {}, RLIMIT_NOFILE {soft}",
        bin.display(),
        opts.groups.join(","),
        opts.io_driver.as_deref().unwrap_or("edge's default")
    );
    let mut rows = Vec::new();
    for g in &opts.groups {
        let t = Instant::now();
        println!("group {g}:");
        let _ = io::stdout().flush();
        let mut got = match g.as_str() {
            "a" => crate::matrix::sender::group_a(&bin, &driver, "a"),
            "b" => crate::matrix::sender::group_b(&bin, &driver, "b"),
            "c" => crate::matrix::lifecycle::group_c(&bin, &driver),
            "d" => crate::matrix::lifecycle::group_d(&bin, &faults_bin, &driver),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown group {other:?} (a, b, c, d)"),
            )),
        }?;
        println!("group {g}: {:.1} s", t.elapsed().as_secs_f64());
        rows.append(&mut got);
    }
    let mut t = Table::new(&["group", "case", "expected", "observed", "pass"]);
    for r in &rows {
        t.row([
            r.group.clone(),
            r.case.clone(),
            r.expected.clone(),
            r.observed.clone(),
            match r.pass {
                Some(true) => "pass".into(),
                Some(false) => "FAIL".into(),
                None => "skip".into(),
            },
        ]);
    }
    println!();
    print!("{}", t.render());
    let failed: Vec<&Row> = rows.iter().filter(|r| r.pass == Some(false)).collect();
    for r in &failed {
        for n in &r.notes {
            println!("FAIL {} {}: {n}", r.group, r.case);
        }
    }
    let goal_missed = rows
        .iter()
        .filter(|r| r.observed.contains("(>5ms goal)"))
        .count();
    println!(
        "health p99 goal of 5 ms: {} (reported, not asserted)",
        if goal_missed == 0 {
            "met in every case".to_string()
        } else {
            format!("missed in {goal_missed} of {} cases", rows.len())
        }
    );
    let passed = failed.is_empty();
    println!(
        "matrix: {} passed, {} failed, {} skipped in {:.1} s: {}",
        rows.iter().filter(|r| r.pass == Some(true)).count(),
        failed.len(),
        rows.iter().filter(|r| r.pass.is_none()).count(),
        started.elapsed().as_secs_f64(),
        if passed { "PASS" } else { "FAIL" }
    );
    Ok(passed)
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
            event_of("edge_connections_shed_total", &[]),
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

#[cfg(test)]
mod orphan_tests {
    #[test]
    fn orphaned_fds_counts_each_dead_worker() {
        let log = "x\n2026 WARN closed the connections event=\"worker.orphans_closed\" worker=0 downstream=9 upstream=1\ny";
        assert_eq!(super::orphaned_fds(log), 12);
        assert_eq!(super::orphaned_fds("nothing"), 0);
    }
}
