//! Process lifecycle: drain on SIGTERM (DESIGN.md "Drain and upgrade").

use std::time::{Duration, Instant};

use crate::harness::{config, Client, Edge, Origin, Reply};

both_drivers!(sigterm_drains_in_flight_requests_then_exits_0, |d| {
    let origin = Origin::start(|req| {
        if req.target.starts_with("/slow") {
            Reply::ok(b"slow").delayed(Duration::from_secs(2))
        } else {
            Reply::ok(b"fast")
        }
    });
    let cfg = config(
        d,
        origin.addr,
        "[server.timeouts]\ndrain_delay = \"1s\"\ndrain = \"10s\"",
        "",
    );
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
    let edge = crate::harness::Edge::start_env(&config(d, origin.addr, "", ""), &[], FAULTS);
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
        let edge = crate::harness::Edge::start_env(&config(d, origin.addr, "", ""), &[], FAULTS);
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
