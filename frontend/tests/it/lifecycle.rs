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
