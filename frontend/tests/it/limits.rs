//! Request limits and request validation (DESIGN.md "Status codes", "HTTP/1.1 rules"): 431, 414, 413,
//! every malformed case answered 400, 501 for codings edge does not implement, 405 for CONNECT, 404 with
//! no route. Each rejected request gets a short text answer with Content-Length, `Connection: close` where
//! the table says so, the `edge_requests_invalid_total{reason}` counter and a `request.invalid` log line,
//! and never reaches the origin.

use std::{
    panic::{catch_unwind, AssertUnwindSafe},
    time::{Duration, Instant},
};

use crate::harness::{assert_error_response, Cfg, Client, Driver, Edge, Origin};

const SEC: Duration = Duration::from_secs(1);

/// The limits most cases here run at: 4 KiB heads, 10 fields, 1 KiB bodies.
fn small_limits(c: Cfg) -> Cfg {
    c.limit("max_head_bytes", "4KiB")
        .limit("max_headers", 10)
        .limit("max_body_bytes", "1KiB")
}

/// Edge's default limits.
fn default_limits(c: Cfg) -> Cfg {
    c
}

/// One request edge must reject.
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    status: u16,
    reason: &'static str,
}

fn case(name: &'static str, bytes: impl AsRef<[u8]>, status: u16, reason: &'static str) -> Case {
    Case {
        name,
        bytes: bytes.as_ref().to_vec(),
        status,
        reason,
    }
}

/// Sends `c.bytes` to a fresh edge (its config changed by `limits`) and checks the whole contract of an
/// invalid request: status, error response shape, `Connection: close` and the close itself, the counter
/// with its reason (and no other reason), the log line, and an origin that saw nothing.
fn check_rejected(d: Driver, limits: fn(Cfg) -> Cfg, c: &Case) {
    let origin = Origin::echo();
    let edge = Edge::start(&limits(Cfg::new(d, origin.addr)));
    let mut client = Client::connect(edge.addr);
    client.send(&c.bytes);
    let r = client
        .read_response(false)
        .unwrap_or_else(|| panic!("{}: connection closed without a response", c.name));
    assert_error_response(c.name, &r, c.status, true);
    assert!(
        client.time_until_closed(3 * SEC).is_some(),
        "{}: connection still open 3 s after the {}",
        c.name,
        c.status
    );
    let label = format!("reason=\"{}\"", c.reason);
    let n = edge.wait_metric("edge_requests_invalid_total", &[&label], 1.0);
    assert_eq!(n, 1.0, "{}: edge_requests_invalid_total{{{label}}}", c.name);
    let all = edge.metric("edge_requests_invalid_total", &[]);
    assert_eq!(
        all, 1.0,
        "{}: edge_requests_invalid_total over all reasons",
        c.name
    );
    assert!(
        edge.wait_log_all(&["request.invalid", &label], 2 * SEC)
            .is_some(),
        "{}: no request.invalid log line with {label}",
        c.name
    );
    assert_eq!(
        origin.seen_count(),
        0,
        "{}: the origin saw the request",
        c.name
    );
    drop(client);
    assert_eq!(
        edge.wait_metric("edge_connections_active", &[], 0.0),
        0.0,
        "{}: edge_connections_active",
        c.name
    );
}

/// Runs every case (each on its own edge) and reports all failures together.
fn check_all(d: Driver, limits: fn(Cfg) -> Cfg, cases: &[Case]) {
    let mut failed = Vec::new();
    for c in cases {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check_rejected(d, limits, c))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("[{}] {msg}", c.name));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

fn post(fields: &str, body: &str) -> String {
    format!("POST /p HTTP/1.1\r\nHost: x\r\n{fields}\r\n{body}")
}

both_drivers!(malformed_requests_get_400, |d| {
    let cases = [
        case(
            "Content-Length and Transfer-Encoding",
            post(
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                "5\r\nhello\r\n0\r\n\r\n",
            ),
            400,
            "bad_framing",
        ),
        case(
            "differing Content-Length fields",
            post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
            400,
            "bad_framing",
        ),
        case(
            "differing Content-Length list",
            post("Content-Length: 5, 6\r\n", "hello!"),
            400,
            "bad_framing",
        ),
        case(
            "Content-Length with a sign",
            post("Content-Length: +5\r\n", "hello"),
            400,
            "bad_framing",
        ),
        case(
            "Content-Length not a number",
            post("Content-Length: 5a\r\n", "hello"),
            400,
            "bad_framing",
        ),
        case(
            "negative Content-Length",
            post("Content-Length: -1\r\n", ""),
            400,
            "bad_framing",
        ),
        case(
            "Content-Length in hex",
            post("Content-Length: 0x5\r\n", "hello"),
            400,
            "bad_framing",
        ),
        case(
            "Transfer-Encoding in HTTP/1.0",
            "POST /p HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            "bad_framing",
        ),
        case(
            "chunked twice in one field",
            post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n"),
            400,
            "bad_framing",
        ),
        case(
            "chunked twice in two fields",
            post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
            400,
            "bad_framing",
        ),
        case(
            "gzip only",
            post("Transfer-Encoding: gzip\r\n", "hello"),
            400,
            "bad_framing",
        ),
        case(
            "chunked then gzip",
            post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n"),
            400,
            "bad_framing",
        ),
        case(
            "bad chunk size",
            post("Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n"),
            400,
            "bad_chunk",
        ),
        case(
            "chunk size line ending in a bare LF",
            post("Transfer-Encoding: chunked\r\n", "5\nhello\r\n0\r\n\r\n"),
            400,
            "bad_chunk",
        ),
        case(
            "chunk data longer than its size",
            post(
                "Transfer-Encoding: chunked\r\n",
                "5\r\nhello, world\r\n0\r\n\r\n",
            ),
            400,
            "bad_chunk",
        ),
        case("missing Host", "GET / HTTP/1.1\r\n\r\n", 400, "bad_host"),
        case(
            "two Host fields",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            400,
            "bad_host",
        ),
        case(
            "Host with a path",
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            400,
            "bad_host",
        ),
        case(
            "whitespace before a colon",
            "GET / HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n",
            400,
            "bad_head",
        ),
        case(
            "whitespace before the Host colon",
            "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            400,
            "bad_head",
        ),
        case(
            "obs-fold",
            "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
            400,
            "bad_head",
        ),
        case(
            "control character in a field value",
            "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",
            400,
            "bad_head",
        ),
        case(
            "garbage instead of a request line",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            400,
            "bad_head",
        ),
    ];
    check_all(d, default_limits, &cases);
});

both_drivers!(unimplemented_coding_gets_501, |d| {
    check_all(
        d,
        default_limits,
        &[
            case(
                "gzip, chunked",
                post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
                501,
                "transfer_coding",
            ),
            case(
                "gzip and chunked in two fields",
                post(
                    "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
                501,
                "transfer_coding",
            ),
        ],
    );
});

both_drivers!(connect_gets_405, |d| {
    check_all(
        d,
        default_limits,
        &[case(
            "CONNECT",
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
            405,
            "method",
        )],
    );
});

both_drivers!(head_over_limits_gets_431, |d| {
    let big_field = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(5000)
    );
    let many: String = (0..10).map(|i| format!("X-F{i}: v\r\n")).collect();
    let too_many = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    check_all(
        d,
        small_limits,
        &[
            case("head over max_head_bytes", big_field, 431, "head_too_large"),
            case(
                "11 fields over max_headers = 10",
                too_many,
                431,
                "head_too_large",
            ),
            case(
                "unfinished head over max_head_bytes",
                format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}", "a".repeat(5000)),
                431,
                "head_too_large",
            ),
        ],
    );
});

both_drivers!(heads_at_the_limits_pass, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&small_limits(Cfg::new(d, origin.addr)));
    let mut c = Client::connect(edge.addr);
    // Exactly max_headers fields.
    let nine: String = (0..9).map(|i| format!("X-F{i}: v\r\n")).collect();
    c.send(format!("GET /ten HTTP/1.1\r\nHost: x\r\n{nine}\r\n").as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 200, "10 fields");
    // A head just under max_head_bytes.
    let head_start = "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: ";
    let pad = 4096 - head_start.len() - 4 - 8;
    c.send(format!("{head_start}{}\r\n\r\n", "b".repeat(pad)).as_bytes());
    assert_eq!(
        c.read_response(false).unwrap().status,
        200,
        "head under 4 KiB"
    );
    // A body of exactly max_body_bytes, and identical repeated Content-Length fields (folded into one).
    let body = vec![b'z'; 1024];
    c.send(
        b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\nContent-Length: 1024\r\n\r\n",
    );
    c.send(&body);
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200, "1 KiB body: {}", r.text());
    assert_eq!(r.body, body);
    assert_eq!(origin.last().header("content-length"), Some("1024"));
    assert_eq!(
        origin
            .last()
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .count(),
        1
    );
    assert_eq!(edge.metric("edge_requests_invalid_total", &[]), 0.0);
});

both_drivers!(request_line_over_limit_gets_414, |d| {
    let target = format!("/{}", "u".repeat(5000));
    check_all(
        d,
        small_limits,
        &[
            case(
                "request line over max_head_bytes = 4KiB (sent whole)",
                format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"),
                414,
                "uri_too_long",
            ),
            case(
                "request line over max_head_bytes = 4KiB (head unfinished)",
                format!("GET {target} HTTP/1.1\r\n"),
                414,
                "uri_too_long",
            ),
        ],
    );
});

both_drivers!(request_line_over_default_limit_gets_414, |d| {
    // The default max_head_bytes (16 KiB, the size of one read buffer).
    let target = format!("/{}", "u".repeat(20_000));
    check_all(
        d,
        default_limits,
        &[case(
            "request line over the default 16 KiB",
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"),
            414,
            "uri_too_long",
        )],
    );
});

both_drivers!(content_length_over_max_body_gets_413_before_the_body, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&small_limits(Cfg::new(d, origin.addr)));
    let mut c = Client::connect(edge.addr);
    let t = Instant::now();
    // Only the head: the answer must not wait for a body.
    c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n");
    let r = c.read_response(false).expect("a 413");
    assert!(
        t.elapsed() < SEC,
        "413 took {:?}: edge waited for the body",
        t.elapsed()
    );
    assert_error_response("Content-Length over max_body_bytes", &r, 413, true);
    assert!(c.time_until_closed(3 * SEC).is_some());
    assert_eq!(
        edge.wait_metric(
            "edge_requests_invalid_total",
            &["reason=\"body_too_large\""],
            1.0
        ),
        1.0
    );
    assert!(edge
        .wait_log_all(&["request.invalid", "reason=\"body_too_large\""], 2 * SEC)
        .is_some());
    assert_eq!(origin.accepted(), 0, "the origin was contacted");
});

both_drivers!(chunked_body_over_max_body_sent_whole_gets_413, |d| {
    let mut body = format!("{:x}\r\n{}\r\n", 1100, "q".repeat(1100));
    body.push_str("0\r\n\r\n");
    check_all(
        d,
        small_limits,
        &[case(
            "chunked body of 1100 bytes over max_body_bytes = 1KiB",
            post("Transfer-Encoding: chunked\r\n", &body),
            413,
            "body_too_large",
        )],
    );
});

both_drivers!(expect_continue_over_max_body_gets_413_without_100, |d| {
    let origin = Origin::echo();
    let edge = Edge::start(&small_limits(Cfg::new(d, origin.addr)));
    let mut c = Client::connect(edge.addr);
    c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4096\r\n\r\n");
    let (bytes, closed) = c.read_until_closed(3 * SEC);
    assert!(closed.is_some(), "connection not closed after the 413");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with("HTTP/1.1 413 "),
        "expected a 413 and no 100 Continue first: {text:?}"
    );
    assert_eq!(origin.accepted(), 0);
});

both_drivers!(
    chunked_body_over_max_body_gets_413_and_aborts_upstream,
    |d| {
        let origin = Origin::echo();
        let edge = Edge::start(&small_limits(Cfg::new(d, origin.addr)));
        let mut c = Client::connect(edge.addr);
        c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
        let chunk = |b: u8| {
            let mut v = b"258\r\n".to_vec(); // 600 bytes
            v.extend(std::iter::repeat_n(b, 600));
            v.extend_from_slice(b"\r\n");
            v
        };
        c.send(&chunk(b'a'));
        // 600 bytes are within the limit: the exchange with the origin starts.
        assert!(
            origin.wait_until(5 * SEC, |o| o.accepted() == 1),
            "the exchange did not start"
        );
        // 1200 bytes are not.
        c.send(&chunk(b'b'));
        let r = c.read_response(false).expect("a 413");
        assert_error_response("chunked body over max_body_bytes", &r, 413, true);
        assert!(c.time_until_closed(3 * SEC).is_some());
        assert_eq!(
            edge.wait_metric(
                "edge_requests_invalid_total",
                &["reason=\"body_too_large\""],
                1.0
            ),
            1.0
        );
        assert!(edge
            .wait_log_all(&["request.invalid", "reason=\"body_too_large\""], 2 * SEC)
            .is_some());
        // The origin's exchange was aborted: its connection closed without a whole request.
        assert!(
            origin.wait_until(3 * SEC, |o| o.closed() == 1),
            "the upstream connection of the rejected body is still open"
        );
        assert_eq!(origin.seen_count(), 0);
        assert_eq!(edge.wait_metric("edge_requests_in_flight", &[], 0.0), 0.0);
    }
);

both_drivers!(no_route_gets_404_and_keeps_the_connection, |d| {
    let origin = Origin::fixed(b"api");
    let edge = Edge::start(&Cfg::new(d, origin.addr).route_prefix("/api"));
    let mut c = Client::connect(edge.addr);
    let r = c.get("/nothing");
    assert_error_response("no route", &r, 404, false);
    assert_eq!(
        c.get("/api/x").body,
        b"api",
        "connection not kept after a 404"
    );
    // A small body is discarded and the connection kept.
    c.send(b"POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789");
    let r = c.read_response(false).unwrap();
    assert_error_response("no route with a small body", &r, 404, false);
    assert_eq!(c.get("/api/y").body, b"api");
    // More than 64 KiB of unread body: answered, then closed.
    let mut c2 = Client::connect(edge.addr);
    c2.send(b"POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n");
    let r = c2.read_response(false).expect("a 404");
    assert_error_response("no route with a large body", &r, 404, true);
    assert!(c2.time_until_closed(3 * SEC).is_some());
    assert_eq!(
        edge.wait_metric("edge_requests_total", &["status=\"404\""], 3.0),
        3.0
    );
    assert_eq!(edge.metric("edge_requests_invalid_total", &[]), 0.0);
    assert_eq!(edge.count_log("request.invalid"), 0);
    assert_eq!(origin.seen_count(), 2);
});
