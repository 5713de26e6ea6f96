//! The `edge-bench` command line: parses arguments and dispatches to the library's subcommands.
//! Exit codes: 0 success, 1 a failed invariant or a runtime error, 2 bad arguments (clap).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use edge_bench::compare;
use edge_bench::peers::load::closed::{run_load, LoadOptions};
use edge_bench::peers::load::open::{run_open_loop, OpenLoopOptions, OpenLoopReport};
use edge_bench::peers::origin::{spawn_origin, OriginOptions, DEFAULT_BODY};
use edge_bench::scenarios::demo::{self, DemoOptions};
use edge_bench::scenarios::hol::{self, HolOptions};
use edge_bench::support::table::{ms, Table};

#[derive(Debug, Parser)]
#[command(
    name = "edge-bench",
    version,
    about = "Test origin, load generator and scenarios for edge"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the HTTP/1.1 test origin until killed.
    Origin {
        /// Address to listen on (port 0 picks a free port; the real one is printed).
        #[arg(long)]
        listen: SocketAddr,
        /// Delay every response except /fast…; /slow… waits this or 3 s when unset.
        #[arg(long, value_parser = humantime::parse_duration)]
        delay: Option<Duration>,
        /// Response body size in bytes.
        #[arg(long, default_value_t = DEFAULT_BODY.len())]
        body_bytes: usize,
        /// Frame responses with chunked transfer coding instead of Content-Length.
        #[arg(long)]
        chunked: bool,
        /// Worker threads, each with its own runtime and SO_REUSEPORT listener.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Pin workers to these CPUs (comma-separated, worker i gets the i-th, wrapping).
        #[arg(long, value_delimiter = ',')]
        cpus: Vec<usize>,
    },
    /// Run a bounded keep-alive load against an HTTP/1.1 server and print the result.
    Load {
        /// Server address.
        #[arg(long)]
        target: SocketAddr,
        /// Request path.
        #[arg(long, default_value = "/fast")]
        path: String,
        /// Host header (default: the target address).
        #[arg(long)]
        host: Option<String>,
        /// Concurrent keep-alive connections.
        #[arg(long, short = 'c', default_value_t = 64)]
        connections: usize,
        /// Generator threads (monoio runtimes).
        #[arg(long, short = 't', default_value_t = 1)]
        threads: usize,
        /// How long to send requests.
        #[arg(long, short = 'd', default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Limit per request, and the grace after the duration.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        timeout: Duration,
        /// Pin threads to these CPUs (comma-separated).
        #[arg(long, value_delimiter = ',')]
        cpus: Vec<usize>,
        /// Open loop: send this many requests/s in total (latency from each request's scheduled
        /// send time) instead of back to back.
        #[arg(long)]
        rate: Option<f64>,
    },
    /// Origin + real edge + 10 s of load + health probes behind slow requests (Quick start).
    Demo {
        /// Load duration.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
        /// Keep-alive load connections.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Load generator threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
        #[arg(long)]
        io_driver: Option<String>,
    },
    /// How cost grows with work: latency at fixed rates, req/s and p99 against connections, RSS
    /// against idle connections (edge io_uring/epoll and nginx; JSON and SVG under bench/results).
    Scale(edge_bench::scale::Args),
    /// Side-by-side throughput: edge (io_uring, epoll), nginx, HAProxy and direct under wrk.
    Compare(compare::Args),
    /// Allocations per request on edge's workers in steady state (builds edge with count-alloc).
    Alloc {
        /// Measured load per case.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Health probes behind 1, 15, 64 and 128 slow requests (head-of-line blocking).
    Hol {
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
        /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
        #[arg(long)]
        io_driver: Option<String>,
    },
    /// Health probes while more silent sockets than max_connections are held open (eviction).
    IdleWedge {
        /// How long to probe.
        #[arg(long, default_value = "45s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Silent sockets held open (re-opened when edge closes them).
        #[arg(long, default_value_t = 300)]
        idle_sockets: usize,
        /// edge's server.max_connections.
        #[arg(long, default_value_t = 256)]
        max_connections: usize,
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
        /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
        #[arg(long)]
        io_driver: Option<String>,
    },
    /// A request body that stops short (and a head without its end): 408 at the request deadline.
    Partial {
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
        /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
        #[arg(long)]
        io_driver: Option<String>,
    },
    /// A request head dripped one byte per 200 ms: 408 at the deadline, not restarted per read.
    Drip {
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
        /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
        #[arg(long)]
        io_driver: Option<String>,
    },
    /// Every case of DESIGN.md "Fault matrix" (groups a-d) with the invariants after each.
    Matrix {
        /// Groups to run (comma-separated among a, b, c, d).
        #[arg(long, value_delimiter = ',', default_value = "a,b,c,d")]
        groups: Vec<String>,
        /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
        #[arg(long)]
        io_driver: Option<String>,
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
        /// The edge binary for the injected-fault rows of group d (a debug build, e.g.
        /// target/debug/edge); default: --edge-bin.
        #[arg(long)]
        faults_edge_bin: Option<PathBuf>,
    },
    /// Resident memory per idle keep-alive connection (edge with 1 worker), per io driver.
    IdleMemory {
        /// Idle keep-alive connections (client and edge each need this many fds).
        #[arg(long, default_value_t = edge_bench::scenarios::idle_memory::DEFAULT_CONNECTIONS)]
        connections: usize,
        /// Measure only this io driver (io_uring or epoll); both in turn when unset.
        #[arg(long)]
        io_driver: Option<String>,
        /// The edge binary (default: next to edge-bench, else built with cargo).
        #[arg(long)]
        edge_bin: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("edge-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one subcommand; `Ok(false)` means it ran and its check failed.
fn run(cmd: Cmd) -> io::Result<bool> {
    match cmd {
        Cmd::Origin {
            listen,
            delay,
            body_bytes,
            chunked,
            workers,
            cpus,
        } => {
            let origin = spawn_origin(OriginOptions {
                listen,
                delay,
                body_bytes,
                chunked,
                workers,
                cpus,
            })?;
            println!("origin listening on {}", origin.addr());
            io::stdout().flush()?;
            origin.wait();
            Ok(true)
        }
        Cmd::Load {
            target,
            path,
            host,
            connections,
            threads,
            duration,
            timeout,
            cpus,
            rate,
        } => {
            if let Some(rate) = rate {
                let opts = OpenLoopOptions {
                    target,
                    host,
                    path,
                    rate,
                    connections,
                    threads,
                    duration,
                    request_timeout: timeout,
                    cpus,
                };
                let r = run_open_loop(&opts)?;
                print!("{}", open_loop_table(&r, duration).render());
                return Ok(r.responses > 0);
            }
            let opts = LoadOptions {
                target,
                host,
                path,
                connections,
                threads,
                duration,
                request_timeout: timeout,
                cpus,
            };
            let r = run_load(&opts)?;
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
            for (name, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
                t.row([name.to_string(), ms(r.latency(q))]);
            }
            t.row(["max".to_string(), ms(r.latency_max())]);
            print!("{}", t.render());
            Ok(r.responses > 0)
        }
        Cmd::Demo {
            duration,
            edge_bin,
            connections,
            threads,
            io_driver,
        } => demo::run(&DemoOptions {
            duration,
            edge_bin,
            connections,
            threads,
            edge_args: driver_args(io_driver),
            ..DemoOptions::default()
        }),
        Cmd::Compare(args) => compare::run(&args),
        Cmd::Scale(args) => edge_bench::scale::run(&args),
        Cmd::Alloc { duration } => {
            edge_bench::scenarios::alloc::run(&edge_bench::scenarios::alloc::AllocOptions {
                duration,
                ..Default::default()
            })
        }
        Cmd::Hol {
            edge_bin,
            io_driver,
        } => hol::run(&HolOptions {
            edge_bin,
            edge_args: driver_args(io_driver),
            ..HolOptions::default()
        }),
        Cmd::IdleWedge {
            duration,
            idle_sockets,
            max_connections,
            edge_bin,
            io_driver,
        } => edge_bench::scenarios::idle_wedge::run(
            &edge_bench::scenarios::idle_wedge::IdleWedgeOptions {
                edge_bin,
                duration,
                idle_sockets,
                max_connections,
                edge_args: driver_args(io_driver),
                ..Default::default()
            },
        ),
        Cmd::Partial {
            edge_bin,
            io_driver,
        } => edge_bench::scenarios::inbound::run_partial(
            &edge_bench::scenarios::inbound::InboundOptions {
                edge_bin,
                edge_args: driver_args(io_driver),
                ..Default::default()
            },
        ),
        Cmd::Drip {
            edge_bin,
            io_driver,
        } => edge_bench::scenarios::inbound::run_drip(
            &edge_bench::scenarios::inbound::InboundOptions {
                edge_bin,
                edge_args: driver_args(io_driver),
                ..Default::default()
            },
        ),
        Cmd::Matrix {
            groups,
            io_driver,
            edge_bin,
            faults_edge_bin,
        } => edge_bench::matrix::run(&edge_bench::matrix::MatrixOptions {
            groups,
            io_driver,
            edge_bin,
            faults_edge_bin,
        }),
        Cmd::IdleMemory {
            connections,
            io_driver,
            edge_bin,
        } => {
            let defaults = edge_bench::scenarios::idle_memory::IdleMemoryOptions::default();
            edge_bench::scenarios::idle_memory::run(
                &edge_bench::scenarios::idle_memory::IdleMemoryOptions {
                    edge_bin,
                    connections,
                    drivers: io_driver.map_or(defaults.drivers.clone(), |d| vec![d]),
                    ..defaults
                },
            )
        }
    }
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
    for (name, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
        t.row([name.to_string(), ms(r.latency(q))]);
    }
    t.row(["max".to_string(), ms(r.latency_max())]);
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

/// edge arguments selecting an io driver, or none.
fn driver_args(io_driver: Option<String>) -> Vec<String> {
    io_driver
        .map(|d| vec!["--io-driver".to_string(), d])
        .unwrap_or_default()
}
