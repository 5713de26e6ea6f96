//! `edge-bench matrix` group f, active health checks (DESIGN.md "Fault matrix", "Upstream health,
//! discovery and balancing"): an endpoint that starts failing its health check while serving gets no new
//! requests after the threshold and nothing fails meanwhile; every endpoint unhealthy fails open.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::base_config;
use super::discovery::Load;
use super::origin::{ok, ScriptOrigin};
use super::runner::{run_case, Check, Edge, HealthRule, Row};
use crate::support::probe;

/// An origin whose `/healthz` answers 500 while `sick` is set, counting the other requests it serves.
struct Checked {
    origin: ScriptOrigin,
    sick: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
}

impl Checked {
    fn start() -> io::Result<Checked> {
        let (sick, served) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (s, n) = (sick.clone(), served.clone());
        let origin = ScriptOrigin::serve(move |path| match path {
            "/healthz" if s.load(Ordering::SeqCst) => {
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec()
            }
            "/healthz" => ok(b"ok"),
            _ => {
                n.fetch_add(1, Ordering::SeqCst);
                ok(b"served")
            }
        })?;
        Ok(Checked {
            origin,
            sick,
            served,
        })
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

/// Waits until edge's output holds `needle` at least `n` times.
fn wait_lines(e: &Edge, needle: &str, n: usize, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while e.proc.output().matches(needle).count() < n {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The two health-check cases, on one edge in front of two checked origins.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn health_cases(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let (a, b) = (Checked::start()?, Checked::start()?);
    let cfg = format!(
        "{}\n[[upstreams]]\nname = \"app\"\nendpoints = [\"{}\", \"{}\"]\n\
         [upstreams.health_check]\npath = \"/healthz\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\n\
         unhealthy_threshold = 2\nhealthy_threshold = 2\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"app\"\n",
        base_config(""),
        a.origin.addr(),
        b.origin.addr()
    );
    let edge = Edge::start(bin, "matrix-f-health", &cfg, driver, &[])?;
    let mut rows = vec![run_case(
        &edge,
        "f",
        "endpoint failing its health check while serving",
        "no new requests after the threshold, none fail",
        HealthRule::Strict,
        |e| failing_endpoint(e, &a, &b),
    )];
    rows.push(run_case(
        &edge,
        "f",
        "every endpoint unhealthy",
        "fail open: requests still served",
        HealthRule::Strict,
        |e| all_unhealthy(e, &a, &b),
    ));
    edge.stop();
    Ok(rows)
}

/// Four clients keep sending while `a` turns sick; after `upstream.unhealthy` it may still see the
/// requests already on their way (one per client), nothing more, for a second of load; then it heals.
fn failing_endpoint(e: &Edge, a: &Checked, b: &Checked) -> io::Result<Check> {
    let clients = 4;
    let load = Load::start(e.traffic, clients);
    a.sick.store(true, Ordering::SeqCst);
    let marked = wait_lines(e, "upstream.unhealthy", 1, Duration::from_secs(5));
    let (a_at, b_at, ok_at) = (a.served(), b.served(), load.ok());
    // One second of load after the verdict: the case's duration, not a synchronisation.
    std::thread::sleep(Duration::from_secs(1));
    let (a_after, b_after) = (a.served() - a_at, b.served() - b_at);
    let (ok, failed) = load.finish();
    a.sick.store(false, Ordering::SeqCst);
    let healed = wait_lines(e, "upstream.healthy", 1, Duration::from_secs(5));
    let mut k = Check::seen(format!(
        "unhealthy logged: {marked}; after it a +{a_after}, b +{b_after} ({} ok), {failed} failed; healthy again: {healed}",
        ok - ok_at
    ));
    k.expect(marked, || "no upstream.unhealthy within 5 s".into())
        .expect(a_after <= clients, || {
            format!("{a_after} requests reached the unhealthy endpoint")
        })
        .expect(b_after > 0, || "the healthy endpoint got nothing".into())
        .expect(failed == 0, || format!("{failed} requests failed"))
        .expect(healed, || {
            "no upstream.healthy within 5 s of healing".into()
        });
    Ok(k)
}

/// Both origins sick: once both are marked unhealthy, requests are still answered (fail open) and
/// `edge_upstream_fail_open_total` moves.
fn all_unhealthy(e: &Edge, a: &Checked, b: &Checked) -> io::Result<Check> {
    let before = e.output_count("upstream.unhealthy");
    a.sick.store(true, Ordering::SeqCst);
    b.sick.store(true, Ordering::SeqCst);
    let marked = wait_lines(e, "upstream.unhealthy", before + 2, Duration::from_secs(5));
    let open0 = e.metric("edge_upstream_fail_open_total", &[]);
    let answered = (0..50)
        .filter(|_| {
            probe::get(e.traffic, "/fast", Duration::from_secs(2)).is_ok_and(|r| r.status == 200)
        })
        .count();
    let opened = e.metric("edge_upstream_fail_open_total", &[]) - open0;
    a.sick.store(false, Ordering::SeqCst);
    b.sick.store(false, Ordering::SeqCst);
    let healthy = e.output_count("upstream.healthy");
    let healed = wait_lines(e, "upstream.healthy", healthy + 2, Duration::from_secs(5));
    let mut k = Check::seen(format!(
        "both unhealthy: {marked}; {answered}/50 answered 200; fail_open +{opened}; healed: {healed}"
    ));
    k.expect(marked, || {
        "both endpoints were not marked unhealthy within 5 s".into()
    })
    .expect(answered == 50, || {
        format!("only {answered} of 50 answered 200")
    })
    .expect(opened > 0.0, || {
        "edge_upstream_fail_open_total did not move".into()
    })
    .expect(healed, || "the endpoints did not return".into());
    Ok(k)
}
