//! The proxy path end to end: bodies both ways, framing, keep-alive reuse, health, upstream down.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use crate::harness::{read_request, Cfg, Client, Edge, Origin, Reply, Route, Upstream};

both_drivers!(get_round_trips, |d| {
    let origin = Origin::fixed(b"hello, world\n");
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    let r = c.get("/a/b?x=1");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("via"), Some("1.1 edge"));
    let seen = origin.last();
    assert_eq!(seen.target, "/a/b?x=1");
    assert_eq!(seen.header("host"), Some("test"));
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    assert!(seen.header("x-request-id").is_some_and(|v| !v.is_empty()));
});

both_drivers!(post_content_length_body_is_byte_exact, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut c = Client::connect(edge.addr);
    c.send(
        format!(
            "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    c.send(&body);
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-method"), Some("POST"));
    assert!(r.body == body, "echoed body differs");
    assert_eq!(origin.last().header("content-length"), Some("300000"));
});

/// A reader that takes at most 32 KiB per read and waits a millisecond before each: an upstream that
/// reads a body slower than the client sends it.
struct Slowly<R>(R);

impl<R: std::io::Read> std::io::Read for Slowly<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(1));
        let n = buf.len().min(32 * 1024);
        self.0.read(&mut buf[..n])
    }
}

// The upstream takes the body slower than the client sends it, through a small receive buffer, and the
// body is larger than edge's send buffer toward it can grow (Linux's default `tcp_wmem` ceiling is
// 4 MiB): edge's sends fill the upstream's socket part way again and again (on io_uring a non-blocking
// send takes part of a chunk and the driver writes the rest), and every byte arrives once and in order.
both_drivers!(an_upload_to_an_upstream_reading_slowly_is_byte_exact, |d| {
    let origin = Origin::script(|mut s, _| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(32 * 1024)
            .unwrap();
        let mut buf = Vec::new();
        let Some((seen, _)) = read_request(&mut Slowly(&mut s), &mut buf) else {
            return;
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            seen.body.len()
        );
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(&seen.body);
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let body: Vec<u8> = (0..16_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let mut c = Client::connect(edge.addr);
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.send(head.as_bytes());
    c.send(&body);
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), body.len());
    assert!(r.body == body, "the body the upstream read differs");
});

both_drivers!(chunked_request_body_of_several_mib_is_streamed, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut want = Vec::new();
    for i in 0..48u32 {
        let chunk: Vec<u8> = (0..(64 * 1024 + i)).map(|j| (j ^ i) as u8).collect();
        c.send(format!("{:x}\r\n", chunk.len()).as_bytes());
        c.send(&chunk);
        c.send(b"\r\n");
        want.extend_from_slice(&chunk);
    }
    c.send(b"0\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert!(want.len() > 3 << 20);
    assert_eq!(r.body.len(), want.len());
    assert!(r.body == want, "echoed body differs");
    assert_eq!(origin.last().header("transfer-encoding"), Some("chunked"));
});

both_drivers!(chunked_and_close_delimited_responses, |d| {
    let origin = Origin::start(|req| {
        match req.target.as_str() {
        "/chunked" => Reply::raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n", false),
        _ => Reply::raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", true),
    }
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    let r = c.get("/chunked");
    assert!(r.chunked);
    assert_eq!(r.body, b"hello, world");
    // Close-delimited upstream body: re-chunked for an HTTP/1.1 client, and the connection stays usable.
    let r = c.get("/close");
    assert!(
        r.chunked,
        "close-delimited body should be forwarded chunked to HTTP/1.1"
    );
    assert_eq!(r.body, b"until the end");
    assert_eq!(c.get("/chunked").body, b"hello, world");
    // HTTP/1.0 client: close-delimited.
    let mut c10 = Client::connect(edge.addr);
    c10.send(b"GET /chunked HTTP/1.0\r\n\r\n");
    let r = c10.read_response(false).unwrap();
    assert!(!r.chunked);
    assert_eq!(r.body, b"hello, world");
});

both_drivers!(head_204_304_have_no_body, |d| {
    let origin = Origin::start(|req| match req.target.as_str() {
        "/204" => Reply::raw(b"HTTP/1.1 204 No Content\r\n\r\n", false),
        "/304" => Reply::raw(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", false),
        _ => Reply::raw(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false),
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(true).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5"));
    let r = c.get("/204");
    assert_eq!(r.status, 204);
    let r = c.get("/304");
    assert_eq!(r.status, 304);
    // Nothing stray arrived after the bodiless responses: the next response parses cleanly.
    c.send(b"HEAD /y HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_response(true).unwrap().status, 200);
});

both_drivers!(keep_alive_reuses_one_upstream_connection, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    for _ in 0..100 {
        assert_eq!(c.get("/").status, 200);
    }
    assert_eq!(
        origin.accepted(),
        1,
        "100 sequential requests should reuse one upstream connection"
    );
    assert_eq!(edge.metric("edge_upstream_requests_total", &[]), 100.0);
});

both_drivers!(two_workers_both_serve, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr).workers(2));
    // SO_REUSEPORT spreads connections by hash of the source port; 64 connections reach both workers
    // unless the kernel is extraordinarily unlucky (2^-63).
    for _ in 0..64 {
        let mut c = Client::connect(edge.addr);
        assert_eq!(c.get("/").status, 200);
    }
    let m = edge.metrics();
    for w in ["worker=\"0\"", "worker=\"1\""] {
        let n = crate::harness::metric_sum(&m, "edge_connections_total", &[w]);
        assert!(n > 0.0, "{w} accepted no connection:\n{m}");
    }
});

both_drivers!(health_answers_fast_behind_slow_requests, |d| {
    let origin = Origin::start(|req| {
        if req.target.starts_with("/slow") {
            Reply::ok(b"slow").delayed(Duration::from_secs(3))
        } else {
            Reply::ok(b"fast")
        }
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut slow: Vec<Client> = (0..15)
        .map(|_| {
            let mut c = Client::connect(edge.addr);
            c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
            c
        })
        .collect();
    // Wait until all 15 are at the origin (event, not sleep).
    let until = Instant::now() + Duration::from_secs(5);
    while origin.seen.lock().unwrap().len() < 15 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(origin.seen.lock().unwrap().len(), 15);
    for _ in 0..5 {
        let t = Instant::now();
        let mut c = Client::connect(edge.addr);
        let r = c.get("/_health");
        let took = t.elapsed();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"ok");
        // A probe queued behind the slow requests would take their 3 s; 500 ms leaves room for a
        // loaded test host without letting that through.
        assert!(
            took < Duration::from_millis(500),
            "health took {took:?} behind 15 slow requests"
        );
    }
    for c in &mut slow {
        assert_eq!(c.read_response(false).unwrap().body, b"slow");
    }
});

both_drivers!(upstream_down_gives_502_and_proxy_keeps_serving, |d| {
    let dead_addr = crate::harness::refused_addr();
    let origin = Origin::fixed(b"alive");
    let cfg = Cfg::new(d, dead_addr)
        .add_upstream(Upstream::new("live", &[origin.addr]))
        .add_route(Route::new("/live", "live"));
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    let r = c.get("/down");
    assert_eq!(r.status, 502);
    assert!(r.text().contains("refused"), "{}", r.text());
    // Same connection still serves (keep-alive after a 502 with no body).
    let r = c.get("/live/x");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"alive");
    assert_eq!(
        edge.metric("edge_upstream_errors_total", &["kind=\"refused\""]),
        1.0
    );
    assert!(edge
        .wait_log("upstream.error", Duration::from_secs(2))
        .is_some());
    let mut c2 = Client::connect(edge.addr);
    assert_eq!(c2.get("/_health").status, 200);
    c2.s.flush().unwrap();
    edge.assert_upstream_settled();
});

both_drivers!(upstream_max_active_queue_timeout_sheds_with_503, |d| {
    let origin = Origin::start(|req| {
        if req.target.starts_with("/slow") {
            Reply::ok(b"slow").delayed(Duration::from_secs(2))
        } else {
            Reply::ok(b"fast")
        }
    });
    let cfg = Cfg::new(d, origin.addr)
        .upstream_field("max_active", 1)
        .upstream_field("queue_timeout", "300ms");
    let edge = Edge::start(&cfg);
    let mut first = Client::connect(edge.addr);
    first.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let until = Instant::now() + Duration::from_secs(5);
    while origin.seen.lock().unwrap().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let t = Instant::now();
    let mut second = Client::connect(edge.addr);
    let r = second.get("/fast");
    let took = t.elapsed();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(
        r.header("connection").is_none(),
        "the connection is kept: no body was left unread"
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "shed after {took:?}"
    );
    assert_eq!(
        edge.metric("edge_requests_shed_total", &["reason=\"upstream_queue\""]),
        1.0
    );
    assert!(edge
        .wait_log("request.shed", Duration::from_secs(2))
        .is_some());
    // The first request completes, and then the slot is free again.
    assert_eq!(first.read_response(false).unwrap().body, b"slow");
    assert_eq!(second.get("/fast").body, b"fast");
    assert_eq!(
        edge.wait_metric("edge_upstream_connections", &["state=\"active\""], 0.0),
        0.0
    );
});

both_drivers!(failing_endpoint_is_ejected_while_the_other_serves, |d| {
    let dead_addr = crate::harness::refused_addr();
    let origin = Origin::fixed(b"alive");
    let cfg = Cfg::new(d, origin.addr).endpoints(&[dead_addr, origin.addr]);
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    // Refused connects are retried once on the other endpoint, so every request succeeds; after 5
    // consecutive failures the dead endpoint is ejected and no longer tried.
    for _ in 0..20 {
        assert_eq!(c.get("/").body, b"alive");
    }
    assert_eq!(
        edge.metric("edge_upstream_errors_total", &["kind=\"ejected\""]),
        1.0
    );
    assert!(edge
        .wait_log("upstream.ejected", Duration::from_secs(2))
        .is_some());
    assert!(edge.metric("edge_upstream_retries_total", &[]) >= 5.0);
});

both_drivers!(slow_requests_log_request_slow_with_duration, |d| {
    let origin = Origin::start(|_| Reply::ok(b"late").delayed(Duration::from_millis(1200)));
    let cfg = Cfg::new(d, origin.addr).log("slow_request", "1s");
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/late").status, 200);
    let line = edge
        .wait_log("request.slow", Duration::from_secs(2))
        .expect("request.slow line");
    assert!(
        line.contains("status=200") && line.contains("duration_ms="),
        "{line}"
    );
    // The duration histogram saw it in the 2.5 s bucket but not in the 1 s one.
    let m = edge.metrics();
    let bucket = |le: &str| {
        crate::harness::metric_sum(
            &m,
            "edge_request_duration_seconds_bucket",
            &[&format!("le=\"{le}\"")],
        )
    };
    assert_eq!(bucket("1"), 0.0, "{m}");
    assert_eq!(bucket("2.5"), 1.0, "{m}");
    assert_eq!(bucket("60"), 1.0, "{m}");
});

both_drivers!(warn_logs_are_rate_limited_with_a_summary, |d| {
    let origin = Origin::fixed(b"x");
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    // 60 malformed requests in well under a second: at most 20 request.invalid lines in that second, and
    // a log.suppressed line (written by the worker's timer) carries the rest.
    for _ in 0..60 {
        let mut c = Client::connect(edge.addr);
        c.send(b"GARBAGE\r\n\r\n");
        assert_eq!(c.read_response(false).unwrap().status, 400);
    }
    assert_eq!(
        edge.metric("edge_requests_invalid_total", &["reason=\"bad_head\""]),
        60.0
    );
    // Every drop is accounted for: each failure wants two warn/info lines (request.invalid and
    // request.failed); those not written are counted in log.suppressed summaries.
    let account = || {
        let log = edge.log();
        let written = log
            .iter()
            .filter(|l| {
                l.contains("event=\"request.invalid\"") || l.contains("event=\"request.failed\"")
            })
            .count();
        let suppressed: usize = log
            .iter()
            .filter(|l| l.contains("event=\"log.suppressed\""))
            .map(|l| {
                l.split("suppressed=")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum();
        (written, suppressed)
    };
    let until = Instant::now() + Duration::from_secs(4);
    while account().0 + account().1 < 120 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (written, suppressed) = account();
    assert_eq!(
        written + suppressed,
        120,
        "written {written}, suppressed {suppressed}"
    );
    assert!(
        suppressed > 0 && written <= 60,
        "written {written}, suppressed {suppressed}"
    );
});
