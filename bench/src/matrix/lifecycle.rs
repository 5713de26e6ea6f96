//! `edge-bench matrix` group d, lifecycle (DESIGN.md "Fault matrix", "Drain and upgrade"):
//! SIGTERM with 20 requests in flight; a panic in one connection and a worker thread death
//! (injected through `EDGE_TEST_FAULTS=1`, debug builds only: a release build answers the fault
//! paths from the origin, which is detected and reported as skipped); an `edge --upgrade` under
//! load; and groups a and b again on the epoll driver.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::base_config;
use super::invariants::{health_verdict, Prober, Samples};
use super::origin::{ok, Conn, ScriptOrigin};
use super::runner::{run_case, Check, Edge, HealthRule, Row, SEC, STOP_GRACE};
use super::sender::group_a;
use super::upstream::group_b;
use crate::support::edge_proc::EdgeProcess;
use crate::support::metrics::count_events;

const FAULTS: &[(&str, &str)] = &[("EDGE_TEST_FAULTS", "1")];
const NEEDS_DEBUG: &str = "needs a debug build (cargo build -p edge-frontend)";

/// Polls edge's output until it holds a line with `event` (after `skip` such lines), at most
/// `limit`.
fn wait_event(p: &EdgeProcess, event: &str, skip: usize, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        if count_events(&p.output(), event) > skip {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Group d: lifecycle, then groups a and b on epoll.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_d(bin: &Path, faults_bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let mut rows = vec![sigterm_in_flight(bin, driver)?];
    rows.extend(injected_faults(faults_bin, driver)?);
    rows.push(upgrade_under_load(bin, driver)?);
    let epoll = ["--io-driver".to_string(), "epoll".to_string()];
    println!("  io_uring unavailable: cannot be disabled without root sysctl; groups a and b on --io-driver epoll");
    rows.extend(group_a(bin, &epoll, "d:epoll a")?);
    rows.extend(group_b(bin, &epoll, "d:epoll b")?);
    Ok(rows)
}

fn manual_row(case: &str, expected: &str, k: Check, samples: &Samples, strict: bool) -> Row {
    let (health, hf) = health_verdict(samples);
    let mut notes = k.failures;
    if strict {
        notes.extend(hf);
    }
    println!(
        "  d {case} … {}",
        if notes.is_empty() { "ok" } else { "FAIL" }
    );
    Row {
        group: "d".into(),
        case: case.into(),
        expected: expected.into(),
        observed: format!("{}; {health}", k.observed),
        pass: Some(notes.is_empty()),
        notes,
    }
}

/// SIGTERM with 20 requests in flight (drain_delay 1 s): health 503, all 20 answered, exit 0.
fn sigterm_in_flight(bin: &Path, driver: &[String]) -> io::Result<Row> {
    let origin = ScriptOrigin::serve(|_| {
        std::thread::sleep(2 * SEC);
        ok(b"slow")
    })?;
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let cfg = base_config("").replace(
        "drain_delay = \"0s\"\ndrain = \"1s\"",
        "drain_delay = \"1s\"\ndrain = \"10s\"",
    );
    let mut edge = Edge::start(bin, "matrix-d-term", &cfg, &extra, &[])?;
    let mut conns = Vec::new();
    for i in 0..20 {
        let mut c = Conn::open(edge.traffic)?;
        c.send(format!("GET /slow/{i} HTTP/1.1\r\nHost: m\r\n\r\n").as_bytes())?;
        conns.push(c);
    }
    let inflight = edge.wait_metric("edge_requests_in_flight", &[], 5 * SEC, |v| v >= 20.0);
    let pid = edge.proc.pid() as libc::pid_t;
    // SAFETY: kill(2) on our own, not yet reaped child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let t0 = Instant::now();
    let draining = wait_event(&edge.proc, "server.draining", 0, 2 * SEC);
    let health = crate::support::probe::get(edge.traffic, "/_health", 2 * SEC).map(|r| r.status);
    let until = Instant::now() + 10 * SEC;
    let mut ok200 = 0;
    for c in &mut conns {
        if matches!(c.read_response(until), Ok(r) if r.status == 200 && r.says_close()) {
            ok200 += 1;
        }
    }
    let code = exit_code_by(&mut edge.proc, until)?;
    let took = t0.elapsed();
    let mut k = Check::seen(format!(
        "in flight {inflight}, health {health:?}, {ok200}/20 x 200 + close, exit {code:?} after {:.1} s",
        took.as_secs_f64()
    ));
    k.expect(inflight >= 20.0, || {
        "requests not in flight before SIGTERM".into()
    })
    .expect(draining && matches!(health, Ok(503)), || {
        "health not 503 during the drain".into()
    })
    .expect(ok200 == 20, || "in-flight requests lost".into())
    .expect(code == Some(0), || "exit code not 0".into());
    edge.stop();
    Ok(manual_row(
        "SIGTERM with 20 requests in flight",
        "all 200, health 503, exit 0",
        k,
        &Vec::new(),
        false,
    ))
}

/// A panic in one connection and a worker thread death, on a build with fault injection.
fn injected_faults(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let origin = ScriptOrigin::serve(|_| ok(b"fine"))?;
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let cfg = base_config("workers = 2");
    let edge = Edge::start(bin, "matrix-d-faults", &cfg, &extra, FAULTS)?;
    let release = Cell::new(false);
    let panic_case = ("a panic in one connection", "only that connection closes");
    let mut rows = vec![run_case(
        &edge,
        "d",
        panic_case.0,
        panic_case.1,
        HealthRule::Strict,
        |e| panic_in_connection(e, &release),
    )];
    if release.get() {
        rows[0] = Row::skipped("d", panic_case.0, panic_case.1, NEEDS_DEBUG);
        rows.push(Row::skipped(
            "d",
            "a worker thread death",
            "restarted, others unaffected",
            NEEDS_DEBUG,
        ));
        edge.stop();
        return Ok(rows);
    }
    rows.push(run_case(
        &edge,
        "d",
        "a worker thread death",
        "restarted, others unaffected",
        HealthRule::ReportOnly,
        worker_death,
    ));
    edge.stop();
    Ok(rows)
}

/// A request to the fault path that panics its connection, next to a bystander connection: only
/// the victim closes. Sets `release` when the build has no fault injection (proxied instead).
fn panic_in_connection(e: &Edge, release: &Cell<bool>) -> io::Result<Check> {
    let until = Instant::now() + 5 * SEC;
    let mut bystander = Conn::open(e.traffic)?;
    bystander.send(b"GET / HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let first = bystander.read_response(until)?;
    let mut victim = Conn::open(e.traffic)?;
    victim.send(b"GET /__edge_test/panic HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let v = victim.read_response(until);
    if matches!(&v, Ok(r) if r.body == b"fine") {
        release.set(true);
        return Ok(Check::seen("proxied: no fault injection in this build"));
    }
    bystander.send(b"GET / HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let again = bystander.read_response(until)?;
    let panics = e.metric("edge_connection_panics_total", &[]);
    let mut k = Check::seen(format!(
        "victim: {}, bystander {} then {}, panics {panics}",
        match &v {
            Ok(r) => format!("answered {}", r.status),
            Err(e) => format!("closed ({})", e.kind()),
        },
        first.status,
        again.status
    ));
    k.expect(v.is_err(), || {
        "the panicking connection got a response".into()
    })
    .expect(first.status == 200 && again.status == 200, || {
        "bystander not served".into()
    })
    .expect(panics == 1.0, || {
        "edge_connection_panics_total not 1".into()
    });
    Ok(k)
}

/// 16 served connections, then a request that kills their worker: the worker restarts, the
/// other worker serves meanwhile, and new connections are served after.
fn worker_death(e: &Edge) -> io::Result<Check> {
    let until = Instant::now() + 5 * SEC;
    let mut conns = (0..16)
        .map(|_| Conn::open(e.traffic))
        .collect::<io::Result<Vec<_>>>()?;
    for c in &mut conns {
        c.send(b"GET / HTTP/1.1\r\nHost: m\r\n\r\n")?;
        c.read_response(until)?;
    }
    let mut killer = Conn::open(e.traffic)?;
    killer.send(b"GET /__edge_test/kill-worker HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let died = wait_event(&e.proc, "worker.died", 0, 3 * SEC);
    let mut survivors = 0;
    for c in &mut conns {
        let t = Instant::now() + Duration::from_millis(500);
        if c.send(b"GET / HTTP/1.1\r\nHost: m\r\n\r\n").is_ok()
            && matches!(c.read_response(t), Ok(r) if r.body == b"fine")
        {
            survivors += 1;
        }
    }
    let during = count_events(&e.proc.output(), "worker.restarted");
    let restarted = wait_event(&e.proc, "worker.restarted", 0, 4 * SEC);
    let restarts = e.metric("edge_worker_restarts_total", &[]);
    let mut fresh = 0;
    for _ in 0..16 {
        let mut c = Conn::open(e.traffic)?;
        c.send(b"GET / HTTP/1.1\r\nHost: m\r\n\r\n")?;
        if matches!(c.read_response(until + 5 * SEC), Ok(r) if r.body == b"fine") {
            fresh += 1;
        }
    }
    let ready = (0..100).any(|_| {
        let ok = matches!(crate::support::probe::get(e.traffic, "/_health", SEC), Ok(r) if r.status == 200);
        if !ok {
            std::thread::sleep(Duration::from_millis(30));
        }
        ok
    });
    let mut k = Check::seen(format!(
        "died {died}, {survivors}/16 served during the outage, restarted {restarted} (restarts {restarts}), {fresh}/16 new served, ready {ready}"
    ));
    k.expect(died && restarted && restarts == 1.0, || {
        "worker not restarted".into()
    })
    .expect(during == 0 && survivors > 0, || {
        "no connection served while the worker was down".into()
    })
    .expect(fresh == 16 && ready, || {
        "not fully serving after the restart".into()
    });
    Ok(k)
}

/// `edge --upgrade` while 4 clients (2 keep-alive, 2 new connection per request) send requests.
fn upgrade_under_load(bin: &Path, driver: &[String]) -> io::Result<Row> {
    let origin = ScriptOrigin::serve(|_| ok(b"fine"))?;
    let dir = std::env::temp_dir().join(format!("edge-bench-matrix-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sock = dir.join("upgrade.sock");
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let cfg = base_config(&format!(
        "workers = 2\nupgrade_socket = \"{}\"",
        sock.display()
    ))
    .replace("drain = \"1s\"", "drain = \"10s\"");
    let mut old = Edge::start(bin, "matrix-d-upgrade", &cfg, &extra, &[])?;
    let prober = Prober::start(old.traffic)?;
    let clients = Clients::start(old.traffic);
    let warmed = clients.wait_ok(200, 5 * SEC);
    let mut args = old.args.clone();
    args.push("--upgrade".into());
    let mut new = EdgeProcess::start_env(bin, &args, &[])?;
    let done = wait_event(&new, "upgrade.done", 0, 10 * SEC);
    let until = Instant::now() + 15 * SEC;
    let old_code = exit_code_by(&mut old.proc, until)?;
    let continued = clients.wait_ok(clients.ok() + 200, 5 * SEC);
    let (ok_count, fails) = clients.finish();
    let samples = prober.finish();
    let mut k = Check::seen(format!(
        "{ok_count} ok, {} failed, upgrade.done {done}, old exit {old_code:?}, new serving {continued}",
        fails.len()
    ));
    k.expect(warmed && done && continued, || "handover incomplete".into())
        .expect(old_code == Some(0), || "old process did not exit 0".into())
        .expect(fails.is_empty(), || {
            format!("failed requests, first: {:?}", fails.first())
        });
    let _ = new.stop(STOP_GRACE);
    old.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(manual_row(
        "zero-downtime upgrade under load",
        "no request fails, old exits 0",
        k,
        &samples,
        true,
    ))
}

/// The exit code of `p` once it exits, polling (20 ms) until `until`; `None` when it is still
/// running then or was killed by a signal.
fn exit_code_by(p: &mut EdgeProcess, until: Instant) -> io::Result<Option<i32>> {
    loop {
        if let Some(st) = p.exited()? {
            return Ok(st.code());
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The load during the upgrade: 4 clients sending `GET /` in a loop (2 keep-alive, 2 with a new
/// connection per request), counting good answers and recording failures.
struct Clients {
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Clients {
    fn start(addr: SocketAddr) -> Clients {
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::<String>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = [true, true, false, false]
            .into_iter()
            .map(|keep| {
                let (ok, failures, stop) = (ok.clone(), failures.clone(), stop.clone());
                std::thread::spawn(move || client_loop(addr, keep, &ok, &failures, &stop))
            })
            .collect();
        Clients {
            ok,
            failures,
            stop,
            threads,
        }
    }

    /// Good answers so far.
    fn ok(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits (10 ms polls, at most `limit`) for `n` good answers; whether they came.
    fn wait_ok(&self, n: usize, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.ok() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.ok() >= n
    }

    /// Stops the clients; the good answers and the failures.
    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let fails = self
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (self.ok.load(Ordering::Relaxed), fails)
    }
}

/// One upgrade client: `GET /` until `stop`, on one kept connection (`keep`) or a new one each time.
fn client_loop(
    addr: SocketAddr,
    keep: bool,
    okc: &AtomicUsize,
    failures: &Mutex<Vec<String>>,
    stop: &AtomicBool,
) {
    let mut conn: Option<Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        let mut c = match conn.take().map_or_else(|| Conn::open(addr), Ok) {
            Ok(c) => c,
            Err(e) => {
                failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!("connect: {e}"));
                continue;
            }
        };
        let r = c
            .send(b"GET / HTTP/1.1\r\nHost: m\r\n\r\n")
            .and_then(|_| c.read_response(Instant::now() + 5 * SEC));
        match r {
            Ok(r) if r.status == 200 && r.body == b"fine" => {
                okc.fetch_add(1, Ordering::Relaxed);
                if keep && !r.says_close() {
                    conn = Some(c);
                }
            }
            Ok(r) => failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("status {}", r.status)),
            Err(e) => failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{e}")),
        }
    }
}
