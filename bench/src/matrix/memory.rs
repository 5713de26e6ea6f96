//! `edge-bench matrix` group h, memory (DESIGN.md "Fault matrix", "Memory under slow readers and
//! large bodies"): the slow-reader case. 200 clients with a 4 KiB receive buffer ask for a 4 MiB
//! response, read nothing for 3 s, then read 4 KiB every 5 ms (the readers of `edge-bench
//! slow-readers`, [`crate::slow::readers`]): every body must arrive complete and byte-exact, with
//! the health probes answered and the slots back afterwards (the runner's invariants). edge's peak
//! RSS growth per reader is shown in the row, not asserted (`slow-readers` measures it against
//! nginx and HAProxy). edge gets `send = "10s"` here: a reader is silent for 3 s, longer than the
//! matrix's usual 2 s.

use std::io;
use std::path::Path;
use std::time::Duration;

use super::config_with_send;
use super::runner::{run_case, secs, Check, Edge, HealthRule, Row, SEC};
use crate::peers::origin::{spawn_origin, OriginOptions};
use crate::slow::readers::{run_readers, ReadersPlan};
use crate::slow::report::growth_per_reader;
use crate::slow::sampler::{rss_kib, RssSampler};
use crate::support::table::bytes;

/// Slow readers of the case.
const READERS: usize = 200;

/// The response body each asks for.
const BODY: u64 = 4 << 20;

/// Group h: one edge in front of an origin answering every path with [`BODY`] bytes.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_h(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let origin = spawn_origin(OriginOptions {
        body_bytes: BODY as usize,
        ..OriginOptions::default()
    })?;
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let edge = Edge::start(bin, "matrix-h", &config_with_send("", "10s"), &extra, &[])?;
    let rows = vec![run_case(
        &edge,
        "h",
        &format!("{READERS} slow readers of 4 MiB"),
        "every body complete",
        HealthRule::Strict,
        slow_readers,
    )];
    edge.stop();
    drop(origin);
    Ok(rows)
}

/// The readers against `e`, with edge's RSS sampled every 100 ms.
fn slow_readers(e: &Edge) -> io::Result<Check> {
    let pid = e.proc.pid();
    let base = rss_kib(&[pid]).unwrap_or(0);
    let sampler = RssSampler::start(vec![pid], Duration::from_millis(100))?;
    let plan = ReadersPlan {
        addr: e.traffic,
        path: "/big".into(),
        clients: READERS,
        size: BODY,
        rcvbuf: 4096,
        pause: 3 * SEC,
        read_bytes: 4096,
        read_every: Duration::from_millis(5),
        threads: 2,
        limit: 60 * SEC,
        progress: false,
    };
    let out = run_readers(&plan);
    let rss = sampler.finish();
    let out = out?;
    let peak = rss.peak_kib.max(base);
    let mut k = Check::seen(format!(
        "{}/{READERS} complete, {} truncated, {} failed, reading {}; RSS peak +{} ({} per reader)",
        out.complete,
        out.truncated,
        out.failed,
        secs(Duration::from_secs_f64(out.read_s)),
        bytes(((peak - base) * 1024) as i64),
        bytes(growth_per_reader(base, peak, READERS))
    ));
    k.expect(out.all_complete(), || {
        format!("bodies lost: {}", out.reasons.join("; "))
    });
    Ok(k)
}
