//! `edge-bench scale`: how the cost of edge and nginx grows with work (DESIGN.md, Benchmark
//! method). Three parts, each optional:
//! - [`rate`]: latency at fixed request rates with the open-loop generator
//!   ([`crate::peers::load::open`]): p50/p99/p99.9/max from each request's scheduled send time,
//!   achieved rate, errors;
//! - [`connections`]: requests/s and p99 against keep-alive connection count, closed loop
//!   ([`crate::peers::load::closed`]), every connection busy;
//! - [`idle`]: resident memory against idle keep-alive connection count, from a fresh proxy:
//!   (VmRSS with N idle − VmRSS before) / N.
//!
//! Placement as in `compare`: the proxy under test on the proxy CPUs (1 worker), the origin
//! (`edge-bench origin` child) and edge-bench's load threads on the load CPUs. In `rate` and
//! `connections` every target is started once and kept running; runs interleave the targets at
//! each step (A B C at 10k/s, A B C at 20k/s, …).
//!
//! Counts are bounded by file descriptors: RLIMIT_NOFILE is raised to the hard limit, and a
//! count that does not fit (edge-bench's own sockets, edge's `2 × max_connections + 256` rule and
//! its eviction threshold, nginx's two fds per busy connection) is lowered to what fits, with the
//! reason printed and kept in the results (see [`report`]).
//!
//! Output: Markdown tables on stdout, `bench/results/scale-DATE-COMMIT.json` and SVG plots beside
//! it ([`plot`]); the proxies are in [`target`]. Figures are reported, not asserted: `Ok(false)` only when a target
//! failed to start or died.

pub mod connections;
pub mod idle;
pub mod plot;
pub mod rate;
pub mod report;
pub mod target;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::compare::proxies::NGINX_BIN;
use crate::peers::load::closed::{run_load, LoadOptions};
use crate::peers::origin::child::start_origin;
use crate::peers::origin::LOAD_PATH;
use crate::scale::report::{
    conn_table, edge_max_connections_for, rate_table, RunInfo, ScaleReport, Skipped,
};
use crate::scale::target::{Proxy, ScaleTarget};
use crate::support::edge_proc::locate_edge_bin;
use crate::support::host::{cpu_list, git_commit, parse_cpus, pin_current_thread, version_of};
use crate::support::procfs::{clock_ticks_per_sec, raise_nofile_limit};

/// Pause between two runs (lets the previous run's sockets close).
const SETTLE: Duration = Duration::from_millis(500);

/// Options of `edge-bench scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Parts to run: rate, connections, idle.
    #[arg(long, value_delimiter = ',', default_value = "rate,connections,idle")]
    pub parts: Vec<String>,
    /// Targets, in the order each step runs them.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "edge-io_uring,edge-epoll,nginx"
    )]
    pub targets: Vec<ScaleTarget>,
    /// `rate`: requests/s to hold, in turn.
    #[arg(long, value_delimiter = ',', default_value = "10000,20000,40000")]
    pub rates: Vec<f64>,
    /// `rate`: keep-alive connections the rate is spread over.
    #[arg(long, default_value_t = 64)]
    pub rate_connections: u64,
    /// `connections`: busy keep-alive connection counts, in turn.
    #[arg(long, value_delimiter = ',', default_value = "16,256,1000,10000")]
    pub connections: Vec<u64>,
    /// `idle`: idle keep-alive connection counts (ascending; opened incrementally).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000")]
    pub idle: Vec<u64>,
    /// `idle`: also measure idle TLS connections (TLS 1.3 with one generated ECDSA P-256
    /// certificate; each did one keep-alive HTTPS GET), in rows `TARGET tls` beside the plain ones.
    #[arg(long)]
    pub tls: bool,
    /// Length of each measured run (rate and connections).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Unmeasured closed-loop run (64 connections) per target after it starts; 0s skips it.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// `idle`: wait after opening connections before reading the RSS.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// CPUs of the proxy under test.
    #[arg(long, default_value = "0")]
    pub proxy_cpus: String,
    /// CPUs of the origin and edge-bench's load threads.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// The edge binary (default: next to edge-bench, else built with cargo).
    #[arg(long)]
    pub edge_bin: Option<PathBuf>,
    /// nginx executable (nginx is skipped, with the reason, when it is missing).
    #[arg(long, default_value = NGINX_BIN)]
    pub nginx_bin: PathBuf,
    /// Where the JSON and SVG files go.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub out_dir: PathBuf,
}

/// What every part of one run shares.
struct Setup<'a> {
    args: &'a Args,
    /// Targets that run, in step order.
    targets: Vec<ScaleTarget>,
    edge_bin: PathBuf,
    /// The origin's address (an `edge-bench origin` child).
    origin: SocketAddr,
    /// `taskset -c` list of the proxy CPUs.
    proxy_list: String,
    load_cpus: Vec<usize>,
    /// RLIMIT_NOFILE hard limit (edge-bench, edge and nginx run at it).
    hard: u64,
    /// Certificates for the TLS idle rows (`--tls`).
    tls: Option<crate::support::certs::CertFiles>,
}

impl Setup<'_> {
    fn bin_of(&self, t: ScaleTarget) -> PathBuf {
        if t.is_edge() {
            self.edge_bin.clone()
        } else {
            self.args.nginx_bin.clone()
        }
    }
}

/// Runs the chosen parts, prints their tables, writes JSON and plots.
///
/// # Errors
/// Bad options, no edge binary, the origin not starting, results not writable.
pub fn run(args: &Args) -> io::Result<bool> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let proxy_cpus = parse_cpus(&args.proxy_cpus).map_err(invalid)?;
    let load_cpus = parse_cpus(&args.load_cpus).map_err(invalid)?;
    for p in &args.parts {
        if !["rate", "connections", "idle"].contains(&p.as_str()) {
            return Err(invalid(format!(
                "unknown part {p:?} (expected rate, connections, idle)"
            )));
        }
    }
    let part = |name: &str| args.parts.iter().any(|p| p == name);
    let (soft, hard) = raise_nofile_limit()?;
    println!("fd limit {soft} (hard {hard}); edge-bench, edge and nginx each get the hard limit");

    let (targets, skipped) = select_targets(args);
    let edge_bin = if targets.iter().any(|t| t.is_edge()) {
        locate_edge_bin(args.edge_bin.as_deref())?
    } else {
        PathBuf::from("edge")
    };
    let (proxy_list, load_list) = (cpu_list(&proxy_cpus), cpu_list(&load_cpus));
    pin_current_thread(&load_cpus)?;
    let (_origin, origin) = start_origin(&load_list, load_cpus.len(), Duration::from_secs(10))?;
    let placement = format!(
        "proxy on CPU {proxy_list} (1 worker); origin ({} worker(s)) and edge-bench's load \
         threads on CPU {load_list}",
        load_cpus.len()
    );
    println!("{placement}; origin on {origin}");
    let setup = Setup {
        args,
        targets,
        edge_bin,
        origin,
        proxy_list,
        load_cpus,
        hard,
        tls: match args.tls {
            true => Some(crate::support::certs::write_test_certs(
                &std::env::temp_dir().join(format!("edge-bench-scale-{}-tls", std::process::id())),
                "edge-bench scale CA",
                1,
            )?),
            false => None,
        },
    };

    let mut failures = Vec::new();
    let mut report = ScaleReport {
        run: run_info(&setup, placement, (soft, hard)),
        rate: Vec::new(),
        connections: Vec::new(),
        idle: Vec::new(),
        skipped,
    };
    if part("rate") || part("connections") {
        busy_parts(
            &setup,
            part("rate"),
            part("connections"),
            &mut report,
            &mut failures,
        )?;
    }
    if part("idle") {
        idle::part(&setup, &mut report, &mut failures);
    }
    print_notes(&report);
    write_results(&args.out_dir, &report)?;
    for f in &failures {
        println!("FAILED: {f}");
    }
    Ok(failures.is_empty())
}

/// The requested targets without repeats, leaving out nginx when its executable is missing
/// (printed, and returned with the reason).
fn select_targets(args: &Args) -> (Vec<ScaleTarget>, Vec<Skipped>) {
    let mut skipped = Vec::new();
    let mut targets: Vec<ScaleTarget> = Vec::new();
    for &t in &args.targets {
        if targets.contains(&t) {
            continue;
        }
        if t == ScaleTarget::Nginx && !args.nginx_bin.is_file() {
            let reason = format!(
                "{} not found (bench/setup.sh installs it)",
                args.nginx_bin.display()
            );
            println!("skipping nginx: {reason}");
            skipped.push(Skipped {
                target: t.name().into(),
                reason,
            });
            continue;
        }
        targets.push(t);
    }
    (targets, skipped)
}

/// The run's record: date, commit, machine, kernel, versions of what runs, placement, fd limit and
/// the command line.
fn run_info(setup: &Setup, placement: String, fd_limit: (u64, u64)) -> RunInfo {
    let mut versions = vec![(
        "edge-bench".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    )];
    for t in &setup.targets {
        let (name, arg) = if t.is_edge() {
            ("edge", "--version")
        } else {
            ("nginx", "-v")
        };
        if !versions.iter().any(|(n, _)| n == name) {
            versions.push((name.to_string(), version_of(&setup.bin_of(*t), arg)));
        }
    }
    RunInfo {
        tool: "edge-bench scale".into(),
        date: crate::support::host::utc_date(),
        commit: git_commit(),
        machine: machine(),
        kernel: crate::support::host::kernel_release().unwrap_or_else(|| "unknown".into()),
        versions,
        placement,
        fd_limit,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// The `rate` and `connections` parts: every target started once (sized for the most
/// connections either part asks for), warmed up, then each step run over the targets in turn.
fn busy_parts(
    setup: &Setup,
    rate: bool,
    connections: bool,
    report: &mut ScaleReport,
    failures: &mut Vec<String>,
) -> io::Result<()> {
    let (args, hard) = (setup.args, setup.hard);
    let most = args
        .connections
        .iter()
        .copied()
        .chain([args.rate_connections])
        .max()
        .unwrap_or(64);
    let max_conns = edge_max_connections_for(most);
    let mut running = Vec::new();
    for &t in &setup.targets {
        match Proxy::start(
            t,
            &setup.bin_of(t),
            setup.origin,
            &setup.proxy_list,
            (max_conns, hard),
            None,
        ) {
            Ok(p) => running.push(p),
            Err(e) => {
                eprintln!("{e}");
                failures.push(format!("{} failed to start", t.name()));
                report.skipped.push(Skipped {
                    target: t.name().into(),
                    reason: format!("failed to start: {}", first_line(&e.to_string())),
                });
            }
        }
    }
    if !args.warmup.is_zero() {
        for p in &running {
            let mut o = LoadOptions::new(p.addr, LOAD_PATH);
            o.duration = args.warmup;
            o.cpus = setup.load_cpus.clone();
            run_load(&o)?;
        }
    }
    if rate {
        for &r in &args.rates {
            for p in running.iter_mut() {
                if let Some(row) = rate::run_at(p, r, args, &setup.load_cpus, failures)? {
                    report.rate.push(row);
                }
            }
        }
        println!("\n### Latency at fixed rates (open loop)\n");
        print!("{}", rate_table(&report.rate).render_markdown_numeric());
    }
    if connections {
        for &n in &args.connections {
            for p in running.iter_mut() {
                let (used, note) = connections::busy_count(p.target, n, max_conns, hard);
                let row =
                    connections::run_with(p, n, used, note, args, &setup.load_cpus, failures)?;
                report.connections.extend(row);
            }
        }
        println!("\n### Requests/s and latency against busy connections (closed loop)\n");
        print!(
            "{}",
            conn_table(&report.connections).render_markdown_numeric()
        );
    }
    for p in running {
        p.stop(Duration::from_secs(2));
    }
    Ok(())
}

/// Prints the notes of clamped counts and the skipped targets.
fn print_notes(report: &ScaleReport) {
    let notes: Vec<String> = report
        .connections
        .iter()
        .filter_map(|r| r.note.as_ref().map(|n| format!("{} busy: {n}", r.target)))
        .chain(
            report
                .idle
                .iter()
                .filter_map(|r| r.note.as_ref().map(|n| format!("{} idle: {n}", r.target))),
        )
        .collect();
    for n in &notes {
        println!("note: {n}");
    }
    for s in &report.skipped {
        println!("skipped {}: {}", s.target, s.reason);
    }
}

/// Writes `scale-DATE-COMMIT.json` and the SVG plots beside it under `dir`, printing their paths.
fn write_results(dir: &Path, report: &ScaleReport) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let stem = dir.join(format!("scale-{}-{}", report.run.date, report.run.commit));
    let json = stem.with_extension("json");
    std::fs::write(&json, report.to_json())?;
    println!("\nresults: {}", json.display());
    for path in plot::write_plots(report, &stem)? {
        println!("plot: {}", path.display());
    }
    Ok(())
}

/// Proxy CPU share between two tick readings over `wall`.
pub(crate) fn cpu_share(before: Option<u64>, after: Option<u64>, wall: Duration) -> Option<f64> {
    let ticks = after?.checked_sub(before?)?;
    Some(ticks as f64 / clock_ticks_per_sec() as f64 / wall.as_secs_f64().max(1e-9))
}

/// The first line of `s`.
pub(crate) fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// `CPU model, N CPUs, M GiB`.
pub(crate) fn machine() -> String {
    let model = crate::support::host::cpu_model().unwrap_or_else(|| "unknown CPU".into());
    let cpus = crate::support::host::online_cpus().unwrap_or(0);
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    format!(
        "{model}, {cpus} CPUs, {:.1} GiB",
        mem_kib as f64 / (1024.0 * 1024.0)
    )
}
