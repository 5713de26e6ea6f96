//! A client that leaves mid-request (DESIGN.md "Status codes", "Observability"): the request is not
//! lost silently. Its access line carries 499 (nginx's "client closed request") when the client left
//! before edge had an answer, or the answer's status when it left mid-response; it counts in
//! `edge_requests_total{status}` and `edge_requests_client_closed_total{phase}`, and its upstream
//! connection is closed, also while the upstream still works on it when the client's word is certain
//! (an HTTP/2 stream's reset). An HTTP/1.1 client's EOF then is taken for a half-close, and answered.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::harness::*;

const SEC: Duration = Duration::from_secs(1);

/// The request head and the part of its body the clients send before they leave.
const HEAD: &str = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
const PART: usize = 1000;

/// An origin that reads what arrives and never answers, counting the bytes: `got` says how far the
/// request came; the connection ends when edge closes it (`Origin::closed`).
fn counting_origin() -> (Origin, Arc<AtomicUsize>) {
    let got = Arc::new(AtomicUsize::new(0));
    let total = got.clone();
    let origin = Origin::script(move |mut s: TcpStream, _| {
        let _ = s.set_read_timeout(Some(60 * SEC));
        let mut b = [0u8; 65536];
        while let Ok(n @ 1..) = s.read(&mut b) {
            total.fetch_add(n, Ordering::SeqCst);
        }
    });
    (origin, got)
}

/// Edge on `cfg` with h2c on, `send` at 10 s and JSON access lines written to a file in `dir`.
fn start(cfg: Cfg, dir: &TempDir) -> (Edge, PathBuf) {
    let path = dir.0.join("access.log");
    let edge = Edge::start(
        &cfg.server("h2c", true)
            .timeout("send", "10s")
            .log("access", true)
            .log("access_format", "json")
            .log("access_path", path.to_str().unwrap()),
    );
    (edge, path)
}

/// The one access line in `path` (5 s max), parsed.
fn access_line(path: &Path) -> serde_json::Value {
    let lines = wait_lines(path, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    serde_json::from_str(&lines[0]).expect(&lines[0])
}

/// The client-closed counters: `edge_requests_client_closed_total` once it reaches `want` in `phase`,
/// and the other phase.
fn closed_counts(edge: &Edge, phase: &str, other: &str) -> (f64, f64) {
    let label = format!("phase=\"{phase}\"");
    let n = edge.wait_metric("edge_requests_client_closed_total", &[&label], 1.0);
    let other = format!("phase=\"{other}\"");
    (
        n,
        edge.metric("edge_requests_client_closed_total", &[&other]),
    )
}

/// What every test ends in: nothing in flight, no client connection open.
fn assert_settled(edge: &Edge) {
    assert_eq!(edge.wait_metric("edge_requests_in_flight", &[], 0.0), 0.0);
    assert_eq!(edge.wait_metric("edge_connections_active", &[], 0.0), 0.0);
}

both_drivers!(
    an_http1_client_that_leaves_mid_upload_is_logged_as_499,
    |d| {
        let (origin, got) = counting_origin();
        let dir = TempDir::new();
        let (edge, path) = start(Cfg::new(d, origin.addr), &dir);
        let mut c = Client::connect(edge.addr);
        c.send(HEAD.as_bytes());
        c.send(&[b'a'; PART]);
        // The head and the part reached the origin: edge is mid-body when the client leaves.
        assert!(
            wait_until(5 * SEC, || got.load(Ordering::SeqCst) >= HEAD.len() + PART),
            "the origin got {} bytes",
            got.load(Ordering::SeqCst)
        );
        drop(c);

        let line = access_line(&path);
        assert_eq!(line["status"], 499, "{line}");
        assert_eq!(line["protocol"], "http1", "{line}");
        assert_eq!(line["method"], "POST", "{line}");
        assert_eq!(
            edge.wait_metric("edge_requests_total", &["status=\"499\""], 1.0),
            1.0
        );
        assert_eq!(closed_counts(&edge, "request", "response"), (1.0, 0.0));
        assert!(
            origin.wait_until(5 * SEC, |o| o.closed() == 1),
            "edge kept the upstream connection of the abandoned upload open"
        );
        assert_settled(&edge);
    }
);

both_drivers!(an_http1_client_that_leaves_mid_head_is_logged_as_499, |d| {
    let (origin, got) = counting_origin();
    let dir = TempDir::new();
    let (edge, path) = start(Cfg::new(d, origin.addr), &dir);
    // No request: a close before any byte (a TCP health check), and one after the empty lines a
    // server ignores before a request line (RFC 9112 §2.2).
    drop(TcpStream::connect(edge.addr).unwrap());
    let mut empty = TcpStream::connect(edge.addr).unwrap();
    empty.write_all(b"\r\n\r\n").unwrap();
    drop(empty);
    assert_eq!(
        edge.wait_metric("edge_connections_total", &[], 2.0),
        2.0,
        "both connections accepted"
    );
    assert_settled(&edge);
    // Part of a head, then a close: a request the client left before an answer.
    let mut partial = TcpStream::connect(edge.addr).unwrap();
    partial
        .write_all(b"GET /partial HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    drop(partial);

    let line = access_line(&path);
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["protocol"], "http1", "{line}");
    assert!(
        line["request_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{line}"
    );
    assert_eq!(closed_counts(&edge, "request", "response"), (1.0, 0.0));
    assert_eq!(
        edge.metric("edge_requests_total", &[]),
        1.0,
        "the two connections without a request count no request"
    );
    assert_eq!(got.load(Ordering::SeqCst), 0, "nothing reached the origin");
    assert_settled(&edge);
});

both_drivers!(
    an_http1_client_that_leaves_mid_response_is_logged_with_the_answer,
    |d| {
        const BIG: usize = 16 << 20;
        let big: &'static [u8] = Box::leak(vec![b'x'; BIG].into_boxed_slice());
        let origin = Origin::start(move |_| Reply::ok(big));
        let dir = TempDir::new();
        let (edge, path) = start(Cfg::new(d, origin.addr), &dir);
        // A small receive buffer: most of the body is still to come when the client leaves.
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        s.connect(&edge.addr.into()).unwrap();
        let mut s: TcpStream = s.into();
        s.set_read_timeout(Some(5 * SEC)).unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut head = [0u8; 1024];
        let n = s.read(&mut head).unwrap();
        assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);
        // Closing with unread bytes resets the connection: edge's next write fails.
        drop(s);

        let line = access_line(&path);
        assert_eq!(line["status"], 200, "{line}");
        let sent = line["response_bytes"].as_u64().expect("response_bytes");
        assert!(sent < BIG as u64, "the whole body counted as sent: {line}");
        assert_eq!(closed_counts(&edge, "response", "request"), (1.0, 0.0));
        assert_eq!(edge.metric("edge_requests_total", &["status=\"499\""]), 0.0);
        // Not edge's failure: no truncation, no send timeout.
        assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
        assert_eq!(
            edge.metric("edge_inbound_timeouts_total", &["phase=\"send\""]),
            0.0
        );
        assert_settled(&edge);
    }
);

// An HTTP/1.1 client's EOF is not taken for abandonment while the upstream works: it may be a
// half-close after a whole request, which is answered (DESIGN.md "Fault matrix", a.), however long the
// upstream takes.
both_drivers!(
    an_http1_client_that_half_closes_after_its_request_gets_a_slow_answer,
    |d| {
        let origin = Origin::start(|_| Reply::ok(b"late").delayed(3 * SEC / 2));
        let dir = TempDir::new();
        let (edge, path) = start(Cfg::new(d, origin.addr), &dir);
        let mut c = Client::connect(edge.addr);
        c.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
        c.s.shutdown(std::net::Shutdown::Write).unwrap();
        let r = c
            .read_response(false)
            .expect("the answer to a half-closed client");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"late"[..]));
        let line = access_line(&path);
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(edge.metric("edge_requests_client_closed_total", &[]), 0.0);
        assert_settled(&edge);
    }
);

// A route that takes nginx's side: the close (a half-close too) while the upstream works ends the
// exchange at once.
both_drivers!(
    a_route_with_abandon_on_client_close_closes_the_upstream_when_the_client_leaves,
    |d| {
        let (origin, got) = counting_origin();
        let dir = TempDir::new();
        let cfg = Cfg::new(d, origin.addr).route_field("abandon_on_client_close", true);
        let (edge, path) = start(cfg, &dir);
        let mut c = Client::connect(edge.addr);
        let get = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
        c.send(get.as_bytes());
        assert!(
            wait_until(5 * SEC, || got.load(Ordering::SeqCst) >= get.len()),
            "the request never reached the origin"
        );
        c.s.shutdown(std::net::Shutdown::Write).unwrap();
        // Well before the upstream's zombie verdict (10 s) and request timeout (30 s).
        assert!(
            origin.wait_until(5 * SEC, |o| o.closed() == 1),
            "edge kept the upstream connection of the abandoned request open"
        );
        assert!(c.closed_by_peer(), "edge kept the client connection open");
        let line = access_line(&path);
        assert_eq!(line["status"], 499, "{line}");
        assert_eq!(closed_counts(&edge, "request", "response"), (1.0, 0.0));
        assert_eq!(edge.metric("edge_upstream_timeouts_total", &[]), 0.0);
        assert_settled(&edge);
    }
);

/// An HTTP/2 client resets its stream mid-upload (`upload`: a POST of which [`PART`] bytes reached the
/// origin) or while the origin works on a GET: either way before edge had an answer, so the stream is
/// logged as 499, counted as a client reset and a client close, and its upstream connection closed.
fn h2_stream_reset_is_logged_as_499(d: Driver, upload: bool) {
    let (origin, got) = counting_origin();
    let dir = TempDir::new();
    let (edge, path) = start(Cfg::new(d, origin.addr), &dir);
    let authority = edge.addr.to_string();
    block_on(async {
        let c = h2_connect(edge.addr).await;
        let req = match upload {
            true => http::Request::post(format!("http://{authority}/up"))
                .header("content-length", "100000"),
            false => http::Request::get(format!("http://{authority}/slow")),
        };
        let mut send = c.clone().ready().await.unwrap();
        let (_resp, mut body) = send.send_request(req.body(()).unwrap(), !upload).unwrap();
        let reached = match upload {
            true => PART,
            false => 1,
        };
        if upload {
            send_all(&mut body, &[b'a'; PART], false).await.unwrap();
        }
        settle(5 * SEC, "the request never reached the origin", || {
            got.load(Ordering::SeqCst) >= reached
        })
        .await;
        body.send_reset(h2::Reason::CANCEL);
        // The connection stays open (its task sends the RST_STREAM) until edge has let go upstream.
        settle(8 * SEC, "the upstream connection stayed open", || {
            origin.closed() > 0
        })
        .await;
    });
    let line = access_line(&path);
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["protocol"], "h2", "{line}");
    assert_eq!(closed_counts(&edge, "request", "response"), (1.0, 0.0));
    assert_eq!(
        edge.metric("edge_http2_resets_total", &["side=\"client\""]),
        1.0
    );
}

both_drivers!(an_h2_stream_reset_mid_upload_is_logged_as_499, |d| {
    h2_stream_reset_is_logged_as_499(d, true);
});

both_drivers!(
    an_h2_stream_reset_while_its_upstream_works_is_logged_as_499,
    |d| {
        h2_stream_reset_is_logged_as_499(d, false);
    }
);
