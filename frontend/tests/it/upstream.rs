//! Upstream resilience (DESIGN.md "Upstream pools and retries", "Zombie detection (capped)"): capped
//! zombie detection against DESIGN.md's table scaled down to seconds, upstream clocks paused while the
//! client is slow, `write_timeout`, an upstream that answers before reading the body, and the close/reuse
//! race on a pooled connection (GET retried once, POST never).
//!
//! Fault matrix group b, one named test per case (status the client sees, counter, nothing left active):
//! - refuses: `proxy::upstream_down_gives_502_and_proxy_keeps_serving`
//! - never accepts (connect hangs): `faults::connect_that_hangs_gives_504_at_connect_timeout`
//! - accepts and never answers: `silent_upstream_is_a_zombie_at_the_cap`,
//!   `drops::silent_upstream_gives_504_at_route_request_timeout`
//! - answers the head then stalls: `faults::zombie_upstream_is_cut_at_the_threshold`
//! - streams slowly for longer than the cap: `slow_stream_survives_only_when_received_bytes_count`
//! - closes mid-body: `drops::upstream_close_mid_body_truncates_and_closes`
//! - closes a pooled connection just as it is reused: `pooled_connection_closed_on_reuse_retries_get_not_post`
//! - closes each connection right after its response: `a_connection_closed_after_its_response_is_probed_for_a_post_and_retried_for_a_get`
//! - answers before reading the body: `early_response_is_relayed_and_both_connections_close`
//! - sends a malformed head: `drops::malformed_upstream_head_gives_502_bad_response`
//! - 3 s slow responses: `slow_responses_complete_and_release_their_connection`

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use crate::harness::{
    read_request, refused_addr, Cfg, Client, Edge, Origin, Reply, Route, Upstream,
};

const SEC: Duration = Duration::from_secs(1);

/// Sends `GET path` on a fresh connection; returns the status and how long it took.
fn timed_get(edge: &Edge, path: &str) -> (u16, Duration) {
    let mut c = Client::connect_timeout(edge.addr, 30 * SEC);
    let t = Instant::now();
    let r = c.get(path);
    (r.status, t.elapsed())
}

fn assert_within(what: &str, took: Duration, low: Duration, high: Duration) {
    assert!(
        took >= low && took <= high,
        "{what}: took {took:?}, expected {low:?}..={high:?}"
    );
}

both_drivers!(silent_upstream_is_a_zombie_at_the_cap, |d| {
    // max_inactive 1 s, cap 2 s: threshold = max(1, min(2, 30 + 1)) = 2 s, and max(1, 2) = 2 s for none.
    let origin = Origin::silent();
    let cfg = Cfg::new(d, origin.addr)
        .upstream_field("request_timeout", "30s")
        .upstream_field("max_inactive", "1s")
        .upstream_field("max_inactive_cap", "2s")
        .add_route(Route::new("/none", "origin").set("request_timeout", "none"));
    let edge = Edge::start(&cfg);
    for (n, path, rt_ms) in [(1.0, "/", "30000"), (2.0, "/none/x", "-1")] {
        let (status, took) = timed_get(&edge, path);
        assert_eq!(status, 504, "{path}");
        assert_within(path, took, 2 * SEC, Duration::from_millis(3500));
        assert_eq!(
            edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"zombie\""], n),
            n
        );
        let line = edge
            .wait_log_all(
                &[
                    "upstream.zombie",
                    &format!("max_request_timeout_ms={rt_ms}"),
                ],
                2 * SEC,
            )
            .expect("upstream.zombie line");
        for field in [
            "inactive_duration_threshold_ms=2000",
            "last_request_sent_at",
            "last_received_at=\"never\"",
            "endpoint=",
            "worker=",
        ] {
            assert!(line.contains(field), "{field} missing in {line}");
        }
    }
    assert_eq!(
        edge.metric("edge_upstream_timeouts_total", &["phase=\"request\""]),
        0.0
    );
    assert_eq!(
        edge.metric("edge_upstream_retries_total", &[]),
        0.0,
        "a zombie is never retried"
    );
    edge.assert_upstream_settled();
    // Each zombie connection was closed by edge: the origin saw both end.
    assert!(
        origin.wait_until(2 * SEC, |o| o.closed() == 2),
        "origin connections left open"
    );
});

both_drivers!(design_table_rows_scaled_down, |d| {
    // DESIGN.md's table divided by ten (cap 60 s -> 3 s after rounding up for timer slack): rows 1-2 end at
    // request_timeout (phase="request"), rows 3-5 at the zombie threshold (phase="zombie").
    let origin = Origin::silent();
    let route = |path: &str, upstream: &str, rt: &str| {
        Route::new(path, upstream).set("request_timeout", rt)
    };
    let cfg = Cfg::new(d, origin.addr)
        .upstream_field("max_inactive", "1s")
        .upstream_field("max_inactive_cap", "3s")
        .add_upstream(
            Upstream::new("raised", &[origin.addr])
                .set("max_inactive", "4s")
                .set("max_inactive_cap", "3s"),
        )
        .add_route(route("/row1", "origin", "500ms")) // threshold 1.5 s; request_timeout first
        .add_route(route("/row2", "origin", "2s")) // threshold 3 s; request_timeout first
        .add_route(route("/row3", "origin", "20s")) // threshold min(3, 21) = 3 s
        .add_route(route("/row4", "origin", "none")) // threshold max(1, 3) = 3 s
        .add_route(route("/row5", "raised", "20s")); // threshold max(4, min(3, 24)) = 4 s
    let edge = Edge::start(&cfg);
    let rows = [
        ("/row1", Duration::from_millis(500)),
        ("/row2", 2 * SEC),
        ("/row3", 3 * SEC),
        ("/row4", 3 * SEC),
        ("/row5", 4 * SEC),
    ];
    let results: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = rows
            .iter()
            .map(|(path, _)| {
                let edge = &edge;
                s.spawn(move || timed_get(edge, path))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((path, want), (status, took)) in rows.iter().zip(results) {
        assert_eq!(status, 504, "{path}");
        assert_within(path, took, *want, *want + SEC);
    }
    assert_eq!(
        edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"request\""], 2.0),
        2.0
    );
    assert_eq!(
        edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"zombie\""], 3.0),
        3.0
    );
    assert_eq!(edge.count_log("upstream.zombie"), 3);
    edge.assert_upstream_settled();
});

/// An origin that answers with a chunked body of ten 500 ms-spaced chunks ("chunk0".."chunk9", ~5 s).
fn slow_stream_origin() -> Origin {
    Origin::script(|mut s, _| {
        let mut buf = Vec::new();
        if read_request(&mut s, &mut buf).is_none() {
            return;
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for i in 0..10 {
            thread::sleep(Duration::from_millis(500));
            if s.write_all(format!("6\r\nchunk{i}\r\n").as_bytes())
                .is_err()
            {
                return;
            }
        }
        let _ = s.write_all(b"0\r\n\r\n");
    })
}

both_drivers!(slow_stream_survives_only_when_received_bytes_count, |d| {
    // threshold = max(1, min(2, 30 + 1)) = 2 s; the stream lasts ~5 s with a byte every 500 ms.
    let origin = slow_stream_origin();
    let cfg = |counts: bool| {
        Cfg::new(d, origin.addr)
            .upstream_field("request_timeout", "30s")
            .upstream_field("max_inactive", "1s")
            .upstream_field("max_inactive_cap", "2s")
            .upstream_field("zombie_counts_received", counts)
    };
    let counting = Edge::start(&cfg(true));
    let strict = Edge::start(&cfg(false));
    let (whole, cut) = thread::scope(|s| {
        let a = s.spawn(|| {
            let mut c = Client::connect_timeout(counting.addr, 20 * SEC);
            c.get("/")
        });
        let b = s.spawn(|| {
            let mut c = Client::connect_timeout(strict.addr, 20 * SEC);
            c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
            let t = Instant::now();
            let (bytes, closed) = c.read_until_closed(10 * SEC);
            (bytes, closed, t.elapsed())
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    // Received bytes count: the stream completes intact.
    assert_eq!(whole.status, 200);
    let want: String = (0..10).map(|i| format!("chunk{i}")).collect();
    assert_eq!(whole.text(), want);
    assert_eq!(counting.metric("edge_upstream_timeouts_total", &[]), 0.0);
    // Only the last send counts: cut at the threshold, truncated (no last-chunk), zombie counted.
    let (bytes, closed, took) = cut;
    assert!(
        closed.is_some(),
        "the strict edge did not close the response"
    );
    assert_within(
        "zombie cut",
        took,
        Duration::from_millis(1900),
        Duration::from_millis(3200),
    );
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(
        text.contains("chunk0") && !text.contains("chunk9"),
        "{text}"
    );
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a cut stream must not end with a last-chunk: {text}"
    );
    assert_eq!(
        strict.wait_metric("edge_upstream_timeouts_total", &["phase=\"zombie\""], 1.0),
        1.0
    );
    assert_eq!(strict.metric("edge_responses_truncated_total", &[]), 1.0);
    assert!(strict.wait_log("upstream.zombie", 2 * SEC).is_some());
    counting.assert_upstream_settled();
    strict.assert_upstream_settled();
});

both_drivers!(slow_client_download_is_not_blamed_on_the_upstream, |d| {
    // threshold 1 s counting sends only; the download takes ~3 s because the client reads slowly. Time
    // edge spends blocked writing to the client pauses the upstream clock, so no zombie verdict. (Without
    // the pause this fails on io_uring; on epoll a read that is ready completes before its deadline is
    // looked at, and here the upstream is always ready.)
    const SIZE: usize = 4 << 20;
    let origin = Origin::start(|_| Reply::ok(&vec![b'd'; SIZE]));
    let cfg = Cfg::new(d, origin.addr)
        .upstream_field("request_timeout", "1s")
        .upstream_field("max_inactive", "1s")
        .upstream_field("max_inactive_cap", "1s")
        .upstream_field("zombie_counts_received", false);
    let edge = Edge::start(&cfg);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(32 << 10).unwrap();
    sock.connect(&edge.addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(10 * SEC)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let mut b = vec![0u8; 32 << 10];
    while got.len() < SIZE + 38 {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
        thread::sleep(Duration::from_millis(25)); // ~1.3 MB/s: a slow reader, paced on purpose
    }
    let took = t.elapsed();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    assert!(got.starts_with(b"HTTP/1.1 200 OK"));
    assert_eq!(got.len() - head_end, SIZE, "body cut short after {took:?}");
    assert!(
        took > 2 * SEC,
        "the download was not slow ({took:?}): the test proves nothing"
    );
    assert_eq!(edge.metric("edge_upstream_timeouts_total", &[]), 0.0);
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
    edge.assert_upstream_settled();
});

both_drivers!(upstream_not_reading_the_body_hits_write_timeout, |d| {
    // The origin reads the head and then nothing: once socket buffers fill, edge's writes stall.
    let origin = Origin::script(|mut s, _| {
        let mut b = [0u8; 1024];
        let _ = s.read(&mut b);
        thread::sleep(Duration::from_secs(15));
    });
    let cfg = Cfg::new(d, origin.addr).upstream_field("write_timeout", "1s");
    let edge = Edge::start(&cfg);
    let mut c = Client::connect_timeout(edge.addr, 20 * SEC);
    const SIZE: usize = 48 << 20;
    c.send(format!("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {SIZE}\r\n\r\n").as_bytes());
    let mut w = c.s.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let chunk = vec![b'u'; 1 << 20];
        let mut sent = 0;
        while sent < SIZE && w.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        sent
    });
    let t = Instant::now();
    let r = c.read_response(false).expect("a response");
    let took = t.elapsed();
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert!(took < 10 * SEC, "504 after {took:?}");
    assert_eq!(
        edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"write\""], 1.0),
        1.0
    );
    assert!(edge
        .wait_log_all(&["upstream.timeout", "write"], 2 * SEC)
        .is_some());
    drop(c);
    let sent = sender.join().unwrap();
    assert!(
        sent < SIZE,
        "the whole body went through; the origin was reading"
    );
    edge.assert_upstream_settled();
});

both_drivers!(early_response_is_relayed_and_both_connections_close, |d| {
    // The origin reads the head only and refuses the upload at once, then waits to see whether edge
    // closes the connection (it must not pool a connection that is mid-request).
    let edge_closed = Arc::new(Mutex::new(Vec::new()));
    let seen = edge_closed.clone();
    let origin = Origin::script(move |mut s, id| {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        if buf[..n].starts_with(b"GET") {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        } else {
            let _ = s.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied");
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let closed = loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break true,
                Ok(_) => {}
            }
        };
        seen.lock().unwrap().push((id, closed));
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect_timeout(edge.addr, 5 * SEC);
    // Head and 10 of 100 body bytes: edge forwards them and waits for the rest from the client.
    c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789");
    let r = c.read_response(false).expect("the upstream's early answer");
    assert_eq!(r.status, 403);
    assert_eq!(r.body, b"denied");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        c.time_until_closed(3 * SEC).is_some(),
        "client connection not closed"
    );
    assert!(
        wait_for(&edge_closed, 1),
        "edge kept the upstream connection that answered early"
    );
    // Nothing counted as an upstream failure; the next request gets a fresh upstream connection.
    assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
    assert_eq!(edge.metric("edge_requests_total", &["status=\"403\""]), 1.0);
    let mut c2 = Client::connect(edge.addr);
    assert_eq!(c2.get("/after").body, b"ok");
    assert_eq!(origin.accepted(), 2);
    edge.assert_upstream_settled();
});

/// Waits (5 s max) until `v` holds `n` entries.
fn wait_for<T>(v: &Mutex<Vec<T>>, n: usize) -> bool {
    crate::harness::wait_until(5 * SEC, || v.lock().unwrap().len() >= n)
}

both_drivers!(
    pooled_connection_closed_on_reuse_retries_get_not_post,
    |d| {
        // Every origin connection answers its first request, then reads the next one whole and closes without
        // answering: the close races the reuse, and the pre-reuse check cannot see it coming.
        let bodies = Arc::new(Mutex::new(Vec::<(String, Vec<u8>)>::new()));
        let seen = bodies.clone();
        let origin = Origin::script(move |mut s, _| {
            let mut buf = Vec::new();
            let Some((first, used)) = read_request(&mut s, &mut buf) else {
                return;
            };
            buf.drain(..used);
            seen.lock()
                .unwrap()
                .push((first.target.clone(), first.body.clone()));
            let body = format!("first {}", first.target);
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
            if let Some((second, _)) = read_request(&mut s, &mut buf) {
                seen.lock().unwrap().push((second.target, second.body));
            }
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        assert_eq!(c.get("/a").text(), "first /a");
        // Reuses the pooled connection, which closes: retried once on a fresh connection.
        let r = c.get("/b");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "first /b");
        assert_eq!(edge.metric("edge_upstream_retries_total", &[]), 1.0);
        // A POST on the next pooled connection: not retried, 502, and the origin got its body once.
        c.send(b"POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 502, "{}", r.text());
        assert_eq!(edge.metric("edge_upstream_retries_total", &[]), 1.0);
        assert_eq!(
            edge.wait_metric(
                "edge_upstream_errors_total",
                &["kind=\"closed_early\""],
                1.0
            ),
            1.0
        );
        let posts: Vec<_> = bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == "/c")
            .map(|(_, b)| b.clone())
            .collect();
        assert_eq!(
            posts,
            vec![b"hello".to_vec()],
            "the POST body reached the origin once"
        );
        assert_eq!(origin.accepted(), 2);
        edge.assert_upstream_settled();
    }
);

both_drivers!(
    a_connection_closed_after_its_response_is_probed_for_a_post_and_retried_for_a_get,
    |d| {
        // Every origin connection answers one request with a keep-alive response, then closes (no
        // `Connection: close`): each pooled connection is closed a moment after its check-in, before
        // the watch is armed. A POST is not retry-safe, so its checkout probes the connection, finds
        // the close and connects anew (no retry); a GET right after its check-in may skip the probe
        // (`Reuse::RetrySafe`) and is then retried on a fresh connection. Either way the client gets
        // its answer. Each step waits until edge's end of the closed connection has the origin's FIN
        // (CLOSE_WAIT): under load the loopback may deliver it after the origin's `close` returns,
        // and a POST that overtakes it is the stale-connection race no probe can see.
        let closed = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
        let closes = closed.clone();
        let edge_ends = Arc::new(Mutex::new(Vec::new()));
        let ends = edge_ends.clone();
        let origin = Origin::script(move |mut s, _| {
            ends.lock()
                .unwrap()
                .push((s.peer_addr().unwrap(), s.local_addr().unwrap()));
            let mut buf = Vec::new();
            if let Some((req, _)) = read_request(&mut s, &mut buf) {
                let body = format!("{} {}", req.method, req.target);
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
            drop(s);
            *closes.0.lock().unwrap() += 1;
            closes.1.notify_all();
        });
        let wait_closed = |n: usize| {
            let (lock, cv) = &*closed;
            let g = lock.lock().unwrap();
            let (g, _) = cv.wait_timeout_while(g, 5 * SEC, |c| *c < n).unwrap();
            assert!(*g >= n, "the origin closed {} connections, not {n}", *g);
            drop(g);
            let (edge_end, origin_end) = edge_ends.lock().unwrap()[n - 1];
            wait_for_fin(edge_end, origin_end);
        };
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        assert_eq!(c.get("/a").text(), "GET /a");
        wait_closed(1);
        c.send(b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
        let r = c.read_response(false).unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "POST /b"));
        assert_eq!(
            edge.metric("edge_upstream_retries_total", &[]),
            0.0,
            "the POST was sent on the closed connection"
        );
        assert_eq!(origin.accepted(), 2);
        wait_closed(2);
        let r = c.get("/c");
        assert_eq!((r.status, r.text().as_str()), (200, "GET /c"));
        assert!(edge.metric("edge_upstream_retries_total", &[]) <= 1.0);
        edge.assert_upstream_settled();
    }
);

/// Waits (up to 5 s) until the local TCP socket `local` connected to `remote` has left ESTABLISHED:
/// its peer's FIN has arrived (CLOSE_WAIT) or it is closed already (read from /proc/net/tcp; IPv4
/// only). The whole 4-tuple is matched: the same local port may also name a TIME_WAIT connection to
/// another destination, from another test.
fn wait_for_fin(local: std::net::SocketAddr, remote: std::net::SocketAddr) {
    let hex = |addr: std::net::SocketAddr| {
        let std::net::SocketAddr::V4(v4) = addr else {
            panic!("{addr}: IPv4 only")
        };
        format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        )
    };
    let (l, r) = (hex(local), hex(remote));
    let until = Instant::now() + 5 * SEC;
    loop {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let state = table.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() > 3 && f[1] == l && f[2] == r).then(|| f[3].to_string())
        });
        // Anything but 01 (ESTABLISHED) will do: 08 = CLOSE_WAIT, and gone or a closing state means
        // edge has already closed it.
        if state.as_deref() != Some("01") {
            return;
        }
        assert!(
            Instant::now() < until,
            "{local} -> {remote} still in TCP state {state:?} 5 s after its peer closed"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

both_drivers!(slow_responses_complete_and_release_their_connection, |d| {
    // 3 s responses, four at once: each completes, health stays fast, and the connections are pooled
    // afterwards (active back to 0).
    let origin = Origin::start(|_| Reply::ok(b"slow").delayed(3 * SEC));
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let started = Instant::now();
    let statuses: Vec<u16> = thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| timed_get(&edge, "/slow").0))
            .collect();
        // Health is answered while all four wait on the origin.
        assert!(edge.wait_metric("edge_upstream_connections", &["state=\"active\""], 4.0) == 4.0);
        let t = Instant::now();
        let mut h = Client::connect(edge.addr);
        assert_eq!(h.get("/_health").status, 200);
        assert!(t.elapsed() < SEC / 2, "health took {:?}", t.elapsed());
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses, vec![200; 4]);
    assert!(
        started.elapsed() < 6 * SEC,
        "the slow requests were serialised"
    );
    assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
    assert_eq!(edge.metric("edge_upstream_timeouts_total", &[]), 0.0);
    edge.assert_upstream_settled();
    assert_eq!(
        edge.wait_metric("edge_upstream_connections", &["state=\"idle\""], 4.0),
        4.0
    );
});

both_drivers!(keep_alive_timeout_caps_the_pooled_lifetime, |d| {
    // The origin announces `Keep-Alive: timeout=2` (and in fact keeps connections open for 10 s): edge
    // keeps the connection pooled for 2 - 1 = 1 s, not pool_idle_timeout (4 s), then closes it.
    let origin = Origin::start(|_| {
        Reply::raw(
            b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=2\r\nContent-Length: 2\r\n\r\nok",
            false,
        )
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/1").body, b"ok");
    assert_eq!(c.get("/2").body, b"ok");
    assert_eq!(
        origin.accepted(),
        1,
        "a pooled connection is reused within its lifetime"
    );
    let t = Instant::now();
    assert_eq!(
        edge.wait_metric("edge_upstream_connections", &["state=\"idle\""], 1.0),
        1.0
    );
    assert_eq!(
        edge.wait_metric("edge_upstream_connections", &["state=\"idle\""], 0.0),
        0.0
    );
    assert_within("pooled lifetime", t.elapsed(), SEC / 2, 2 * SEC);
    assert!(
        origin.wait_until(2 * SEC, |o| o.closed() == 1),
        "edge did not close it"
    );
    assert_eq!(c.get("/3").body, b"ok");
    assert_eq!(origin.accepted(), 2);
});

both_drivers!(connect_timeout_retries_on_the_next_endpoint, |d| {
    // First endpoint: a full backlog, so the connect hangs; second: a live origin. Any method is retried
    // (nothing was sent), here a POST, once, on the next endpoint.
    let hanging = crate::harness::HangingListener::new();
    let origin = Origin::echo();
    let cfg = Cfg::new(d, origin.addr).endpoints(&[hanging.addr, origin.addr]);
    let edge = Edge::start(&cfg);
    let mut c = Client::connect_timeout(edge.addr, 10 * SEC);
    let t = Instant::now();
    c.send(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nbody");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"body");
    // Worker 0 starts round-robin at the first endpoint: the hanging one, for connect_timeout.
    assert_within("retried request", t.elapsed(), SEC / 2, 3 * SEC);
    assert_eq!(edge.metric("edge_upstream_retries_total", &[]), 1.0);
    // The timeout was answered by the retry, not with a 504: it counts as a retry only.
    assert_eq!(edge.metric("edge_upstream_timeouts_total", &[]), 0.0);
    assert_eq!(origin.seen_count(), 1);
    edge.assert_upstream_settled();
});

both_drivers!(ejected_endpoint_returns_after_its_backoff, |d| {
    // The first endpoint refuses until it comes back; after 5 consecutive failures it is ejected for
    // 1 s, then tried again, connects, and is logged as returned.
    let dead_addr = refused_addr();
    let origin = Origin::fixed(b"alive");
    let cfg = Cfg::new(d, origin.addr).endpoints(&[dead_addr, origin.addr]);
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    for _ in 0..10 {
        assert_eq!(c.get("/").body, b"alive");
    }
    assert!(edge.wait_log("upstream.ejected", 2 * SEC).is_some());
    assert_eq!(
        edge.metric("edge_upstream_retries_total", &[]),
        5.0,
        "ejected after 5 failures"
    );
    let ejected_at = Instant::now();
    // The endpoint comes back on the same port, answering "back".
    let back = std::net::TcpListener::bind(dead_addr).expect("rebind the freed port");
    let served = Arc::new(Mutex::new(Vec::new()));
    let log = served.clone();
    thread::spawn(move || {
        for s in back.incoming() {
            let Ok(mut s) = s else { continue };
            let log = log.clone();
            thread::spawn(move || {
                let mut buf = Vec::new();
                while let Some((req, used)) = read_request(&mut s, &mut buf) {
                    buf.drain(..used);
                    log.lock().unwrap().push(req.target);
                    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nback")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    let mut bodies = Vec::new();
    assert!(
        crate::harness::wait_until(5 * SEC, || {
            bodies.push(c.get("/").text());
            edge.count_log("upstream.returned") == 1
        }),
        "the endpoint was not tried again"
    );
    assert!(
        ejected_at.elapsed() >= Duration::from_millis(900),
        "returned before its backoff"
    );
    assert!(bodies.iter().any(|b| b == "back"), "{bodies:?}");
    assert!(!served.lock().unwrap().is_empty());
    assert_eq!(
        edge.metric("edge_upstream_errors_total", &["kind=\"ejected\""]),
        1.0
    );
});

both_drivers!(
    connections_above_pool_max_idle_serve_the_next_burst_then_close,
    |d| {
        // pool_max_idle = 2 and bursts of 6 requests in flight at once (the origin holds each 300 ms). The
        // cap is applied by the pool sweep (every 500 ms) to connections idle through a whole period, not
        // at check-in, so the second burst reuses the first one's 6 connections, and 4 close afterwards.
        let origin = Origin::start(|_| Reply::ok(b"burst").delayed(Duration::from_millis(300)));
        let cfg = Cfg::new(d, origin.addr).upstream_field("pool_max_idle", 2);
        let edge = Edge::start(&cfg);
        let burst = |n: f64| {
            thread::scope(|s| {
                let handles: Vec<_> = (0..6).map(|_| s.spawn(|| timed_get(&edge, "/"))).collect();
                for h in handles {
                    assert_eq!(h.join().unwrap().0, 200);
                }
            });
            // Counted after the exchange checked its connection in.
            assert_eq!(
                edge.wait_metric("edge_requests_total", &["status=\"200\""], n),
                n
            );
        };
        burst(6.0);
        assert_eq!(origin.accepted(), 6);
        burst(12.0);
        assert_eq!(
            origin.accepted(),
            6,
            "the second burst opened connections: the first burst's were closed at check-in"
        );
        assert!(
            origin.wait_until(3 * SEC, |o| o.closed() == 4),
            "surplus idle connections not closed: {} closed",
            origin.closed()
        );
        assert_eq!(
            edge.wait_metric("edge_upstream_connections", &["state=\"idle\""], 2.0),
            2.0
        );
        // The two kept serve the third burst with four new ones.
        burst(18.0);
        assert_eq!(origin.accepted(), 10);
    }
);

both_drivers!(requests_in_flight_are_published_while_they_wait, |d| {
    // Three requests held 2 s by the origin: the worker's heartbeat (every 250 ms) publishes 3 in flight,
    // then 0 once they are answered.
    let origin = Origin::start(|_| Reply::ok(b"held").delayed(2 * SEC));
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| timed_get(&edge, "/"))).collect();
        assert_eq!(edge.wait_metric("edge_requests_in_flight", &[], 3.0), 3.0);
        for h in handles {
            assert_eq!(h.join().unwrap().0, 200);
        }
    });
    assert_eq!(edge.wait_metric("edge_requests_in_flight", &[], 0.0), 0.0);
});
