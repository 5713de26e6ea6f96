//! HTTP/2 from clients (DESIGN.md "HTTP/2"): curl `--http2` over TLS (ALPN h2) and
//! `--http2-prior-knowledge` on the plain listener with `server.h2c`; the harness's h2 client for
//! byte-exact bodies both ways, health over h2, 100 concurrent streams on one connection, a slow
//! upstream on one stream not delaying the others, `:authority` against Host, GOAWAY after
//! `max_requests_per_connection` and on drain with open streams finishing, a stream whose client stops
//! reading pausing alone until its `send` deadline resets it. Every request reaches the
//! origin as HTTP/1.1.

use std::{process::Command, time::Duration};

use crate::harness::{
    block_on, check_config, h2_connect, h2_request, settle, Cfg, Driver, Edge, Origin, Reply, Site,
    TempDir,
};

/// Whether curl runs here and speaks HTTP/2; prints why a test is skipped when not.
pub(crate) fn have_curl_h2() -> bool {
    let ok = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("HTTP2"));
    if !ok {
        // Straight to stderr: `eprintln!` is captured by the test harness and shown only on failure.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIP: curl with HTTP/2 is not installed\n",
        );
    }
    ok
}

/// Runs curl with `args`; returns its stdout, panicking with stderr when it fails.
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// curl `--http2` to `https://localhost:{port}{path}` (resolved to 127.0.0.1, trusting `site`'s CA) with
/// `args` before the URL, and `-w` printing the status and the HTTP version after the body.
pub(crate) fn curl_h2_tls(site: &Site, port: u16, args: &[&str], path: &str) -> String {
    let ca = site.ca_file.to_string_lossy().into_owned();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}{path}");
    let mut all = vec!["--http2", "--cacert", &ca, "--resolve", &resolve];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-w", "\n%{http_code} %{http_version}", &url]);
    curl(&all)
}

/// An edge serving h2c (prior knowledge) on its plain listener.
fn h2c(d: Driver, origin: &Origin) -> Edge {
    Edge::start(&Cfg::new(d, origin.addr).server("h2c", true))
}

both_drivers!(curl_http2_over_tls_negotiates_h2_and_forwards_http11, |d| {
    if !have_curl_h2() {
        return;
    }
    let origin = Origin::echo();
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let port = edge.tls_addr().port();
    let args = [
        "-H",
        "cookie: a=1",
        "-H",
        "cookie: b=2",
        "--data-binary",
        "posted body",
    ];
    let out = curl_h2_tls(&site, port, &args, "/up?x=1");
    assert_eq!(out, "posted body\n200 2");
    let seen = origin.last();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/up?x=1")
    );
    assert_eq!(seen.minor, 1, "forwarded as HTTP/1.1");
    assert_eq!(
        seen.header("host"),
        Some(format!("localhost:{port}").as_str())
    );
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    assert_eq!(seen.header("cookie"), Some("a=1; b=2"), "cookies joined");
    assert_eq!(seen.body, b"posted body");
});

both_drivers!(
    curl_http2_prior_knowledge_on_the_plain_listener_with_h2c,
    |d| {
        if !have_curl_h2() {
            return;
        }
        let origin = Origin::fixed(b"over h2c");
        let edge = h2c(d, &origin);
        let url = format!("http://{}/c", edge.addr);
        let fmt = "\n%{http_code} %{http_version}";
        let out = curl(&["--http2-prior-knowledge", "-w", fmt, &url]);
        assert_eq!(out, "over h2c\n200 2");
        assert_eq!(origin.last().minor, 1);
        // The same listener still serves HTTP/1.1.
        let out = curl(&["--http1.1", "-w", fmt, &url]);
        assert_eq!(out, "over h2c\n200 1.1");
        let health = format!("http://{}/_health", edge.addr);
        let out = curl(&["--http2-prior-knowledge", "-w", fmt, &health]);
        assert_eq!(out, "ok\n200 2");
        assert_eq!(origin.seen_count(), 2, "health is answered locally");
    }
);

both_drivers!(without_h2c_the_preface_is_not_http2, |d| {
    if !have_curl_h2() {
        return;
    }
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--http2-prior-knowledge"])
        .arg(format!("http://{}/", edge.addr))
        .output()
        .unwrap();
    assert!(!out.status.success(), "h2c is off by default");
    assert_eq!(origin.seen_count(), 0);
});

both_drivers!(one_mib_bodies_are_byte_exact_both_ways, |d| {
    let origin = Origin::echo();
    let edge = h2c(d, &origin);
    let body: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    let authority = edge.addr.to_string();
    let r = block_on(async {
        let c = h2_connect(edge.addr).await;
        // No Content-Length: forwarded chunked; then with one: forwarded as is.
        let chunked = h2_request(&c, "POST", "/echo", &authority, &[], &body).await;
        let len = body.len().to_string();
        let sized = [("content-length", len.as_str())];
        let sized = h2_request(&c, "PUT", "/echo", &authority, &sized, &body).await;
        (chunked, sized)
    });
    for (r, method) in [(r.0, "POST"), (r.1, "PUT")] {
        let r = r.unwrap();
        assert_eq!(r.status, 200, "{method}");
        assert_eq!(r.headers.get("x-method").unwrap(), method);
        assert!(r.body == body, "{method}: response body differs");
    }
    let seen = origin.seen.lock().unwrap().clone();
    assert_eq!(seen[0].header("transfer-encoding"), Some("chunked"));
    assert_eq!(seen[1].header("content-length"), Some("1048576"));
    assert!(
        seen.iter().all(|s| s.body == body),
        "upstream bodies differ"
    );
});

both_drivers!(responses_carry_via_and_lose_hop_by_hop_fields, |d| {
    let origin = Origin::start(|_| {
        Reply::raw(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, x-private\r\n\
              Keep-Alive: timeout=5\r\nX-Private: drop me\r\nVia: 1.1 origin\r\nX-App: kept\r\n\r\nok",
            false,
        )
    });
    let edge = h2c(d, &origin);
    let authority = edge.addr.to_string();
    let r = block_on(async {
        let c = h2_connect(edge.addr).await;
        h2_request(&c, "GET", "/v", &authority, &[], b"").await
    })
    .unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"ok".as_slice()));
    assert_eq!(r.headers.get("x-app").unwrap(), "kept");
    // RFC 9110 §7.6.3: the upstream's Via kept, edge's appended.
    let via: Vec<_> = r.headers.get_all("via").iter().collect();
    assert_eq!(via, ["1.1 origin", "1.1 edge"]);
    for hop in ["connection", "keep-alive", "x-private"] {
        assert!(r.headers.get(hop).is_none(), "{hop} was forwarded");
    }
});

both_drivers!(
    hundred_concurrent_streams_on_one_connection_are_all_answered,
    |d| {
        let origin = Origin::start(|s| Reply::ok(s.target.as_bytes()));
        let edge = h2c(d, &origin);
        let authority = edge.addr.to_string();
        let answers = block_on(async {
            let c = h2_connect(edge.addr).await;
            let mut tasks = Vec::new();
            for i in 0..100 {
                let (c, authority) = (c.clone(), authority.clone());
                tasks.push(monoio::spawn(async move {
                    let path = format!("/s/{i}");
                    let r = h2_request(&c, "GET", &path, &authority, &[], b"").await;
                    (path, r)
                }));
            }
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await);
            }
            out
        });
        for (path, r) in answers {
            let r = r.unwrap();
            assert_eq!((r.status, r.body.as_slice()), (200, path.as_bytes()));
        }
        assert_eq!(origin.seen_count(), 100);
        assert_eq!(
            edge.metric("edge_connections_total", &[]),
            1.0,
            "one connection"
        );
    }
);

both_drivers!(slow_upstream_stream_does_not_delay_the_others, |d| {
    let origin = Origin::start(|s| {
        let r = Reply::ok(b"done");
        match s.target.as_str() {
            "/slow" => r.delayed(Duration::from_secs(3)),
            _ => r,
        }
    });
    let edge = h2c(d, &origin);
    let authority = edge.addr.to_string();
    let (slow, fast, health) = block_on(async {
        let c = h2_connect(edge.addr).await;
        let mut slow = Vec::new();
        for _ in 0..20 {
            let (c, a) = (c.clone(), authority.clone());
            slow.push(monoio::spawn(async move {
                let started = std::time::Instant::now();
                let r = h2_request(&c, "GET", "/slow", &a, &[], b"").await;
                (r, started.elapsed())
            }));
        }
        let started = std::time::Instant::now();
        let fast = h2_request(&c, "GET", "/fast", &authority, &[], b"").await;
        let health = h2_request(&c, "GET", "/_health", &authority, &[], b"").await;
        let quick = started.elapsed();
        let mut done = Vec::new();
        for t in slow {
            done.push(t.await);
        }
        (done, (fast, quick), health)
    });
    let (fast, quick) = fast;
    assert_eq!(fast.unwrap().body, b"done");
    assert_eq!(health.unwrap().body, b"ok");
    assert!(
        quick < Duration::from_secs(2),
        "fast streams took {quick:?}"
    );
    for (r, took) in slow {
        assert_eq!(r.unwrap().body, b"done");
        assert!(took >= Duration::from_secs(3), "{took:?}");
    }
});

both_drivers!(streams_get_access_and_slow_request_lines, |d| {
    // DESIGN.md `[log]`: one access line per request and `request.slow` past `slow_request`, for
    // HTTP/2 streams as for HTTP/1.1 requests; a stream edge answers itself (health, 404) too.
    let origin = Origin::start(|s| {
        let r = Reply::ok(b"done");
        match s.target.as_str() {
            "/late" => r.delayed(Duration::from_millis(1200)),
            _ => r,
        }
    });
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("h2c", true)
            .log("access", true)
            .log("slow_request", "1s"),
    );
    let authority = edge.addr.to_string();
    let statuses = block_on(async {
        let c = h2_connect(edge.addr).await;
        let mut statuses = Vec::new();
        for path in ["/fast?q=1", "/late", "/_health"] {
            let r = h2_request(&c, "GET", path, &authority, &[], b"").await;
            statuses.push(r.map(|r| r.status));
        }
        statuses
    });
    assert_eq!(statuses, [Ok(200), Ok(200), Ok(200)]);
    let sec = Duration::from_secs(2);
    for path in ["/fast", "/late", "/_health"] {
        let line = edge
            .wait_log_all(
                &["\"event\":\"access\"", &format!("\"path\":\"{path}\"")],
                sec,
            )
            .unwrap_or_else(|| panic!("no access line for {path}"));
        assert!(
            line.contains("\"protocol\":\"h2\"") && line.contains("\"status\":200"),
            "{line}"
        );
    }
    let slow = edge
        .wait_log_all(&["request.slow", "path=\"/late\""], sec)
        .expect("request.slow line");
    assert!(
        slow.contains("protocol=\"h2\"") && slow.contains("duration_ms="),
        "{slow}"
    );
    assert!(
        edge.wait_log_all(&["request.slow", "/fast"], Duration::from_millis(200))
            .is_none(),
        "a fast stream logged as slow"
    );
});

both_drivers!(authority_wins_and_a_differing_host_is_400, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = h2c(d, &origin);
    let (same, other) = block_on(async {
        let c = h2_connect(edge.addr).await;
        let same = [("host", "site.test")];
        let same = h2_request(&c, "GET", "/a", "site.test", &same, b"").await;
        let other = [("host", "other.test")];
        let other = h2_request(&c, "GET", "/b", "site.test", &other, b"").await;
        (same, other)
    });
    assert_eq!(same.unwrap().status, 200);
    assert_eq!(origin.last().header("host"), Some("site.test"));
    let other = other.unwrap();
    assert_eq!(other.status, 400);
    assert_eq!(origin.seen_count(), 1, "the 400 is not forwarded");
    assert_eq!(
        edge.wait_metric("edge_requests_invalid_total", &["reason=\"bad_host\""], 1.0),
        1.0
    );
});

#[test]
fn http2_settings_are_in_check_output() {
    let dir = TempDir::new();
    let path = dir.0.join("edge.toml");
    let rest = "[[upstreams]]\nname = \"o\"\nendpoints = [\"127.0.0.1:9\"]\n\
                [[routes]]\npath_prefix = \"/\"\nupstream = \"o\"\n";
    let text = "[server]\nh2c = true\n[server.http2]\nmax_concurrent_streams = 9\n";
    std::fs::write(&path, format!("{text}{rest}")).unwrap();
    let out = check_config(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("h2c = true"), "{text}");
    assert!(
        text.contains("[server.http2]\nmax_concurrent_streams = 9\n"),
        "{text}"
    );
    let text = "[server.http2]\nmax_frame_size = 100\n";
    std::fs::write(&path, format!("{text}{rest}")).unwrap();
    let out = check_config(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server.http2.max_frame_size"), "{err}");
    assert!(err.contains("edge.toml"), "{err}");
}

/// An origin that answers `/slow` after `delay` and everything else at once, with its path.
fn slow_origin(delay: Duration) -> Origin {
    Origin::start(move |s| {
        let r = Reply::ok(s.target.as_bytes());
        match s.target.as_str() {
            "/slow" => r.delayed(delay),
            _ => r,
        }
    })
}

both_drivers!(
    goaway_after_max_requests_per_connection_lets_open_streams_finish,
    |d| {
        let origin = slow_origin(Duration::from_millis(300));
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .server("max_requests_per_connection", 3);
        let edge = Edge::start(&cfg);
        let authority = edge.addr.to_string();
        let (first, after) = block_on(async {
            let c = h2_connect(edge.addr).await;
            let mut tasks = Vec::new();
            for _ in 0..3 {
                let (c, a) = (c.clone(), authority.clone());
                tasks.push(monoio::spawn(async move {
                    h2_request(&c, "GET", "/slow", &a, &[], b"").await
                }));
            }
            let mut first = Vec::new();
            for t in tasks {
                first.push(t.await);
            }
            let after = h2_request(&c, "GET", "/fast", &authority, &[], b"").await;
            (first, after)
        });
        for r in first {
            assert_eq!(
                r.unwrap().body,
                b"/slow",
                "open streams finish after GOAWAY"
            );
        }
        assert!(after.is_err(), "a stream after GOAWAY: {after:?}");
        assert_eq!(origin.seen_count(), 3);
        // A new connection is served.
        let again = block_on(async {
            let c = h2_connect(edge.addr).await;
            h2_request(&c, "GET", "/fast", &authority, &[], b"").await
        });
        assert_eq!(again.unwrap().body, b"/fast");
    }
);

both_drivers!(sigterm_drains_h2_streams_then_exits_0, |d| {
    let origin = slow_origin(Duration::from_secs(2));
    let cfg = Cfg::new(d, origin.addr)
        .server("h2c", true)
        .timeout("drain_delay", "1s")
        .timeout("drain", "10s");
    let mut edge = Edge::start(&cfg);
    let authority = edge.addr.to_string();
    let (slow, health) = block_on(async {
        let c = h2_connect(edge.addr).await;
        let (c2, a) = (c.clone(), authority.clone());
        let slow =
            monoio::spawn(async move { h2_request(&c2, "GET", "/slow", &a, &[], b"").await });
        settle(Duration::from_secs(5), "the origin saw no request", || {
            origin.seen_count() >= 1
        })
        .await;
        edge.signal(libc::SIGTERM);
        assert!(edge
            .wait_log("server.draining", Duration::from_secs(2))
            .is_some());
        let health = h2_request(&c, "GET", "/_health", &authority, &[], b"").await;
        (slow.await, health)
    });
    assert_eq!(health.unwrap().status, 503, "readiness is 503 during drain");
    assert_eq!(
        slow.unwrap().body,
        b"/slow",
        "the in-flight stream finished"
    );
    assert_eq!(edge.wait_exit(Duration::from_secs(10)), Some(0));
});

both_drivers!(
    a_stream_whose_client_stops_reading_pauses_alone_then_is_reset_at_send,
    |d| {
        const BIG: usize = 8 << 20;
        let big: &'static [u8] = Box::leak(vec![b'x'; BIG].into_boxed_slice());
        let origin = Origin::start(move |s| match s.target.as_str() {
            "/big" => Reply::ok(big),
            _ => Reply::ok(b"small"),
        });
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .timeout("send", "4s");
        let edge = Edge::start(&cfg);
        let authority = edge.addr.to_string();
        let send_phase = ["phase=\"send\""];
        let (small, stuck) = block_on(async {
            let c = h2_connect(edge.addr).await;
            let req = http::Request::get(format!("http://{authority}/big"))
                .body(())
                .unwrap();
            let mut send = c.clone().ready().await.unwrap();
            let (resp, _) = send.send_request(req, true).unwrap();
            // The head arrives; the body is never read, so the stream's window (1 MiB) stays full.
            let mut body = resp.await.unwrap().into_body();
            let started = std::time::Instant::now();
            let mut small = Vec::new();
            for i in 0..5 {
                let path = format!("/s{i}");
                small.push(h2_request(&c, "GET", &path, &authority, &[], b"").await);
            }
            let quick = started.elapsed();
            // Served while the stuck stream was still open: its reset comes only at `send`.
            let reset_before = edge.metric("edge_inbound_timeouts_total", &send_phase);
            // Reading now: what was buffered, then the reset edge sent at its `send` deadline.
            let mut got = 0;
            let mut end = Ok(());
            while let Some(d) = body.data().await {
                match d {
                    Ok(d) => got += d.len(),
                    Err(e) => {
                        end = Err(e.to_string());
                        break;
                    }
                }
            }
            (small, (quick, reset_before, got, end))
        });
        for r in small {
            assert_eq!(r.unwrap().body, b"small");
        }
        let (quick, reset_before, got, end) = stuck;
        assert_eq!(
            reset_before, 0.0,
            "other streams were answered only after the stuck one was reset ({quick:?})"
        );
        assert!(got < BIG, "the stuck stream was cut short ({got} bytes)");
        assert!(end.is_err(), "the stuck stream ends with a reset");
        assert_eq!(
            edge.wait_metric("edge_inbound_timeouts_total", &send_phase, 1.0),
            1.0
        );
    }
);

both_drivers!(
    a_header_list_over_max_header_list_is_refused_and_the_connection_goes_on,
    |d| {
        let origin = Origin::fixed(b"ok");
        let edge = h2c(d, &origin);
        let authority = edge.addr.to_string();
        let (big, after) = block_on(async {
            let c = h2_connect(edge.addr).await;
            let value = "v".repeat(20 << 10);
            let big = [("x-big", value.as_str())];
            let big = h2_request(&c, "GET", "/big", &authority, &big, b"").await;
            let after = h2_request(&c, "GET", "/after", &authority, &[], b"").await;
            (big, after)
        });
        // Over the default 16 KiB: a 431 or a stream error, never forwarded.
        assert!(big.as_ref().map_or(true, |r| r.status == 431), "{big:?}");
        assert_eq!(after.unwrap().body, b"ok", "the connection goes on");
        assert_eq!(origin.seen_count(), 1);
    }
);
