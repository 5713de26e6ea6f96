//! Inbound deadlines (DESIGN.md "Inbound deadlines" and "Status codes"): `idle` closes a quiet socket,
//! `request` answers 408 for a stalled head, a stalled body and a drip-fed head (a deadline, not a
//! per-read timeout), `send` releases a client that stopped reading, and a route's
//! `client_request_timeout` replaces `request` for a slow upload.

use std::time::{Duration, Instant};

use crate::harness::{
    assert_about, assert_error_response, Cfg, Client, Drip, Edge, Origin, Reply, Route,
};

const SEC: Duration = Duration::from_secs(1);

/// The edge state every test ends in: no connection left open, no request in flight.
fn assert_settled(edge: &Edge) {
    let active = edge.wait_metric("edge_connections_active", &[], 0.0);
    assert_eq!(active, 0.0, "edge_connections_active did not return to 0");
    let in_flight = edge.wait_metric("edge_requests_in_flight", &[], 0.0);
    assert_eq!(
        in_flight, 0.0,
        "edge_requests_in_flight did not return to 0"
    );
}

both_drivers!(idle_socket_is_closed_at_idle, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("idle", "1s"));

    // Before the first byte.
    let mut c = Client::connect(edge.addr);
    let (bytes, took) = c.read_until_closed(5 * SEC);
    let took = took.expect("an idle socket was still open after 5 s (idle = 1s)");
    assert_about("idle close before the first byte", took, SEC, SEC);
    assert!(
        bytes.is_empty(),
        "an idle close sends nothing, got {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let n = edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 1.0);
    assert_eq!(n, 1.0, "edge_inbound_timeouts_total{{phase=\"idle\"}}");

    // Between keep-alive requests.
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/").status, 200);
    let (bytes, took) = c.read_until_closed(5 * SEC);
    let took = took.expect("an idle keep-alive connection was still open after 5 s");
    assert_about("idle close between requests", took, SEC, SEC);
    assert!(bytes.is_empty());
    let n = edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 2.0);
    assert_eq!(n, 2.0, "edge_inbound_timeouts_total{{phase=\"idle\"}}");
    assert_eq!(
        edge.metric("edge_inbound_timeouts_total", &["phase=\"request\""]),
        0.0
    );
    assert_settled(&edge);
});

// The worker ends idle connections from one idle sweep (one timer for all of them): each must still
// get its own deadline, counted from when it went idle, not the sweep's next tick for the oldest.
both_drivers!(each_idle_connection_gets_its_own_deadline, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("idle", "3s"));
    let idle = 3 * SEC;

    let mut a = Client::connect(edge.addr);
    let a_since = Instant::now();
    // The scenario's gap, not a synchronisation: `b` goes idle 1.5 s after `a`.
    std::thread::sleep(SEC * 3 / 2);
    let mut b = Client::connect(edge.addr);
    assert_eq!(b.get("/").status, 200);
    let b_since = Instant::now();

    let (_, closed) = a.read_until_closed(10 * SEC);
    assert!(closed.is_some(), "a was still open after 10 s (idle = 3s)");
    assert_about("first idle connection", a_since.elapsed(), idle, SEC);
    let (bytes, closed) = b.read_until_closed(10 * SEC);
    assert!(closed.is_some(), "b was still open after 10 s (idle = 3s)");
    assert_about("second idle connection", b_since.elapsed(), idle, SEC);
    assert!(bytes.is_empty());
    let n = edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 2.0);
    assert_eq!(n, 2.0, "edge_inbound_timeouts_total{{phase=\"idle\"}}");
    assert_settled(&edge);
});

// A reload that shortens `idle` applies to connections that are idle already (the sweep reads the
// configuration at least once a second).
both_drivers!(
    a_shorter_idle_from_a_reload_applies_to_idle_connections,
    |d| {
        const SIGHUP: i32 = 1;
        let origin = Origin::fixed(b"ok");
        let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("idle", "60s"));
        let mut kept = Client::connect(edge.addr);
        assert_eq!(kept.get("/").status, 200);

        edge.rewrite_config(&Cfg::new(d, origin.addr).timeout("idle", "1s"));
        edge.signal(SIGHUP);
        edge.wait_log("config.reloaded", 5 * SEC)
            .expect("config.reloaded logged");
        let (bytes, took) = kept.read_until_closed(10 * SEC);
        let took = took.expect("an idle connection was still open 10 s after idle became 1s");
        assert!(
            took <= 3 * SEC,
            "closed {took:?} after the reload (idle = 1s)"
        );
        assert!(bytes.is_empty());
        let n = edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 1.0);
        assert_eq!(n, 1.0, "edge_inbound_timeouts_total{{phase=\"idle\"}}");
        assert_settled(&edge);
    }
);

both_drivers!(stalled_head_gets_408_at_request, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("request", "2s"));
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n");
    let r = c.read_response(false).expect("a 408 for a stalled head");
    assert_about("408 for a stalled head", t.elapsed(), 2 * SEC, SEC);
    assert_error_response("stalled head", &r, 408, true);
    assert!(
        c.time_until_closed(3 * SEC).is_some(),
        "connection still open after the 408"
    );
    edge.assert_counted_and_logged(
        "edge_inbound_timeouts_total",
        &["phase=\"request\""],
        1.0,
        "request.timeout",
    );
    assert_eq!(origin.accepted(), 0, "a stalled head reached the origin");
    assert_settled(&edge);
});

both_drivers!(stalled_body_gets_408_at_request, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("request", "2s"));
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789");
    let r = c.read_response(false).expect("a 408 for a stalled body");
    assert_about("408 for a stalled body", t.elapsed(), 2 * SEC, SEC);
    assert_error_response("stalled body", &r, 408, true);
    assert!(
        c.time_until_closed(3 * SEC).is_some(),
        "connection still open after the 408"
    );
    edge.assert_counted_and_logged(
        "edge_inbound_timeouts_total",
        &["phase=\"request\""],
        1.0,
        "request.timeout",
    );
    // The origin never got a whole request, and its connection was given up.
    assert_eq!(origin.seen_count(), 0);
    assert!(
        origin.wait_until(3 * SEC, |o| o.closed() == o.accepted()),
        "edge kept the upstream connection of an aborted request open"
    );
    assert_settled(&edge);
});

both_drivers!(drip_fed_head_gets_408_at_request_not_later, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("request", "2s"));
    // 200 ms a byte: the whole head would take about 40 s; every single read arrives well within any
    // per-read timeout, so only a deadline armed by the first byte cuts it off.
    let mut head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Drip: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 160));
    head.extend_from_slice(b"\r\n\r\n");
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    let drip = Drip::start(&c.s, head, 1, Duration::from_millis(200));
    let r = c.read_response(false).expect("a 408 for a drip-fed head");
    let took = t.elapsed();
    let sent = drip.stop();
    assert_about("408 for a drip-fed head", took, 2 * SEC, SEC);
    assert!(sent < 40, "{sent} bytes dripped before the 408");
    assert_error_response("drip-fed head", &r, 408, true);
    edge.assert_counted_and_logged(
        "edge_inbound_timeouts_total",
        &["phase=\"request\""],
        1.0,
        "request.timeout",
    );
    assert_eq!(origin.accepted(), 0);
    drop(c);
    assert_settled(&edge);
});

both_drivers!(client_that_never_reads_is_closed_at_send, |d| {
    const BIG: usize = 64 << 20;
    let origin = Origin::start(|_| Reply::ok(&vec![b'x'; BIG]));
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("send", "1s"));
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        origin.wait_until(5 * SEC, |o| o.seen_count() == 1),
        "the request did not reach the origin"
    );
    let t = Instant::now();
    assert_eq!(edge.metric("edge_connections_active", &[]), 1.0);
    // Never read: once the socket buffers are full edge makes no progress and `send` expires.
    let active = edge.wait_metric_where("edge_connections_active", &[], 10 * SEC, |v| v == 0.0);
    let took = t.elapsed();
    assert_eq!(
        active, 0.0,
        "a client that never reads still holds its connection after 10 s"
    );
    assert_about("close of a client that stopped reading", took, SEC, SEC);
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"send\""], 1.0),
        1.0
    );
    edge.assert_counted_and_logged(
        "edge_responses_truncated_total",
        &[],
        1.0,
        "response.truncated",
    );
    // What was already in the socket buffers still arrives, then the connection ends short.
    let (bytes, closed) = c.read_until_closed(10 * SEC);
    assert!(closed.is_some(), "connection not closed");
    assert!(
        bytes.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(64)])
    );
    assert!(
        bytes.len() < BIG,
        "the whole response arrived ({} bytes)",
        bytes.len()
    );
    assert!(
        origin.wait_until(5 * SEC, |o| o.closed() == o.accepted()),
        "the upstream connection of the abandoned response was not closed"
    );
    assert_settled(&edge);
});

both_drivers!(route_client_request_timeout_overrides_request, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .timeout("request", "1s")
            .add_route(Route::new("/upload", "origin").set("client_request_timeout", "4s")),
    );
    let body: Vec<u8> = (0..20u8).map(|i| b'a' + i).collect();

    // The upload route: a body dripped over about 2 s (past `request`, within the route's 4 s) succeeds.
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    c.send(b"POST /upload/f HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n");
    let drip = Drip::start(&c.s, body.clone(), 1, Duration::from_millis(100));
    let r = c
        .read_response(false)
        .expect("a response to the slow upload");
    let took = t.elapsed();
    assert_eq!(drip.stop(), 20);
    assert_eq!(
        r.status,
        200,
        "slow upload on the route with client_request_timeout = 4s: {}",
        r.text()
    );
    assert_eq!(r.body, body);
    assert!(
        took > Duration::from_millis(1800),
        "the drip took only {took:?}"
    );
    // Kept alive afterwards.
    assert_eq!(c.get("/upload/again").status, 200);
    drop(c);

    // Any other route: the same upload is cut off at `request` (1 s).
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    c.send(b"POST /other HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n");
    let drip = Drip::start(&c.s, body.clone(), 1, Duration::from_millis(100));
    let r = c.read_response(false).expect("a 408");
    let took = t.elapsed();
    drip.stop();
    assert_about("408 on the route without an override", took, SEC, SEC);
    assert_error_response("slow upload without override", &r, 408, true);
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"request\""], 1.0),
        1.0
    );
    drop(c);
    assert_settled(&edge);
});

both_drivers!(request_deadline_spans_head_and_body, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("request", "2s"));
    // Head dripped over about 1.2 s, then the body over about 1.2 s: each part alone is within `request`,
    // together they are not; the deadline is armed once, by the first byte.
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    let head = b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n".to_vec();
    let head_len = head.len();
    let drip = Drip::start(&c.s, head, head_len.div_ceil(6), Duration::from_millis(240));
    // The body drip starts when the head drip is done (event: the drip thread's progress).
    assert!(crate::harness::wait_until(5 * SEC, || drip.written() == head_len));
    drip.stop();
    let d1 = Drip::start(
        &c.s,
        b"0123456789ab".to_vec(),
        2,
        Duration::from_millis(240),
    );
    let r = c.read_response(false).expect("a 408");
    let took = t.elapsed();
    d1.stop();
    assert_about("408 for a slow head plus a slow body", took, 2 * SEC, SEC);
    assert_error_response("slow head plus slow body", &r, 408, true);
    assert_eq!(origin.seen_count(), 0);
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"request\""], 1.0),
        1.0
    );
    drop(c);
    assert_settled(&edge);
});

both_drivers!(slow_but_steady_reader_is_not_cut_off_at_send, |d| {
    const BIG: usize = 16 << 20;
    let origin = Origin::start(|req| {
        if req.target != "/big" {
            return Reply::ok(b"small");
        }
        let body: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
        Reply::ok(&body)
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("send", "1s"));
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    // `send` bounds lack of progress, not the whole response: reading 1 MiB every 200 ms takes about
    // 3 s in all and must not be cut off.
    let t = Instant::now();
    let r = c.read_head().expect("response head");
    assert_eq!(r.status, 200);
    let mut got = c.take_buffered().len();
    let mut buf = vec![0u8; 1 << 20];
    c.set_timeout(5 * SEC);
    let mut last = Vec::new();
    while got < BIG {
        std::thread::sleep(Duration::from_millis(200));
        let mut chunk = 0;
        while chunk < (1 << 20) && got < BIG {
            let want = ((1 << 20) - chunk).min(BIG - got);
            let n = std::io::Read::read(&mut c.s, &mut buf[..want]).expect("read");
            assert!(n > 0, "connection closed after {got} of {BIG} body bytes");
            last = buf[n.saturating_sub(16)..n].to_vec();
            chunk += n;
            got += n;
        }
    }
    assert_eq!(got, BIG);
    let want_last: Vec<u8> = (BIG - last.len()..BIG).map(|i| (i % 251) as u8).collect();
    assert_eq!(last, want_last, "body bytes differ at the end");
    assert!(
        t.elapsed() > 2 * SEC,
        "the slow read took only {:?}",
        t.elapsed()
    );
    assert_eq!(
        edge.metric("edge_inbound_timeouts_total", &["phase=\"send\""]),
        0.0
    );
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
    // Kept alive afterwards.
    assert_eq!(c.get("/again").status, 200);
    drop(c);
    assert_settled(&edge);
});

both_drivers!(request_deadline_is_armed_by_each_requests_first_byte, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .timeout("idle", "10s")
            .timeout("request", "2s"),
    );
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/first").status, 200);
    // Keep-alive idle time (the scenario itself, not a wait for edge) does not count against the next
    // request's deadline: it starts with that request's first byte.
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    c.send(b"GET /second HTTP/1.1\r\nHost: x\r\n");
    let r = c.read_response(false).expect("a 408");
    assert_about(
        "408 for the second request's stalled head",
        t.elapsed(),
        2 * SEC,
        SEC,
    );
    assert_error_response("second request stalled", &r, 408, true);
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"request\""], 1.0),
        1.0
    );
    assert_eq!(
        edge.metric("edge_inbound_timeouts_total", &["phase=\"idle\""]),
        0.0
    );
    drop(c);
    assert_settled(&edge);
});
