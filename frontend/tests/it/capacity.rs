//! Capacity (DESIGN.md "Capacity" and "Status codes"): at `max_connections`, idle connections are evicted
//! to make room so health probes are always answered; when nothing is evictable, the excess is shed with
//! 503 + `Retry-After: 1` + `Connection: close`, health is still answered, nothing hangs, and the
//! connection count returns to zero.

use std::{
    io::Write,
    net::TcpStream,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::harness::{Cfg, Client, Driver, Edge, Origin, Reply};

const SEC: Duration = Duration::from_secs(1);
const MAX: usize = 256;

fn capacity_config(d: Driver, origin: &Origin) -> Cfg {
    // The scripted origin accepts on one thread; a burst of 256 upstream connects can overflow its
    // accept queue, and a dropped SYN is retried after 1 s: connect_timeout must exceed that.
    Cfg::new(d, origin.addr)
        .workers(2)
        .server("max_connections", MAX)
        .upstream_field("connect_timeout", "5s")
}

/// One health probe on a fresh connection; panics unless it is answered 200 `ok` within 2 s.
fn probe(edge: &Edge, what: &str) -> Duration {
    let t = Instant::now();
    let mut c = Client::connect_timeout(edge.addr, 2 * SEC);
    c.send(b"GET /_health HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c
        .read_response(false)
        .unwrap_or_else(|| panic!("{what}: health probe got no answer"));
    assert_eq!(r.status, 200, "{what}: health probe: {}", r.text());
    assert_eq!(r.body, b"ok");
    t.elapsed()
}

fn assert_no_connections_left(edge: &Edge) {
    let active = edge.wait_metric("edge_connections_active", &[], 0.0);
    assert_eq!(
        active, 0.0,
        "edge_connections_active (sum over workers) did not return to 0"
    );
}

both_drivers!(idle_sockets_over_the_limit_never_stop_health_probes, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&capacity_config(d, &origin));
    assert_eq!(edge.metric("edge_connections_max", &[]), MAX as f64);
    let started = Instant::now();
    // 300 sockets that connect and never send a byte.
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(edge.addr).unwrap())
        .collect();
    let accepted = edge.wait_metric_where("edge_connections_total", &[], 5 * SEC, |v| v >= 300.0);
    assert!(accepted >= 300.0, "edge accepted only {accepted} of 300");
    for i in 0..20 {
        let took = probe(&edge, &format!("probe {i} behind 300 idle sockets"));
        assert!(took < SEC, "probe {i} took {took:?}");
    }
    let evicted = edge.metric("edge_connections_evicted_total", &[]);
    assert!(evicted > 0.0, "no idle connection was evicted");
    // Connections accepted in one accept burst before their tasks ran are not in the idle list yet and
    // may be shed instead (503 after the 1 s head deadline, then a lingering close); once those are gone,
    // the open count is back within the limit.
    let active =
        edge.wait_metric_where("edge_connections_active", &[], 5 * SEC, |v| v <= MAX as f64);
    assert!(
        active <= MAX as f64,
        "{active} connections still open with max_connections = {MAX}"
    );
    drop(idle);
    assert_no_connections_left(&edge);
    assert!(started.elapsed() < 15 * SEC, "took {:?}", started.elapsed());
});

both_drivers!(busy_burst_over_the_limit_is_shed_with_503, |d| {
    // The origin tracks how many slow requests it holds at once: each downstream connection has at most
    // one request in flight, so this peak can never exceed max_connections.
    let (current, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (cur2, peak2) = (current.clone(), peak.clone());
    let origin = Origin::start(move |req| {
        if !req.target.starts_with("/slow") {
            return Reply::ok(b"fast");
        }
        let now = cur2.fetch_add(1, Ordering::SeqCst) + 1;
        peak2.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(2 * SEC);
        cur2.fetch_sub(1, Ordering::SeqCst);
        Reply::ok(b"slow")
    });
    let edge = Edge::start(&capacity_config(d, &origin));
    let started = Instant::now();
    // Twice the limit, each connection with a request in flight against a 2 s slow path.
    let n = 2 * MAX;
    let mut conns: Vec<Client> = Vec::with_capacity(n);
    let mut write_failed = 0;
    for _ in 0..n {
        let mut c = Client::connect_timeout(edge.addr, 10 * SEC);
        if c.s
            .write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
            .is_err()
        {
            write_failed += 1;
        }
        conns.push(c);
    }
    // While at the limit (slow requests in flight at the origin), health is still answered.
    assert!(
        origin.wait_until(5 * SEC, |o| o.seen_count() >= MAX / 2),
        "slow requests did not reach the origin ({} did)",
        origin.seen_count()
    );
    for i in 0..5 {
        let took = probe(&edge, &format!("probe {i} at the limit"));
        assert!(
            took < Duration::from_millis(1500),
            "probe {i} took {took:?}"
        );
    }
    // Every connection gets an answer in bounded time: 200 (served) or 503 (shed).
    let (mut ok, mut shed) = (0, 0);
    let mut unanswered = Vec::new();
    for (i, c) in conns.iter_mut().enumerate() {
        match c.read_response(false) {
            Some(r) if r.status == 200 => {
                assert_eq!(r.body, b"slow");
                ok += 1;
            }
            Some(r) if r.status == 503 => {
                assert_eq!(
                    r.header("retry-after"),
                    Some("1"),
                    "503 without Retry-After: 1"
                );
                assert_eq!(
                    r.header("connection")
                        .map(str::to_ascii_lowercase)
                        .as_deref(),
                    Some("close"),
                    "503 without Connection: close"
                );
                let cl = r
                    .header("content-length")
                    .expect("503 without Content-Length");
                assert_eq!(cl.parse::<usize>().unwrap(), r.body.len());
                assert!(!r.body.is_empty());
                assert!(
                    c.time_until_closed(3 * SEC).is_some(),
                    "shed connection {i} not closed"
                );
                shed += 1;
            }
            Some(r) => panic!("connection {i}: unexpected {} {}", r.status, r.text()),
            None => unanswered.push(i),
        }
    }
    let elapsed = started.elapsed();
    let mut problems = Vec::new();
    if !unanswered.is_empty() {
        problems.push(format!(
            "{} of {n} connections with a request in flight were closed without any answer \
             (first ones: {:?}; first write failed on {write_failed}); evicted = {}",
            unanswered.len(),
            &unanswered[..unanswered.len().min(10)],
            edge.metric("edge_connections_evicted_total", &[]),
        ));
    }
    let peak = peak.load(Ordering::SeqCst);
    if peak > MAX {
        problems.push(format!(
            "{peak} slow requests were in flight at the origin at once with max_connections = {MAX}"
        ));
    }
    if elapsed > 12 * SEC {
        problems.push(format!("answering the burst took {elapsed:?}"));
    }
    if shed == 0 {
        problems.push("nothing was shed with 503".into());
    }
    if ok == 0 {
        problems.push("nothing was served".into());
    }
    assert!(
        problems.is_empty(),
        "served {ok}, shed {shed}, shed(limit) metric {}:\n{}",
        edge.metric("edge_connections_shed_total", &["reason=\"limit\""]),
        problems.join("\n")
    );
    let shed_metric = edge.wait_metric_where(
        "edge_connections_shed_total",
        &["reason=\"limit\""],
        2 * SEC,
        |v| v >= shed as f64,
    );
    assert_eq!(
        shed_metric, shed as f64,
        "edge_connections_shed_total{{reason=\"limit\"}} vs 503s seen"
    );
    assert!(edge.wait_log("connection.shed", 2 * SEC).is_some());
    drop(conns);
    assert_no_connections_left(&edge);
    assert_eq!(edge.wait_metric("edge_requests_in_flight", &[], 0.0), 0.0);
    assert!(started.elapsed() < 18 * SEC, "took {:?}", started.elapsed());
});
