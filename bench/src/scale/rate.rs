//! The `rate` part of `edge-bench scale`: latency at a fixed request rate with the open-loop
//! generator, one run per (rate, target): p50/p99/p99.9/max from each request's scheduled send
//! time, the achieved rate, errors and the proxy's CPU share.

use std::io::{self, Write};
use std::time::Instant;

use super::report::RateRow;
use super::target::Proxy;
use super::{cpu_share, Args, SETTLE};
use crate::peers::load::open::{run_open_loop, OpenLoopOptions};
use crate::peers::origin::LOAD_PATH;

/// One run at `rate` requests/s against `p`; `None` (with a failure) when the proxy has died.
///
/// # Errors
/// Load generator failures.
pub fn run_at(
    p: &mut Proxy,
    rate: f64,
    args: &Args,
    cpus: &[usize],
    failures: &mut Vec<String>,
) -> io::Result<Option<RateRow>> {
    if let Err(e) = p.check_alive() {
        eprintln!("{e}");
        failures.push(format!("{} died", p.target.name()));
        return Ok(None);
    }
    std::thread::sleep(SETTLE);
    let mut o = OpenLoopOptions::new(p.addr, LOAD_PATH, rate);
    o.connections = args.rate_connections as usize;
    o.duration = args.duration;
    o.cpus = cpus.to_vec();
    let (t0, c0) = (Instant::now(), p.cpu_ticks());
    let r = run_open_loop(&o)?;
    let cpu = cpu_share(c0, p.cpu_ticks(), t0.elapsed());
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let row = RateRow {
        target: p.target.name().into(),
        rate,
        connections: args.rate_connections,
        scheduled: r.scheduled,
        responses: r.responses,
        achieved: r.achieved_rate(args.duration),
        errors: r.error_total(),
        unsent: r.unsent,
        p50_ms: q(&r.latency_us, 0.5),
        p99_ms: q(&r.latency_us, 0.99),
        p999_ms: q(&r.latency_us, 0.999),
        max_ms: r.latency_us.max() as f64 / 1000.0,
        service_p99_ms: q(&r.service_us, 0.99),
        send_lag_p99_ms: q(&r.send_lag_us, 0.99),
        proxy_cpu: cpu,
    };
    println!(
        "rate {:>6.0}/s {:<14} achieved {:>7.0}/s p50 {:.2} ms p99 {:.2} ms max {:.1} ms errors {}",
        rate, row.target, row.achieved, row.p50_ms, row.p99_ms, row.max_ms, row.errors
    );
    let _ = io::stdout().flush();
    Ok(Some(row))
}
