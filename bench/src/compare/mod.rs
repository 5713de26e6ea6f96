//! `edge-bench compare`: side-by-side throughput of edge (io_uring and epoll), nginx, HAProxy and
//! "direct to origin" under the same wrk load, per workload (DESIGN.md, Benchmark method; the
//! workloads are in [`workload`]).
//!
//! Method:
//! - one origin serves every target: `edge-bench origin` as a child process (1 worker per load
//!   CPU, pinned to the load CPU set; see
//!   [`start_origin`](crate::peers::origin::child::start_origin) for why not in-process);
//!   edge-bench's own threads are pinned to the load CPU set too;
//! - every proxy is started once per group of workloads ([`setup`]), pinned to the proxy CPU set
//!   with `taskset`, health-checked
//!   through the proxy (`GET /fast` answers 200), warmed up with one unmeasured wrk run, and kept
//!   running across all rounds (only the target under test gets load; idle proxies sleep);
//! - workloads run one after the other; within one, rounds interleave the targets
//!   (A B C … A B C …); each run is
//!   `taskset -c LOAD wrk -t1 -cN -dD --latency -s SCRIPT [-H …] http://TARGET/PATH`;
//! - before the `close` workload, each target is checked to close after a `Connection: close`
//!   request;
//! - the TLS workloads (`tls-…`, [`tls`]) give every target a TLS listener with one generated
//!   ECDSA P-256 certificate (`direct`: a second origin process in TLS mode); wrk gets an
//!   `OPENSSL_CONF` that fixes TLS 1.3 (1.2) and AES-128-GCM, and the connection-per-request TLS
//!   workloads run on edge-bench's own [`handshake`] loader;
//! - the HTTP/2 workloads (`h2-get`, `h2-get-1m`) run on [`h2load`] (64 connections × 10
//!   streams, ALPN h2, a round that negotiates anything else fails) against a target set of
//!   their own ([`setup`]: proxies with ALPN h2 first, 1024-connection upstream pools and no
//!   per-connection request cap; no `direct`, the origin speaks HTTP/1.1 only);
//! - the HTTP/2-upstream workloads (`grpc-unary`, `grpc-stream`, `h1-to-h2`, [`h2_upstream`]) run
//!   against an h2c origin (nginx, else `edge-bench origin --h2c`) through proxies with HTTP/2
//!   upstreams, h2load over h2c for the gRPC ones and wrk for `h1-to-h2`, with the upstream
//!   connections counted during each run;
//! - the proxy's CPU time over each run is the change in utime + stime in `/proc/PID/stat`
//!   (process and direct children: the nginx worker), sampled right before wrk starts and right
//!   after it exits; utilisation is that over the wall time of the run. A round under 85 % is
//!   load-bound (see [`report`]);
//! - at the end every proxy is stopped by its own pid (SIGTERM, SIGKILL after a grace), all in
//!   parallel; the Markdown tables print per workload (every run, per-target medians with ratios
//!   to nginx, edge against the others) and a summary of ratios to nginx; the JSON record and the
//!   SVG plots go to `--out-dir` ([`json`], [`plot`]).
//!
//! Figures are reported, not asserted: the exit code is 1 only when a target failed to start,
//! died, or a wrk run failed.
//!
//! Where things are: [`plan`] checks the arguments, [`setup`] starts each group's origin and
//! targets, [`target`] and [`proxies`] start and account the targets, [`run`](mod@run) runs one
//! workload's rounds through [`wrk`] (or [`h2load`], [`handshake`]), [`report`] and [`tables`]
//! summarise, [`json`] and [`plot`] write the files.

pub mod h2_upstream;
pub mod h2load;
pub mod handshake;
pub mod json;
pub mod plan;
pub mod plot;
pub mod proxies;
pub mod report;
pub mod run;
pub mod setup;
pub mod tables;
pub mod target;
pub mod tls;
pub mod workload;
pub mod wrk;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::compare::plan::Plan;
use crate::compare::proxies::{HAPROXY_BIN, NGINX_BIN};
use crate::compare::report::{Sample, LOAD_BOUND_UTIL};
use crate::compare::run::WorkloadRun;
use crate::compare::setup::{
    placement, start_origin_of, start_targets, start_tls_origin, stop_all, stop_tls_origin, Group,
};
use crate::compare::tables::{nginx_summary_table, ratio_table, rounds_table, summary_table};
use crate::compare::target::{closes_after_request, Binaries, Target, TargetKind, TargetTls};
use crate::compare::tls::TlsSetup;
use crate::compare::workload::Workload;
use crate::compare::wrk::wrk_seconds;
use crate::peers::origin::LOAD_PATH;
use crate::support::edge_proc::{EdgeProcess, STOP_GRACE};
use crate::support::host::{pin_current_thread, version_of};

/// How long a proxy gets to answer its first request through to the origin.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between two runs (lets sockets of the previous run close).
pub(crate) const SETTLE: Duration = Duration::from_millis(300);

/// Options of `edge-bench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Rounds; every round runs every target once, in order.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Length of each measured run (wrk -d, whole seconds).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// wrk connections (-c) of the workloads without a fixed count (all but get-64, get-256).
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Workloads, in the order they run: get-64, get-256, get-16k, get-1m, post-1m, close, heads, and
    /// the small-request ones against the nginx origin (get-64@nginx, get-256@nginx, heads@nginx,
    /// close@nginx); named explicitly: the TLS ones (tls-get-64, tls-get-1m, tls-handshake,
    /// tls-resume, tls12-get-64), the HTTP/2 ones (h2-get, h2-get-1m) and the HTTP/2-upstream
    /// ones (grpc-unary, grpc-stream, h1-to-h2: an h2c origin, proxies with HTTP/2 upstreams).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "get-64,get-256,get-16k,get-1m,post-1m,close,heads,get-64@nginx,get-256@nginx,heads@nginx,close@nginx"
    )]
    pub workloads: Vec<Workload>,
    /// A functional check, not a measurement: 1 round of 3 s, 1 s warm-up (overrides those
    /// options); files go to OUT_DIR/quick.
    #[arg(long)]
    pub quick: bool,
    /// Where the JSON record and the SVG plots go.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub out_dir: PathBuf,
    /// Print only: write no JSON and no plots.
    #[arg(long)]
    pub no_files: bool,
    /// Targets, in the order each round runs them.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "edge-io_uring,edge-epoll,nginx,haproxy,direct"
    )]
    pub targets: Vec<TargetKind>,
    /// CPUs of the proxy under test (list or ranges: 0 or 0,2 or 0-1).
    #[arg(long, default_value = "0")]
    pub proxy_cpus: String,
    /// CPUs of wrk, the origin and edge-bench itself.
    #[arg(long, default_value = "1")]
    pub load_cpus: String,
    /// Hold each proxy to this share of one CPU, in whole percent (1 to 100 per CPU of
    /// --proxy-cpus), with a cgroup CPU quota (CFS bandwidth, 100 ms period) as ECS and Kubernetes
    /// CPU limits do; a round is then load-bound under 85 % of the quota. Makes the proxy the
    /// bottleneck where the load CPUs cannot saturate it (1 MiB bodies on 2 CPUs): pick a quota well
    /// below what the proxy uses unthrottled, and check the `throttled` note of each round. Needs
    /// root and a cgroup cpu controller.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(1..))]
    pub proxy_cpu_quota: Option<u32>,
    /// Unmeasured wrk run per target after it starts; 0s skips it.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// The edge binary (default: next to edge-bench, else built with cargo).
    #[arg(long)]
    pub edge_bin: Option<PathBuf>,
    /// A second edge binary for the `baseline-io_uring` and `baseline-epoll` targets (old and new
    /// build side by side in one run).
    #[arg(long)]
    pub baseline_edge_bin: Option<PathBuf>,
    /// A config file for the `edge-io_uring` and `edge-epoll` targets only (the baseline targets run
    /// without it): one binary with a setting on and off side by side, e.g. access logging
    /// (`--baseline-edge-bin` the same binary). Plain HTTP/1.1 workloads only. A file that names
    /// `{origin}` (e.g. `endpoints = ["{origin}"]`) keeps its own upstreams and routes, with the
    /// origin's address put in; any other gets the origin with `--upstream`.
    #[arg(long)]
    pub edge_config: Option<PathBuf>,
    /// nginx executable.
    #[arg(long, default_value = NGINX_BIN)]
    pub nginx_bin: PathBuf,
    /// HAProxy executable.
    #[arg(long, default_value = HAPROXY_BIN)]
    pub haproxy_bin: PathBuf,
    /// wrk executable.
    #[arg(long, default_value = "/usr/bin/wrk")]
    pub wrk_bin: PathBuf,
    /// h2load executable (nghttp2-client), for the HTTP/2 workloads.
    #[arg(long, default_value = "/usr/bin/h2load")]
    pub h2load_bin: PathBuf,
}

/// Everything about one run of `compare` that the JSON record and the plots need.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// Workloads run, in order.
    pub workloads: Vec<Workload>,
    /// Targets that ran, in round order.
    pub kinds: Vec<TargetKind>,
    /// Systems left out, with the reason.
    pub skipped: Vec<(TargetKind, String)>,
    /// Rounds per workload.
    pub rounds: usize,
    /// Run length in seconds (wrk -d).
    pub duration_s: u64,
    /// Connections of the workloads without a fixed count.
    pub connections: usize,
    /// Proxy and load CPU lists.
    pub proxy_cpus: String,
    /// CPUs of wrk, the origin and edge-bench.
    pub load_cpus: String,
    /// The proxies' CPU quota, % of one CPU (`--proxy-cpu-quota`).
    pub cpu_quota: Option<u32>,
    /// The placement text (pids and their actual CPU lists).
    pub placement: String,
    /// `name: version` lines.
    pub versions: Vec<(String, String)>,
    /// Whether each target closed the connection after a `Connection: close` request.
    pub closes: Vec<(TargetKind, String)>,
    /// Failures (start, death, wrk).
    pub failures: Vec<String>,
}

/// Runs the comparison and prints its tables; `Ok(false)` when a target failed to start, died,
/// or a wrk run failed (the remaining targets still run and print).
///
/// # Errors
/// Bad options, missing wrk or edge, origin start failures, and failures writing the results.
pub fn run(args: &Args) -> io::Result<bool> {
    let args = &args.clone().quick_adjusted();
    let plan = Plan::new(args)?;
    // Everything edge-bench starts from here on (reader threads, children before their
    // taskset) inherits the load CPU set.
    pin_current_thread(&plan.load_cpus)?;
    let mut failures: Vec<String> = Vec::new();
    let mut samples = Vec::new();
    let mut placements = String::new();
    let mut closes = Vec::new();
    let mut ran: Vec<TargetKind> = Vec::new();
    let versions = versions(args, &plan.bins, &plan.kinds);
    let tls_dir =
        std::env::temp_dir().join(format!("edge-bench-compare-{}-tls", std::process::id()));
    let any_tls = plan.workloads.iter().any(|w| w.is_tls());
    let tls = any_tls.then(|| TlsSetup::create(&tls_dir)).transpose()?;
    for group in Group::ALL {
        let workloads: Vec<Workload> = plan
            .workloads
            .iter()
            .copied()
            .filter(|&w| Group::of(w) == group)
            .collect();
        if workloads.is_empty() {
            continue;
        }
        let (mut origin, origin_addr) = start_origin_of(group.origin(), &plan)?;
        let tls_here = tls
            .as_ref()
            .filter(|_| workloads.iter().any(|w| w.is_tls()));
        let mut tls_origin = match tls_here {
            Some(t)
                if plan.kinds.contains(&TargetKind::Direct) && group.runs(TargetKind::Direct) =>
            {
                Some(start_tls_origin(&plan, t)?)
            }
            _ => None,
        };
        let tls_targets = tls_here.map(|t| TargetTls {
            certs: &t.certs,
            origin: tls_origin.as_ref().map(|o| o.1),
            h2: group == Group::H2,
        });
        let mut targets = start_targets(&plan, origin_addr, group, tls_targets, &mut failures);
        let placement = placement(&targets, &plan.proxy_list, &plan.load_list, origin.pid());
        print!("{placement}");
        if placements.is_empty() {
            let line: Vec<String> = versions.iter().map(|(_, v)| v.clone()).collect();
            println!("versions: {}", line.join("; "));
        }
        placements.push_str(&placement);
        if workloads.iter().any(|w| w.load() == Workload::Close) && closes.is_empty() {
            closes = check_closes(&targets);
        }
        ran = (plan.kinds.iter().copied())
            .filter(|&k| ran.contains(&k) || targets.iter().any(|t| t.kind == k))
            .collect();
        let mut got = run_workloads(
            args,
            (&workloads, tls_here),
            &plan,
            &mut targets,
            (&mut origin, origin_addr),
            &mut failures,
        )?;
        samples.append(&mut got);
        stop_all(targets);
        stop_tls_origin(tls_origin.take(), &mut failures)?;
        if let Some(st) = origin.exited()? {
            failures.push(format!("the origin exited during the runs ({st})"));
        }
        let _ = origin.stop(STOP_GRACE);
    }
    let _ = std::fs::remove_dir_all(&tls_dir);
    print_summary(&samples, &ran, &plan.workloads);
    print!("{placements}");
    for (k, c) in &closes {
        println!("Connection: close on {}: {c}", k.name());
    }
    let info = RunInfo {
        workloads: plan.workloads,
        kinds: ran,
        skipped: plan.skipped,
        rounds: args.rounds,
        duration_s: wrk_seconds(args.duration),
        connections: args.connections,
        proxy_cpus: plan.proxy_list,
        load_cpus: plan.load_list,
        cpu_quota: plan.cpu_quota,
        placement: placements,
        versions,
        closes,
        failures: failures.clone(),
    };
    if !args.no_files {
        write_results(&args.out_dir, &info, &samples)?;
    }
    Ok(print_failures(&failures))
}

/// Prints the first line of every failure; `true` when there were none.
fn print_failures(failures: &[String]) -> bool {
    if failures.is_empty() {
        return true;
    }
    eprintln!("\nfailures:");
    for f in failures {
        eprintln!("  {}", f.lines().next().unwrap_or(""));
    }
    false
}

/// Every workload in turn over the running targets, printing each workload's tables; then every
/// target not already found dead is checked once more. The samples of all workloads.
fn run_workloads(
    args: &Args,
    (workloads, tls): (&[Workload], Option<&TlsSetup>),
    plan: &Plan,
    targets: &mut [Target],
    (origin, origin_addr): (&mut EdgeProcess, std::net::SocketAddr),
    failures: &mut Vec<String>,
) -> io::Result<Vec<Sample>> {
    let scripts =
        std::env::temp_dir().join(format!("edge-bench-compare-{}-lua", std::process::id()));
    std::fs::create_dir_all(&scripts)?;
    let mut samples: Vec<Sample> = Vec::new();
    let mut dead = vec![false; targets.len()];
    let ran: Vec<TargetKind> = targets.iter().map(|t| t.kind).collect();
    for &w in workloads {
        let script = scripts.join(format!("{}.lua", w.name().replace('@', "-")));
        std::fs::write(&script, w.lua_script())?;
        let before = samples.len();
        let grpc_data = if w.is_grpc() {
            Some(h2_upstream::message_file(&scripts)?)
        } else {
            None
        };
        let ctx = WorkloadRun {
            args,
            workload: w,
            script: &script,
            load_list: &plan.load_list,
            tls,
            origin: w.is_h2_upstream().then_some(origin_addr),
            grpc_data: grpc_data.as_deref(),
        };
        ctx.run(targets, &mut dead, origin, &mut samples, failures)?;
        print_workload(args, w, &samples[before..], &ran);
    }
    let _ = std::fs::remove_dir_all(&scripts);
    for (i, t) in targets.iter_mut().enumerate() {
        if !dead[i] {
            if let Err(e) = t.check_alive() {
                failures.push(e.to_string());
            }
        }
    }
    Ok(samples)
}

/// The tables of one workload: every run, the per-target medians, and edge against the others.
fn print_workload(args: &Args, w: Workload, these: &[Sample], ran: &[TargetKind]) {
    println!("\n### {} ({})\n", w.name(), w.describe(args.connections));
    print!("{}", rounds_table(these).render_markdown());
    println!(
        "\nmedians over {} round(s) of {} s (load-bound rounds left out):\n",
        args.rounds,
        wrk_seconds(args.duration)
    );
    print!("{}", summary_table(these, ran).render_markdown());
    if ran.iter().any(|k| k.is_edge()) {
        println!();
        print!("{}", ratio_table(these, ran).render_markdown());
    }
    let _ = io::stdout().flush();
}

/// The ratios to nginx over all workloads, and what the columns mean.
fn print_summary(samples: &[Sample], ran: &[TargetKind], workloads: &[Workload]) {
    println!("\n### ratios to nginx (medians; req/s above 1x: more; CPU/request and p99 below 1x: less)\n");
    print!(
        "{}",
        nginx_summary_table(samples, ran, workloads).render_markdown()
    );
    println!(
        "\nCPU s/100k req = proxy CPU time (utime+stime, all threads; nginx master+worker) per 100 000 requests. \
         CPU util = that time / wall time of the run; under {:.0} % of one CPU (of the quota, with \
         --proxy-cpu-quota) a round is load-bound. throttled = share of the run the quota held the proxy off its CPU. \
         runq wait = time the proxy was runnable but its CPU ran something else. peak RSS = VmHWM over the \
         run (nginx: master+worker). * = every round load-bound (medians over all rounds).",
        LOAD_BOUND_UTIL * 100.0
    );
}

/// Writes `compare-DATE-COMMIT.json` and the SVG plots under `dir`, printing their paths.
fn write_results(dir: &Path, info: &RunInfo, samples: &[Sample]) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let commit = crate::support::host::git_commit();
    let date = crate::support::host::utc_date();
    let json = dir.join(format!("compare-{date}-{commit}.json"));
    let doc = crate::compare::json::document(info, samples, &date, &commit);
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&doc).map_err(io::Error::other)? + "\n",
    )?;
    println!("\nresults: {}", json.display());
    for path in crate::compare::plot::write_plots(dir, info, samples)? {
        println!("plot: {}", path.display());
    }
    Ok(())
}

/// (program, version line) for wrk, edge, nginx and HAProxy as far as they run, and the TLS
/// setup when TLS workloads run.
fn versions(args: &Args, bins: &Binaries, kinds: &[TargetKind]) -> Vec<(String, String)> {
    let mut v = vec![("wrk".to_string(), version_of(&args.wrk_bin, "-v"))];
    if args.workloads.iter().any(|w| w.is_h2() || w.is_grpc()) {
        v.push(("h2load".into(), version_of(&args.h2load_bin, "--version")));
    }
    if kinds.iter().any(|k| k.is_edge()) {
        v.push((
            "edge".to_string(),
            format!(
                "{} ({}, commit {})",
                version_of(&bins.edge, "--version"),
                bins.edge.display(),
                crate::support::host::git_commit()
            ),
        ));
    }
    if kinds.contains(&TargetKind::Nginx) {
        v.push(("nginx".to_string(), version_of(&bins.nginx, "-v")));
    }
    if kinds.contains(&TargetKind::Haproxy) {
        v.push(("haproxy".to_string(), version_of(&bins.haproxy, "-v")));
    }
    if args.workloads.iter().any(|w| w.is_tls()) {
        let openssl = version_of(std::path::Path::new("/usr/bin/openssl"), "version");
        v.push((
            "tls".to_string(),
            format!(
                "one ECDSA P-256 leaf (rcgen); TLS 1.3 TLS_AES_128_GCM_SHA256, TLS 1.2 \
                 ECDHE-ECDSA-AES128-GCM-SHA256; wrk on {openssl} via OPENSSL_CONF; origin and \
                 handshake loader on rustls 0.23 (aws-lc-rs)"
            ),
        ));
    }
    v
}

/// Checks that every target closes a connection after answering a `Connection: close` request
/// (otherwise the `close` workload would not open a connection per request); prints and returns
/// what each did.
fn check_closes(targets: &[Target]) -> Vec<(TargetKind, String)> {
    targets
        .iter()
        .map(|t| {
            let what = match closes_after_request(t.addr, LOAD_PATH) {
                Ok(Some(true)) => "closes after the response".to_string(),
                Ok(Some(false)) => "WARNING: keeps the connection open".to_string(),
                Ok(None) => "WARNING: answered non-200".to_string(),
                Err(e) => format!("WARNING: check failed: {e}"),
            };
            println!("Connection: close check, {}: {what}", t.kind.name());
            (t.kind, what)
        })
        .collect()
}
