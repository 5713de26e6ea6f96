//! `edge-bench idle-wedge`: health probes while more silent sockets than `max_connections` are
//! held open (DESIGN.md "Capacity", Fault matrix c).
//!
//! edge runs with `max_connections = 256` (a temp config). A keeper thread opens 300 sockets
//! that never send a byte, watches them with poll(2) and re-opens every one edge closes (evicted
//! or shed), so the pressure lasts the whole run. Meanwhile `GET /_health` is probed on a fresh
//! connection every 250 ms for the duration. Afterwards the admin metrics give the evicted and
//! shed counts. The invariant (DESIGN.md): no probe fails and none takes longer than 1 s; the
//! 5 ms p99 goal is reported, not asserted.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::peers::origin::OriginOptions;
use crate::scenarios::hol::{HolRound, PROBE_LIMIT, PROBE_TIMEOUT};
use crate::support::edge_config::TempConfig;
use crate::support::edge_proc::{locate_edge_bin, EdgeArgs, STOP_GRACE};
use crate::support::metrics::{count_events, fetch_metrics, metric_sum};
use crate::support::probe::{self, probe_series};
use crate::support::procfs::raise_nofile_limit;
use crate::support::stack::{Stack, HEALTH_PATH};
use crate::support::table::{ms, Table};

/// The p99 probe latency goal (reported, not asserted).
pub const P99_GOAL: Duration = Duration::from_millis(5);

/// Command line of `edge-bench idle-wedge`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How long to probe.
    #[arg(long, default_value = "45s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Silent sockets held open (re-opened when edge closes them).
    #[arg(long, default_value_t = 300)]
    pub idle_sockets: usize,
    /// edge's server.max_connections.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    #[command(flatten)]
    pub edge: EdgeArgs,
}

impl Args {
    /// The scenario's options: these choices over the defaults.
    pub fn options(&self) -> IdleWedgeOptions {
        IdleWedgeOptions {
            duration: self.duration,
            idle_sockets: self.idle_sockets,
            max_connections: self.max_connections,
            edge_bin: self.edge.edge_bin.clone(),
            edge_args: self.edge.driver_args(),
            ..IdleWedgeOptions::default()
        }
    }
}

/// Options of `edge-bench idle-wedge`.
#[derive(Debug, Clone)]
pub struct IdleWedgeOptions {
    /// The edge binary; found or built when `None`.
    pub edge_bin: Option<PathBuf>,
    /// How long health is probed.
    pub duration: Duration,
    /// Silent sockets held open.
    pub idle_sockets: usize,
    /// edge's `server.max_connections`.
    pub max_connections: usize,
    /// Time between probes.
    pub interval: Duration,
    /// Extra arguments for edge (e.g. `--io-driver epoll`).
    pub edge_args: Vec<String>,
}

impl Default for IdleWedgeOptions {
    fn default() -> Self {
        Self {
            edge_bin: None,
            duration: Duration::from_secs(45),
            idle_sockets: 300,
            max_connections: 256,
            interval: Duration::from_millis(250),
            edge_args: Vec::new(),
        }
    }
}

/// What the keeper saw.
#[derive(Debug, Clone, Default)]
pub struct KeeperStats {
    /// Sockets opened at the start.
    pub initial: usize,
    /// Sockets re-opened after edge closed one.
    pub reopened: u64,
    /// Sockets edge closed (EOF or reset).
    pub closed_by_edge: u64,
    /// Of those, how many got a response first (edge answers a shed connection's request, but
    /// these sockets send none, so any bytes at all are unexpected).
    pub got_bytes: u64,
    /// Failed (re)connects.
    pub connect_failures: u64,
    /// The first connect failure.
    pub first_connect_error: Option<String>,
    /// Sockets open when the keeper stopped.
    pub held_at_end: usize,
}

/// The keeper thread: holds `n` silent sockets to `addr` open until stopped (also used by
/// `matrix` group c).
#[derive(Debug)]
pub struct Keeper {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<KeeperStats>,
}

impl Keeper {
    /// Opens the sockets (returning once the first round of connects is done) and keeps them.
    pub fn start(addr: SocketAddr, n: usize) -> io::Result<Keeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("idle-keeper".into())
            .spawn(move || keep(addr, n, &flag, ready_tx))?;
        let _ = ready_rx.recv_timeout(Duration::from_secs(30));
        Ok(Keeper { stop, thread })
    }

    /// Stops the keeper, closing its sockets; what it saw.
    pub fn finish(self) -> KeeperStats {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// The keeper loop: (re)connect the missing sockets, poll them, drop the ones edge closed.
fn keep(
    addr: SocketAddr,
    n: usize,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<()>,
) -> KeeperStats {
    let mut stats = KeeperStats::default();
    let mut socks: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut first_round = true;
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        for slot in socks.iter_mut().filter(|s| s.is_none()) {
            let s = probe::connect(addr, Duration::from_secs(1)).and_then(|s| {
                s.set_nonblocking(true)?;
                Ok(s)
            });
            match s {
                Ok(s) => {
                    *slot = Some(s);
                    if first_round {
                        stats.initial += 1;
                    } else {
                        stats.reopened += 1;
                    }
                }
                Err(e) => {
                    stats.connect_failures += 1;
                    stats.first_connect_error.get_or_insert(e.to_string());
                    break;
                }
            }
        }
        if first_round {
            first_round = false;
            let _ = ready.send(());
        }
        let (mut fds, idx): (Vec<libc::pollfd>, Vec<usize>) = socks
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref().map(|s| {
                    let fd = libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLIN | libc::POLLRDHUP,
                        revents: 0,
                    };
                    (fd, i)
                })
            })
            .unzip();
        // SAFETY: `fds` is a valid array of pollfd of the given length for the whole call.
        let ready_n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        if ready_n > 0 {
            for (p, &i) in fds.iter().zip(&idx) {
                if p.revents == 0 {
                    continue;
                }
                let Some(s) = socks[i].as_mut() else { continue };
                let closed = loop {
                    match s.read(&mut chunk) {
                        Ok(0) => break true,
                        Ok(_) => stats.got_bytes += 1,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break true,
                    }
                };
                if closed {
                    socks[i] = None;
                    stats.closed_by_edge += 1;
                }
            }
        }
        // Re-open in batches rather than one accept-evict-reopen cycle per loop turn.
        std::thread::sleep(Duration::from_millis(10));
    }
    stats.held_at_end = socks.iter().flatten().count();
    stats
}

/// Counters read from edge's admin metrics after the run.
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeCounts {
    /// `edge_connections_evicted_total`, all workers.
    pub evicted: f64,
    /// `edge_connections_shed_total{reason="limit"}`.
    pub shed_limit: f64,
    /// `edge_connections_shed_total{reason="fd_limit"}`.
    pub shed_fd_limit: f64,
    /// `edge_connections_active` at the end (the sockets are still held).
    pub active: f64,
    /// `edge_connections_max`.
    pub max: f64,
    /// `edge_inbound_timeouts_total{phase="idle"}`.
    pub idle_timeouts: f64,
}

impl EdgeCounts {
    fn from_metrics(text: &str) -> Self {
        let shed = "edge_connections_shed_total";
        Self {
            evicted: metric_sum(text, "edge_connections_evicted_total", &[]),
            shed_limit: metric_sum(text, shed, &[("reason", "limit")]),
            shed_fd_limit: metric_sum(text, shed, &[("reason", "fd_limit")]),
            active: metric_sum(text, "edge_connections_active", &[]),
            max: metric_sum(text, "edge_connections_max", &[]),
            idle_timeouts: metric_sum(text, "edge_inbound_timeouts_total", &[("phase", "idle")]),
        }
    }
}

/// What one run saw, for the table and the verdict.
struct Outcome {
    /// The io driver edge reports.
    driver: String,
    /// The health probes (no slow requests: `held` stays empty).
    round: HolRound,
    /// How long probing took.
    probed_for: Duration,
    /// What the keeper saw.
    kept: KeeperStats,
    /// edge's counters, read while the sockets were still held.
    counts: io::Result<EdgeCounts>,
    /// `connection.shed` log lines.
    shed_logs: usize,
}

impl Outcome {
    /// The result table.
    fn table(&self, opts: &IdleWedgeOptions) -> Table {
        let q = self.round.quantiles();
        let cell = |f: fn(&crate::support::table::Quantiles) -> Duration| {
            q.as_ref().map_or("-".to_string(), |q| ms(f(q)))
        };
        let mut t = Table::new(&["measure", "value"]);
        t.row(["io driver", self.driver.as_str()]);
        t.row([
            "silent sockets / max_connections".to_string(),
            format!("{} / {}", opts.idle_sockets, opts.max_connections),
        ]);
        t.row([
            "health probes (failed, >1s)".to_string(),
            format!(
                "{} ({}, {})",
                self.round.probes.len(),
                self.round.failed(),
                self.round.slower_than(PROBE_LIMIT)
            ),
        ]);
        t.row(["probe p50".to_string(), cell(|q| q.p50)]);
        t.row(["probe p99 (goal 5 ms)".to_string(), cell(|q| q.p99)]);
        t.row(["probe max".to_string(), cell(|q| q.max)]);
        let secs = self.probed_for.as_secs_f64().max(1e-3);
        t.row([
            "sockets closed by edge (re-opened)".to_string(),
            format!(
                "{} ({}, {:.0}/s)",
                self.kept.closed_by_edge,
                self.kept.reopened,
                self.kept.reopened as f64 / secs
            ),
        ]);
        t.row([
            "silent sockets that got bytes".to_string(),
            self.kept.got_bytes.to_string(),
        ]);
        t.row([
            "connect failures".to_string(),
            self.kept.connect_failures.to_string(),
        ]);
        match &self.counts {
            Ok(c) => {
                t.row(["edge_connections_max".to_string(), format!("{:.0}", c.max)]);
                t.row([
                    "edge_connections_active (end)".to_string(),
                    format!("{:.0}", c.active),
                ]);
                t.row([
                    "edge_connections_evicted_total".to_string(),
                    format!("{:.0}", c.evicted),
                ]);
                t.row([
                    "edge_connections_shed_total{limit}".to_string(),
                    format!("{:.0}", c.shed_limit),
                ]);
                t.row([
                    "edge_connections_shed_total{fd_limit}".to_string(),
                    format!("{:.0}", c.shed_fd_limit),
                ]);
                t.row([
                    "edge_inbound_timeouts_total{idle}".to_string(),
                    format!("{:.0}", c.idle_timeouts),
                ]);
            }
            Err(e) => {
                t.row(["metrics".to_string(), format!("unavailable: {e}")]);
            }
        }
        t.row([
            "connection.shed log lines".to_string(),
            self.shed_logs.to_string(),
        ]);
        t
    }

    /// Prints the failures and notes; whether the invariant held (no failed or slow probe, at
    /// least one probe).
    fn passed(&self) -> bool {
        let q = self.round.quantiles();
        let mut passed = true;
        if let Some(f) = self.round.first_failure() {
            println!(
                "FAIL: {} of {} probes failed; first: {f}",
                self.round.failed(),
                self.round.probes.len()
            );
            passed = false;
        }
        if self.round.slower_than(PROBE_LIMIT) > 0 {
            println!(
                "FAIL: {} probe(s) slower than {}",
                self.round.slower_than(PROBE_LIMIT),
                ms(PROBE_LIMIT)
            );
            passed = false;
        }
        if self.round.probes.is_empty() {
            println!("FAIL: no probe was taken");
            passed = false;
        }
        if let Some(e) = &self.kept.first_connect_error {
            println!(
                "note: {} silent-socket connect(s) failed, first: {e}",
                self.kept.connect_failures
            );
        }
        if q.is_some_and(|q| q.p99 > P99_GOAL) {
            println!(
                "note: probe p99 above the {} goal (reported, not asserted)",
                ms(P99_GOAL)
            );
        }
        if let Ok(c) = &self.counts {
            if c.evicted == 0.0 && c.shed_limit == 0.0 {
                println!("note: edge neither evicted nor shed: the limit was never reached");
            }
            if c.shed_limit > 0.0 && self.shed_logs == 0 {
                println!(
                    "note: edge_connections_shed_total moved but no connection.shed line was logged"
                );
            }
        }
        passed
    }
}

/// Runs the scenario and prints its table; returns whether the invariant held.
///
/// # Errors
/// Setup failures: no edge binary, origin or edge not starting, edge exiting mid-run.
pub fn run(opts: &IdleWedgeOptions) -> io::Result<bool> {
    let (soft, hard) = raise_nofile_limit()?;
    println!("RLIMIT_NOFILE soft {soft} (raised to the hard limit {hard})");
    let bin = locate_edge_bin(opts.edge_bin.as_deref())?;
    let config = TempConfig::write(
        "idle-wedge",
        &format!(
            "[server]\nmax_connections = {}\n\n[server.timeouts]\ndrain_delay = \"0s\"\n",
            opts.max_connections
        ),
    )?;
    let mut args = config.args();
    args.extend_from_slice(&opts.edge_args);
    let mut stack = Stack::start(&bin, OriginOptions::default(), &args)?;

    println!(
        "holding {} silent sockets (re-opened when edge closes them) against max_connections = {}",
        opts.idle_sockets, opts.max_connections
    );
    let _ = io::stdout().flush();
    let keeper = Keeper::start(stack.traffic, opts.idle_sockets)?;
    std::thread::sleep(Duration::from_millis(500));
    println!(
        "probing GET {HEALTH_PATH} on fresh connections every {} for {:.0} s",
        ms(opts.interval),
        opts.duration.as_secs_f64()
    );
    let _ = io::stdout().flush();
    let started = Instant::now();
    let probes = probe_series(
        stack.traffic,
        HEALTH_PATH,
        opts.interval,
        opts.duration,
        PROBE_TIMEOUT,
    );
    let probed_for = started.elapsed();
    stack.check_alive()?;
    // Read the counters while the sockets are still held (so `active` shows the pressure).
    let counts = fetch_metrics(stack.admin).map(|t| EdgeCounts::from_metrics(&t));
    let kept = keeper.finish();
    stack.check_alive()?;
    let driver = stack
        .io_driver()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let shed_logs = count_events(&stack.edge.output(), "connection.shed");

    let outcome = Outcome {
        driver,
        round: HolRound {
            k: opts.idle_sockets,
            probes,
            held: Default::default(),
        },
        probed_for,
        kept,
        counts,
        shed_logs,
    };
    println!();
    print!("{}", outcome.table(opts).render());
    let passed = outcome.passed();
    let stopped = stack.edge.stop(STOP_GRACE)?;
    println!("edge {stopped}");
    drop(config);
    println!("idle-wedge: {}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn keeper_reopens_closed_sockets() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let keeper = Keeper::start(addr, 3).unwrap();
        let mut accepted: Vec<_> = (0..3).map(|_| l.accept().unwrap().0).collect();
        // Close one from the server side; the keeper notices and re-opens it.
        drop(accepted.remove(0));
        let (again, _) = l.accept().unwrap();
        accepted.push(again);
        let stats = keeper.finish();
        assert_eq!(stats.initial, 3);
        assert_eq!(stats.closed_by_edge, 1);
        assert_eq!(stats.reopened, 1);
        assert_eq!(stats.held_at_end, 3);
        assert_eq!(stats.got_bytes, 0);
    }
}
