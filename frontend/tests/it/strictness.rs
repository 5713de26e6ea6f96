//! Strictness on what a message declares, through the real binary (DESIGN.md "Configuration"
//! `[server.limits]`, "HTTP/1.1 rules", "Status codes"):
//! - a body whose Content-Length or chunk size declares more than `max_body_bytes` is refused with 413 as
//!   soon as the declaration is read, whatever its digits; nothing of that request goes upstream when the
//!   bytes that came with the head decide it, and an upstream connection that already has the head is
//!   closed, never pooled;
//! - bodyless responses (1xx, 204, 304, HEAD) reach the client with only the framing fields they may
//!   carry, and bytes an upstream sends after such a head never reach a client, with the head or later.

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use crate::harness::{assert_error_response, Cfg, Client, Driver, Edge, Origin, Response};
use crate::smuggling::complete_request;

const SEC: Duration = Duration::from_secs(1);

/// `max_body_bytes` of the limit tests (`None`: the default).
const ONE_MIB: Option<&str> = Some("1MiB");

/// Reads from `s` until `buf` starts with a complete request, appending every byte read to `raw`;
/// returns that request's bytes (drained from `buf`), or `None` when the peer closes first.
fn next_request(s: &mut TcpStream, buf: &mut Vec<u8>, raw: &Mutex<Vec<u8>>) -> Option<Vec<u8>> {
    let mut b = [0u8; 65536];
    loop {
        if let Some(n) = complete_request(buf) {
            return Some(buf.drain(..n).collect());
        }
        let n = match s.read(&mut b) {
            Ok(n) if n > 0 => n,
            _ => return None,
        };
        raw.lock().unwrap().extend_from_slice(&b[..n]);
        buf.extend_from_slice(&b[..n]);
    }
}

/// An origin that answers every request with 200 `conn<id>` and records what its first connection
/// received; `closed()` counts connections whose peer closed.
fn recording_origin() -> (Origin, Arc<Mutex<Vec<u8>>>) {
    let first = Arc::new(Mutex::new(Vec::new()));
    let first2 = first.clone();
    let origin = Origin::script(move |mut s, id| {
        let _ = s.set_read_timeout(Some(30 * SEC));
        let other = Mutex::new(Vec::new());
        let raw = if id == 1 { &*first2 } else { &other };
        let mut buf = Vec::new();
        while next_request(&mut s, &mut buf, raw).is_some() {
            let body = format!("conn{id}");
            let r = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(r.as_bytes());
        }
    });
    (origin, first)
}

/// One request edge must refuse with 413 from what it declares.
struct Declared {
    name: &'static str,
    bytes: Vec<u8>,
}

fn declared(name: &'static str, head_fields: &str, body: impl AsRef<[u8]>) -> Declared {
    let mut bytes = format!("POST /up HTTP/1.1\r\nHost: x\r\n{head_fields}\r\n").into_bytes();
    bytes.extend_from_slice(body.as_ref());
    Declared { name, bytes }
}

/// The default test config, with `max_body_bytes` set when given.
fn with_max_body(d: Driver, origin: std::net::SocketAddr, max_body: Option<&str>) -> Cfg {
    match max_body {
        Some(m) => Cfg::new(d, origin).limit("max_body_bytes", m),
        None => Cfg::new(d, origin),
    }
}

/// Sends `c.bytes` (never a whole body) to a fresh edge and checks the 413 came at once, was counted and
/// logged, closed the connection, and that the origin was never contacted.
fn check_refused_before_forwarding(d: Driver, max_body: Option<&str>, c: &Declared) {
    let origin = Origin::echo();
    let edge = Edge::start(&with_max_body(d, origin.addr, max_body));
    let mut client = Client::connect(edge.addr);
    let t = Instant::now();
    client.send(&c.bytes);
    let r = client
        .read_response(false)
        .unwrap_or_else(|| panic!("{}: closed without a response", c.name));
    assert!(t.elapsed() < SEC, "{}: 413 took {:?}", c.name, t.elapsed());
    assert_error_response(c.name, &r, 413, true);
    assert!(
        client.time_until_closed(3 * SEC).is_some(),
        "{}: connection still open after the 413",
        c.name
    );
    let label = "reason=\"body_too_large\"";
    assert_eq!(
        edge.wait_metric("edge_requests_invalid_total", &[label], 1.0),
        1.0,
        "{}",
        c.name
    );
    assert_eq!(
        edge.metric("edge_requests_invalid_total", &[]),
        1.0,
        "{}",
        c.name
    );
    assert!(
        edge.wait_log_all(&["request.invalid", label], 2 * SEC)
            .is_some(),
        "{}: no request.invalid line",
        c.name
    );
    assert_eq!(origin.accepted(), 0, "{}: the origin was contacted", c.name);
}

/// Runs every case, each on its own edge, and reports all failures together.
fn check_all(d: Driver, max_body: Option<&str>, cases: &[Declared]) {
    let mut failed = Vec::new();
    for c in cases {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_refused_before_forwarding(d, max_body, c)
        }));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("[{}] {msg}", c.name));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

const CHUNKED: &str = "Transfer-Encoding: chunked\r\n";

both_drivers!(
    chunk_size_declaring_more_than_max_body_bytes_is_413_before_forwarding,
    |d| {
        // 1000 bytes, then a chunk declaring one byte more than the 1 MiB limit leaves (0xffc19).
        let mut second = format!("3e8\r\n{}\r\nffc19\r\n", "a".repeat(1000));
        second.push_str(&"b".repeat(100));
        check_all(
            d,
            ONE_MIB,
            &[
                declared("size line alone, 1 MiB + 1", CHUNKED, "100001\r\n"),
                declared(
                    "size line and part of its data",
                    CHUNKED,
                    format!("100001\r\n{}", "x".repeat(1000)),
                ),
                declared("second chunk over what the first left", CHUNKED, second),
                declared("size digits not yet ended", CHUNKED, "1000000"),
                declared("size with an extension", CHUNKED, "200000;name=value\r\n"),
                declared("size of 40 hex digits", CHUNKED, "f".repeat(40) + "\r\n"),
                declared(
                    "size too large for u64 behind leading zeros",
                    CHUNKED,
                    "00000010000000000000000\r\n",
                ),
                declared(
                    "Content-Length too large for u64",
                    "Content-Length: 99999999999999999999999\r\n",
                    "",
                ),
            ],
        );
    }
);

both_drivers!(
    sizes_too_large_for_u64_are_413_under_the_default_limit,
    |d| {
        check_all(
            d,
            None,
            &[
                declared(
                    "chunk size overflowing u64",
                    CHUNKED,
                    "1ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
                ),
                declared(
                    "Content-Length overflowing u64",
                    "Content-Length: 18446744073709551616\r\n",
                    "",
                ),
            ],
        );
    }
);

both_drivers!(
    chunk_size_declared_later_closes_the_upstream_connection,
    |d| {
        // The declaration comes whole, or its digits split so the last one decides.
        for parts in [&["100000\r\n"][..], &["10000", "0"]] {
            let (origin, first) = recording_origin();
            let edge = Edge::start(&with_max_body(d, origin.addr, ONE_MIB));
            let mut c = Client::connect(edge.addr);
            let mut start = format!("POST /up HTTP/1.1\r\nHost: x\r\n{CHUNKED}\r\n400\r\n");
            start.push_str(&"a".repeat(1024));
            start.push_str("\r\n");
            c.send(start.as_bytes());
            let (last, before) = parts.split_last().unwrap();
            let mut sent = start.clone();
            for p in before {
                c.send(p.as_bytes());
                sent.push_str(p);
            }
            // Everything so far is within the limit: the origin has the head and the first chunk.
            let tail = sent.as_bytes()[sent.len() - 40..].to_vec();
            assert!(
                origin.wait_until(5 * SEC, |_| first.lock().unwrap().ends_with(&tail)),
                "{parts:?}: the origin did not get the first chunk"
            );
            // 1 KiB sent plus 1 MiB declared: over the limit before any of it arrives.
            let t = Instant::now();
            c.send(last.as_bytes());
            let r = c.read_response(false).expect("a 413");
            assert!(t.elapsed() < SEC, "{parts:?}: 413 took {:?}", t.elapsed());
            assert_error_response("declared later", &r, 413, true);
            assert!(c.time_until_closed(3 * SEC).is_some());
            edge.assert_counted_and_logged(
                "edge_requests_invalid_total",
                &["reason=\"body_too_large\""],
                1.0,
                "request.invalid",
            );
            // That upstream connection is closed, and the refused declaration never reached it.
            assert!(
                origin.wait_until(3 * SEC, |o| o.closed() == 1),
                "{parts:?}: the upstream connection of the refused body is still open"
            );
            let raw = String::from_utf8_lossy(&first.lock().unwrap()).into_owned();
            assert!(!raw.contains("\r\n100000"), "{parts:?}: forwarded: {raw:?}");
            // It was not pooled either: the next request gets a new one.
            let r = Client::connect(edge.addr).get("/after");
            assert_eq!(r.body, b"conn2", "{parts:?}");
            assert_eq!(origin.accepted(), 2, "{parts:?}");
            edge.assert_upstream_settled();
        }
    }
);

/// No Content-Length nor Transfer-Encoding field in `r`.
#[track_caller]
fn assert_no_framing(what: &str, r: &Response) {
    for name in ["content-length", "transfer-encoding"] {
        assert_eq!(r.header(name), None, "{what}: {:?}", r.headers);
    }
}

/// How many `name` fields `r` has.
fn count(r: &Response, name: &str) -> usize {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .count()
}

/// An origin answering `path` with the raw bytes of `replies` (by method and path) and 200 `good`
/// otherwise.
fn replying(replies: &'static [(&'static str, &'static str, &'static str)]) -> Origin {
    Origin::start(move |req| {
        replies
            .iter()
            .find(|(m, p, _)| *m == req.method && *p == req.target)
            .map_or_else(
                || crate::harness::Reply::ok(b"good"),
                |(_, _, bytes)| crate::harness::Reply::raw(bytes.as_bytes(), false),
            )
    })
}

both_drivers!(
    upstream_204_with_content_length_reaches_the_client_without_it,
    |d| {
        let origin = replying(&[
            ("GET", "/zero", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX-A: 1\r\n\r\n"),
            ("GET", "/cl", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n"),
            ("GET", "/te", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"),
            ("HEAD", "/cl", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n"),
            (
                "GET",
                "/103",
                "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\nContent-Length: 0\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 2\r\nX-A: 1\r\n\r\n",
            ),
        ]);
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        // (request, whether its upstream connection may be reused: not after a 204 announcing a body).
        for (n, (req, reused)) in [
            ("GET /zero", true),
            ("GET /cl", false),
            ("GET /te", false),
            ("HEAD /cl", false),
            ("GET /103", false),
        ]
        .into_iter()
        .enumerate()
        {
            let before = origin.accepted();
            c.send(format!("{req} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            let mut r = c.read_any_head().expect("a response");
            if r.status == 103 {
                assert_no_framing("the 103", &r);
                assert_eq!(r.header("link"), Some("</s.css>"));
                r = c.read_any_head().expect("the final response");
            }
            assert_eq!(r.status, 204, "{req}");
            assert_no_framing(req, &r);
            assert_eq!(r.header("x-a"), Some("1"), "{req}");
            assert_eq!(c.get("/good").body, b"good", "{req}: next response");
            assert!(c.buffered().is_empty(), "{req}: {:?}", c.buffered());
            let want = before.max(1) + usize::from(!reused);
            assert_eq!(origin.accepted(), want, "{req} (case {n}): upstream reuse");
        }
    }
);

both_drivers!(
    upstream_304_keeps_its_content_length_and_never_gets_transfer_encoding,
    |d| {
        let origin = replying(&[
            (
                "GET",
                "/cl",
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nETag: \"v\"\r\n\r\n",
            ),
            (
                "GET",
                "/twice",
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\nContent-Length: 7, 7\r\n\r\n",
            ),
            (
                "GET",
                "/te",
                "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            ),
        ]);
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        for (path, length) in [("/cl", Some("1234")), ("/twice", Some("7")), ("/te", None)] {
            c.send(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"v\"\r\n\r\n")
                    .as_bytes(),
            );
            let r = c.read_response(false).expect("a 304");
            assert_eq!(r.status, 304, "{path}");
            assert_eq!(
                r.header("content-length"),
                length,
                "{path}: {:?}",
                r.headers
            );
            assert_eq!(
                count(&r, "content-length"),
                usize::from(length.is_some()),
                "{path}"
            );
            assert_eq!(r.header("transfer-encoding"), None, "{path}");
            assert_eq!(c.get("/good").body, b"good", "{path}: next response");
        }
        // Nothing stray came: one upstream connection served everything.
        assert_eq!(origin.accepted(), 1);
    }
);

both_drivers!(
    head_response_keeps_content_length_and_never_gets_chunked_framing,
    |d| {
        let origin = replying(&[
            (
                "HEAD",
                "/cl",
                "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
            ),
            (
                "HEAD",
                "/chunked",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            ),
            ("HEAD", "/none", "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n"),
        ]);
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        for (path, length) in [("/cl", Some("1234")), ("/chunked", None), ("/none", None)] {
            c.send(format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            let r = c.read_response(true).expect("a response");
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(
                r.header("content-length"),
                length,
                "{path}: {:?}",
                r.headers
            );
            assert_eq!(
                r.header("transfer-encoding"),
                None,
                "{path}: {:?}",
                r.headers
            );
            assert_eq!(r.header("connection"), None, "{path}: {:?}", r.headers);
            assert_eq!(c.get("/good").body, b"good", "{path}: next response");
            assert!(c.buffered().is_empty(), "{path}: {:?}", c.buffered());
        }
        assert_eq!(origin.accepted(), 1);
    }
);

/// A bodyless answer whose upstream then sends a whole response of its own, with the head (in the same
/// write) or later (after the connection went back to edge's pool): the client must never see those
/// bytes, and the next request must be served on a new upstream connection.
fn check_stray_bytes(d: Driver, request: &'static str, head: &'static str) {
    const STRAY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled";
    for later in [false, true] {
        let (poke, poked) = mpsc::channel::<()>();
        let poked = Mutex::new(poked);
        let (wrote, stray_written) = mpsc::channel::<()>();
        let wrote = Mutex::new(wrote);
        let origin = Origin::script(move |mut s, id| {
            let _ = s.set_read_timeout(Some(30 * SEC));
            let (mut buf, raw) = (Vec::new(), Mutex::new(Vec::new()));
            while next_request(&mut s, &mut buf, &raw).is_some() {
                if id > 1 {
                    let r = format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nconn{id}");
                    let _ = s.write_all(r.as_bytes());
                    continue;
                }
                if later {
                    let _ = s.write_all(head.as_bytes());
                    let _ = poked.lock().unwrap().recv_timeout(10 * SEC);
                    let _ = s.write_all(STRAY);
                } else {
                    let _ = s.write_all(&[head.as_bytes(), STRAY].concat());
                }
                let _ = wrote.lock().unwrap().send(());
            }
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(request.as_bytes());
        let r = c.read_response(true).expect("the bodyless response");
        assert!(
            matches!(r.status, 200 | 204 | 304),
            "{request}: {}",
            r.status
        );
        if later {
            // The exchange ended cleanly: the connection went back to the pool, then the bytes came.
            let idle = edge.wait_metric("edge_upstream_connections", &["state=\"idle\""], 1.0);
            assert_eq!(idle, 1.0, "{request}: not pooled before the stray bytes");
            poke.send(()).unwrap();
        }
        stray_written
            .recv_timeout(5 * SEC)
            .expect("origin wrote the stray bytes");
        // Nothing of them reaches the client, on its own or as the answer to its next request.
        let (got, closed) = c.read_until_closed(Duration::from_millis(300));
        assert!(
            got.is_empty(),
            "{request} (later: {later}): {:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(closed.is_none(), "{request}: client connection closed");
        c.set_timeout(15 * SEC);
        let next = c.get("/next");
        assert_eq!(
            next.body, b"conn2",
            "{request} (later: {later}): the stray answer was used"
        );
        assert!(c.buffered().is_empty(), "{request}: {:?}", c.buffered());
        assert_eq!(origin.accepted(), 2, "{request} (later: {later})");
    }
}

both_drivers!(
    stray_bytes_after_a_304_are_not_forwarded_nor_the_connection_reused,
    |d| check_stray_bytes(
        d,
        "GET /304 HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\n"
    )
);

both_drivers!(
    stray_bytes_after_a_204_are_not_forwarded_nor_the_connection_reused,
    |d| check_stray_bytes(
        d,
        "DELETE /204 HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP/1.1 204 No Content\r\n\r\n"
    )
);

both_drivers!(
    stray_bytes_after_a_head_response_are_not_forwarded_nor_the_connection_reused,
    |d| check_stray_bytes(
        d,
        "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n"
    )
);

both_drivers!(a_response_head_over_64_kib_is_502, |d| {
    // One field of 100 KiB, sent in a single write: the head is complete only past the 64 KiB bound.
    let big = format!(
        "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 2\r\n\r\nok",
        "a".repeat(100 * 1024)
    );
    let origin = Origin::start(move |_| crate::harness::Reply::raw(big.as_bytes(), false));
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut client = Client::connect(edge.addr);
    let r = client.get("/big");
    assert_error_response("a 100 KiB response head", &r, 502, false);
});
