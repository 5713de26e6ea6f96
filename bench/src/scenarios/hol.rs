//! `edge-bench hol`: health probes behind slow requests (head-of-line blocking), DESIGN.md Fault
//! matrix c.
//!
//! For each k in 1, 15, 64, 128: open k connections that each send `GET /slow` (the origin holds
//! them 3 s), and while they wait, probe `GET /_health` on fresh connections every 250 ms for
//! about 2.5 s. Then read the k slow responses (non-200 counted and reported) before the next k.
//! The invariant (DESIGN.md): no probe fails and none takes longer than 1 s; the 5 ms p99 goal is
//! reported, not asserted. [`probe_behind_slow`] is the shared step, also used by the demo.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::peers::origin::{OriginOptions, DEFAULT_SLOW};
use crate::support::edge_proc::{locate_edge_bin, EdgeArgs, STOP_GRACE};
use crate::support::probe::{probe_series, HeldOutcome, HeldRequests, Probe};
use crate::support::stack::{Stack, HEALTH_PATH};
use crate::support::table::{ms, Quantiles, Table};

/// Path the origin delays by [`DEFAULT_SLOW`].
pub const SLOW_PATH: &str = "/slow";

/// A probe slower than this fails the scenario (DESIGN.md, Fault matrix).
pub const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// Per-probe timeout: longer than [`PROBE_LIMIT`], so a slow probe is measured, not just failed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Polls edge's `edge_requests_in_flight` (summed over workers) until it reaches `k` or `until`.
fn wait_in_flight(admin: SocketAddr, k: usize, until: Instant) {
    while Instant::now() < until {
        let in_flight = crate::support::metrics::fetch_metrics(admin)
            .map(|m| crate::support::metrics::metric_sum(&m, "edge_requests_in_flight", &[]))
            .unwrap_or(0.0);
        if in_flight >= k as f64 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One k: the probes and the held slow requests.
#[derive(Debug, Clone)]
pub struct HolRound {
    /// Slow requests held open.
    pub k: usize,
    /// Health probes taken while they waited.
    pub probes: Vec<Probe>,
    /// How the slow requests ended.
    pub held: HeldOutcome,
}

impl HolRound {
    /// Probes that did not get a 200.
    pub fn failed(&self) -> usize {
        self.probes.iter().filter(|p| !p.ok()).count()
    }

    /// Probes (passed or not) slower than `limit`.
    pub fn slower_than(&self, limit: Duration) -> usize {
        self.probes.iter().filter(|p| p.latency > limit).count()
    }

    /// Percentiles of all probe latencies.
    pub fn quantiles(&self) -> Option<Quantiles> {
        Quantiles::of(&self.probes.iter().map(|p| p.latency).collect::<Vec<_>>())
    }

    /// The first failed probe's error, for the report.
    pub fn first_failure(&self) -> Option<String> {
        self.probes
            .iter()
            .find(|p| !p.ok())
            .map(|p| match &p.result {
                Ok(status) => format!("probe at {} answered {status}", ms(p.at)),
                Err(e) => format!("probe at {} failed: {e}", ms(p.at)),
            })
    }
}

/// Holds `k` slow requests open on `traffic`, waits until edge reports all `k` in flight (its admin
/// `/metrics`, at most 5 s), probes health every `interval` for `window`, then reads the slow
/// responses (bounded by the slow delay plus 10 s). Probing starts once the requests wait on the
/// origin, not while edge is still accepting the burst: the probes measure head-of-line blocking
/// behind waiting requests.
pub fn probe_behind_slow(
    traffic: SocketAddr,
    admin: SocketAddr,
    k: usize,
    interval: Duration,
    window: Duration,
) -> HolRound {
    let held = HeldRequests::open(traffic, SLOW_PATH, k, PROBE_TIMEOUT);
    let opened = Instant::now();
    wait_in_flight(admin, k, opened + Duration::from_secs(5));
    let probes = probe_series(traffic, HEALTH_PATH, interval, window, PROBE_TIMEOUT);
    let held = held.finish(opened + DEFAULT_SLOW + Duration::from_secs(10));
    HolRound { k, probes, held }
}

/// Command line of `edge-bench hol`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub edge: EdgeArgs,
}

impl Args {
    /// The scenario's options: these choices over the defaults.
    pub fn options(&self) -> HolOptions {
        HolOptions {
            edge_bin: self.edge.edge_bin.clone(),
            edge_args: self.edge.driver_args(),
            ..HolOptions::default()
        }
    }
}

/// Options of `edge-bench hol`.
#[derive(Debug, Clone)]
pub struct HolOptions {
    /// The edge binary; found or built when `None` (see [`locate_edge_bin`]).
    pub edge_bin: Option<PathBuf>,
    /// Numbers of slow requests, one round each.
    pub ks: Vec<usize>,
    /// Time between probes.
    pub interval: Duration,
    /// How long probes run per round (shorter than the 3 s slow delay).
    pub window: Duration,
    /// Extra arguments for edge (e.g. `--io-driver epoll`).
    pub edge_args: Vec<String>,
}

impl Default for HolOptions {
    fn default() -> Self {
        Self {
            edge_bin: None,
            ks: vec![1, 15, 64, 128],
            interval: Duration::from_millis(250),
            window: Duration::from_millis(2500),
            edge_args: Vec::new(),
        }
    }
}

/// Runs the scenario and prints its table; returns whether the invariant held.
///
/// # Errors
/// Setup failures: no edge binary, origin or edge not starting, edge exiting mid-run.
pub fn run(opts: &HolOptions) -> io::Result<bool> {
    let bin = locate_edge_bin(opts.edge_bin.as_deref())?;
    let mut stack = Stack::start(&bin, OriginOptions::default(), &opts.edge_args)?;
    let mut rounds = Vec::with_capacity(opts.ks.len());
    for &k in &opts.ks {
        println!(
            "k={k}: holding {k} x GET {SLOW_PATH}, probing {HEALTH_PATH} every {}",
            ms(opts.interval)
        );
        rounds.push(probe_behind_slow(
            stack.traffic,
            stack.admin,
            k,
            opts.interval,
            opts.window,
        ));
        stack.check_alive()?;
    }
    let mut table = Table::new(&[
        "k",
        "probes",
        "failed",
        ">1s",
        "p50",
        "p90",
        "max",
        "slow ok",
        "slow failed",
    ]);
    for r in &rounds {
        let q = r.quantiles();
        let cell = |f: fn(&Quantiles) -> Duration| q.as_ref().map_or("-".into(), |q| ms(f(q)));
        table.row([
            r.k.to_string(),
            r.probes.len().to_string(),
            r.failed().to_string(),
            r.slower_than(PROBE_LIMIT).to_string(),
            cell(|q| q.p50),
            cell(|q| q.p90),
            cell(|q| q.max),
            r.held.ok.to_string(),
            r.held.failed.to_string(),
        ]);
    }
    println!();
    print!("{}", table.render());
    let mut passed = true;
    for r in &rounds {
        if let Some(f) = r.first_failure() {
            println!("k={}: {f}", r.k);
            passed = false;
        }
        if r.slower_than(PROBE_LIMIT) > 0 || r.probes.is_empty() {
            println!(
                "k={}: probe slower than {} or no probe taken",
                r.k,
                ms(PROBE_LIMIT)
            );
            passed = false;
        }
        if let Some(e) = &r.held.first_error {
            println!(
                "k={}: {} slow request(s) failed, first: {e}",
                r.k, r.held.failed
            );
        }
        if r.quantiles()
            .is_some_and(|q| q.p99 > Duration::from_millis(5))
        {
            println!(
                "k={}: probe p99 above the 5 ms goal (reported, not asserted)",
                r.k
            );
        }
    }
    let stopped = stack.edge.stop(STOP_GRACE)?;
    println!("edge {stopped}");
    println!("hol: {}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}
