//! Request smuggling and response desync (DESIGN.md "HTTP/1.1 rules"), through the real binary
//! against an origin that records the raw bytes it receives. Each smuggling shape rides on a keep-alive
//! connection after a good request and carries a second request (`/smuggled`) in its body: edge must
//! answer 400 (501 for a coding it does not implement) with `Connection: close`, count and log it, and
//! the origin must see the good request and nothing more. On the response side, ambiguous framing is 502
//! and a response that brings bytes it should not (a body on HEAD/204/304, a late byte on an idle pooled
//! connection) never reaches another request: that upstream connection is not reused.

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc, Arc, Mutex,
    },
    time::Duration,
};

use crate::harness::{assert_error_response, Cfg, Client, Driver, Edge, Origin, Reply};

const SEC: Duration = Duration::from_secs(1);

/// An origin that records every byte it receives (all connections, in arrival order) and answers each
/// complete request it can frame (Content-Length or chunked, as edge always sends) with 200 `ok`.
struct Recording {
    origin: Origin,
    raw: Arc<Mutex<Vec<u8>>>,
    requests: Arc<AtomicUsize>,
}

impl Recording {
    fn start() -> Recording {
        let raw = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let (raw2, requests2) = (raw.clone(), requests.clone());
        let origin = Origin::script(move |mut s, _| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            let mut buf = Vec::new();
            let mut b = [0u8; 65536];
            loop {
                let n = match s.read(&mut b) {
                    Ok(n) if n > 0 => n,
                    _ => return,
                };
                raw2.lock().unwrap().extend_from_slice(&b[..n]);
                buf.extend_from_slice(&b[..n]);
                while let Some(used) = complete_request(&buf) {
                    buf.drain(..used);
                    requests2.fetch_add(1, Ordering::SeqCst);
                    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        Recording {
            origin,
            raw,
            requests,
        }
    }

    fn raw(&self) -> String {
        String::from_utf8_lossy(&self.raw.lock().unwrap()).into_owned()
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Length of the first complete request in `buf`: head plus Content-Length body, or a chunked body up to
/// its last chunk (the test bodies hold no `0\r\n\r\n` of their own). Shared with the strictness tests.
pub(crate) fn complete_request(buf: &[u8]) -> Option<usize> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(n) = req.parse(buf).ok()? else {
        return None;
    };
    let field = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    if let Some(cl) = field("content-length") {
        let end = n + cl.parse::<usize>().ok()?;
        return (buf.len() >= end).then_some(end);
    }
    if field("transfer-encoding").is_some() {
        let i = buf[n..].windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(n + i + 5);
    }
    Some(n)
}

/// The request every smuggling attempt carries in its body.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

struct Shape {
    name: &'static str,
    bytes: String,
    status: u16,
    reason: &'static str,
}

fn shape(name: &'static str, bytes: String, status: u16, reason: &'static str) -> Shape {
    Shape {
        name,
        bytes,
        status,
        reason,
    }
}

fn shapes() -> Vec<Shape> {
    let s = SMUGGLED;
    let chunk = format!("{:x}\r\n{s}\r\n0\r\n\r\n", s.len());
    vec![
        shape(
            "CL.TE",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}", 5 + s.len()),
            400,
            "bad_framing",
        ),
        shape(
            "TE.CL",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{chunk}"),
            400,
            "bad_framing",
        ),
        shape(
            "duplicate differing Content-Length",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{s}", s.len()),
            400,
            "bad_framing",
        ),
        shape(
            "Content-Length list with differing values",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nContent-Length: 0, {}\r\n\r\n{s}", s.len()),
            400,
            "bad_framing",
        ),
        shape(
            "obfuscated TE: xchunked",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n{chunk}"),
            400,
            "bad_framing",
        ),
        shape(
            "obfuscated TE: chunked then identity",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n{chunk}"),
            400,
            "bad_framing",
        ),
        shape(
            "obfuscated TE: space before the colon",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{s}"),
            400,
            "bad_head",
        ),
        shape(
            "obfuscated TE: obs-fold",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n\tchunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{s}"),
            400,
            "bad_head",
        ),
        shape(
            "obfuscated TE: bare LF before it",
            format!("POST /attack HTTP/1.1\r\nHost: x\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{s}"),
            400,
            "bad_head",
        ),
        shape(
            "TE in HTTP/1.0",
            format!("POST /attack HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n{s}"),
            400,
            "bad_framing",
        ),
        shape(
            "chunked after gzip",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{s}"),
            501,
            "transfer_coding",
        ),
        shape(
            "chunk size with a 0x prefix",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x0\r\n\r\n{s}"),
            400,
            "bad_chunk",
        ),
        shape(
            "chunk extension with a bare LF",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0;a\n\r\n{s}"),
            400,
            "bad_chunk",
        ),
        shape(
            "chunk data not followed by CRLF",
            format!("POST /attack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nAB\r\n0\r\n\r\n{s}"),
            400,
            "bad_chunk",
        ),
    ]
}

/// One shape on a fresh edge: a good request first, then the attack on the same connection.
fn check_shape(d: Driver, sh: &Shape) {
    let origin = Recording::start();
    let edge = Edge::start(&Cfg::new(d, origin.origin.addr));
    let mut c = Client::connect(edge.addr);
    let r = c.get("/first");
    assert_eq!(r.status, 200, "{}: the good request", sh.name);
    c.send(sh.bytes.as_bytes());
    let r = c
        .read_response(false)
        .unwrap_or_else(|| panic!("{}: closed without a response", sh.name));
    assert_error_response(sh.name, &r, sh.status, true);
    assert!(
        c.time_until_closed(3 * SEC).is_some(),
        "{}: connection still open after the {}",
        sh.name,
        sh.status
    );
    let label = format!("reason=\"{}\"", sh.reason);
    edge.assert_counted_and_logged(
        "edge_requests_invalid_total",
        &[&label],
        1.0,
        "request.invalid",
    );
    assert!(
        edge.wait_log_all(&["request.invalid", &label], 2 * SEC)
            .is_some(),
        "{}: no request.invalid line with {label}",
        sh.name
    );
    assert_eq!(
        edge.metric("edge_requests_invalid_total", &[]),
        1.0,
        "{}: counted under another reason too",
        sh.name
    );
    // All bytes edge sent went out before the answer; the origin saw only the good request.
    let raw = origin.raw();
    assert_eq!(origin.requests(), 1, "{}: origin saw {raw:?}", sh.name);
    assert!(
        !raw.contains("/smuggled"),
        "{}: smuggled request reached the origin: {raw:?}",
        sh.name
    );
    if sh.reason != "bad_chunk" {
        // Rejected on its head: nothing of it left edge.
        assert!(
            !raw.contains("/attack"),
            "{}: the rejected request reached the origin: {raw:?}",
            sh.name
        );
    }
}

both_drivers!(smuggling_shapes_get_400_and_never_reach_the_origin, |d| {
    let mut failed = Vec::new();
    for sh in shapes() {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_shape(d, &sh)));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("[{}] {msg}", sh.name));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
});

both_drivers!(tab_before_a_valid_te_value_is_plain_ows, |d| {
    // `Transfer-Encoding:\tchunked` is valid (HTAB is OWS): the body is framed as chunked, exactly.
    let origin = Origin::echo();
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(
        b"POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"abc");
    assert_eq!(c.get("/after").status, 200);
    assert_eq!(origin.seen_count(), 2);
});

both_drivers!(bytes_after_a_connection_close_request_are_ignored, |d| {
    let origin = Recording::start();
    let edge = Edge::start(&Cfg::new(d, origin.origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(
        format!("GET /only HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n{SMUGGLED}").as_bytes(),
    );
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let (rest, closed) = c.read_until_closed(3 * SEC);
    assert!(closed.is_some(), "connection not closed");
    assert!(
        rest.is_empty(),
        "a second response: {:?}",
        String::from_utf8_lossy(&rest)
    );
    let raw = origin.raw();
    assert_eq!(origin.requests(), 1, "{raw}");
    assert!(!raw.contains("/smuggled"), "{raw}");
});

both_drivers!(pipelined_requests_after_a_rejected_one_are_dropped, |d| {
    // Good, bad, good in one write: the first is answered, the second rejected, the third never served.
    let origin = Recording::start();
    let edge = Edge::start(&Cfg::new(d, origin.origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(format!("GET /one HTTP/1.1\r\nHost: x\r\n\r\nPOST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab{SMUGGLED}").as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 200);
    assert_error_response("second", &c.read_response(false).unwrap(), 400, true);
    let (rest, closed) = c.read_until_closed(3 * SEC);
    assert!(closed.is_some());
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    assert_eq!(origin.requests(), 1, "{}", origin.raw());
});

// Upstream responses with ambiguous or faulty framing: 502 `bad_response`, and that upstream connection
// is closed, never pooled.
both_drivers!(
    ambiguous_upstream_responses_get_502_and_are_not_pooled,
    |d| {
        let cases: [(&str, &[u8]); 8] = [
        ("/cl-te", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("/te-xchunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
        ("/te-gzip-chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("/chunked-twice", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
        ("/te-http10", b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n"),
        ("/bare-lf", b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok"),
        ("/space-colon", b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok"),
        ("/obs-fold", b"HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 2\r\n\r\nok"),
    ];
        let origin = Origin::start(move |req| {
            cases
                .iter()
                .find(|(p, _)| *p == req.target)
                .map_or_else(|| Reply::ok(b"good"), |(_, bytes)| Reply::raw(bytes, false))
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        for (i, (path, _)) in cases.iter().enumerate() {
            let r = c.get(path);
            assert_error_response(path, &r, 502, false);
            assert_eq!(
                edge.wait_metric(
                    "edge_upstream_errors_total",
                    &["kind=\"bad_response\""],
                    (i + 1) as f64
                ),
                (i + 1) as f64,
                "{path}"
            );
            // The connection that brought the bad response is closed: the origin sees it end.
            assert!(
                origin.wait_until(3 * SEC, |o| o.closed() == i + 1),
                "{path}: the upstream connection was kept"
            );
            assert_eq!(c.get("/good").body, b"good", "after {path}");
        }
        assert!(edge
            .wait_log_all(&["upstream.error", "kind=\"bad_response\""], 2 * SEC)
            .is_some());
    }
);

// HEAD, 204 and 304 answered with a body by a broken upstream: the client gets no body, the next
// response on its connection is clean, and the upstream connection is not reused.
both_drivers!(bodies_on_head_204_304_never_reach_the_client, |d| {
    let origin = Origin::start(|req| match (req.method.as_str(), req.target.as_str()) {
        ("HEAD", _) => Reply::raw(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false),
        (_, "/204") => Reply::raw(b"HTTP/1.1 204 No Content\r\n\r\nGARBAGE", false),
        (_, "/304") => Reply::raw(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\nGARBAGE",
            false,
        ),
        _ => Reply::ok(b"good"),
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    for (n, req) in [
        "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /204 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /304 HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    .iter()
    .enumerate()
    {
        c.send(req.as_bytes());
        let r = c.read_response(true).unwrap();
        assert!(matches!(r.status, 200 | 204 | 304), "{req}");
        let good = c.get("/good");
        assert_eq!(good.status, 200, "{req}: next response");
        assert_eq!(good.body, b"good", "{req}: stray bytes reached the client");
        assert!(c.buffered().is_empty(), "{req}: {:?}", c.buffered());
        // Each bad response's connection is dropped: one new upstream connection per bad response.
        assert_eq!(
            origin.accepted(),
            n + 2,
            "{req}: upstream connection reused"
        );
    }
});

both_drivers!(late_byte_on_an_idle_pooled_connection_poisons_it, |d| {
    // Connection 1 answers, then (when the test says so) sends one stray byte while idle in edge's pool.
    let (poke, poked) = mpsc::channel::<()>();
    let poked = Mutex::new(poked);
    let (wrote, stray_written) = mpsc::channel::<()>();
    let wrote = Mutex::new(wrote);
    let origin = Origin::script(move |mut s: TcpStream, id| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut b = [0u8; 4096];
        let mut buf = Vec::new();
        loop {
            let n = match s.read(&mut b) {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            buf.extend_from_slice(&b[..n]);
            while let Some(used) = complete_request(&buf) {
                buf.drain(..used);
                let body = format!("conn{id}");
                let r = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(r.as_bytes()).is_err() {
                    return;
                }
                if id == 1 {
                    let _ = poked.lock().unwrap().recv_timeout(Duration::from_secs(10));
                    let _ = s.write_all(b"X");
                    let _ = wrote.lock().unwrap().send(());
                }
            }
        }
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    assert_eq!(c.get("/a").body, b"conn1");
    // Edge pools the connection right after the response; the stray byte follows.
    assert_eq!(
        edge.wait_metric("edge_upstream_connections", &["state=\"idle\""], 1.0),
        1.0
    );
    poke.send(()).unwrap();
    stray_written
        .recv_timeout(Duration::from_secs(5))
        .expect("origin wrote the stray byte");
    let r = c.get("/b");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"conn2", "the poisoned connection was reused");
    assert_eq!(origin.accepted(), 2);
});

both_drivers!(absolute_form_target_authority_is_the_host, |d| {
    // RFC 9112 §3.2.2: the target's authority replaces Host; upstream gets origin-form and that Host.
    let origin = Origin::echo();
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(b"GET http://real.example:8080/p?q=1 HTTP/1.1\r\nHost: spoofed.example\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
    let seen = origin.last();
    assert_eq!(seen.target, "/p?q=1");
    assert_eq!(seen.header("host"), Some("real.example:8080"));
    assert_eq!(
        seen.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
            .count(),
        1
    );
    // A fragment in the target is 400 bad_head.
    c.send(b"GET /p#frag HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_error_response("fragment", &c.read_response(false).unwrap(), 400, true);
    edge.assert_counted_and_logged(
        "edge_requests_invalid_total",
        &["reason=\"bad_head\""],
        1.0,
        "request.invalid",
    );
    assert_eq!(origin.seen_count(), 1);
});
