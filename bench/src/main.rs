//! The `edge-bench` command line: the subcommands, each with its `Args` in its job module, and
//! the dispatch to them. Exit codes: 0 success, 1 a failed invariant or a runtime error, 2 bad
//! arguments (clap).

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use edge_bench::peers::{load, origin};
use edge_bench::scenarios::{alloc, balance, demo, hol, idle_memory, idle_wedge, inbound};
use edge_bench::{compare, matrix, scale, slow};

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
    /// Run the HTTP/1.1 test origin until killed (HTTPS with --tls or --tls-cert/--tls-key).
    Origin(origin::Args),
    /// Run a bounded keep-alive load against an HTTP/1.1 server and print the result.
    Load(load::Args),
    /// Origin + real edge + 10 s of load + health probes behind slow requests (Quick start).
    Demo(demo::Args),
    /// How cost grows with work: latency at fixed rates, req/s and p99 against connections, RSS
    /// against idle connections (edge io_uring/epoll and nginx; JSON and SVG under bench/results).
    Scale(scale::Args),
    /// Side-by-side throughput: edge (io_uring, epoll), nginx, HAProxy and direct under wrk.
    Compare(compare::Args),
    /// Allocations per request on edge's workers in steady state (builds edge with count-alloc).
    Alloc(alloc::Args),
    /// Health probes behind 1, 15, 64 and 128 slow requests (head-of-line blocking).
    Hol(hol::Args),
    /// Health probes while more silent sockets than max_connections are held open (eviction).
    IdleWedge(idle_wedge::Args),
    /// A request body that stops short (and a head without its end): 408 at the request deadline.
    Partial(inbound::Args),
    /// A request head dripped one byte per 200 ms: 408 at the deadline, not restarted per read.
    Drip(inbound::Args),
    /// Every case of DESIGN.md "Fault matrix" (groups a-f; e: the TLS and HTTP/2 cases; h: the
    /// slow readers) with the invariants after each.
    Matrix(matrix::Args),
    /// Resident memory per idle keep-alive connection (edge with 1 worker), per io driver.
    IdleMemory(idle_memory::Args),
    /// Memory under slow readers of large bodies: edge (io_uring, epoll), nginx and HAProxy with
    /// 1000 clients reading a 4 MiB body slowly (RSS baseline, peak, per reader; bodies complete).
    SlowReaders(slow::Args),
    /// round_robin vs least_request (and nginx least_conn) in front of a fast and a 20 ms endpoint.
    Balance(balance::Args),
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
        Cmd::Origin(args) => origin::run(&args),
        Cmd::Load(args) => load::run(&args),
        Cmd::Demo(args) => demo::run(&args.options()),
        Cmd::Scale(args) => scale::run(&args),
        Cmd::Compare(args) => compare::run(&args),
        Cmd::Alloc(args) => alloc::run(&args.options()),
        Cmd::Hol(args) => hol::run(&args.options()),
        Cmd::IdleWedge(args) => idle_wedge::run(&args.options()),
        Cmd::Partial(args) => inbound::run_partial(&args.options()),
        Cmd::Drip(args) => inbound::run_drip(&args.options()),
        Cmd::Matrix(args) => matrix::run(&args),
        Cmd::IdleMemory(args) => idle_memory::run(&args.options()),
        Cmd::Balance(args) => balance::run(&args),
        Cmd::SlowReaders(args) => slow::run(&args),
    }
}
