//! The load generators and the `edge-bench load` subcommand: [`closed`] sends each connection's
//! requests back to back, [`open`] holds a fixed request rate and measures latency from each
//! request's scheduled send time.

pub mod closed;
pub mod open;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use closed::{run_load, LoadOptions, LoadReport};
use open::{run_open_loop, OpenLoopOptions, OpenLoopReport};

use crate::support::table::{ms, Table};

/// Command line of `edge-bench load`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Server address.
    #[arg(long)]
    pub target: SocketAddr,
    /// Request path.
    #[arg(long, default_value = "/fast")]
    pub path: String,
    /// Host header (default: the target address).
    #[arg(long)]
    pub host: Option<String>,
    /// Concurrent keep-alive connections.
    #[arg(long, short = 'c', default_value_t = 64)]
    pub connections: usize,
    /// Generator threads (monoio runtimes).
    #[arg(long, short = 't', default_value_t = 1)]
    pub threads: usize,
    /// How long to send requests.
    #[arg(long, short = 'd', default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Limit per request, and the grace after the duration.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Pin threads to these CPUs (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Open loop: send this many requests/s in total (latency from each request's scheduled
    /// send time) instead of back to back.
    #[arg(long)]
    pub rate: Option<f64>,
}

/// Runs `edge-bench load` (closed loop, or open loop with `--rate`) and prints its table;
/// `Ok(false)` when no response came back.
///
/// # Errors
/// Generator setup failures (threads, runtimes, CPU pinning).
pub fn run(args: &Args) -> io::Result<bool> {
    if let Some(rate) = args.rate {
        let opts = OpenLoopOptions {
            target: args.target,
            host: args.host.clone(),
            path: args.path.clone(),
            rate,
            connections: args.connections,
            threads: args.threads,
            duration: args.duration,
            request_timeout: args.timeout,
            cpus: args.cpus.clone(),
        };
        let r = run_open_loop(&opts)?;
        print!("{}", open_loop_table(&r, args.duration).render());
        return Ok(r.responses > 0);
    }
    let opts = LoadOptions {
        target: args.target,
        host: args.host.clone(),
        path: args.path.clone(),
        connections: args.connections,
        threads: args.threads,
        duration: args.duration,
        request_timeout: args.timeout,
        cpus: args.cpus.clone(),
    };
    let r = run_load(&opts)?;
    print!("{}", closed_loop_table(&r).render());
    Ok(r.responses > 0)
}

/// The result of a closed-loop run as a two-column table.
fn closed_loop_table(r: &LoadReport) -> Table {
    let mut t = Table::new(&["measure", "value"]);
    t.row(["requests".to_string(), r.responses.to_string()]);
    t.row(["requests/s".to_string(), format!("{:.0}", r.req_per_sec())]);
    t.row(["non-2xx/3xx".to_string(), r.non_2xx.to_string()]);
    let e = r.errors;
    t.row(["errors".to_string(), e.total().to_string()]);
    for (kind, n) in [
        ("connect", e.connect),
        ("closed", e.closed),
        ("io", e.io),
        ("timeout", e.timeout),
        ("bad response", e.bad_response),
    ] {
        if n > 0 {
            t.row([format!("  {kind}"), n.to_string()]);
        }
    }
    latency_rows(&mut t, |q| r.latency(q), r.latency_max());
    t
}

/// The result of an open-loop run as a two-column table.
fn open_loop_table(r: &OpenLoopReport, duration: Duration) -> Table {
    let mut t = Table::new(&["measure", "value"]);
    t.row(["target rate".to_string(), format!("{:.0}/s", r.rate)]);
    t.row(["scheduled".to_string(), r.scheduled.to_string()]);
    t.row(["responses".to_string(), r.responses.to_string()]);
    t.row([
        "achieved rate".to_string(),
        format!("{:.0}/s", r.achieved_rate(duration)),
    ]);
    t.row(["non-2xx/3xx".to_string(), r.non_2xx.to_string()]);
    t.row(["errors".to_string(), r.errors.total().to_string()]);
    t.row(["unsent".to_string(), r.unsent.to_string()]);
    latency_rows(&mut t, |q| r.latency(q), r.latency_max());
    let us = |h: &hdrhistogram::Histogram<u64>, q: f64| {
        ms(Duration::from_micros(h.value_at_quantile(q)))
    };
    t.row([
        "p50 / p99 service (from send)".to_string(),
        format!("{} / {}", us(&r.service_us, 0.5), us(&r.service_us, 0.99)),
    ]);
    t.row([
        "p50 / p99 send lag".to_string(),
        format!("{} / {}", us(&r.send_lag_us, 0.5), us(&r.send_lag_us, 0.99)),
    ]);
    t
}

/// The p50, p99, p99.9 and max rows, from latency at a quantile.
fn latency_rows(t: &mut Table, at: impl Fn(f64) -> Duration, max: Duration) {
    for (name, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
        t.row([name.to_string(), ms(at(q))]);
    }
    t.row(["max".to_string(), ms(max)]);
}
