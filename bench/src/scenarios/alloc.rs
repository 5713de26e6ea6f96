//! `edge-bench alloc`: allocations per request on edge's own path in steady state, proved with a
//! counting global allocator in a bench mode (bench/README.md "Allocations per request").
//!
//! Builds edge with the `count-alloc` feature (into `target/count-alloc`, leaving the normal binary
//! alone), whose workers publish their thread's allocation count as `edge_worker_allocations_total`.
//! For each io driver and workload it warms up with keep-alive load, reads the counter and
//! `edge_requests_total`, runs the measured load, and reads both again: the ratio of the growths is
//! allocations per request on the worker threads (the admin thread that renders /metrics is not
//! counted). A row opens fresh connections, one request each, for allocations per connection, and a
//! last one sends requests 20 ms apart on keep-alive connections, so that every request follows an idle
//! transition (the 5 ms fast wait expired): at most about one allocation each (monoio's canceller).
//! edge runs with `max_requests_per_connection` raised so that the keep-alive rows measure requests,
//! not the connection churn that the default of 1000 imposes (about 12 allocations per new connection,
//! so 0.012 per request at the default).
//! Fails when keep-alive requests allocate (more than one allocation per 10 000 requests, which leaves
//! room for the worker's 4 Hz timer tasks).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::peers::load::closed::{run_load, LoadOptions};
use crate::peers::origin::OriginOptions;
use crate::support::edge_proc::build_edge_features;
use crate::support::metrics::metric_sum;
use crate::support::probe;
use crate::support::stack::Stack;
use crate::support::table::Table;

/// Highest allocations per keep-alive request that still passes.
pub const MAX_PER_REQUEST: f64 = 1e-4;

/// Command line of `edge-bench alloc`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Measured load per case.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

impl Args {
    /// The scenario's options: these choices over the defaults.
    pub fn options(&self) -> AllocOptions {
        AllocOptions {
            duration: self.duration,
            ..AllocOptions::default()
        }
    }
}

/// Options of `edge-bench alloc`.
#[derive(Debug, Clone)]
pub struct AllocOptions {
    /// Warm-up load before the first reading.
    pub warmup: Duration,
    /// Measured load.
    pub duration: Duration,
    /// Keep-alive connections.
    pub connections: usize,
    /// Fresh connections for the per-connection row.
    pub fresh_connections: usize,
}

impl Default for AllocOptions {
    fn default() -> Self {
        Self {
            warmup: Duration::from_secs(2),
            duration: Duration::from_secs(5),
            connections: 64,
            fresh_connections: 2000,
        }
    }
}

/// Allocation and request counters summed over workers.
fn read_counters(stack: &Stack) -> io::Result<(f64, f64)> {
    // Workers publish their count every 250 ms: wait until two readings 300 ms apart agree.
    let mut last = None;
    for _ in 0..20 {
        let text = crate::support::metrics::fetch_metrics(stack.admin)?;
        let now = (
            metric_sum(&text, "edge_worker_allocations_total", &[]),
            metric_sum(&text, "edge_requests_total", &[]),
        );
        if last == Some(now) {
            return Ok(now);
        }
        last = Some(now);
        std::thread::sleep(Duration::from_millis(300));
    }
    Err(io::Error::other("allocation counter did not settle"))
}

/// Allocation and request counters summed over workers, read once (under load; the allocation
/// counter lags by at most one 250 ms heartbeat).
fn read_now(stack: &Stack) -> io::Result<(f64, f64)> {
    let text = crate::support::metrics::fetch_metrics(stack.admin)?;
    Ok((
        metric_sum(&text, "edge_worker_allocations_total", &[]),
        metric_sum(&text, "edge_requests_total", &[]),
    ))
}

/// One GET per fresh connection, `n` times.
fn fresh_connections(addr: SocketAddr, n: usize) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    for _ in 0..n {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /fast HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
        while s.read(&mut buf)? > 0 {}
    }
    Ok(())
}

/// Highest allocations per request of the paced row, where every request comes after its connection's
/// fast wait expired: monoio's `Canceller::cancel` allocates its successor once per idle transition.
pub const MAX_PER_PACED_REQUEST: f64 = 1.05;

/// Connections and rounds of the paced row, and the pause between a connection's requests (longer than
/// edge's 5 ms keep-alive fast wait, so each request finds its connection gone idle).
const PACED_CONNECTIONS: usize = 16;
const PACED_ROUNDS: usize = 40;
const PACED_GAP: Duration = Duration::from_millis(20);

/// `PACED_CONNECTIONS` keep-alive connections, each having served one request (so their own
/// allocations are behind them).
fn paced_connections(addr: SocketAddr) -> io::Result<Vec<TcpStream>> {
    let mut conns = (0..PACED_CONNECTIONS)
        .map(|_| TcpStream::connect(addr))
        .collect::<io::Result<Vec<_>>>()?;
    paced_rounds(&mut conns, 1)?;
    Ok(conns)
}

/// `rounds` rounds of one GET on each connection (each response read within 5 s), with `PACED_GAP`
/// after each round.
fn paced_rounds(conns: &mut [TcpStream], rounds: usize) -> io::Result<()> {
    for _ in 0..rounds {
        for s in conns.iter_mut() {
            probe::send_get(s, "bench", "/fast", false)?;
            probe::read_response(s, Instant::now() + Duration::from_secs(5))?;
        }
        std::thread::sleep(PACED_GAP);
    }
    Ok(())
}

/// How much the request and allocation counters grew over `load`, read once each has settled:
/// (requests, allocations).
fn settled_growth(stack: &Stack, load: impl FnOnce() -> io::Result<()>) -> io::Result<(f64, f64)> {
    let (a0, r0) = read_counters(stack)?;
    load()?;
    let (a1, r1) = read_counters(stack)?;
    Ok((r1 - r0, a1 - a0))
}

/// One row of the table: `counts` is (requests, allocations), shown with their ratio to `decimals`
/// places; `verdict` `None` for a reported row.
fn row(
    table: &mut Table,
    driver: &str,
    name: &str,
    (requests, allocs): (f64, f64),
    decimals: usize,
    verdict: Option<bool>,
) {
    let verdict = match verdict {
        Some(true) => "pass",
        Some(false) => "FAIL",
        None => "per connection (reported)",
    };
    table.row([
        driver.to_string(),
        name.to_string(),
        format!("{requests}"),
        format!("{allocs}"),
        format!("{:.decimals$}", allocs / requests.max(1.0)),
        verdict.to_string(),
    ]);
}

/// The rows about connections rather than requests: fresh connections (reported per connection),
/// and keep-alive requests 20 ms apart, each after an idle transition; whether the latter passed.
fn connection_rows(
    stack: &Stack,
    driver: &str,
    opts: &AllocOptions,
    table: &mut Table,
) -> io::Result<bool> {
    let fresh = settled_growth(stack, || {
        fresh_connections(stack.traffic, opts.fresh_connections)
    })?;
    row(
        table,
        driver,
        "GET 13 B, new connection each",
        fresh,
        2,
        None,
    );

    let mut conns = paced_connections(stack.traffic)?;
    let paced = settled_growth(stack, || paced_rounds(&mut conns, PACED_ROUNDS))?;
    drop(conns);
    let ok = paced.1 / paced.0.max(1.0) <= MAX_PER_PACED_REQUEST && paced.0 > 0.0;
    row(
        table,
        driver,
        "GET 13 B, keep-alive, 20 ms apart",
        paced,
        2,
        Some(ok),
    );
    Ok(ok)
}

/// Runs every case and prints the table; returns whether keep-alive requests stayed allocation-free.
///
/// # Errors
/// Build, origin or edge start failures and metrics read failures.
pub fn run(opts: &AllocOptions) -> io::Result<bool> {
    let bin = build_edge_features("count-alloc", "count-alloc")?;
    let config = std::env::temp_dir().join(format!("edge-bench-alloc-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[server]\nmax_requests_per_connection = 1000000000\n",
    )?;
    let result = run_cases(opts, &bin, &config);
    let _ = std::fs::remove_file(&config);
    result
}

fn run_cases(
    opts: &AllocOptions,
    bin: &std::path::Path,
    config: &std::path::Path,
) -> io::Result<bool> {
    let mut table = Table::new(&[
        "driver",
        "workload",
        "requests",
        "allocations",
        "per request",
        "verdict",
    ]);
    let mut pass = true;
    let workloads = [
        ("GET 13 B, keep-alive", 13usize, false),
        ("GET 16 KiB, keep-alive", 16 << 10, false),
        ("GET 16 KiB chunked, keep-alive", 16 << 10, true),
    ];
    for driver in ["io_uring", "epoll"] {
        for (name, body_bytes, chunked) in workloads {
            let origin = OriginOptions {
                body_bytes,
                chunked,
                ..OriginOptions::default()
            };
            let args = [
                "--config",
                &config.display().to_string(),
                "--workers",
                "1",
                "--io-driver",
                driver,
            ]
            .map(String::from);
            let mut stack = Stack::start(bin, origin, &args)?;
            // One load run spans the warm-up and the measured window, so no connection opens
            // inside the window; readings are taken while it runs.
            let mut load = LoadOptions::new(stack.traffic, "/fast");
            load.connections = opts.connections;
            load.duration = opts.warmup + opts.duration + Duration::from_secs(1);
            let runner = std::thread::spawn(move || run_load(&load));
            std::thread::sleep(opts.warmup);
            let (a0, r0) = read_now(&stack)?;
            std::thread::sleep(opts.duration);
            let (a1, r1) = read_now(&stack)?;
            let report = runner
                .join()
                .map_err(|_| io::Error::other("load thread panicked"))??;
            stack.check_alive()?;
            let (allocs, requests) = (a1 - a0, r1 - r0);
            let ok = allocs / requests.max(1.0) <= MAX_PER_REQUEST
                && report.error_total() == 0
                && requests > 0.0;
            pass &= ok;
            row(&mut table, driver, name, (requests, allocs), 6, Some(ok));
            if body_bytes == 13 {
                pass &= connection_rows(&stack, driver, opts, &mut table)?;
            }
        }
    }
    print!("{}", table.render());
    println!(
        "allocations counted on edge's worker threads (count-alloc build); pass = at most {MAX_PER_REQUEST} per keep-alive request, \
         and at most {MAX_PER_PACED_REQUEST} per request when every request follows an idle transition \
         (20 ms apart, on {PACED_CONNECTIONS} connections that served one request before)"
    );
    Ok(pass)
}
