//! Fault-matrix cases (DESIGN.md "Fault matrix") not covered elsewhere: pipelining, a connect that hangs,
//! a pooled connection the upstream closed (reused or idle), stray bytes on an idle pooled connection,
//! a zombie upstream, and the client half-closing.

use std::{
    io::{Read, Write},
    net::Shutdown,
    time::{Duration, Instant},
};

use crate::harness::{Cfg, Client, Edge, Origin, Reply};

both_drivers!(pipelined_requests_are_answered_in_order, |d| {
    let origin = Origin::start(|req| Reply::ok(req.target.as_bytes()));
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /one HTTP/1.1\r\nHost: t\r\n\r\nGET /two HTTP/1.1\r\nHost: t\r\n\r\nPOST /three HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET /four HTTP/1.1\r\nHost: t\r\n\r\n");
    for want in ["/one", "/two", "/three", "/four"] {
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), want);
    }
});

both_drivers!(
    half_close_after_a_full_request_still_gets_the_response,
    |d| {
        let origin = Origin::fixed(b"answer");
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        c.s.shutdown(Shutdown::Write).unwrap();
        let r = c.read_response(false).unwrap();
        assert_eq!(r.body, b"answer");
        assert!(c.closed_by_peer());
        assert_eq!(edge.wait_metric("edge_connections_active", &[], 0.0), 0.0);
    }
);

both_drivers!(connect_that_hangs_gives_504_at_connect_timeout, |d| {
    // A listener with a backlog of 0 that never accepts: once its queue is full, SYNs are dropped and a
    // connect hangs (PLATFORM.md).
    let hanging = crate::harness::HangingListener::new();
    let addr = hanging.addr;
    let edge = Edge::start(&Cfg::new(d, addr));
    let t = Instant::now();
    let mut c = Client::connect(edge.addr);
    let r = c.get("/");
    let took = t.elapsed();
    assert_eq!(r.status, 504);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "504 after {took:?}"
    );
    assert_eq!(
        edge.metric("edge_upstream_timeouts_total", &["phase=\"connect\""]),
        1.0
    );
    assert!(edge
        .wait_log("upstream.timeout", Duration::from_secs(2))
        .is_some());
    edge.assert_upstream_settled();
});

both_drivers!(
    pooled_connection_closed_by_the_upstream_is_not_reused,
    |d| {
        // The origin answers each connection's first request and then closes it without saying so.
        let origin = Origin::script(|mut s, _| {
            let mut b = [0u8; 4096];
            if matches!(s.read(&mut b), Ok(n) if n > 0) {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        for i in 0..20 {
            let r = c.get("/");
            assert_eq!(r.status, 200, "request {i}");
            assert_eq!(r.body, b"ok");
        }
        assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
    }
);

/// An origin whose first connection answers one request, keeps the connection open by its headers,
/// then (after 100 ms) does `after` to the idle connection and reports how long edge took to close its
/// end (the origin's read seeing EOF or a reset; `None`: not within 5 s). Later connections answer normally.
fn idle_fault_origin(
    after: fn(&mut std::net::TcpStream),
) -> (Origin, std::sync::mpsc::Receiver<Option<Duration>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let origin = Origin::script(move |mut s, id| {
        let mut b = [0u8; 4096];
        while matches!(s.read(&mut b), Ok(n) if n > 0) {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            if id != 1 {
                continue;
            }
            std::thread::sleep(Duration::from_millis(100));
            after(&mut s);
            let t = Instant::now();
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            // EOF, or a reset when edge closed with the stray bytes unread (RFC 9293 §3.6).
            let closed = match s.read(&mut b) {
                Ok(n) => n == 0,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            };
            let _ = tx.send(closed.then(|| t.elapsed()));
            return;
        }
    });
    (origin, rx)
}

/// DESIGN.md "Upstream pools and retries": an idle pooled connection is watched, so `fault` done by the
/// upstream to it makes edge close it at once (well before its 30 s pool lifetime), and the next
/// request goes out on a fresh connection with no retry.
fn idle_pooled_connection_fault_closes_it(
    d: crate::harness::Driver,
    fault: fn(&mut std::net::TcpStream),
) {
    let (origin, closed) = idle_fault_origin(fault);
    let edge = Edge::start(&Cfg::new(d, origin.addr).upstream_field("pool_idle_timeout", "30s"));
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/").body, b"ok");
    let took = closed
        .recv_timeout(Duration::from_secs(10))
        .expect("the origin script reports")
        .expect("edge closed the idle pooled connection within 5 s");
    assert!(
        took < Duration::from_secs(2),
        "edge took {took:?} to close it"
    );
    assert_eq!(c.get("/").body, b"ok");
    assert_eq!(origin.accepted(), 2);
    assert_eq!(edge.metric("edge_upstream_retries_total", &[]), 0.0);
    assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
    edge.assert_upstream_settled();
}

both_drivers!(
    an_idle_pooled_connection_the_upstream_closes_is_closed_at_once,
    |d| {
        // A half-close (FIN) with the origin still reading: edge's close shows as EOF there.
        idle_pooled_connection_fault_closes_it(d, |s| {
            let _ = s.shutdown(Shutdown::Write);
        });
    }
);

both_drivers!(
    an_idle_pooled_connection_with_stray_bytes_is_closed_at_once,
    |d| {
        // Bytes nobody asked for: the connection's framing can no longer be trusted.
        idle_pooled_connection_fault_closes_it(d, |s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        });
    }
);

both_drivers!(zombie_upstream_is_cut_at_the_threshold, |d| {
    // Head and half the body, then silence: threshold = max(1s, min(2s, 1s + 1s)) = 2 s.
    let origin = Origin::script(|mut s, _| {
        let mut b = [0u8; 4096];
        if matches!(s.read(&mut b), Ok(n) if n > 0) {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf_");
            std::thread::sleep(Duration::from_secs(10));
        }
    });
    let cfg = Cfg::new(d, origin.addr)
        .upstream_field("request_timeout", "1s")
        .upstream_field("max_inactive", "1s")
        .upstream_field("max_inactive_cap", "2s");
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let t = Instant::now();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while let Ok(n) = c.s.read(&mut b) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&b[..n]);
    }
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200 OK") && text.ends_with("half_"),
        "{text}"
    );
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(4),
        "closed after {took:?}"
    );
    assert_eq!(
        edge.metric("edge_upstream_timeouts_total", &["phase=\"zombie\""]),
        1.0
    );
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 1.0);
    let line = edge
        .wait_log("upstream.zombie", Duration::from_secs(2))
        .expect("upstream.zombie line");
    for field in [
        "inactive_duration_threshold_ms=2000",
        "last_request_sent_at",
        "last_received_at",
        "max_request_timeout_ms=1000",
        "endpoint=",
        "worker=",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    edge.assert_upstream_settled();
});
