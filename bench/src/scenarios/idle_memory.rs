//! `edge-bench idle-memory`: the resident-memory cost of an idle keep-alive connection.
//!
//! For each io driver (io_uring, then epoll, unless one is chosen): start edge with one worker
//! (temp config: `workers = 1`, `max_connections` with room above N so nothing is evicted, `idle`
//! long enough to outlast the run), read `VmRSS` (and `RssAnon`) of the edge pid from
//! /proc/PID/status, open N connections and send one `GET /_health` on each and read its answer
//! (so every connection is keep-alive and has served a request), wait 3 s, check that edge still
//! holds N connections (`edge_connections_active`) and read the memory again. The cost is
//! (after − before) / N; above 8 KiB per connection fails. The connections are then closed and
//! the memory read once more (reported only).
//!
//! Kernel socket buffers are not in the process's RSS and are not counted. File descriptors bound
//! N: this process holds N sockets and edge holds N more (plus `2 × max_connections + 256` is what
//! edge wants from its own limit), so with the usual hard limit of 20000 the default is 9000.

use std::io::{self, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::peers::origin::OriginOptions;
use crate::support::edge_config::TempConfig;
use crate::support::edge_proc::{locate_edge_bin, STOP_GRACE};
use crate::support::metrics::{fetch_metrics, metric_sum};
use crate::support::probe;
use crate::support::procfs::{raise_nofile_limit, read_rss, Rss};
use crate::support::stack::{Stack, HEALTH_PATH};
use crate::support::table::{bytes, ms, Table};

/// Largest accepted cost per idle connection.
pub const LIMIT_PER_CONN: u64 = 8 * 1024;

/// Default connections: fits twice (client and edge) under a 20000 fd hard limit.
pub const DEFAULT_CONNECTIONS: usize = 9000;

/// Command line of `edge-bench idle-memory`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Idle keep-alive connections (client and edge each need this many fds).
    #[arg(long, default_value_t = DEFAULT_CONNECTIONS)]
    pub connections: usize,
    /// Measure only this io driver (io_uring or epoll); both in turn when unset.
    #[arg(long)]
    pub io_driver: Option<String>,
    /// The edge binary (default: next to edge-bench, else built with cargo).
    #[arg(long)]
    pub edge_bin: Option<PathBuf>,
}

impl Args {
    /// The scenario's options: these choices over the defaults.
    pub fn options(&self) -> IdleMemoryOptions {
        let defaults = IdleMemoryOptions::default();
        IdleMemoryOptions {
            edge_bin: self.edge_bin.clone(),
            connections: self.connections,
            drivers: self
                .io_driver
                .clone()
                .map_or(defaults.drivers.clone(), |d| vec![d]),
            ..defaults
        }
    }
}

/// Options of `edge-bench idle-memory`.
#[derive(Debug, Clone)]
pub struct IdleMemoryOptions {
    /// The edge binary; found or built when `None`.
    pub edge_bin: Option<PathBuf>,
    /// Idle keep-alive connections.
    pub connections: usize,
    /// io drivers to measure, in turn.
    pub drivers: Vec<String>,
    /// Wait between the last connection and the second reading.
    pub settle: Duration,
    /// Extra arguments for edge.
    pub edge_args: Vec<String>,
}

impl Default for IdleMemoryOptions {
    fn default() -> Self {
        Self {
            edge_bin: None,
            connections: DEFAULT_CONNECTIONS,
            drivers: vec!["io_uring".into(), "epoll".into()],
            settle: Duration::from_secs(3),
            edge_args: Vec::new(),
        }
    }
}

/// One driver's measurement.
#[derive(Debug, Clone)]
pub struct MemRound {
    /// The driver asked for.
    pub driver: String,
    /// The driver edge reports (`edge_build_info`).
    pub reported_driver: String,
    /// Connections that served their request and were kept.
    pub opened: usize,
    /// Connections whose open or request failed.
    pub failed: usize,
    /// The first failure.
    pub first_error: Option<String>,
    /// How long opening them took.
    pub open_time: Duration,
    /// `edge_connections_active` (all workers) before the second reading.
    pub active: Option<f64>,
    /// Before the connections.
    pub before: Rss,
    /// With the connections held, after the settle time.
    pub held: Rss,
    /// After closing them and the settle time again.
    pub after_close: Rss,
}

impl MemRound {
    /// VmRSS growth per held connection, bytes (may be negative).
    pub fn per_conn(&self) -> i64 {
        per_conn(self.before.total, self.held.total, self.opened)
    }

    /// RssAnon growth per held connection, bytes.
    pub fn anon_per_conn(&self) -> i64 {
        per_conn(self.before.anon, self.held.anon, self.opened)
    }

    /// Failed checks of this round.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.opened == 0 {
            f.push("no connection was opened".to_string());
        } else if self.per_conn() > LIMIT_PER_CONN as i64 {
            f.push(format!(
                "{} per idle connection, over the {} limit",
                bytes(self.per_conn()),
                bytes(LIMIT_PER_CONN as i64)
            ));
        }
        if self.failed > 0 {
            f.push(format!(
                "{} connection(s) failed, first: {}",
                self.failed,
                self.first_error.as_deref().unwrap_or("?")
            ));
        }
        match self.active {
            Some(a) if a + 0.5 >= self.opened as f64 => {}
            Some(a) => f.push(format!(
                "edge holds {a:.0} connections of {} (it closed some, so the figure is low)",
                self.opened
            )),
            None => f.push("edge_connections_active unavailable".to_string()),
        }
        if !self.reported_driver.eq_ignore_ascii_case(&self.driver) {
            f.push(format!(
                "asked for {} but edge reports {}",
                self.driver, self.reported_driver
            ));
        }
        f
    }
}

/// Bytes exactly, with the rounded unit when that differs: `3891 B (3.8 KiB)`.
fn exact(v: i64) -> String {
    let rounded = bytes(v);
    if v.unsigned_abs() < 1024 {
        rounded
    } else {
        format!("{v} B ({rounded})")
    }
}

fn per_conn(before: u64, after: u64, n: usize) -> i64 {
    if n == 0 {
        return 0;
    }
    (after as i64 - before as i64) / n as i64
}

/// `max_connections` for N held connections: eviction starts when fewer than 1/16 are free, so
/// N must stay under 15/16 of it; a little headroom for the health probes on top.
pub fn max_connections_for(n: usize) -> usize {
    (n * 16).div_ceil(15) + 64
}

/// Opens `n` keep-alive connections, each having served `GET /_health`.
fn open_idle(addr: std::net::SocketAddr, n: usize) -> (Vec<TcpStream>, usize, Option<String>) {
    let mut held = Vec::with_capacity(n);
    let mut failed = 0;
    let mut first = None;
    let host = addr.to_string();
    for _ in 0..n {
        let r = probe::connect(addr, Duration::from_secs(2)).and_then(|mut s| {
            s.set_write_timeout(Some(Duration::from_secs(2)))?;
            probe::send_get(&mut s, &host, HEALTH_PATH, false)?;
            let resp = probe::read_response(&mut s, Instant::now() + Duration::from_secs(5))?;
            if resp.status != 200 {
                return Err(io::Error::other(format!("status {}", resp.status)));
            }
            Ok(s)
        });
        match r {
            Ok(s) => held.push(s),
            Err(e) => {
                failed += 1;
                first.get_or_insert_with(|| e.to_string());
                if failed >= 20 && held.is_empty() {
                    break;
                }
            }
        }
    }
    (held, failed, first)
}

/// Measures one driver.
fn measure(bin: &std::path::Path, driver: &str, opts: &IdleMemoryOptions) -> io::Result<MemRound> {
    let max = max_connections_for(opts.connections);
    let config = TempConfig::write(
        "idle-memory",
        &format!(
            "[server]\nworkers = 1\nmax_connections = {max}\nio_driver = \"{driver}\"\n\n\
             [server.timeouts]\nidle = \"600s\"\ndrain_delay = \"0s\"\ndrain = \"2s\"\n"
        ),
    )?;
    let mut args = config.args();
    args.extend(["--io-driver".to_string(), driver.to_string()]);
    args.extend_from_slice(&opts.edge_args);
    let mut stack = Stack::start(bin, OriginOptions::default(), &args)?;
    let reported_driver = stack
        .io_driver()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let pid = stack.edge.pid();
    // Let start-up settle (first requests, periodic heap trim) before the baseline.
    std::thread::sleep(Duration::from_secs(1));
    let before = read_rss(pid)?;
    println!(
        "{driver}: VmRSS {} before; opening {} keep-alive connections, one GET {HEALTH_PATH} each",
        bytes(before.total as i64),
        opts.connections
    );
    let _ = io::stdout().flush();
    let t0 = Instant::now();
    let (held, failed, first_error) = open_idle(stack.traffic, opts.connections);
    let open_time = t0.elapsed();
    std::thread::sleep(opts.settle);
    stack.check_alive()?;
    let active = fetch_metrics(stack.admin)
        .ok()
        .map(|t| metric_sum(&t, "edge_connections_active", &[]));
    let held_rss = read_rss(pid)?;
    let opened = held.len();
    drop(held);
    std::thread::sleep(opts.settle);
    let after_close = read_rss(pid)?;
    stack.check_alive()?;
    let stopped = stack.edge.stop(STOP_GRACE)?;
    println!("{driver}: edge {stopped}");
    Ok(MemRound {
        driver: driver.to_string(),
        reported_driver,
        opened,
        failed,
        first_error,
        open_time,
        active,
        before,
        held: held_rss,
        after_close,
    })
}

/// Runs the scenario for each driver and prints its table; returns whether every driver stayed
/// under [`LIMIT_PER_CONN`].
///
/// # Errors
/// Setup failures: no edge binary, origin or edge not starting, edge exiting mid-run, /proc
/// unreadable.
pub fn run(opts: &IdleMemoryOptions) -> io::Result<bool> {
    let (soft, hard) = raise_nofile_limit()?;
    let max = max_connections_for(opts.connections);
    println!(
        "fd limit {soft} (hard {hard}): edge-bench needs {} fds for the client sockets and edge \
         needs {} more plus its own (it wants 2 x max_connections + 256 = {}); the hard limit \
         cannot be raised without privileges, so the default is {DEFAULT_CONNECTIONS} connections",
        opts.connections,
        opts.connections,
        2 * max + 256
    );
    if (2 * max + 256) as u64 > hard || opts.connections as u64 + 64 > soft {
        println!(
            "warning: {} connections do not fit the fd limit {hard}; edge will lower \
             max_connections and may evict, and the check below will say so",
            opts.connections
        );
    }
    let bin = locate_edge_bin(opts.edge_bin.as_deref())?;
    let mut rounds = Vec::with_capacity(opts.drivers.len());
    for d in &opts.drivers {
        rounds.push(measure(&bin, d, opts)?);
    }
    let mut t = Table::new(&[
        "driver",
        "conns",
        "active",
        "open time",
        "VmRSS before",
        "VmRSS held",
        "per conn",
        "RssAnon per conn",
        "VmRSS after close",
    ]);
    for r in &rounds {
        t.row([
            r.reported_driver.clone(),
            r.opened.to_string(),
            r.active.map_or("?".into(), |a| format!("{a:.0}")),
            ms(r.open_time),
            bytes(r.before.total as i64),
            bytes(r.held.total as i64),
            exact(r.per_conn()),
            exact(r.anon_per_conn()),
            bytes(r.after_close.total as i64),
        ]);
    }
    println!();
    print!("{}", t.render());
    println!(
        "per conn = (VmRSS held - VmRSS before) / conns, edge with 1 worker, {} after the last \
         connection; limit {}",
        ms(opts.settle),
        bytes(LIMIT_PER_CONN as i64)
    );
    let mut passed = true;
    for r in &rounds {
        for f in r.failures() {
            println!("FAIL: {}: {f}", r.driver);
            passed = false;
        }
    }
    println!("idle-memory: {}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_above_the_eviction_threshold() {
        for n in [1, 100, 9000] {
            let max = max_connections_for(n);
            // Eviction starts when free < max / 16.
            assert!(max - n >= max / 16, "n={n} max={max}");
        }
        assert!(2 * max_connections_for(9000) + 256 <= 20000);
    }

    #[test]
    fn per_conn_is_signed() {
        assert_eq!(per_conn(1000, 3000, 2), 1000);
        assert_eq!(per_conn(3000, 1000, 2), -1000);
        assert_eq!(per_conn(1, 2, 0), 0);
    }
}
