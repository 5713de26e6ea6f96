//! DESIGN.md "Observability": access lines (every field, each `log.access_format`, over HTTP/1.1 and
//! HTTP/2, written to `log.access_path` and reopened on SIGUSR1), the dropped-line counter, W3C trace
//! context (`log.traceparent`), X-Request-Id on every response, and the `route` label of
//! `edge_requests_total`.

use std::time::Duration;

use crate::harness::*;

const SEC: Duration = Duration::from_secs(1);
const VALID_TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Edge with the access log on in `format` to a file in `dir`, h2c on, the route named `api`.
fn start(d: Driver, origin: &Origin, dir: &TempDir, format: &str) -> (Edge, std::path::PathBuf) {
    let path = dir.0.join("access.log");
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("h2c", true)
            .log("access", true)
            .log("access_format", format)
            .log("access_path", path.to_str().unwrap())
            .route_field("name", "api"),
    );
    (edge, path)
}

/// One HTTP/1.1 POST and one HTTP/2 POST of `hello` to `/v1/x?ab=1` with a user agent, a request id
/// and a valid traceparent; the origin answers `done!!`.
fn send_both(edge: &Edge) {
    let mut c = Client::connect(edge.addr);
    c.send(
        format!(
            "POST /v1/x?ab=1 HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: ua-test/1 (h1)\r\n\
             X-Request-Id: rid-h1\r\ntraceparent: {VALID_TP}\r\nContent-Length: 5\r\n\r\nhello"
        )
        .as_bytes(),
    );
    let r = c.read_response(false).expect("HTTP/1.1 response");
    assert_eq!((r.status, r.text().as_str()), (200, "done!!"));
    let r = block_on(async {
        let c = h2_connect(edge.addr).await;
        let headers = [
            ("user-agent", "ua-test/1 (h2)"),
            ("x-request-id", "rid-h2"),
            ("traceparent", VALID_TP),
        ];
        h2_request(
            &c,
            "POST",
            "/v1/x?ab=1",
            "api.example.com",
            &headers,
            b"hello",
        )
        .await
    })
    .expect("h2 response");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"done!!"[..]));
}

both_drivers!(json_lines_carry_every_field_over_http1_and_h2, |d| {
    let origin = Origin::start(|_| Reply::ok(b"done!!"));
    let dir = TempDir::new();
    let (edge, path) = start(d, &origin, &dir, "json");
    send_both(&edge);
    let lines = wait_lines(&path, 2);
    for (line, proto, tag) in [(&lines[0], "http1", "h1"), (&lines[1], "h2", "h2")] {
        let v: serde_json::Value = serde_json::from_str(line).expect(line);
        let s = |k: &str| {
            v[k].as_str()
                .unwrap_or_else(|| panic!("{k} in {line}"))
                .to_string()
        };
        let n = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {line}"));
        assert!(s("time").ends_with('Z') && s("time").len() == 24, "{line}");
        assert_eq!(s("event"), "access");
        assert_eq!(n("worker"), 0.0);
        assert_eq!(s("protocol"), proto, "{line}");
        assert!(s("client").starts_with("127.0.0.1:"), "{line}");
        assert_eq!(s("method"), "POST");
        assert_eq!(s("host"), "api.example.com");
        assert_eq!(s("path"), "/v1/x");
        assert_eq!(n("query_len"), 4.0);
        assert_eq!(n("status"), 200.0);
        assert_eq!(n("request_bytes"), 5.0, "{line}");
        assert_eq!(n("response_bytes"), 6.0, "{line}");
        assert!(n("duration_ms") >= n("upstream_ttfb_ms"), "{line}");
        assert_eq!(s("route"), "api");
        assert_eq!(s("upstream"), "origin");
        assert_eq!(s("endpoint"), origin.addr.to_string());
        assert_eq!(n("attempts"), 1.0);
        assert_eq!(s("request_id"), format!("rid-{tag}"));
        assert_eq!(s("trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s("user_agent"), format!("ua-test/1 ({tag})"));
    }
});

both_drivers!(text_lines_carry_every_field_over_http1_and_h2, |d| {
    let origin = Origin::start(|_| Reply::ok(b"done!!"));
    let dir = TempDir::new();
    let (edge, path) = start(d, &origin, &dir, "text");
    send_both(&edge);
    let lines = wait_lines(&path, 2);
    for (line, proto, tag) in [(&lines[0], "http1", "h1"), (&lines[1], "h2", "h2")] {
        assert!(line.starts_with("time=20"), "{line}");
        let want = [
            " event=access worker=0 ".to_string(),
            format!(" protocol={proto} client=127.0.0.1:"),
            " method=POST host=api.example.com path=/v1/x query_len=4 status=200 request_bytes=5 \
             response_bytes=6 duration_ms="
                .to_string(),
            " upstream_ttfb_ms=".into(),
            format!(
                " route=api upstream=origin endpoint={} attempts=1 ",
                origin.addr
            ),
            format!(" request_id=rid-{tag} trace_id=4bf92f3577b34da6a3ce929d0e0e4736 "),
            format!(" user_agent=\"ua-test/1 ({tag})\""),
        ];
        for w in want {
            assert!(line.contains(&w), "{w:?} not in {line}");
        }
    }
});

both_drivers!(combined_lines_are_nginx_combined_over_http1_and_h2, |d| {
    let origin = Origin::start(|_| Reply::ok(b"done!!"));
    let dir = TempDir::new();
    let (edge, path) = start(d, &origin, &dir, "combined");
    send_both(&edge);
    let lines = wait_lines(&path, 2);
    for (line, version, tag) in [(&lines[0], "HTTP/1.1", "h1"), (&lines[1], "HTTP/2.0", "h2")] {
        assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
        assert!(line.contains(" +0000] "), "{line}");
        let want = format!("\"POST /v1/x?ab=1 {version}\" 200 6 \"-\" \"ua-test/1 ({tag})\" 0.");
        assert!(line.contains(&want), "{want:?} not in {line}");
        assert!(line.ends_with(&format!(" rid-{tag}")), "{line}");
    }
});

both_drivers!(sigusr1_reopens_the_access_path_after_a_rename, |d| {
    // logrotate's rename-then-signal: lines before the signal stay in the renamed file, lines after
    // it land in a new file at the configured path.
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let dir = TempDir::new();
    let (edge, path) = start(d, &origin, &dir, "text");
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/before-rotation").status, 200);
    wait_lines(&path, 1);
    let rotated = dir.0.join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    let opened = edge.count_log("access_log.opened");
    edge.signal(libc::SIGUSR1);
    assert!(
        wait_until(5 * SEC, || edge.count_log("access_log.opened") > opened),
        "no access_log.opened line after SIGUSR1"
    );
    assert_eq!(c.get("/after-rotation").status, 200);
    let new = wait_lines(&path, 1);
    assert!(new[0].contains("path=/after-rotation"), "{new:?}");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(old.contains("path=/before-rotation"), "{old}");
    assert!(!old.contains("/after-rotation"), "{old}");
    // Edge is still serving normally (SIGUSR1 did not end it).
    assert_eq!(c.get("/again").status, 200);
});

both_drivers!(the_dropped_line_counter_is_exported_with_help, |d| {
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let edge = Edge::start(&Cfg::new(d, origin.addr).log("access", true));
    let text = edge.metrics();
    assert!(
        text.contains("# HELP edge_access_log_dropped_total "),
        "no HELP line"
    );
    assert_eq!(
        metric_sum(&text, "edge_access_log_dropped_total", &["worker=\"0\""]),
        0.0
    );
});

/// The traceparent and tracestate the origin saw for a request sent with `headers`.
fn seen_trace(edge: &Edge, origin: &Origin, headers: &str) -> (Option<String>, Option<String>) {
    let mut c = Client::connect(edge.addr);
    c.send(format!("GET /t HTTP/1.1\r\nHost: a\r\n{headers}\r\n").as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 200);
    let seen = origin.last();
    (
        seen.header("traceparent").map(str::to_string),
        seen.header("tracestate").map(str::to_string),
    )
}

fn assert_new_traceparent(tp: &str) {
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    assert_eq!((parts[0], parts[3]), ("00", "00"), "{tp}");
    assert!(parts[1].len() == 32 && parts[2].len() == 16, "{tp}");
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    assert!(hex(parts[1]) && hex(parts[2]), "{tp}");
    assert_ne!(parts[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(parts[1].bytes().any(|b| b != b'0'), "{tp}");
}

both_drivers!(traceparent_is_propagated_replaced_or_started, |d| {
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let edge = Edge::start(&Cfg::new(d, origin.addr).log("access", true));
    // Valid: forwarded unchanged, with its tracestate.
    let (tp, ts) = seen_trace(
        &edge,
        &origin,
        &format!("traceparent: {VALID_TP}\r\ntracestate: vendor=1\r\n"),
    );
    assert_eq!(tp.as_deref(), Some(VALID_TP));
    assert_eq!(ts.as_deref(), Some("vendor=1"));
    // Invalid (upper case): replaced by a new one; tracestate dropped.
    let (tp, ts) = seen_trace(
        &edge,
        &origin,
        "traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\r\ntracestate: v=1\r\n",
    );
    assert_new_traceparent(&tp.unwrap());
    assert_eq!(ts, None);
    // Absent: started.
    let (started, _) = seen_trace(&edge, &origin, "");
    let started = started.unwrap();
    assert_new_traceparent(&started);
    // The trace id edge started is in the access line (and the request's other log lines).
    let trace_id = started.split('-').nth(1).unwrap();
    assert!(
        edge.wait_log(&format!("\"trace_id\":\"{trace_id}\""), 2 * SEC)
            .is_some(),
        "no access line with trace id {trace_id}"
    );
});

both_drivers!(an_h2_stream_gets_a_started_traceparent_upstream, |d| {
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let edge = Edge::start(&Cfg::new(d, origin.addr).server("h2c", true));
    let authority = edge.addr.to_string();
    let r = block_on(async {
        let c = h2_connect(edge.addr).await;
        let headers = [("traceparent", "garbage"), ("tracestate", "a=b")];
        h2_request(&c, "GET", "/t", &authority, &headers, b"").await
    })
    .unwrap();
    assert_eq!(r.status, 200);
    let seen = origin.last();
    assert_new_traceparent(seen.header("traceparent").unwrap());
    assert_eq!(seen.header("tracestate"), None);
});

both_drivers!(
    forward_passes_trace_context_as_received_and_off_logs_none,
    |d| {
        let origin = Origin::start(|_| Reply::ok(b"ok"));
        let edge = Edge::start(
            &Cfg::new(d, origin.addr)
                .log("traceparent", "forward")
                .log("access", true)
                .log("access_format", "text"),
        );
        let (tp, ts) = seen_trace(&edge, &origin, "traceparent: bad\r\ntracestate: v=1\r\n");
        assert_eq!((tp.as_deref(), ts.as_deref()), (Some("bad"), Some("v=1")));
        let (tp, _) = seen_trace(&edge, &origin, "");
        assert_eq!(tp, None, "forward starts no trace");
        let (tp, _) = seen_trace(&edge, &origin, &format!("traceparent: {VALID_TP}\r\n"));
        assert_eq!(tp.as_deref(), Some(VALID_TP));
        assert!(edge
            .wait_log("trace_id=4bf92f3577b34da6a3ce929d0e0e4736", 2 * SEC)
            .is_some());
        drop(edge);
        let edge = Edge::start(
            &Cfg::new(d, origin.addr)
                .log("traceparent", "off")
                .log("access", true)
                .log("access_format", "text"),
        );
        let (tp, _) = seen_trace(&edge, &origin, &format!("traceparent: {VALID_TP}\r\n"));
        assert_eq!(tp.as_deref(), Some(VALID_TP));
        let line = edge.wait_log("event=access", 2 * SEC).expect("access line");
        assert!(line.contains(" trace_id=- "), "{line}");
    }
);

both_drivers!(every_response_carries_x_request_id, |d| {
    let origin = Origin::start(|s| match s.target.as_str() {
        "/api/own" => Reply::raw(
            b"HTTP/1.1 200 OK\r\nX-Request-Id: from-origin\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        _ => Reply::ok(b"ok"),
    });
    let dead = refused_addr();
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("h2c", true)
            .route_prefix("/api")
            .add_upstream(Upstream::new("dead", &[dead]))
            .add_route(Route::new("/dead", "dead")),
    );
    let mut c = Client::connect(edge.addr);
    // Forwarded 200: the client's id comes back; without one, the generated id the origin saw.
    c.send(b"GET /api/a HTTP/1.1\r\nHost: a\r\nX-Request-Id: mine-1\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.header("x-request-id")), (200, Some("mine-1")));
    let r = c.get("/api/b");
    let sent = origin.last().header("x-request-id").unwrap().to_string();
    assert_eq!(
        (r.status, r.header("x-request-id")),
        (200, Some(sent.as_str()))
    );
    // The upstream's own id is kept, alone.
    let r = c.get("/api/own");
    let ids: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-request-id"))
        .collect();
    assert_eq!(ids.len(), 1, "{:?}", r.headers);
    assert_eq!(r.header("x-request-id"), Some("from-origin"));
    // 404: no route.
    let r = c.get("/nowhere");
    assert_eq!(r.status, 404);
    assert!(
        r.header("x-request-id").is_some_and(|v| !v.is_empty()),
        "{:?}",
        r.headers
    );
    // 502: the upstream refuses.
    let r = Client::connect(edge.addr).get("/dead");
    assert_eq!(r.status, 502);
    assert!(r.header("x-request-id").is_some(), "{:?}", r.headers);
    // Health (a local answer) and a 400 found before admission.
    assert!(Client::connect(edge.addr)
        .get("/_health")
        .header("x-request-id")
        .is_some());
    let mut bad = Client::connect(edge.addr);
    bad.send(b"GET /api HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
    let r = bad.read_response(false).unwrap();
    assert_eq!(r.status, 400);
    assert!(r.header("x-request-id").is_some(), "{:?}", r.headers);
    // HTTP/2: a forwarded 200 and a 404.
    let authority = edge.addr.to_string();
    let (ok, missing) = block_on(async {
        let c = h2_connect(edge.addr).await;
        let ok = h2_request(
            &c,
            "GET",
            "/api/a",
            &authority,
            &[("x-request-id", "h2-id")],
            b"",
        )
        .await;
        let missing = h2_request(&c, "GET", "/nowhere", &authority, &[], b"").await;
        (ok.unwrap(), missing.unwrap())
    });
    assert_eq!(ok.headers.get("x-request-id").unwrap(), "h2-id");
    assert_eq!(missing.status, 404);
    assert!(missing.headers.get("x-request-id").is_some());
});

both_drivers!(requests_are_counted_by_route, |d| {
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .route_prefix("/api")
            .route_field("name", "api")
            .add_route(Route::new("/plain", "origin")),
    );
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/api/x").status, 200);
    assert_eq!(c.get("/plain/x").status, 200);
    assert_eq!(c.get("/nowhere").status, 404);
    // Counted once the response is out: waited for.
    let count = |labels: &[&str]| edge.wait_metric("edge_requests_total", labels, 1.0);
    assert_eq!(
        count(&["route=\"api\"", "status=\"200\"", "protocol=\"http1\""]),
        1.0
    );
    // An unnamed route is labelled by its index.
    assert_eq!(count(&["route=\"1\"", "status=\"200\""]), 1.0);
    assert_eq!(count(&["route=\"-\"", "status=\"404\""]), 1.0);
});

both_drivers!(the_last_lines_are_written_before_exit, |d| {
    // A graceful stop right after a request: the worker hands its buffer over as it ends and the
    // supervisor waits for the writer, so the line is not lost with the process.
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let dir = TempDir::new();
    let path = dir.0.join("access.log");
    let mut edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .timeout("drain_delay", "0s")
            .log("access", true)
            .log("access_path", path.to_str().unwrap()),
    );
    assert_eq!(Client::connect(edge.addr).get("/last").status, 200);
    assert_eq!(edge.terminate(10 * SEC), Some(0));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"path\":\"/last\""), "{text:?}");
});

both_drivers!(
    a_stalled_writer_drops_and_counts_lines_instead_of_stalling_requests,
    |d| {
        // The access path is a FIFO nobody reads: the writer thread blocks opening it, the worker's
        // buffers never come back, and once they are full further lines are dropped and counted while
        // every request is still answered.
        let origin = Origin::start(|_| Reply::ok(b"ok"));
        let dir = TempDir::new();
        let fifo = dir.0.join("stalled.log");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let edge = Edge::start(
            &Cfg::new(d, origin.addr)
                .log("access", true)
                .log("access_path", fifo.to_str().unwrap()),
        );
        let mut c = Client::connect(edge.addr);
        // Four 64 KiB buffers hold about 450 lines of about 600 bytes (within one connection's
        // `max_requests_per_connection`).
        let padding = "p".repeat(200);
        for i in 0..900 {
            assert_eq!(c.get(&format!("/r{i}?{padding}")).status, 200);
        }
        let dropped = edge.wait_metric_where(
            "edge_access_log_dropped_total",
            &["worker=\"0\""],
            5 * SEC,
            |v| v > 0.0,
        );
        assert!(dropped > 0.0, "nothing counted as dropped");
        assert!(
            dropped < 900.0,
            "{dropped}: the buffers should have taken some lines"
        );
    }
);

both_drivers!(answers_edge_makes_itself_get_access_lines_too, |d| {
    // Health probes, 404 and an upstream failure each get a line; the route is `-` before routing.
    let origin = Origin::start(|_| Reply::ok(b"ok"));
    let dir = TempDir::new();
    let path = dir.0.join("access.log");
    let dead = refused_addr();
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .route_prefix("/api")
            .add_upstream(Upstream::new("dead", &[dead]))
            .add_route(Route::new("/dead", "dead").set("name", "down"))
            .log("access", true)
            .log("access_path", path.to_str().unwrap()),
    );
    for (target, status) in [("/_health", 200), ("/nowhere", 404), ("/dead/x", 502)] {
        assert_eq!(Client::connect(edge.addr).get(target).status, status);
    }
    let lines = wait_lines(&path, 3);
    let v: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_path = |p: &str| v.iter().find(|l| l["path"] == p).expect(p).clone();
    let health = by_path("/_health");
    assert_eq!(
        (health["status"].as_u64(), health["route"].as_str()),
        (Some(200), Some("-"))
    );
    assert_eq!(health["response_bytes"].as_u64(), Some(2));
    let missing = by_path("/nowhere");
    assert_eq!(
        (missing["status"].as_u64(), missing["route"].as_str()),
        (Some(404), Some("-"))
    );
    assert!(missing["upstream"].is_null() && missing["attempts"].as_u64() == Some(0));
    let failed = by_path("/dead/x");
    assert_eq!(failed["status"].as_u64(), Some(502));
    assert_eq!(failed["route"].as_str(), Some("down"));
    assert_eq!(failed["upstream"].as_str(), Some("dead"));
    assert_eq!(failed["attempts"].as_u64(), Some(1));
    assert!(failed["upstream_ttfb_ms"].is_null() && failed["endpoint"].is_null());
    for l in &v {
        assert!(
            l["request_id"].as_str().is_some_and(|id| !id.is_empty()),
            "{l}"
        );
        assert_eq!(l["trace_id"].as_str().map(str::len), Some(32), "{l}");
    }
});
