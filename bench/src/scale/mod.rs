//! `edge-bench scale`: how the cost of edge and nginx grows with work (DESIGN.md, Benchmark
//! method; issue 6). Three parts, each optional:
//! - `rate`: latency at fixed request rates with the open-loop generator ([`crate::peers::load::open`]):
//!   p50/p99/p99.9/max from each request's scheduled send time, achieved rate, errors;
//! - `connections`: requests/s and p99 against keep-alive connection count, closed loop
//!   ([`crate::peers::load::closed`]), every connection busy;
//! - `idle`: resident memory against idle keep-alive connection count, from a fresh proxy:
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
//! reason printed and kept in the results (see [`crate::scale::report`]).
//!
//! Output: Markdown tables on stdout, `bench/results/scale-DATE-COMMIT.json` and SVG plots beside
//! it ([`crate::scale::plot`]). Figures are reported, not asserted: `Ok(false)` only when a target
//! failed to start or died.

pub mod plot;
pub mod report;
pub mod target;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;

use crate::compare::proxies::NGINX_BIN;
use crate::peers::load::closed::{run_load, LoadOptions};
use crate::peers::load::open::{run_open_loop, OpenLoopOptions};
use crate::peers::origin::child::start_origin;
use crate::peers::origin::LOAD_PATH;
use crate::scale::report::{
    clamp_count, client_capacity, conn_table, edge_capacity, edge_max_connections_for, idle_table,
    nginx_busy_capacity, nginx_idle_capacity, rate_table, rss_per_conn, ConnRow, IdleRow, RateRow,
    RunInfo, ScaleReport, Skipped,
};
use crate::scale::target::{Proxy, ScaleTarget};
use crate::support::edge_proc::locate_edge_bin;
use crate::support::host::{cpu_list, git_commit, parse_cpus, pin_current_thread, version_of};
use crate::support::probe;
use crate::support::procfs::{clock_ticks_per_sec, raise_nofile_limit};

/// Pause between two runs (lets the previous run's sockets close).
const SETTLE: Duration = Duration::from_millis(500);

/// Options of `edge-bench scale`.
#[derive(Debug, Clone, Args)]
pub struct ScaleArgs {
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

/// Runs the chosen parts, prints their tables, writes JSON and plots.
///
/// # Errors
/// Bad options, no edge binary, the origin not starting, results not writable.
pub fn run(args: &ScaleArgs) -> io::Result<bool> {
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
    let edge_bin = if targets.iter().any(|t| t.is_edge()) {
        locate_edge_bin(args.edge_bin.as_deref())?
    } else {
        PathBuf::from("edge")
    };
    let bin_of = |t: ScaleTarget| {
        if t.is_edge() {
            edge_bin.clone()
        } else {
            args.nginx_bin.clone()
        }
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

    let mut versions = vec![(
        "edge-bench".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    )];
    for t in &targets {
        let (name, arg) = if t.is_edge() {
            ("edge", "--version")
        } else {
            ("nginx", "-v")
        };
        if !versions.iter().any(|(n, _)| n == name) {
            versions.push((name.to_string(), version_of(&bin_of(*t), arg)));
        }
    }
    let mut failures = Vec::new();
    let mut report = ScaleReport {
        run: RunInfo {
            tool: "edge-bench scale".into(),
            date: crate::support::host::utc_date(),
            commit: git_commit(),
            machine: machine(),
            kernel: crate::support::host::kernel_release().unwrap_or_else(|| "unknown".into()),
            versions,
            placement,
            fd_limit: (soft, hard),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        },
        rate: Vec::new(),
        connections: Vec::new(),
        idle: Vec::new(),
        skipped,
    };

    if part("rate") || part("connections") {
        let most = args
            .connections
            .iter()
            .copied()
            .chain([args.rate_connections])
            .max()
            .unwrap_or(64);
        let max_conns = edge_max_connections_for(most);
        let mut running = Vec::new();
        for &t in &targets {
            match Proxy::start(t, &bin_of(t), origin, &proxy_list, max_conns, hard) {
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
                o.cpus = load_cpus.clone();
                run_load(&o)?;
            }
        }
        if part("rate") {
            for &rate in &args.rates {
                for p in running.iter_mut() {
                    if let Some(row) = rate_run(p, rate, args, &load_cpus, &mut failures)? {
                        report.rate.push(row);
                    }
                }
            }
            println!("\n### Latency at fixed rates (open loop)\n");
            print!("{}", rate_table(&report.rate).render_markdown_numeric());
        }
        if part("connections") {
            for &n in &args.connections {
                for p in running.iter_mut() {
                    let (used, note) = busy_count(p.target, n, max_conns, hard);
                    if let Some(row) = conn_run(p, n, used, note, args, &load_cpus, &mut failures)?
                    {
                        report.connections.push(row);
                    }
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
    }

    if part("idle") {
        let mut counts = args.idle.clone();
        counts.sort_unstable();
        counts.dedup();
        for &t in &targets {
            match idle_run(t, &bin_of(t), origin, &proxy_list, &counts, hard, args) {
                Ok(rows) => report.idle.extend(rows),
                Err(e) => {
                    eprintln!("{}: {e}", t.name());
                    failures.push(format!("{} idle: {}", t.name(), first_line(&e.to_string())));
                }
            }
        }
        println!("\n### Resident memory against idle keep-alive connections\n");
        print!("{}", idle_table(&report.idle).render_markdown_numeric());
        println!(
            "\nper connection = (VmRSS held − VmRSS before) / connections; nginx = master + worker"
        );
    }
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

    std::fs::create_dir_all(&args.out_dir)?;
    let stem = args
        .out_dir
        .join(format!("scale-{}-{}", report.run.date, report.run.commit));
    let json = stem.with_extension("json");
    std::fs::write(&json, report.to_json())?;
    println!("\nresults: {}", json.display());
    for path in crate::scale::plot::write_plots(&report, &stem)? {
        println!("plot: {}", path.display());
    }
    for f in &failures {
        println!("FAILED: {f}");
    }
    Ok(failures.is_empty())
}

/// Busy connections to use for `requested` on `target`, and why when it is fewer.
fn busy_count(
    target: ScaleTarget,
    requested: u64,
    max_conns: u64,
    hard: u64,
) -> (u64, Option<String>) {
    let client = (client_capacity(hard), "edge-bench's own fd limit");
    let own = if target.is_edge() {
        (
            edge_capacity(max_conns, hard),
            "edge fits max_connections to its fd limit (2 x max + 256 fds) and evicts below 1/16 free",
        )
    } else {
        (
            nginx_busy_capacity(hard),
            "nginx needs a client and an upstream fd per busy connection",
        )
    };
    clamp_count(requested, &[client, own])
}

/// Idle connections to use for `requested` on `target`, and why when it is fewer.
fn idle_count(
    target: ScaleTarget,
    requested: u64,
    max_conns: u64,
    hard: u64,
) -> (u64, Option<String>) {
    let client = (
        client_capacity(hard),
        "edge-bench holds one fd per connection under the fd hard limit",
    );
    let own = if target.is_edge() {
        (
            edge_capacity(max_conns, hard),
            "edge fits max_connections to its fd limit (2 x max + 256 fds) and evicts below 1/16 free",
        )
    } else {
        (
            nginx_idle_capacity(hard),
            "nginx's fd limit (the hard limit)",
        )
    };
    clamp_count(requested, &[client, own])
}

/// Proxy CPU share between two tick readings over `wall`.
fn cpu_share(before: Option<u64>, after: Option<u64>, wall: Duration) -> Option<f64> {
    let ticks = after?.checked_sub(before?)?;
    Some(ticks as f64 / clock_ticks_per_sec() as f64 / wall.as_secs_f64().max(1e-9))
}

fn rate_run(
    p: &mut Proxy,
    rate: f64,
    args: &ScaleArgs,
    cpus: &[usize],
    failures: &mut Vec<String>,
) -> io::Result<Option<RateRow>> {
    if let Err(e) = p.check_alive() {
        eprintln!("{e}");
        failures.push(format!("{} died", p.target.name()));
        return Ok(None);
    }
    std::thread::sleep(SETTLE);
    let mut o = OpenLoopOptions::new(p.addr, LOAD_PATH, rate);
    o.connections = args.rate_connections as usize;
    o.duration = args.duration;
    o.cpus = cpus.to_vec();
    let (t0, c0) = (Instant::now(), p.cpu_ticks());
    let r = run_open_loop(&o)?;
    let cpu = cpu_share(c0, p.cpu_ticks(), t0.elapsed());
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let row = RateRow {
        target: p.target.name().into(),
        rate,
        connections: args.rate_connections,
        scheduled: r.scheduled,
        responses: r.responses,
        achieved: r.achieved_rate(args.duration),
        errors: r.error_total(),
        unsent: r.unsent,
        p50_ms: q(&r.latency_us, 0.5),
        p99_ms: q(&r.latency_us, 0.99),
        p999_ms: q(&r.latency_us, 0.999),
        max_ms: r.latency_us.max() as f64 / 1000.0,
        service_p99_ms: q(&r.service_us, 0.99),
        send_lag_p99_ms: q(&r.send_lag_us, 0.99),
        proxy_cpu: cpu,
    };
    println!(
        "rate {:>6.0}/s {:<14} achieved {:>7.0}/s p50 {:.2} ms p99 {:.2} ms max {:.1} ms errors {}",
        rate, row.target, row.achieved, row.p50_ms, row.p99_ms, row.max_ms, row.errors
    );
    let _ = io::stdout().flush();
    Ok(Some(row))
}

fn conn_run(
    p: &mut Proxy,
    requested: u64,
    used: u64,
    note: Option<String>,
    args: &ScaleArgs,
    cpus: &[usize],
    failures: &mut Vec<String>,
) -> io::Result<Option<ConnRow>> {
    if let Err(e) = p.check_alive() {
        eprintln!("{e}");
        failures.push(format!("{} died", p.target.name()));
        return Ok(None);
    }
    std::thread::sleep(SETTLE);
    let mut o = LoadOptions::new(p.addr, LOAD_PATH);
    o.connections = used as usize;
    o.duration = args.duration;
    o.cpus = cpus.to_vec();
    let (t0, c0) = (Instant::now(), p.cpu_ticks());
    let r = run_load(&o)?;
    let cpu = cpu_share(c0, p.cpu_ticks(), t0.elapsed());
    let row = ConnRow {
        target: p.target.name().into(),
        requested,
        connections: used,
        note,
        rps: r.req_per_sec(),
        p50_ms: r.latency(0.5).as_secs_f64() * 1e3,
        p99_ms: r.latency(0.99).as_secs_f64() * 1e3,
        errors: r.error_total(),
        proxy_cpu: cpu,
    };
    println!(
        "connections {:>6} {:<14} {:>7.0} req/s p99 {:.2} ms errors {}",
        used, row.target, row.rps, row.p99_ms, row.errors
    );
    let _ = io::stdout().flush();
    Ok(Some(row))
}

/// Opens one keep-alive connection that has served `GET path`.
fn open_one(addr: SocketAddr, host: &str, path: &str) -> io::Result<TcpStream> {
    let mut s = probe::connect(addr, Duration::from_secs(2))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    probe::send_get(&mut s, host, path, false)?;
    let resp = probe::read_response(&mut s, Instant::now() + Duration::from_secs(5))?;
    if resp.status != 200 {
        return Err(io::Error::other(format!("status {}", resp.status)));
    }
    Ok(s)
}

/// A fresh proxy; RSS before, then with each count of idle connections held (opened
/// incrementally, each having served `GET /fast` through to the origin).
fn idle_run(
    t: ScaleTarget,
    bin: &Path,
    origin: SocketAddr,
    cpus: &str,
    counts: &[u64],
    hard: u64,
    args: &ScaleArgs,
) -> io::Result<Vec<IdleRow>> {
    let most = counts.iter().copied().max().unwrap_or(0);
    let max_conns = edge_max_connections_for(most);
    let mut p = Proxy::start(t, bin, origin, cpus, max_conns, hard)?;
    // Let start-up settle (first request served by wait_healthy, timers) before the baseline.
    std::thread::sleep(Duration::from_secs(1));
    let baseline = p.rss()?;
    let host = p.addr.to_string();
    let mut held: Vec<TcpStream> = Vec::new();
    let mut rows = Vec::new();
    for &requested in counts {
        let (n, mut note) = idle_count(t, requested, max_conns, hard);
        let t0 = Instant::now();
        let mut first_err = None;
        while (held.len() as u64) < n {
            match open_one(p.addr, &host, LOAD_PATH) {
                Ok(s) => held.push(s),
                Err(e) => {
                    first_err = Some(e.to_string());
                    break;
                }
            }
        }
        if let Some(e) = first_err {
            note = Some(format!(
                "{requested} requested, {} reached: opening the next failed ({e})",
                held.len()
            ));
        }
        std::thread::sleep(args.settle);
        p.check_alive()?;
        let rss = p.rss()?;
        let reached = held.len() as u64;
        println!(
            "idle {:<14} {reached:>6} connections (opened in {:.1} s): VmRSS {} -> {} bytes",
            t.name(),
            t0.elapsed().as_secs_f64(),
            baseline,
            rss
        );
        let _ = io::stdout().flush();
        rows.push(IdleRow {
            target: t.name().into(),
            requested,
            reached,
            note: note.clone(),
            baseline_rss: baseline,
            rss,
            per_conn: rss_per_conn(baseline, rss, reached),
        });
        if note.is_some() && reached < requested {
            // Larger counts cannot get further.
            for &more in counts.iter().filter(|&&c| c > requested) {
                rows.push(IdleRow {
                    requested: more,
                    note: Some(format!(
                        "{more} requested, {reached} reached: {}",
                        note.as_deref().unwrap_or("")
                    )),
                    ..rows.last().cloned().expect("just pushed")
                });
            }
            break;
        }
    }
    drop(held);
    p.stop(Duration::from_secs(2));
    Ok(rows)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// `CPU model, N CPUs, M GiB`.
fn machine() -> String {
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
