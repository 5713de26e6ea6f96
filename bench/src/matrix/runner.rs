//! The case runner of `edge-bench matrix`: the edge under test ([`Edge`]), what a case reports
//! ([`Check`]) and its report row ([`Row`]), and [`run_case`], which takes the baselines, runs the
//! case under the health prober and then waits for slots, fds, memory and log lines to settle.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::invariants::{
    health_verdict, log_since, moved_counters, orphaned_fds, unlogged_counters, Prober,
};
use crate::support::edge_config::TempConfig;
use crate::support::edge_proc::EdgeProcess;
use crate::support::metrics::{fetch_metrics, metric_sum};
use crate::support::procfs::read_rss;
use crate::support::stack::{free_port, HEALTH_PATH, HEALTH_TIMEOUT};

/// Allowed VmRSS growth over a case.
pub const RSS_SLACK: u64 = 8 << 20;

/// How long slots, fds and log lines get to settle after a case.
pub const SETTLE: Duration = Duration::from_secs(6);

/// SIGTERM-to-SIGKILL grace when a group's edge is stopped (its config has a 1 s drain).
pub const STOP_GRACE: Duration = Duration::from_secs(3);

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

    /// How many times `needle` occurs in edge's output so far.
    pub fn output_count(&self, needle: &str) -> usize {
        self.proc.output().matches(needle).count()
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

/// What edge looked like before a case: the invariants compare against it afterwards.
struct Baseline {
    metrics: String,
    output: String,
    fds: usize,
    rss: u64,
    active: f64,
    idle_upstream: f64,
}

impl Baseline {
    fn take(edge: &Edge) -> Baseline {
        let metrics = edge.metrics();
        let output = edge.proc.output();
        let (fds, rss) = (edge.fds(), edge.rss());
        let active = metric_sum(&metrics, "edge_connections_active", &[]);
        let idle_upstream = metric_sum(&metrics, "edge_upstream_connections", &[("state", "idle")]);
        Baseline {
            metrics,
            output,
            fds,
            rss,
            active,
            idle_upstream,
        }
    }
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
    let base = Baseline::take(edge);
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
    failures.extend(slots_settle(edge, &base));
    let (fds1, fd_failure) = fds_settle(edge, &base);
    failures.extend(fd_failure);
    let rss1 = rss_settle(edge, base.rss);
    if rss1 > base.rss + RSS_SLACK {
        failures.push(format!(
            "VmRSS grew {} -> {} KiB",
            base.rss >> 10,
            rss1 >> 10
        ));
    }
    let (moved, unlogged) = counters_logged(edge, &base);
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
            "{}; {health}; fds {}->{fds1}; rss {:+} KiB{counters}",
            check.observed,
            base.fds,
            (rss1 as i64 - base.rss as i64) / 1024
        ),
        pass: Some(pass),
        notes: failures,
    }
}

/// Waits (at most [`SETTLE`]) for the slots to come back to the baseline; the failure when they
/// did not.
fn slots_settle(edge: &Edge, base: &Baseline) -> Option<String> {
    let slot = |m: &str, name: &str, f: &[(&str, &str)]| metric_sum(m, name, f);
    let active0 = base.active;
    let until = Instant::now() + SETTLE;
    let (a, u, f) = loop {
        let m = edge.metrics();
        let a = slot(&m, "edge_connections_active", &[]);
        let u = slot(&m, "edge_upstream_connections", &[("state", "active")]);
        let f = slot(&m, "edge_requests_in_flight", &[]);
        if (a <= active0 && u == 0.0 && f == 0.0) || Instant::now() >= until {
            break (a, u, f);
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    (a > active0 || u != 0.0 || f != 0.0).then(|| {
        format!(
            "slots not back: connections_active {a} (was {active0}), upstream active {u}, in flight {f}"
        )
    })
}

/// Waits (at most [`SETTLE`]) for edge's VmRSS to come back within [`RSS_SLACK`] of `base`: a worker
/// with nothing in flight gives its pooled buffers back within about a second (DESIGN.md "Memory
/// under slow readers and large bodies"). The VmRSS then.
fn rss_settle(edge: &Edge, base: u64) -> u64 {
    let until = Instant::now() + SETTLE;
    loop {
        let rss = edge.rss();
        if rss <= base + RSS_SLACK || Instant::now() >= until {
            return rss;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most [`SETTLE`]) for the open fds to come back to the baseline; the count then, and
/// the failure when it did not.
///
/// The baseline allows new pooled idle upstream connections, and the fd slots a dead worker
/// leaves behind: its sockets are shut down and released but their fd numbers stay reserved
/// (pointing at /dev/null), and its io_uring ring and eventfd leak with its runtime (docs/operations.md,
/// "Supervision"). A pooled idle connection holds two fds once its pool watch is armed (its socket
/// and the watch's `dup`, one sweep period after check-in: edge's `upstream/src/pool/watch.rs`), so
/// each one pooled now may have gained a second fd since the baseline, and each new one may hold two.
fn fds_settle(edge: &Edge, base: &Baseline) -> (usize, Option<String>) {
    let orphaned = orphaned_fds(&edge.proc.output()[base.output.len()..]);
    let fd_until = Instant::now() + SETTLE;
    let (fds1, allowed) = loop {
        let idle1 = edge.metric("edge_upstream_connections", &[("state", "idle")]);
        let pooled = idle1.max(0.0) as usize;
        let new_pooled = (idle1 - base.idle_upstream).max(0.0) as usize;
        let allowed = base.fds + pooled + new_pooled + orphaned;
        let n = edge.fds();
        if n <= allowed || Instant::now() >= fd_until {
            break (n, allowed);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let failure = (fds1 > allowed).then(|| {
        format!(
            "fds {} -> {fds1} (allowed {allowed} with pooled idle)",
            base.fds
        )
    });
    (fds1, failure)
}

/// Waits (at most 2.5 s: rate-limit summaries come from the worker timer) until every counter that
/// moved since the baseline has its log line; the counters that moved, and those without a line.
fn counters_logged(edge: &Edge, base: &Baseline) -> (Vec<String>, Vec<String>) {
    let log_until = Instant::now() + Duration::from_millis(2500);
    loop {
        let m = edge.metrics();
        let log = log_since(&base.output, &edge.proc.output());
        let missing = unlogged_counters(&base.metrics, &m, &log);
        if missing.is_empty() || Instant::now() >= log_until {
            return (moved_counters(&base.metrics, &m), missing);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One second, the unit the cases' deadlines are written in.
pub const SEC: Duration = Duration::from_secs(1);

/// A duration as `1.23 s` for a case's observation.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Whether `d` lies in `lo..=hi`.
pub fn within(d: Duration, lo: Duration, hi: Duration) -> bool {
    d >= lo && d <= hi
}
