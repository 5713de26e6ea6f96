//! `edge-bench demo`: the README's first command (DESIGN.md, Quick start).
//!
//! Starts the built-in origin on loopback and the real `edge` binary in front of it (building
//! edge first when it is missing), drives keep-alive load on `/fast`, probes `/_health` on fresh
//! connections behind 15 slow requests, reads the io driver from the admin metrics, prints one
//! table, and stops edge (SIGTERM, SIGKILL after 5 s) and the origin, also on every error path.
//! It fails (non-zero exit) when edge fails to start or dies, when a health probe fails, when a
//! slow request fails, or when no load request succeeded.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::peers::load::closed::{run_load, LoadOptions, LoadReport};
use crate::peers::origin::{OriginOptions, LOAD_PATH};
use crate::scenarios::hol::{probe_behind_slow, HolRound};
use crate::support::edge_proc::{driver_args, locate_edge_bin, STOP_GRACE};
use crate::support::stack::Stack;
use crate::support::table::{ms, Table};

/// Command line of `edge-bench demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Load duration.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// The edge binary (default: next to edge-bench, else built with cargo).
    #[arg(long)]
    pub edge_bin: Option<PathBuf>,
    /// Keep-alive load connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Load generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
    #[arg(long)]
    pub io_driver: Option<String>,
}

impl Args {
    /// The demo's options: these choices over the defaults.
    pub fn options(&self) -> DemoOptions {
        DemoOptions {
            duration: self.duration,
            edge_bin: self.edge_bin.clone(),
            connections: self.connections,
            threads: self.threads,
            edge_args: driver_args(self.io_driver.as_deref()),
            ..DemoOptions::default()
        }
    }
}

/// Options of `edge-bench demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Load duration.
    pub duration: Duration,
    /// The edge binary; found or built when `None`.
    pub edge_bin: Option<PathBuf>,
    /// Keep-alive load connections.
    pub connections: usize,
    /// Load generator threads.
    pub threads: usize,
    /// Slow requests held open during the health probes.
    pub slow: usize,
    /// Extra arguments for edge (e.g. `--io-driver epoll`).
    pub edge_args: Vec<String>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(10),
            edge_bin: None,
            connections: 64,
            threads: 1,
            slow: 15,
            edge_args: Vec::new(),
        }
    }
}

/// Runs the demo and prints its table; returns whether it passed.
///
/// # Errors
/// Setup failures: no edge binary, origin or edge not starting, edge exiting mid-run.
pub fn run(opts: &DemoOptions) -> io::Result<bool> {
    let bin = locate_edge_bin(opts.edge_bin.as_deref())?;
    let mut stack = Stack::start(&bin, OriginOptions::default(), &opts.edge_args)?;

    println!(
        "load: {} keep-alive connections, {} thread(s), GET {LOAD_PATH} for {:.0} s",
        opts.connections,
        opts.threads,
        opts.duration.as_secs_f64()
    );
    let _ = io::stdout().flush();
    let mut load_opts = LoadOptions::new(stack.traffic, LOAD_PATH);
    load_opts.connections = opts.connections;
    load_opts.threads = opts.threads;
    load_opts.duration = opts.duration;
    let load = run_load(&load_opts)?;
    stack.check_alive()?;

    println!(
        "probing /_health every 100 ms behind {} x GET /slow (origin holds them 3 s)",
        opts.slow
    );
    let _ = io::stdout().flush();
    let hol = probe_behind_slow(
        stack.traffic,
        stack.admin,
        opts.slow,
        Duration::from_millis(100),
        Duration::from_millis(2500),
    );
    stack.check_alive()?;

    let driver = stack
        .io_driver()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    println!();
    print!("{}", render(&load, &hol, &driver));

    let mut failures = Vec::new();
    if load.responses == 0 {
        failures.push("no load request succeeded".to_string());
    }
    if let Some(f) = hol.first_failure() {
        failures.push(format!(
            "{} of {} health probes failed; {f}",
            hol.failed(),
            hol.probes.len()
        ));
    }
    if hol.probes.is_empty() {
        failures.push("no health probe was taken".to_string());
    }
    if let Some(e) = &hol.held.first_error {
        failures.push(format!(
            "{} slow request(s) failed, first: {e}",
            hol.held.failed
        ));
    }
    let stopped = stack.edge.stop(STOP_GRACE)?;
    println!("edge {stopped}");
    drop(stack);
    for f in &failures {
        println!("demo: FAIL: {f}");
    }
    if failures.is_empty() {
        println!("demo: PASS");
    }
    Ok(failures.is_empty())
}

/// The demo's result table.
fn render(load: &LoadReport, hol: &HolRound, driver: &str) -> String {
    let mut t = Table::new(&["measure", "value"]);
    t.row([
        "requests/s".to_string(),
        format!("{:.0}", load.req_per_sec()),
    ]);
    t.row([
        "requests (errors)".to_string(),
        format!("{} ({})", load.responses, load.error_total()),
    ]);
    for (name, q) in [
        ("latency p50", 0.5),
        ("latency p99", 0.99),
        ("latency p99.9", 0.999),
    ] {
        t.row([name.to_string(), ms(load.latency(q))]);
    }
    t.row(["latency max".to_string(), ms(load.latency_max())]);
    t.row([
        format!("health probes behind {} slow", hol.k),
        format!("{} ({} failed)", hol.probes.len(), hol.failed()),
    ]);
    let q = hol.quantiles();
    t.row([
        "health probe p50".to_string(),
        q.map_or("-".into(), |q| ms(q.p50)),
    ]);
    t.row([
        "health probe max".to_string(),
        q.map_or("-".into(), |q| ms(q.max)),
    ]);
    t.row([
        "slow requests ok / failed".to_string(),
        format!("{} / {}", hol.held.ok, hol.held.failed),
    ]);
    t.row(["io driver".to_string(), driver.to_string()]);
    t.render()
}
