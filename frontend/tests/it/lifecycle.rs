//! Process lifecycle: drain on SIGTERM (DESIGN.md "Drain and upgrade").

use std::time::{Duration, Instant};

use crate::harness::{Cfg, Client, Edge, Origin, Reply};

both_drivers!(sigterm_drains_in_flight_requests_then_exits_0, |d| {
    let origin = Origin::start(|req| {
        if req.target.starts_with("/slow") {
            Reply::ok(b"slow").delayed(Duration::from_secs(2))
        } else {
            Reply::ok(b"fast")
        }
    });
    let cfg = Cfg::new(d, origin.addr)
        .timeout("drain_delay", "1s")
        .timeout("drain", "10s");
    let mut edge = Edge::start(&cfg);
    let mut idle = Client::connect(edge.addr);
    assert_eq!(idle.get("/fast").status, 200);
    let mut slow = Client::connect(edge.addr);
    slow.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let until = Instant::now() + Duration::from_secs(5);
    while origin.seen.lock().unwrap().len() < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    edge.signal(15);
    assert!(edge
        .wait_log("server.draining", Duration::from_secs(2))
        .is_some());
    // Readiness is 503 during drain; requests are still served, with Connection: close.
    let mut probe = Client::connect(edge.addr);
    let r = probe.get("/_health");
    assert_eq!(r.status, 503);
    let mut c = Client::connect(edge.addr);
    let r = c.get("/fast");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    // The in-flight slow request completes.
    let r = slow.read_response(false).unwrap();
    assert_eq!(r.body, b"slow");
    assert_eq!(r.header("connection"), Some("close"));
    // The idle keep-alive connection was closed at drain_delay.
    assert!(idle.closed_by_peer());
    let code = edge.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0));
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(6), "drain took {took:?}");
});

const FAULTS: &[(&str, &str)] = &[("EDGE_TEST_FAULTS", "1")];

both_drivers!(a_panic_in_one_connection_closes_only_that_connection, |d| {
    let origin = Origin::fixed(b"fine");
    let edge = crate::harness::Edge::start_env(&Cfg::new(d, origin.addr), &[], FAULTS);
    let mut bystander = Client::connect(edge.addr);
    assert_eq!(bystander.get("/").body, b"fine");
    let mut victim = Client::connect(edge.addr);
    victim.send(b"GET /__edge_test/panic HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        victim.read_response(false).is_none(),
        "the panicking connection is closed without a response"
    );
    assert!(edge
        .wait_log("connection.panic", Duration::from_secs(2))
        .is_some());
    assert_eq!(edge.metric("edge_connection_panics_total", &[]), 1.0);
    // The worker goes on: the other connection and new ones are served.
    assert_eq!(bystander.get("/").body, b"fine");
    assert_eq!(Client::connect(edge.addr).get("/_health").status, 200);
    assert_eq!(edge.metric("edge_worker_restarts_total", &[]), 0.0);
});

both_drivers!(
    a_dead_worker_thread_is_restarted_with_the_same_listener,
    |d| {
        let origin = Origin::fixed(b"fine");
        let edge = crate::harness::Edge::start_env(&Cfg::new(d, origin.addr), &[], FAULTS);
        let mut c = Client::connect(edge.addr);
        c.send(b"GET /__edge_test/kill-worker HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(edge
            .wait_log("worker.died", Duration::from_secs(3))
            .is_some());
        // While the only worker is down, a new connection waits in the listener's accept queue (the same
        // socket is handed to the restarted worker), and is served once it is back (backoff 1 s).
        let t = Instant::now();
        let mut queued = Client::connect(edge.addr);
        let r = queued.get("/");
        assert_eq!(r.body, b"fine");
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "served after {:?}",
            t.elapsed()
        );
        assert!(edge
            .wait_log("worker.restarted", Duration::from_secs(3))
            .is_some());
        assert_eq!(edge.metric("edge_worker_restarts_total", &[]), 1.0);
        // Readiness recovers once the restarted worker's heartbeat is fresh.
        assert_eq!(Client::connect(edge.addr).get("/_health").status, 200);
    }
);

both_drivers!(sigterm_with_20_requests_in_flight_completes_them_all, |d| {
    // DESIGN.md "Drain and upgrade", its timeline: readiness 503 from SIGTERM, liveness 200
    // throughout, listeners closed at drain_delay (new connections refused), every in-flight request
    // answered 200, exit 0, server.draining and server.stopped logged with counts.
    let origin = Origin::start(|_| Reply::ok(b"slow").delayed(Duration::from_secs(2)));
    let cfg = Cfg::new(d, origin.addr)
        .timeout("drain_delay", "1s")
        .timeout("drain", "10s");
    let mut edge = Edge::start(&cfg);
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let mut c = Client::connect_timeout(edge.addr, Duration::from_secs(10));
            c.send(format!("GET /slow/{i} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
            c
        })
        .collect();
    assert!(
        origin.wait_until(Duration::from_secs(5), |o| o.seen_count() == 20),
        "the 20 requests did not reach the origin"
    );
    let t0 = Instant::now();
    edge.signal(15);
    let line = edge
        .wait_log("server.draining", Duration::from_secs(2))
        .expect("server.draining");
    assert!(line.contains("connections=20"), "{line}");
    let live = |edge: &Edge| {
        let mut c = Client::connect(edge.admin);
        c.get("/_live").status
    };
    assert_eq!(Client::connect(edge.addr).get("/_health").status, 503);
    assert_eq!(live(&edge), 200);
    // After drain_delay the traffic listener is closed: connects are refused.
    assert!(
        crate::harness::wait_until(Duration::from_secs(3), || {
            std::net::TcpStream::connect_timeout(&edge.addr, Duration::from_millis(200)).is_err()
        }),
        "new connections still accepted after drain_delay"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "listener closed before drain_delay"
    );
    assert_eq!(live(&edge), 200, "liveness during the drain");
    for (i, mut c) in clients.into_iter().enumerate() {
        let r = c
            .read_response(false)
            .unwrap_or_else(|| panic!("request {i} lost"));
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.body, b"slow");
        assert_eq!(r.header("connection"), Some("close"));
    }
    assert_eq!(edge.wait_exit(Duration::from_secs(10)), Some(0));
    let line = edge
        .wait_log("server.stopped", Duration::from_secs(1))
        .expect("server.stopped");
    for field in [
        "reason=\"drained\"",
        "connections_at_drain=20",
        "connections_left=0",
        "exit_code=0",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
});

both_drivers!(a_second_signal_exits_at_once_with_1, |d| {
    let origin = Origin::start(|_| Reply::ok(b"slow").delayed(Duration::from_secs(5)));
    let cfg = Cfg::new(d, origin.addr)
        .timeout("drain_delay", "5s")
        .timeout("drain", "10s");
    let mut edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(origin.wait_until(Duration::from_secs(5), |o| o.seen_count() == 1));
    edge.signal(15);
    assert!(edge
        .wait_log("server.draining", Duration::from_secs(2))
        .is_some());
    let t = Instant::now();
    edge.signal(15);
    assert_eq!(edge.wait_exit(Duration::from_secs(3)), Some(1));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    let line = edge
        .wait_log("server.stopped", Duration::from_secs(1))
        .expect("server.stopped");
    assert!(
        line.contains("second signal") && line.contains("exit_code=1"),
        "{line}"
    );
});

both_drivers!(a_dead_worker_does_not_stop_the_other_one, |d| {
    // Two workers: keep-alive connections are spread over both by SO_REUSEPORT. One worker dies; the
    // connections it held close, the others keep being served while it is down, and it comes back.
    let origin = Origin::fixed(b"fine");
    let cfg = Cfg::new(d, origin.addr).workers(2);
    let edge = crate::harness::Edge::start_env(&cfg, &[], FAULTS);
    let mut conns: Vec<Client> = (0..16).map(|_| Client::connect(edge.addr)).collect();
    for c in &mut conns {
        assert_eq!(c.get("/").body, b"fine");
    }
    let mut killer = Client::connect(edge.addr);
    killer.send(b"GET /__edge_test/kill-worker HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(edge
        .wait_log("worker.died", Duration::from_secs(3))
        .is_some());
    // While the dead worker waits for its restart (1 s backoff), the other one serves its connections.
    let mut survivors = 0;
    for c in &mut conns {
        c.set_timeout(Duration::from_millis(500));
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        if matches!(c.read_response(false), Some(r) if r.body == b"fine") {
            survivors += 1;
        }
    }
    assert_eq!(
        edge.count_log("worker.restarted"),
        0,
        "the check above must run while the worker is down"
    );
    assert!(
        survivors > 0 && survivors < 16,
        "{survivors} of 16 connections served during the outage"
    );
    // The dead worker's connections (and the one that killed it) were closed, not left hanging.
    let line = edge
        .wait_log("worker.orphans_closed", Duration::from_secs(1))
        .expect("worker.orphans_closed");
    let closed = 16 - survivors + 1;
    assert!(line.contains(&format!("downstream={closed}")), "{line}");
    assert!(edge
        .wait_log("worker.restarted", Duration::from_secs(3))
        .is_some());
    assert_eq!(edge.metric("edge_worker_restarts_total", &[]), 1.0);
    // Both workers serve again: new connections land on each.
    for _ in 0..16 {
        assert_eq!(Client::connect(edge.addr).get("/").body, b"fine");
    }
    assert_eq!(Client::connect(edge.addr).get("/_health").status, 200);
});

/// DESIGN.md "Observability": the admin API's `GET /config` is the effective configuration as TOML
/// (flags applied; certificate and key files as paths), and the admin endpoints answer HEAD like GET.
#[test]
fn admin_config_is_the_effective_toml_and_head_probes_are_answered() {
    let origin = Origin::fixed(b"x");
    let edge = Edge::start(&Cfg::new(crate::harness::Driver::Epoll, origin.addr));
    let mut c = Client::connect(edge.admin);
    let r = c.get("/config");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/toml"));
    let text = r.text();
    let parsed = edge_core::config::Config::parse(&text, "GET /config").expect("valid TOML config");
    assert_eq!(parsed.upstreams.len(), 1);
    assert!(text.contains(&origin.addr.to_string()), "{text}");
    assert!(text.contains("[[routes]]"), "{text}");
    c.send(b"HEAD /_health HTTP/1.1\r\nHost: admin\r\n\r\n");
    let r = c.read_response(true).expect("HEAD answered");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("2"));
    assert_eq!(
        c.get("/_live").status,
        200,
        "the connection goes on after HEAD"
    );
}
