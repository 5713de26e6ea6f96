//! `edge-bench slow-readers`: resident memory under slow readers of large bodies (DESIGN.md "Memory
//! under slow readers and large bodies", and its paragraph of "Benchmark method").
//!
//! Placement as in `compare`: the proxy under test on the proxy CPUs (1 edge worker, 1 nginx
//! worker, 1 HAProxy thread), the origin and the clients on the load CPUs. The origin ([`setup`])
//! serves a body of `--size` (default 4 MiB): nginx with a static file, or edge-bench's own origin
//! with `--origin edge-bench`. Each target in turn, started fresh as `compare` starts it:
//!
//! 1. after 1 s, the baseline: the sum of `VmRSS` over the proxy's processes;
//! 2. the slow readers ([`readers`]): `--clients` sockets with `SO_RCVBUF = --rcvbuf` set before
//!    connect each send one `GET` (`Connection: close`), read nothing for `--pause`, then read at
//!    most `--read-bytes` every `--read-every` until the body is in; meanwhile [`sampler`] reads
//!    the proxy's RSS every 100 ms;
//! 3. after the last client and `--settle`, the RSS again (within 10 % of the baseline?).
//!
//! Reported per target ([`report`]): bodies complete and byte-exact, truncated, failed, the RSS
//! baseline, peak, growth per reader = (peak − baseline) / clients, the RSS after, and the
//! duration; the memory targets (growth per reader at most HAProxy's in the same run, at most
//! 64 KiB) are printed, not asserted. Exit 1 when an edge target loses a body, fails to start or
//! dies; the JSON record goes to `--out-dir` unless `--no-files`.

pub mod body;
pub mod readers;
pub mod report;
pub mod sampler;
pub mod setup;

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::compare::proxies::{HAPROXY_BIN, NGINX_BIN};
use crate::compare::target::{Binaries, TargetKind};
use crate::support::edge_proc::locate_edge_bin;
use crate::support::host::{cpu_list, git_commit, parse_cpus, pin_current_thread, version_of};
use crate::support::procfs::raise_nofile_limit;
use crate::support::table::bytes;
use readers::{run_readers, ReadersPlan};
use report::{memory_targets, slow_table, SlowReport, SlowRow, SlowRun};
use sampler::{rss_kib, RssSampler};
use setup::{start_origin, start_target, OriginKind, BODY_PATH};

/// How long a proxy (and the origin) gets to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Between a proxy's start and its baseline reading.
const BASELINE_WAIT: Duration = Duration::from_secs(1);

/// How often the proxy's RSS is read during a run.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Command line of `edge-bench slow-readers`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Slow readers (edge-bench holds one socket each; the proxy a client and an upstream one).
    #[arg(long, default_value_t = 1000)]
    pub clients: usize,
    /// Response body size: bytes, or with a KiB, MiB or GiB suffix.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub size: u64,
    /// How long every client reads nothing once the requests are sent.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    pub pause: Duration,
    /// SO_RCVBUF of every client, set before connect.
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    pub rcvbuf: u64,
    /// Most bytes one read of one client takes.
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    pub read_bytes: u64,
    /// Least time between two reads of one client (the pace is read-bytes per read-every).
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub read_every: Duration,
    /// Threads the clients are split over (each an epoll loop).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Longest the reading may take (default: 3 times one body at the pace, plus 60 s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub limit: Option<Duration>,
    /// edge's `server.timeouts.send` (no progress writing to the client).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub send: Duration,
    /// Targets, in order (baseline-io_uring, baseline-epoll with --baseline-edge-bin).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "edge-io_uring,edge-epoll,nginx,haproxy"
    )]
    pub targets: Vec<TargetKind>,
    /// The origin: nginx (a static file) or edge-bench (its own origin).
    #[arg(long, default_value = "nginx")]
    pub origin: OriginKind,
    /// Wait after the last client before the last RSS reading.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// CPUs of the proxy under test.
    #[arg(long, default_value = "0")]
    pub proxy_cpus: String,
    /// CPUs of the origin and the clients.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// The edge binary (default: next to edge-bench, else built with cargo).
    #[arg(long)]
    pub edge_bin: Option<PathBuf>,
    /// A second edge binary for the baseline-io_uring and baseline-epoll targets.
    #[arg(long)]
    pub baseline_edge_bin: Option<PathBuf>,
    /// nginx executable (the origin and a target).
    #[arg(long, default_value = NGINX_BIN)]
    pub nginx_bin: PathBuf,
    /// HAProxy executable.
    #[arg(long, default_value = HAPROXY_BIN)]
    pub haproxy_bin: PathBuf,
    /// Where the JSON record goes.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub out_dir: PathBuf,
    /// Print only: write no JSON.
    #[arg(long)]
    pub no_files: bool,
}

/// Parses `4194304`, `4MiB`, `64KiB`, `1GiB` (also `K`, `M`, `G`) into bytes.
///
/// # Errors
/// Anything else, as a message.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits].parse().map_err(|_| format!("bad size {s:?}"))?;
    let unit = match t[digits..].trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "bad size unit {other:?} in {s:?} (B, KiB, MiB, GiB)"
            ))
        }
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("size {s:?} too large"))
}

/// Runs every target in turn, prints the table and the memory targets, writes the JSON; `Ok(false)`
/// when an edge target lost a body, failed to start or died.
///
/// # Errors
/// Bad arguments, no edge binary, the origin not starting, the results not writable.
pub fn run(args: &Args) -> io::Result<bool> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let proxy_cpus = parse_cpus(&args.proxy_cpus).map_err(invalid)?;
    let load_cpus = parse_cpus(&args.load_cpus).map_err(invalid)?;
    let (kinds, mut failures) = select_targets(args).map_err(invalid)?;
    if args.clients == 0 || args.size == 0 || args.read_bytes == 0 {
        return Err(invalid(
            "--clients, --size and --read-bytes must be above 0".into(),
        ));
    }
    if args.origin == OriginKind::Nginx && !args.nginx_bin.is_file() {
        return Err(invalid(format!(
            "the nginx origin needs {} (bench/setup.sh installs it), or use --origin edge-bench",
            args.nginx_bin.display()
        )));
    }
    let (soft, hard) = raise_nofile_limit()?;
    if args.clients as u64 + 256 > soft {
        return Err(invalid(format!(
            "{} clients need {} fds, the limit is {soft} (hard {hard})",
            args.clients,
            args.clients + 256
        )));
    }
    let (proxy_list, load_list) = (cpu_list(&proxy_cpus), cpu_list(&load_cpus));
    // The clients, the sampler and every child before its taskset inherit the load CPUs.
    pin_current_thread(&load_cpus)?;
    let bins = binaries(args, &kinds)?;
    let origin = start_origin(
        args.origin,
        &args.nginx_bin,
        args.size,
        &load_list,
        START_TIMEOUT,
    )?;
    let placement = format!(
        "proxy on CPU {proxy_list} (1 edge worker, 1 nginx worker, 1 HAProxy thread); origin \
         ({}, 1 worker) and {} reader threads on CPU {load_list}",
        args.origin.name(),
        args.threads
    );
    println!(
        "{placement}; origin pid {} on {}",
        origin.process.pid(),
        origin.addr
    );
    let plan = readers_plan(args, origin.addr)?;
    let mut rows = Vec::new();
    for &kind in &kinds {
        match run_target(kind, &bins, origin.addr, &proxy_list, args, &plan) {
            Ok(row) => rows.push(row),
            Err(e) => {
                eprintln!("{}: {e}", kind.name());
                failures.push(format!("{}: {}", kind.name(), first_line(&e.to_string())));
            }
        }
    }
    drop(origin);
    let report = SlowReport {
        run: run_info(args, &bins, &kinds, placement, &plan),
        memory_targets: memory_targets(&rows),
        rows,
        failures,
    };
    print_report(&report);
    if !args.no_files {
        std::fs::create_dir_all(&args.out_dir)?;
        let path = args.out_dir.join(format!(
            "slow-readers-{}-{}.json",
            report.run.date, report.run.commit
        ));
        std::fs::write(&path, report.to_json())?;
        println!("results: {}", path.display());
    }
    Ok(verdict(&report, &kinds))
}

/// The clients' plan from the arguments; `addr` is replaced by each target's listener.
fn readers_plan(args: &Args, addr: std::net::SocketAddr) -> io::Result<ReadersPlan> {
    let mut plan = ReadersPlan {
        addr,
        path: BODY_PATH.to_string(),
        clients: args.clients,
        size: args.size,
        rcvbuf: usize::try_from(args.rcvbuf).map_err(io::Error::other)?,
        pause: args.pause,
        read_bytes: usize::try_from(args.read_bytes).map_err(io::Error::other)?,
        read_every: args.read_every,
        threads: args.threads,
        limit: Duration::ZERO,
        progress: true,
    };
    plan.limit = args.limit.unwrap_or_else(|| plan.default_limit());
    Ok(plan)
}

/// The targets without repeats; nginx or HAProxy left out (with the reason) when its executable
/// is missing.
///
/// # Errors
/// `direct` (no proxy to measure) or a baseline target without `--baseline-edge-bin`, as a message.
fn select_targets(args: &Args) -> Result<(Vec<TargetKind>, Vec<String>), String> {
    let (mut kinds, mut skipped) = (Vec::new(), Vec::new());
    for &k in &args.targets {
        let missing = match k {
            TargetKind::Direct => return Err("direct runs no proxy: nothing to measure".into()),
            _ if k.is_baseline() && args.baseline_edge_bin.is_none() => {
                return Err(format!("{} needs --baseline-edge-bin", k.name()))
            }
            TargetKind::Nginx => Some(&args.nginx_bin),
            TargetKind::Haproxy => Some(&args.haproxy_bin),
            _ => None,
        };
        if kinds.contains(&k) {
            continue;
        }
        match missing.filter(|p| !p.is_file()) {
            Some(p) => {
                let why = format!("skipped {}: {} not found", k.name(), p.display());
                println!("{why}");
                skipped.push(why);
            }
            None => kinds.push(k),
        }
    }
    Ok((kinds, skipped))
}

/// The executables the targets need.
fn binaries(args: &Args, kinds: &[TargetKind]) -> io::Result<Binaries> {
    let edge = if kinds.iter().any(|k| k.is_edge() && !k.is_baseline()) {
        locate_edge_bin(args.edge_bin.as_deref())?
    } else {
        PathBuf::from("edge")
    };
    Ok(Binaries {
        edge,
        baseline: args.baseline_edge_bin.clone(),
        edge_config: None,
        nginx: args.nginx_bin.clone(),
        haproxy: args.haproxy_bin.clone(),
    })
}

/// One target: start it, read the baseline, run the slow readers under the sampler, read the RSS
/// after, stop it.
fn run_target(
    kind: TargetKind,
    bins: &Binaries,
    origin: std::net::SocketAddr,
    proxy_list: &str,
    args: &Args,
    plan: &ReadersPlan,
) -> io::Result<SlowRow> {
    let mut t = start_target(kind, bins, origin, proxy_list, args.send, START_TIMEOUT)?;
    // Start-up settles (the start-up check's request, timers) before the baseline.
    std::thread::sleep(BASELINE_WAIT);
    let pids = t.pids();
    let baseline = rss_kib(&pids)
        .ok_or_else(|| io::Error::other(format!("no VmRSS readable for pids {pids:?}")))?;
    println!(
        "{} (pids {pids:?}): RSS {}; {} slow readers of {}",
        kind.name(),
        bytes((baseline * 1024) as i64),
        plan.clients,
        bytes(plan.size as i64)
    );
    let _ = io::stdout().flush();
    let sampler = RssSampler::start(pids.clone(), SAMPLE_EVERY)?;
    let outcome = run_readers(&ReadersPlan {
        addr: t.addr,
        ..plan.clone()
    });
    let rss = sampler.finish();
    let outcome = outcome?;
    t.check_alive()?;
    // The clients are closed; the proxy gets this long to let go of what they held.
    std::thread::sleep(args.settle);
    let after = rss_kib(&pids).unwrap_or(0);
    t.check_alive()?;
    let row = SlowRow::new(kind.name(), kind.is_edge(), baseline, rss, after, outcome);
    println!(
        "  {} complete, {} truncated, {} failed in {:.1} s (reading {:.1} s); RSS peak {} at {:.1} s, after {}",
        row.readers.complete,
        row.readers.truncated,
        row.readers.failed,
        row.readers.total_s,
        row.readers.read_s,
        bytes((row.rss.peak_kib * 1024) as i64),
        row.rss.peak_at_s,
        bytes((after * 1024) as i64)
    );
    for r in &row.readers.reasons {
        println!("  {r}");
    }
    Ok(row)
}

/// Prints the table, the memory targets and the failures.
fn print_report(report: &SlowReport) {
    println!();
    print!("{}", slow_table(&report.rows).render());
    println!(
        "per reader = (RSS peak - RSS baseline) / clients; RSS = VmRSS summed over the proxy's \
         processes (nginx: master + worker), sampled every {} ms",
        SAMPLE_EVERY.as_millis()
    );
    println!("{}", report.run.settings);
    println!("memory targets (reported, not asserted):");
    for line in &report.memory_targets {
        println!("  {line}");
    }
    for f in &report.failures {
        println!("FAILED: {f}");
    }
}

/// Whether the run passed: every edge target ran and got every body.
fn verdict(report: &SlowReport, kinds: &[TargetKind]) -> bool {
    let mut passed = true;
    for r in report.rows.iter().filter(|r| r.edge_lost_body()) {
        println!(
            "FAIL: {} lost bodies: {} of {} complete",
            r.target, r.readers.complete, r.readers.clients
        );
        passed = false;
    }
    for k in kinds.iter().filter(|k| k.is_edge()) {
        if !report.rows.iter().any(|r| r.target == k.name()) {
            println!("FAIL: {} did not run to the end", k.name());
            passed = false;
        }
    }
    println!("slow-readers: {}", if passed { "PASS" } else { "FAIL" });
    passed
}

/// The run's record.
fn run_info(
    args: &Args,
    bins: &Binaries,
    kinds: &[TargetKind],
    placement: String,
    plan: &ReadersPlan,
) -> SlowRun {
    let mut versions = vec![(
        "edge-bench".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    )];
    let mut add = |name: &str, bin: &std::path::Path, arg: &str| {
        if !versions.iter().any(|(n, _)| n == name) {
            versions.push((name.to_string(), version_of(bin, arg)));
        }
    };
    for k in kinds {
        match k {
            TargetKind::Nginx => add("nginx", &bins.nginx, "-v"),
            TargetKind::Haproxy => add("haproxy", &bins.haproxy, "-v"),
            k if k.is_baseline() => {
                let bin = bins.baseline.as_deref().unwrap_or(bins.edge.as_path());
                add("baseline edge", bin, "--version");
            }
            _ => add("edge", &bins.edge, "--version"),
        }
    }
    if args.origin == OriginKind::Nginx {
        add("nginx", &bins.nginx, "-v");
    }
    SlowRun {
        tool: "edge-bench slow-readers".into(),
        date: crate::support::host::utc_date(),
        commit: git_commit(),
        machine: crate::scale::machine(),
        kernel: crate::support::host::kernel_release().unwrap_or_else(|| "unknown".into()),
        versions,
        placement,
        origin: match args.origin {
            OriginKind::Nginx => format!(
                "nginx, 1 worker, sendfile on, a static file of {} bytes",
                args.size
            ),
            OriginKind::Own => format!("edge-bench origin --body-bytes {}", args.size),
        },
        settings: settings(args, plan),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// The clients' and the proxies' settings, in words.
fn settings(args: &Args, plan: &ReadersPlan) -> String {
    format!(
        "{} clients, SO_RCVBUF {} set before connect, GET {} with Connection: close, {:.1} s \
         reading nothing, then at most {} every {} ms per client ({}/s), run limit {:.0} s; edge: \
         compare's command line + server.timeouts.send = {} s; nginx: compare's config (default \
         proxy_buffering, proxy_max_temp_file_size 0, proxy_http_version 1.1, upstream keepalive \
         64); HAProxy: compare's config (nbthread 1, maxconn 4000, http-reuse always)",
        plan.clients,
        bytes(plan.rcvbuf as i64),
        plan.path,
        plan.pause.as_secs_f64(),
        bytes(plan.read_bytes as i64),
        plan.read_every.as_millis(),
        bytes(plan.pace() as i64),
        plan.limit.as_secs_f64(),
        args.send.as_secs()
    )
}

/// The first line of `s`.
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64 KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("4MB").is_err() && parse_size("MiB").is_err());
    }
}
