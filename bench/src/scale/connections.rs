//! The `connections` part of `edge-bench scale`: requests/s and latency against the number of
//! busy keep-alive connections, closed loop, each count clamped to what the fd limits hold.

use std::io::{self, Write};
use std::time::Instant;

use super::report::{clamp_count, client_capacity, edge_capacity, nginx_busy_capacity, ConnRow};
use super::target::{Proxy, ScaleTarget};
use super::{cpu_share, Args, SETTLE};
use crate::peers::load::closed::{run_load, LoadOptions};
use crate::peers::origin::LOAD_PATH;

/// Busy connections to use for `requested` on `target`, and why when it is fewer.
pub fn busy_count(
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

/// One closed-loop run of `used` busy connections (`requested` asked for, `note` says why fewer)
/// against `p`; `None` (with a failure) when the proxy has died.
///
/// # Errors
/// Load generator failures.
pub fn run_with(
    p: &mut Proxy,
    requested: u64,
    used: u64,
    note: Option<String>,
    args: &Args,
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
