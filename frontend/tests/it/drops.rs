//! Upstream failures (DESIGN.md "Status codes"): a body cut short after the head was sent is truncated
//! (and the client connection closed), a malformed response head is 502 `bad_response`, an upstream that
//! never answers is 504 at the route's `request_timeout`. Nothing stays in flight afterwards. Upstream
//! lines and `edge_upstream_endpoint_requests_total` name the endpoint (DESIGN.md "Observability").

use std::time::{Duration, Instant};

use crate::harness::{assert_about, assert_error_response, Cfg, Client, Edge, Origin, Reply};

const SEC: Duration = Duration::from_secs(1);

fn assert_settled(edge: &Edge) {
    edge.assert_upstream_settled();
    assert_eq!(
        edge.wait_metric("edge_requests_in_flight", &[], 0.0),
        0.0,
        "edge_requests_in_flight did not return to 0"
    );
    assert_eq!(
        edge.wait_metric("edge_connections_active", &[], 0.0),
        0.0,
        "edge_connections_active did not return to 0"
    );
}

both_drivers!(upstream_close_mid_body_truncates_and_closes, |d| {
    let origin = Origin::start(|req| {
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
        b.extend(std::iter::repeat_n(b'h', 500));
        if req.target == "/chunked" {
            b = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3e8\r\n"
                .to_vec();
            b.extend(std::iter::repeat_n(b'c', 500));
        }
        Reply::raw(&b, true)
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));

    // Content-Length response: the client sees the head, half the body, then the close.
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /length HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_head().expect("response head");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("1000"));
    let (body, closed) = c.read_until_closed(5 * SEC);
    assert!(
        closed.is_some(),
        "client connection not closed after a truncated body"
    );
    assert_eq!(body.len(), 500, "body bytes before the close");
    edge.assert_counted_and_logged(
        "edge_responses_truncated_total",
        &[],
        1.0,
        "response.truncated",
    );

    // Chunked response: the data that arrived, and no last-chunk.
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_head().expect("response head");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let (body, closed) = c.read_until_closed(5 * SEC);
    assert!(
        closed.is_some(),
        "client connection not closed after a truncated body"
    );
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("5\r\nhello\r\n"), "{text:?}");
    assert!(
        !text.contains("\r\n0\r\n\r\n"),
        "a truncated chunked body must not end with the last-chunk: {text:?}"
    );
    assert_eq!(
        edge.wait_metric("edge_responses_truncated_total", &[], 2.0),
        2.0
    );
    // Each counter that moved has its line: the truncation and the upstream's failure.
    assert!(edge
        .wait_log_all(&["upstream.error", "kind=\"closed_early\""], 2 * SEC)
        .is_some());
    assert_settled(&edge);
});

both_drivers!(malformed_upstream_head_gives_502_bad_response, |d| {
    let origin = Origin::start(|req| match req.target.as_str() {
        "/garbage" => Reply::raw(b"HTTP/1.1 2x0 Weird\r\nContent-Length: 2\r\n\r\nno", true),
        "/not-http" => Reply::raw(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", true),
        "/two-lengths" => Reply::raw(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
            true,
        ),
        _ => Reply::ok(b"good"),
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    for (i, path) in ["/garbage", "/not-http", "/two-lengths"].iter().enumerate() {
        let r = c.get(path);
        // The request had no body, so the client connection is kept (keep*).
        assert_error_response(path, &r, 502, false);
        assert!(r.text().contains("malformed"), "{path}: {}", r.text());
        assert_eq!(
            edge.wait_metric(
                "edge_upstream_errors_total",
                &["kind=\"bad_response\""],
                (i + 1) as f64
            ),
            (i + 1) as f64,
            "{path}: edge_upstream_errors_total{{kind=\"bad_response\"}}"
        );
        // Same connection still serves.
        assert_eq!(c.get("/good").body, b"good", "after {path}");
    }
    assert!(edge
        .wait_log_all(&["upstream.error", "kind=\"bad_response\""], 2 * SEC)
        .is_some());
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
    drop(c);
    assert_settled(&edge);
});

// Body bytes that arrive in the same read as the response head (read into a 64 KiB buffer): up to
// 64 KiB with the head are copied behind it into one write (in a pooled large buffer when they do not fit
// a small one), more are written straight from the receive buffer. Every shape must deliver the body
// intact, and malformed framing among those first bytes must still be a 502 (it is scanned before the
// head goes). The 12 KiB bodies are copied, the 100 KiB ones written directly; each is repeated on a
// kept-alive upstream connection.
both_drivers!(body_bytes_in_the_heads_read_are_relayed_or_refused, |d| {
    let pattern = |n: usize| -> Vec<u8> { (0..n).map(|i| b'a' + (i % 26) as u8).collect() };
    let (small_body, big_body) = (pattern(12 * 1024), pattern(100 * 1024));
    let chunked = |body: &[u8], tail: &[u8]| {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r.extend_from_slice(tail);
        r
    };
    let length = |body: &[u8]| {
        let mut r =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(body);
        r
    };
    let replies = [
        ("/length-12k", length(&small_body)),
        ("/chunked-12k", chunked(&small_body, b"\r\n0\r\n\r\n")),
        ("/length-100k", length(&big_body)),
        ("/chunked-100k", chunked(&big_body, b"\r\n0\r\n\r\n")),
        // No CRLF after the chunk's data.
        ("/bad", chunked(&small_body, b"XX0\r\n\r\n")),
    ];
    let origin = Origin::start(
        move |req| match replies.iter().find(|(p, _)| *p == req.target) {
            Some((p, bytes)) => Reply::raw(bytes, *p == "/bad"),
            None => Reply::raw(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nsmall", false),
        },
    );
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    for round in 0..3 {
        for path in [
            "/length-12k",
            "/chunked-12k",
            "/length-100k",
            "/chunked-100k",
            "/small",
        ] {
            let r = c.get(path);
            assert_eq!(r.status, 200, "{path} round {round}");
            let want: &[u8] = match path {
                "/small" => b"small",
                p if p.ends_with("12k") => &small_body,
                _ => &big_body,
            };
            assert!(
                r.body == want,
                "{path} round {round}: body of {} bytes differs",
                r.body.len()
            );
        }
    }
    let r = c.get("/bad");
    assert_error_response("/bad", &r, 502, false);
    assert_eq!(
        edge.wait_metric(
            "edge_upstream_errors_total",
            &["kind=\"bad_response\""],
            1.0
        ),
        1.0
    );
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
    assert_eq!(
        c.get("/small").body,
        b"small",
        "the client connection is kept"
    );
    drop(c);
    assert_settled(&edge);
});

both_drivers!(silent_upstream_gives_504_at_route_request_timeout, |d| {
    let origin = Origin::silent();
    let edge = Edge::start(&Cfg::new(d, origin.addr).route_field("request_timeout", "1s"));
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    let r = c.get("/never");
    assert_about("504 from a silent upstream", t.elapsed(), SEC, SEC);
    assert_error_response("silent upstream", &r, 504, false);
    assert_eq!(
        edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"request\""], 1.0),
        1.0
    );
    assert!(
        edge.wait_log_all(&["upstream.timeout", "phase=\"request\""], 2 * SEC)
            .is_some(),
        "no upstream.timeout log line"
    );
    assert_eq!(
        edge.metric("edge_upstream_timeouts_total", &["phase=\"zombie\""]),
        0.0
    );
    assert_eq!(
        edge.metric("edge_upstream_retries_total", &[]),
        0.0,
        "retried after a request timeout"
    );
    // The timed-out upstream connection is closed, not pooled.
    assert!(
        origin.wait_until(3 * SEC, |o| o.closed() == 1),
        "the timed-out upstream connection is still open"
    );
    assert_eq!(origin.accepted(), 1);
    assert_eq!(edge.wait_metric("edge_requests_in_flight", &[], 0.0), 0.0);
    drop(c);
    assert_settled(&edge);
});

both_drivers!(
    upstream_closing_without_answer_gives_502_closed_early,
    |d| {
        let origin = Origin::start(|req| match req.target.as_str() {
            "/hang-up" => Reply::raw(b"", true),
            _ => Reply::ok(b"good"),
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        // A fresh upstream connection (nothing pooled yet) that closes before any response byte.
        let r = c.get("/hang-up");
        assert_error_response("upstream closed before answering", &r, 502, false);
        assert_eq!(
            edge.wait_metric(
                "edge_upstream_errors_total",
                &["kind=\"closed_early\""],
                1.0
            ),
            1.0
        );
        assert!(edge
            .wait_log_all(&["upstream.error", "kind=\"closed_early\""], 2 * SEC)
            .is_some());
        assert_eq!(c.get("/ok").body, b"good");
        drop(c);
        assert_settled(&edge);
    }
);

// DESIGN.md "Observability": the upstream counters carry `upstream`, and upstream log lines name it, so an
// operator can tell which upstream fails.
both_drivers!(upstream_counters_and_lines_name_the_upstream, |d| {
    let good = Origin::fixed(b"good");
    let dead = crate::harness::refused_addr();
    let cfg = Cfg::new(d, good.addr)
        .add_upstream(crate::harness::Upstream::new("dead", &[dead]))
        .add_route(crate::harness::Route::new("/dead", "dead"));
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/dead/x").status, 502);
    assert_eq!(c.get("/ok").body, b"good");
    let refused = ["upstream=\"dead\"", "kind=\"refused\""];
    assert_eq!(
        edge.wait_metric("edge_upstream_errors_total", &refused, 1.0),
        1.0
    );
    assert_eq!(
        edge.metric("edge_upstream_errors_total", &["upstream=\"origin\""]),
        0.0
    );
    assert_eq!(
        edge.wait_metric(
            "edge_upstream_requests_total",
            &["upstream=\"origin\""],
            1.0
        ),
        1.0
    );
    assert!(edge
        .wait_log_all(&["upstream.error", "upstream=\"dead\""], 2 * SEC)
        .is_some());
});

// DESIGN.md "Observability": every upstream log line names the endpoint, and
// `edge_upstream_endpoint_requests_total` counts each endpoint's attempts by response class, so an
// operator can tell which endpoint of an upstream fails.
both_drivers!(endpoint_counters_and_lines_name_the_failing_endpoint, |d| {
    let good = Origin::fixed(b"good");
    let dead = crate::harness::refused_addr();
    // "pair": one endpoint refuses, the other answers (each refused connect is retried on it);
    // "dead": its one endpoint refuses, so the client gets 502.
    let cfg = Cfg::new(d, good.addr)
        .endpoints(&[dead, good.addr])
        .add_upstream(crate::harness::Upstream::new("dead", &[dead]))
        .add_route(crate::harness::Route::new("/dead", "dead"));
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    for _ in 0..4 {
        assert_eq!(c.get("/ok").body, b"good");
    }
    assert_eq!(c.get("/dead/x").status, 502);
    let on = |upstream: &str, addr: std::net::SocketAddr, class: &str| {
        [
            format!("upstream=\"{upstream}\""),
            format!("endpoint=\"{addr}\""),
            format!("status_class=\"{class}\""),
        ]
    };
    let count = |labels: [String; 3]| {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        edge.metric("edge_upstream_endpoint_requests_total", &labels)
    };
    assert_eq!(
        edge.wait_metric(
            "edge_upstream_endpoint_requests_total",
            &["upstream=\"dead\"", "status_class=\"error\""],
            1.0
        ),
        1.0
    );
    assert_eq!(count(on("origin", good.addr, "2xx")), 4.0);
    assert_eq!(count(on("origin", good.addr, "error")), 0.0);
    // Round robin from the refusing endpoint: every other request tried it first.
    let refused = count(on("origin", dead, "error"));
    assert_eq!(refused, 2.0);
    assert_eq!(edge.metric("edge_upstream_retries_total", &[]), refused);
    assert_eq!(count(on("origin", dead, "2xx")), 0.0);
    assert_eq!(count(on("dead", dead, "error")), 1.0);
    // Every class of every endpoint exports from the start.
    assert_eq!(count(on("origin", good.addr, "5xx")), 0.0);
    let line = edge
        .wait_log_all(&["upstream.error", "upstream=\"dead\""], 2 * SEC)
        .expect("no upstream.error line");
    assert!(line.contains(&format!("endpoint={dead}")), "{line}");
    assert!(line.contains("kind=\"refused\""), "{line}");
});

both_drivers!(timeout_and_shed_lines_name_the_endpoint, |d| {
    // upstream.timeout names the endpoint that did not answer; request.shed for an upstream whose
    // `max_active` is reached names the endpoint waited for.
    let origin = Origin::silent();
    let cfg = Cfg::new(d, origin.addr)
        .route_field("request_timeout", "1s")
        .upstream_field("max_active", 1)
        .upstream_field("queue_timeout", "200ms");
    let edge = Edge::start(&cfg);
    std::thread::scope(|s| {
        let first = s.spawn(|| Client::connect(edge.addr).get("/held").status);
        assert_eq!(
            edge.wait_metric("edge_upstream_connections", &["state=\"active\""], 1.0),
            1.0
        );
        assert_eq!(Client::connect(edge.addr).get("/queued").status, 503);
        assert_eq!(first.join().unwrap(), 504);
    });
    let endpoint = format!("endpoint={}", origin.addr);
    for event in ["upstream.timeout", "request.shed"] {
        let line = edge
            .wait_log_all(&[event, "upstream=\"origin\""], 2 * SEC)
            .unwrap_or_else(|| panic!("no {event} line"));
        assert!(line.contains(&endpoint), "{line}");
    }
    let error = ["upstream=\"origin\"", "status_class=\"error\""];
    assert_eq!(
        edge.wait_metric("edge_upstream_endpoint_requests_total", &error, 1.0),
        1.0,
        "the timed-out attempt counts as an error; the shed request was never sent"
    );
    assert_settled(&edge);
});
