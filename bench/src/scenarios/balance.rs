//! `edge-bench balance`: balancing policies in front of one fast and one slow endpoint (DESIGN.md
//! "Upstream health, discovery and balancing", measured as in "Benchmark method").
//!
//! Two counting origins on loopback answer every request with a small 200; the slow one waits `delay`
//! (20 ms) first. In front of both, one at a time: edge with `balance = "round_robin"`, edge with
//! `balance = "least_request"` (1 worker each, so the in-flight counts are the whole proxy's), and nginx
//! (1 worker, upstream `least_conn`, `keepalive 64`) for reference. Each gets the same closed-loop load,
//! `connections` keep-alive connections for `duration`, interleaved over `rounds` rounds; the table
//! shows requests/s, p50 and p99 and the share of requests the slow endpoint received, medians over the
//! rounds. The proxy runs on `proxy_cpus` and the load generator on `load_cpus`.
//!
//! The invariant: `least_request` sends the slow endpoint less than half of what round robin sends it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::compare::proxies::NGINX_BIN;
use crate::peers::load::closed::{run_load, LoadOptions, LoadReport};
use crate::support::edge_config::TempConfig;
use crate::support::edge_proc::{
    locate_edge_bin, start_pinned_proxy, EdgeArgs, EdgeProcess, STOP_GRACE,
};
use crate::support::stack::free_port;
use crate::support::table::{ms, Table};

/// The origins' answer to every request.
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nhello, world\n";

/// How long a proxy gets to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Command line of `edge-bench balance`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub edge: EdgeArgs,
    /// The nginx executable; nginx is skipped, with the reason, when it is missing.
    #[arg(long, default_value = NGINX_BIN)]
    pub nginx_bin: PathBuf,
    /// How long the slow endpoint waits before answering.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub delay: Duration,
    /// Concurrent keep-alive client connections.
    #[arg(long, short = 'c', default_value_t = 32)]
    pub connections: usize,
    /// Load per target and round.
    #[arg(long, short = 'd', default_value = "8s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Rounds; targets are interleaved within each (A B C A B C ...).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// CPUs of the proxy under test (taskset list).
    #[arg(long, default_value = "0")]
    pub proxy_cpus: String,
    /// CPUs of the load generator (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub load_cpus: Vec<usize>,
}

/// A thread-per-connection HTTP/1.1 origin that answers every request head (GETs only) with
/// [`RESPONSE`] after `delay` and counts what it answered. It runs until the process exits.
struct CountingOrigin {
    addr: SocketAddr,
    served: Arc<AtomicU64>,
}

impl CountingOrigin {
    fn start(delay: Duration) -> io::Result<CountingOrigin> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let served = Arc::new(AtomicU64::new(0));
        let count = served.clone();
        thread::spawn(move || {
            for s in l.incoming().flatten() {
                let count = count.clone();
                thread::spawn(move || serve(s, delay, &count));
            }
        });
        Ok(CountingOrigin { addr, served })
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

/// Answers each request head on `s` until the peer closes.
fn serve(mut s: TcpStream, delay: Duration, served: &AtomicU64) {
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            if !delay.is_zero() {
                thread::sleep(delay);
            }
            if s.write_all(RESPONSE).is_err() {
                return;
            }
            served.fetch_add(1, Ordering::Relaxed);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One proxy configuration under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    EdgeRoundRobin,
    EdgeLeastRequest,
    NginxLeastConn,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::EdgeRoundRobin => "edge round_robin",
            Target::EdgeLeastRequest => "edge least_request",
            Target::NginxLeastConn => "nginx least_conn",
        }
    }
}

/// One run of one target.
struct Run {
    report: LoadReport,
    slow: u64,
    total: u64,
}

impl Run {
    fn slow_share(&self) -> f64 {
        self.slow as f64 / self.total.max(1) as f64
    }
}

/// A started proxy and what must live as long as it does.
struct Proxy {
    process: EdgeProcess,
    _config: Option<TempConfig>,
    _dir: Option<TempDirGuard>,
}

/// A scratch directory removed on drop (nginx's prefix, pid and logs).
struct TempDirGuard(PathBuf);

impl Drop for TempDirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The edge config: one worker, one upstream over both endpoints with `balance`, route `/`.
fn edge_toml(balance: &str, fast: SocketAddr, slow: SocketAddr) -> String {
    format!(
        "[server]\nworkers = 1\n\n[[upstreams]]\nname = \"origin\"\nendpoints = [\"{fast}\", \"{slow}\"]\n\
         balance = \"{balance}\"\n\n[[routes]]\npath_prefix = \"/\"\nupstream = \"origin\"\n"
    )
}

/// The nginx config: like `edge-bench compare`'s (1 worker, keepalive 64), with `least_conn`.
fn nginx_conf(dir: &Path, listen: SocketAddr, fast: SocketAddr, slow: SocketAddr) -> String {
    let d = dir.display();
    format!(
        "worker_processes 1;\ndaemon off;\nmaster_process on;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 4096; }}\nhttp {{\n\
         access_log off;\nclient_body_temp_path {d}/client_body;\nproxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\nuwsgi_temp_path {d}/uwsgi;\nscgi_temp_path {d}/scgi;\n\
         upstream origin {{ least_conn; server {fast}; server {slow}; keepalive 64; }}\n\
         server {{ listen {listen}; location / {{ proxy_pass http://origin; proxy_http_version 1.1;\n\
         proxy_set_header Connection \"\"; }} }}\n}}\n"
    )
}

/// Starts `target` on a free port in front of `fast` and `slow`.
fn start(
    target: Target,
    args: &Args,
    edge_bin: &Path,
    fast: SocketAddr,
    slow: SocketAddr,
) -> io::Result<(Proxy, SocketAddr)> {
    let listen = free_port()?;
    if target == Target::NginxLeastConn {
        let dir = std::env::temp_dir().join(format!("edge-bench-balance-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&dir, listen, fast, slow))?;
        let d = dir.display().to_string();
        let nginx_args = vec![
            "-p".into(),
            format!("{d}/"),
            "-e".into(),
            format!("{d}/error.log"),
            "-c".into(),
            conf.display().to_string(),
        ];
        let process = start_pinned_proxy(
            target.name(),
            &args.nginx_bin,
            nginx_args,
            &args.proxy_cpus,
            listen,
            &dir,
            START_TIMEOUT,
        )?;
        let proxy = Proxy {
            process,
            _config: None,
            _dir: Some(TempDirGuard(dir)),
        };
        return Ok((proxy, listen));
    }
    let balance = match target {
        Target::EdgeRoundRobin => "round_robin",
        _ => "least_request",
    };
    let config = TempConfig::write("balance", &edge_toml(balance, fast, slow))?;
    let mut edge_args = config.args();
    edge_args.extend(["--listen".into(), listen.to_string()]);
    edge_args.extend(["--admin-listen".into(), String::new()]);
    edge_args.extend(args.edge.driver_args());
    let process = start_pinned_proxy(
        target.name(),
        edge_bin,
        edge_args,
        &args.proxy_cpus,
        listen,
        &std::env::temp_dir(),
        START_TIMEOUT,
    )?;
    let proxy = Proxy {
        process,
        _config: Some(config),
        _dir: None,
    };
    Ok((proxy, listen))
}

/// Starts `target`, loads it for `args.duration`, stops it; counts what each origin received.
fn run_one(
    target: Target,
    args: &Args,
    edge_bin: &Path,
    fast: &CountingOrigin,
    slow: &CountingOrigin,
) -> io::Result<Run> {
    let (mut proxy, listen) = start(target, args, edge_bin, fast.addr, slow.addr)?;
    let (f0, s0) = (fast.served(), slow.served());
    let report = run_load(&LoadOptions {
        connections: args.connections,
        duration: args.duration,
        cpus: args.load_cpus.clone(),
        ..LoadOptions::new(listen, "/")
    })?;
    let (f1, s1) = (fast.served(), slow.served());
    proxy.process.stop(STOP_GRACE)?;
    Ok(Run {
        report,
        slow: s1 - s0,
        total: (f1 - f0) + (s1 - s0),
    })
}

/// The median of `v` (the upper one for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the scenario and prints its table; returns whether the invariant held.
///
/// # Errors
/// Setup failures: no edge binary, an origin or a proxy not starting.
pub fn run(args: &Args) -> io::Result<bool> {
    let edge_bin = locate_edge_bin(args.edge.edge_bin.as_deref())?;
    let fast = CountingOrigin::start(Duration::ZERO)?;
    let slow = CountingOrigin::start(args.delay)?;
    println!(
        "fast origin {}, slow origin {} (+{}); {} connections, {} per run, {} rounds",
        fast.addr,
        slow.addr,
        ms(args.delay),
        args.connections,
        ms(args.duration),
        args.rounds
    );
    let mut targets = vec![Target::EdgeRoundRobin, Target::EdgeLeastRequest];
    if args.nginx_bin.exists() {
        targets.push(Target::NginxLeastConn);
    } else {
        println!("nginx skipped: {} not found", args.nginx_bin.display());
    }
    let mut runs: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        for (k, &t) in targets.iter().enumerate() {
            let r = run_one(t, args, &edge_bin, &fast, &slow)?;
            println!(
                "round {round} {}: {:.0} req/s, slow share {:.1} %, {} errors",
                t.name(),
                r.report.req_per_sec(),
                100.0 * r.slow_share(),
                r.report.error_total()
            );
            runs[k].push(r);
        }
    }
    let mut table = Table::new(&["target", "req/s", "p50", "p99", "slow share", "errors"]);
    let mut shares = Vec::new();
    for (t, rs) in targets.iter().zip(&runs) {
        let med = |f: &dyn Fn(&Run) -> f64| median(rs.iter().map(f).collect());
        let share = med(&|r| r.slow_share());
        shares.push(share);
        table.row([
            t.name().to_string(),
            format!("{:.0}", med(&|r| r.report.req_per_sec())),
            ms(Duration::from_secs_f64(med(&|r| {
                r.report.latency(0.5).as_secs_f64()
            }))),
            ms(Duration::from_secs_f64(med(&|r| {
                r.report.latency(0.99).as_secs_f64()
            }))),
            format!("{:.1} %", 100.0 * share),
            rs.iter()
                .map(|r| r.report.error_total())
                .sum::<u64>()
                .to_string(),
        ]);
    }
    println!();
    print!("{}", table.render());
    let passed = shares[1] * 2.0 < shares[0];
    println!(
        "balance: {} (least_request's slow share {:.1} % against round robin's {:.1} %)",
        if passed { "PASS" } else { "FAIL" },
        100.0 * shares[1],
        100.0 * shares[0]
    );
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_config_names_both_endpoints_and_the_policy() {
        let (a, b) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        let t = edge_toml("least_request", a, b);
        assert!(
            t.contains("endpoints = [\"127.0.0.1:1\", \"127.0.0.1:2\"]"),
            "{t}"
        );
        assert!(t.contains("balance = \"least_request\""), "{t}");
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 4.0);
    }
}
