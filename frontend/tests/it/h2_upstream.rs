//! HTTP/2 upstreams (DESIGN.md "HTTP/2 and gRPC upstreams") against a real `h2` server
//! ([`H2Origin`], h2c with prior knowledge): HTTP/1.1 and HTTP/2 clients forwarded as streams,
//! bodies byte-exact both ways, trailers, multiplexing on one connection, REFUSED_STREAM and GOAWAY
//! retried for any method, and the PING liveness that tells a zombie connection from a slow answer.

use std::{sync::atomic::Ordering, time::Duration};

use crate::harness::{
    block_on, h2_connect, h2_request, settle, Cfg, Client, Driver, Edge, H2Origin,
};

/// An edge (one worker, h2c on its listener) whose upstream is `origin` over h2c; `set` adds upstream
/// fields.
fn edge_to(d: Driver, origin: &H2Origin, set: &[(&str, &str)]) -> Edge {
    let mut cfg = Cfg::new(d, origin.addr)
        .workers(1)
        .server("h2c", true)
        .upstream_field("protocol", "h2");
    for (k, v) in set {
        cfg = cfg.upstream_field(k, *v);
    }
    Edge::start(&cfg)
}

both_drivers!(http11_client_is_forwarded_as_an_h2_stream, |d| {
    let origin = H2Origin::start();
    let edge = edge_to(d, &origin, &[]);
    let mut c = Client::connect(edge.addr);
    let r = c.get("/plain?x=1");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"h2 origin\n");
    let body: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: svc.test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.send(head.as_bytes());
    c.send(&body);
    let r = c.read_response(false).expect("echo response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), body.len());
    assert!(r.body == body, "1 MiB echoed byte-exact");
    let seen = origin.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (
            seen[0].method.as_str(),
            seen[0].scheme.as_str(),
            seen[0].path.as_str()
        ),
        ("GET", "http", "/plain?x=1")
    );
    assert_eq!(seen[1].authority, "svc.test", "Host becomes :authority");
    assert!(seen[1].header("host").is_none() && seen[1].header("connection").is_none());
    assert!(seen[1].header("x-forwarded-for").is_some());
    assert_eq!(seen[1].body, body);
    assert_eq!(
        origin.state.connections.load(Ordering::SeqCst),
        1,
        "one connection, reused"
    );
});

both_drivers!(
    chunked_upload_becomes_data_and_trailers_reach_an_http11_client,
    |d| {
        let origin = H2Origin::start();
        let edge = edge_to(d, &origin, &[]);
        let mut c = Client::connect(edge.addr);
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nTE: trailers\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nx-client-sum: 11\r\n\r\n");
        let (raw, closed) = c.read_until_closed(Duration::from_secs(5));
        assert!(
            closed.is_some(),
            "the response ends and the connection closes"
        );
        let raw = String::from_utf8_lossy(&raw).into_owned();
        assert!(raw.starts_with("HTTP/1.1 200 "), "{raw}");
        assert!(
            raw.contains("transfer-encoding: chunked\r\n")
                || raw.contains("Transfer-Encoding: chunked\r\n"),
            "{raw}"
        );
        // The client's trailer section went up as trailing HEADERS; the origin's came back in the
        // last chunk (it echoes the request's trailers after its own).
        assert!(
            raw.ends_with("0\r\nx-echo: done\r\nx-client-sum: 11\r\n\r\n"),
            "trailers in the last chunk: {raw:?}"
        );
        assert_eq!(origin.seen()[0].body, b"hello world");
        let sum = [("x-client-sum".to_string(), "11".to_string())];
        assert_eq!(origin.seen()[0].trailers, sum);
    }
);

both_drivers!(
    h2_client_streams_multiplex_on_one_upstream_connection,
    |d| {
        let origin = H2Origin::start();
        let edge = edge_to(d, &origin, &[]);
        let authority = edge.addr.to_string();
        let statuses = block_on(async {
            let send = h2_connect(edge.addr).await;
            let mut tasks = Vec::new();
            for _ in 0..100 {
                let send = send.clone();
                let a = authority.clone();
                tasks.push(monoio::spawn(async move {
                    h2_request(&send, "GET", "/slow/300", &a, &[], b"").await
                }));
            }
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.map(|r| r.status));
            }
            out
        });
        assert!(statuses.iter().all(|s| *s == Ok(200)), "{statuses:?}");
        let conns = origin.state.connections.load(Ordering::SeqCst);
        assert_eq!(
            conns, 1,
            "100 streams on one upstream connection (max_streams 100)"
        );
        assert!(origin.state.max_active.load(Ordering::SeqCst) > 50);
        // The worker's sweep reports the connection, idle again, under protocol="h2".
        let idle = ["state=\"idle\"", "protocol=\"h2\""];
        assert_eq!(
            edge.wait_metric("edge_upstream_connections", &idle, 1.0),
            1.0
        );
        assert_eq!(
            edge.wait_metric("edge_upstream_h2_streams_active", &[], 0.0),
            0.0
        );
    }
);

both_drivers!(refused_streams_are_retried_whatever_the_method, |d| {
    let origin = H2Origin::start();
    origin.state.refuse_first.store(2, Ordering::SeqCst);
    let edge = edge_to(d, &origin, &[]);
    let mut c = Client::connect(edge.addr);
    c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc");
    let r = c.read_response(false).expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"abc");
    assert_eq!(origin.state.refused.load(Ordering::SeqCst), 2);
    assert_eq!(origin.seen().len(), 1, "processed once");
    edge.wait_metric(
        "edge_upstream_errors_total",
        &["kind=\"refused_stream\""],
        2.0,
    );
});

both_drivers!(graceful_goaway_mid_load_fails_no_request, |d| {
    let origin = H2Origin::start();
    origin.state.goaway_after.store(5, Ordering::SeqCst);
    let edge = edge_to(d, &origin, &[]);
    let authority = edge.addr.to_string();
    let results = block_on(async {
        let send = h2_connect(edge.addr).await;
        let mut out = Vec::new();
        for round in 0..6 {
            let mut tasks = Vec::new();
            for i in 0..8 {
                let send = send.clone();
                let a = authority.clone();
                let body = format!("r{round}-{i}").into_bytes();
                tasks.push(monoio::spawn(async move {
                    h2_request(&send, "POST", "/echo", &a, &[], &body)
                        .await
                        .map(|r| (r.status, r.body == body))
                }));
            }
            for t in tasks {
                out.push(t.await);
            }
        }
        out
    });
    assert!(results.iter().all(|r| *r == Ok((200, true))), "{results:?}");
    assert!(
        origin.state.connections.load(Ordering::SeqCst) > 1,
        "GOAWAY moved streams to new connections"
    );
});

both_drivers!(
    a_silent_connection_is_a_zombie_and_a_slow_live_one_is_not,
    |d| {
        let origin = H2Origin::start();
        let set = [
            ("max_inactive", "1s"),
            ("max_inactive_cap", "2s"),
            ("request_timeout", "10s"),
        ];
        let edge = edge_to(d, &origin, &set);
        let mut c = Client::connect(edge.addr);
        // A slow answer on a live connection: PINGs are answered, no zombie verdict.
        let started = std::time::Instant::now();
        let r = c.get("/slow/3500");
        assert_eq!(r.status, 200, "slow but alive");
        assert!(started.elapsed() >= Duration::from_millis(3400));
        // Silent for max_inactive with a stream in flight: a PING, answered.
        let answered = edge.wait_metric_where(
            "edge_upstream_h2_pings_total",
            &["result=\"answered\""],
            Duration::from_secs(5),
            |v| v >= 1.0,
        );
        assert!(answered >= 1.0);
        // A connection that answers nothing at all, PING ACK included.
        let mut c = Client::connect(edge.addr);
        let started = std::time::Instant::now();
        let r = c.get("/freeze");
        assert_eq!(r.status, 504);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
            "{took:?}"
        );
        edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"zombie\""], 1.0);
        let unanswered = ["result=\"unanswered\""];
        assert_eq!(
            edge.wait_metric("edge_upstream_h2_pings_total", &unanswered, 1.0),
            1.0
        );
    }
);

/// A TLS origin speaking only HTTP/1.1 (ALPN http/1.1), its CA file and the temp dir holding it.
fn http11_tls_origin() -> (
    crate::harness::TlsOrigin,
    std::path::PathBuf,
    crate::harness::TempDir,
) {
    let dir = crate::harness::TempDir::new();
    let ca = crate::harness::Ca::new("origin CA");
    let leaf = ca.leaf("origin", &["localhost", "127.0.0.1"]);
    let ca_file = ca.write(&dir, "origin-ca");
    let answer = |req: &crate::harness::Seen| {
        crate::harness::Reply::ok(format!("http1:{}", req.target).as_bytes())
    };
    (
        crate::harness::TlsOrigin::start(&leaf, None, answer),
        ca_file,
        dir,
    )
}

both_drivers!(auto_speaks_what_the_tls_server_chooses, |d| {
    // A server that chooses http/1.1 in ALPN: HTTP/1.1, pooled as usual.
    let (origin, ca_file, _dir) = http11_tls_origin();
    let cfg = Cfg::new(d, origin.addr)
        .upstream_field("protocol", "auto")
        .upstream_field("tls", true)
        .upstream_field("tls_ca", ca_file.display().to_string())
        .upstream_field("tls_server_name", "localhost");
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    for path in ["/a", "/b"] {
        let r = c.get(path);
        assert_eq!((r.status, r.text()), (200, format!("http1:{path}")));
    }
    assert_eq!(
        origin.accepted(),
        1,
        "the HTTP/1.1 connection was pooled and reused"
    );
    // The same server with protocol = "h2": it does not choose h2, a TLS failure (502 kind="tls").
    let h2_only = cfg.upstream_field("protocol", "h2");
    edge.rewrite_config(&h2_only);
    edge.signal(1); // SIGHUP
    edge.wait_log("config.reloaded", Duration::from_secs(10))
        .expect("reloaded");
    let r = Client::connect(edge.addr).get("/c");
    assert_eq!(r.status, 502);
    assert!(edge
        .wait_log("upstream.tls_failed", Duration::from_secs(5))
        .is_some());
    edge.wait_metric("edge_upstream_errors_total", &["kind=\"tls\""], 1.0);
});

both_drivers!(auto_on_a_plain_connection_is_http11, |d| {
    let origin = crate::harness::Origin::fixed(b"plain http1");
    let cfg = Cfg::new(d, origin.addr).upstream_field("protocol", "auto");
    let edge = Edge::start(&cfg);
    let r = Client::connect(edge.addr).get("/x");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"plain http1"[..]));
    assert_eq!(origin.last().minor, 1);
});

both_drivers!(a_client_that_goes_away_resets_the_upstream_stream, |d| {
    let origin = H2Origin::start();
    let edge = edge_to(d, &origin, &[]);
    // An HTTP/1.1 client that closes its connection while the upstream has not answered.
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n");
    crate::harness::wait_until(Duration::from_secs(5), || origin.seen().len() == 1);
    drop(c);
    crate::harness::wait_until(Duration::from_secs(5), || {
        origin.state.resets.load(Ordering::SeqCst) == 1
    });
    assert_eq!(
        origin.state.resets.load(Ordering::SeqCst),
        1,
        "RST_STREAM reached the origin"
    );
    // An HTTP/2 client that resets its stream.
    let authority = edge.addr.to_string();
    block_on(async {
        let send = h2_connect(edge.addr).await;
        let mut send = send.ready().await.unwrap();
        let req = http::Request::get(format!("http://{authority}/hold"))
            .body(())
            .unwrap();
        let (_resp, mut stream) = send.send_request(req, true).unwrap();
        settle(Duration::from_secs(5), "the origin saw two streams", || {
            origin.seen().len() >= 2
        })
        .await;
        stream.send_reset(h2::Reason::CANCEL);
        settle(Duration::from_secs(5), "the origin saw two resets", || {
            origin.state.resets.load(Ordering::SeqCst) >= 2
        })
        .await;
    });
    assert_eq!(
        origin.state.resets.load(Ordering::SeqCst),
        2,
        "the client's reset reached the origin"
    );
});

both_drivers!(websocket_reaches_an_h2_upstream_as_extended_connect, |d| {
    let origin = H2Origin::start();
    let edge = edge_to(d, &origin, &[]);
    // An HTTP/1.1 client's Upgrade: the upstream's 200 reads as the 101 of the client's own key.
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /ws HTTP/1.1\r\nHost: chat.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    let r = c.read_any_head().expect("the switch");
    assert_eq!(r.status, 101);
    assert_eq!(
        r.header("sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "RFC 6455's sample key"
    );
    assert_eq!(r.header("sec-websocket-protocol"), Some("chat"));
    let frame = b"\x81\x05hello";
    c.send(frame);
    let mut got = c.take_buffered();
    while got.len() < frame.len() {
        let (more, _) = c.read_until_closed(Duration::from_millis(200));
        if more.is_empty() {
            break;
        }
        got.extend_from_slice(&more);
    }
    assert_eq!(got, frame, "echoed through the upstream's stream");
    let seen = &origin.seen()[0];
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("CONNECT", "/ws")
    );
    assert_eq!(seen.authority, "chat.test");
    assert!(seen.header("sec-websocket-key").is_none() && seen.header("upgrade").is_none());
    assert_eq!(seen.header("sec-websocket-version"), Some("13"));
    drop(c);
    // An HTTP/2 client's extended CONNECT, stream to stream.
    let authority = edge.addr.to_string();
    let echoed = block_on(async {
        let send = h2_connect(edge.addr).await;
        let mut t = crate::harness::h2_websocket(&send, "/ws2", &authority, &[])
            .await
            .expect("extended CONNECT");
        assert_eq!(t.status, 200);
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        crate::harness::send_all(&mut t.send, &payload, true)
            .await
            .unwrap();
        let got = crate::harness::read_to_end(&mut t.recv).await.unwrap();
        got == payload
    });
    assert!(echoed, "100 kB echoed byte-exact, END_STREAM both ways");
});

both_drivers!(an_h2_clients_trailers_reach_an_h2_upstream_and_back, |d| {
    let origin = H2Origin::start();
    let edge = edge_to(d, &origin, &[]);
    let authority = edge.addr.to_string();
    let (body, trailers) = block_on(async {
        let send = h2_connect(edge.addr).await;
        let mut send = send.ready().await.unwrap();
        let req = http::Request::post(format!("http://{authority}/echo"))
            .body(())
            .unwrap();
        let (resp, mut stream) = send.send_request(req, false).unwrap();
        stream
            .send_data(bytes::Bytes::from_static(b"payload"), false)
            .unwrap();
        let mut t = http::HeaderMap::new();
        t.insert("x-checksum", "abc".parse().unwrap());
        stream.send_trailers(t).unwrap();
        let mut recv = resp.await.unwrap().into_body();
        let body = crate::harness::read_to_end(&mut recv).await.unwrap();
        let trailers = recv.trailers().await.unwrap().unwrap_or_default();
        (body, trailers)
    });
    assert_eq!(body, b"payload");
    assert_eq!(trailers.get("x-checksum").unwrap(), "abc", "{trailers:?}");
    assert_eq!(trailers.get("x-echo").unwrap(), "done");
    let seen = &origin.seen()[0];
    assert_eq!(seen.body, b"payload");
    let sent = [("x-checksum".to_string(), "abc".to_string())];
    assert_eq!(seen.trailers, sent);
});

both_drivers!(
    a_client_that_stops_reading_pauses_its_upstream_stream,
    |d| {
        let origin = H2Origin::start();
        let edge = edge_to(d, &origin, &[]);
        // 64 MiB asked for, nothing read: the upstream stream may send its window and what the sockets
        // and edge's relay hold, never the body.
        let mut c = Client::connect(edge.addr);
        c.send(b"GET /big/67108864 HTTP/1.1\r\nHost: a\r\n\r\n");
        let sent = || origin.state.big_sent.load(Ordering::SeqCst);
        // Wait until the transfer stalls: no progress for half a second.
        let mut last = 0;
        let stalled = crate::harness::wait_until(Duration::from_secs(10), || {
            std::thread::sleep(Duration::from_millis(500));
            let now = sent();
            let stalled = now > 0 && now == last;
            last = now;
            stalled
        });
        assert!(stalled, "the upstream stream paused at {} bytes", sent());
        assert!(sent() < 16 << 20, "paused after {} bytes of 64 MiB", sent());
        // Reading again lets it go on to the end.
        c.set_timeout(Duration::from_secs(30));
        let r = c.read_response(false).expect("the whole body");
        assert_eq!(r.body.len(), 64 << 20);
        assert_eq!(sent(), 64 << 20);
    }
);

both_drivers!(
    an_upstream_reset_after_the_head_cuts_the_response_short,
    |d| {
        let origin = H2Origin::start();
        let edge = edge_to(d, &origin, &[]);
        // HTTP/1.1: the chunked response ends without its last chunk, and the connection closes.
        let mut c = Client::connect(edge.addr);
        c.send(b"GET /reset HTTP/1.1\r\nHost: a\r\n\r\n");
        let (raw, closed) = c.read_until_closed(Duration::from_secs(5));
        assert!(closed.is_some(), "closed after the cut");
        let raw = String::from_utf8_lossy(&raw).into_owned();
        assert!(raw.starts_with("HTTP/1.1 200 "), "{raw:.80}");
        assert!(!raw.ends_with("0\r\n\r\n"), "no last chunk");
        // HTTP/2: the client's stream is reset.
        let authority = edge.addr.to_string();
        let r = block_on(async {
            let send = h2_connect(edge.addr).await;
            h2_request(&send, "GET", "/reset", &authority, &[], b"").await
        });
        assert!(
            r.is_err(),
            "the stream was reset: {:?}",
            r.map(|r| r.status)
        );
        edge.wait_metric("edge_responses_truncated_total", &[], 2.0);
    }
);

both_drivers!(
    curl_and_an_h2_client_move_1_mib_both_ways_through_an_h2_upstream,
    |d| {
        let origin = H2Origin::start();
        let edge = edge_to(d, &origin, &[]);
        let body: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 13 % 251) as u8).collect();
        let authority = edge.addr.to_string();
        let r = block_on(async {
            let send = h2_connect(edge.addr).await;
            h2_request(&send, "POST", "/echo", &authority, &[], &body).await
        })
        .expect("echo over h2");
        assert_eq!(r.status, 200);
        assert!(r.body == body, "1 MiB echoed byte-exact, stream to stream");
        if crate::h2::have_curl_h2() {
            let out = std::process::Command::new("curl")
                .args(["-sS", "--max-time", "10", "--http2-prior-knowledge"])
                .arg(format!("http://{authority}/big/1048576"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let want: Vec<u8> = (0..1 << 20).map(|i: usize| (i % 251) as u8).collect();
            assert!(out.stdout == want, "curl --http2 got 1 MiB byte-exact");
        }
    }
);
