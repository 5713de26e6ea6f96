//! HTTP/1.1 conformance through the real binary (DESIGN.md "HTTP/1.1 rules"): interim 1xx
//! responses forwarded before the final one (never to an HTTP/1.0 client), `Expect: 100-continue`
//! forwarded (the upstream's 100 or final status reaches the client; edge's own 100 after its wait),
//! Upgrade forwarded only when asked (h2c stripped) with a byte tunnel after 101, and Max-Forwards on
//! OPTIONS and TRACE.

use std::{
    io::{Read, Write},
    net::{Shutdown, TcpStream},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::harness::{assert_about, Cfg, Client, Edge, Origin, Reply};

const SEC: Duration = Duration::from_secs(1);

/// Reads one request head from `s` (bytes after it stay in `buf`); `None` on EOF or error.
fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let h = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            buf.drain(..i + 4);
            return Some(h);
        }
        fill(s, buf)?;
    }
}

/// Reads exactly `n` bytes (those already in `buf` first); `None` on EOF or error.
fn read_exact(s: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Option<Vec<u8>> {
    while buf.len() < n {
        fill(s, buf)?;
    }
    Some(buf.drain(..n).collect())
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut b = [0u8; 4096];
    match s.read(&mut b) {
        Ok(n) if n > 0 => {
            buf.extend_from_slice(&b[..n]);
            Some(())
        }
        _ => None,
    }
}

fn has(head: &str, line: &str) -> bool {
    head.to_ascii_lowercase()
        .contains(&format!("\r\n{}\r\n", line.to_ascii_lowercase()))
}

both_drivers!(
    interim_responses_reach_the_client_before_the_final_one,
    |d| {
        let origin = Origin::start(|_| {
            Reply::raw(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            false,
        )
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        for _ in 0..2 {
            c.send(b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n");
            let hints = c.read_any_head().expect("the 103");
            assert_eq!(hints.status, 103);
            assert_eq!(hints.header("link"), Some("</a.css>; rel=preload"));
            assert_eq!(hints.header("via"), Some("1.1 edge"));
            assert_eq!(hints.header("content-length"), None);
            let r = c.read_response(false).expect("the final response");
            assert_eq!((r.status, r.text().as_str()), (200, "ok"));
        }
        assert_eq!(origin.accepted(), 1, "the upstream connection was reused");

        // An HTTP/1.0 client never gets a 1xx (RFC 9110 §15.2).
        let mut c = Client::connect(edge.addr);
        c.send(b"GET /page HTTP/1.0\r\n\r\n");
        let (bytes, closed) = c.read_until_closed(5 * SEC);
        assert!(closed.is_some());
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text:?}");
        assert!(!text.contains("103"), "{text:?}");
        edge.assert_upstream_settled();
    }
);

both_drivers!(
    interim_response_during_the_body_is_forwarded_and_the_body_completes,
    |d| {
        let origin = Origin::script(|mut s, _| {
            let mut buf = Vec::new();
            while let Some(head) = read_head(&mut s, &mut buf) {
                if !head.starts_with("POST") {
                    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                // The hint goes out before the body has arrived.
                if s.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </b.js>\r\n\r\n")
                    .is_err()
                {
                    return;
                }
                let Some(body) = read_exact(&mut s, &mut buf, 10) else {
                    return;
                };
                let mut reply = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".to_vec();
                reply.extend_from_slice(&body);
                if s.write_all(&reply).is_err() {
                    return;
                }
            }
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
        c.send(b"56789");
        let hints = c.read_any_head().expect("the 103");
        assert_eq!(hints.status, 103);
        assert_eq!(hints.header("link"), Some("</b.js>"));
        let r = c.read_response(false).expect("the final response");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"0123456789"[..]));
        assert_eq!(r.header("connection"), None, "the connection is kept");
        assert_eq!(c.get("/again").status, 200);
        edge.assert_upstream_settled();
    }
);

both_drivers!(
    expect_continue_upstream_100_is_relayed_then_the_body_sent,
    |d| {
        let (tx, rx) = mpsc::channel();
        let origin = Origin::script(move |mut s, _| {
            let mut buf = Vec::new();
            let Some(head) = read_head(&mut s, &mut buf) else {
                return;
            };
            let _ = tx.send(head);
            // No body byte arrives before the 100: edge holds it.
            assert!(buf.is_empty(), "body bytes before the 100");
            s.write_all(b"HTTP/1.1 100 Continue\r\nX-From: origin\r\n\r\n")
                .unwrap();
            let body = read_exact(&mut s, &mut buf, 5).expect("the body after the 100");
            let mut reply = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".to_vec();
            reply.extend_from_slice(&body);
            let _ = s.write_all(&reply);
            let _ = read_head(&mut s, &mut buf);
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(
            b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        );
        let go = c.read_any_head().expect("a 100");
        assert_eq!(go.status, 100);
        assert_eq!(
            go.header("x-from"),
            Some("origin"),
            "the upstream's 100, not edge's"
        );
        let head = rx.recv_timeout(5 * SEC).unwrap();
        assert!(has(&head, "expect: 100-continue"), "{head}");
        c.send(b"hello");
        let r = c.read_response(false).expect("the final response");
        assert_eq!((r.status, r.text().as_str()), (200, "hello"));
        assert_eq!(r.header("connection"), None, "the connection is kept");
        edge.assert_upstream_settled();
    }
);

both_drivers!(
    expect_continue_final_status_is_relayed_without_the_body_and_nothing_reused,
    |d| {
        let (tx, rx) = mpsc::channel();
        let origin = Origin::script(move |mut s, id| {
            let mut buf = Vec::new();
            if read_head(&mut s, &mut buf).is_none() {
                return;
            }
            if id == 1 {
                s.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nnope")
                    .unwrap();
            } else {
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .unwrap();
            }
            // Whatever else arrives (it must be nothing) until edge closes.
            s.set_read_timeout(Some(10 * SEC)).unwrap();
            while fill(&mut s, &mut buf).is_some() {}
            let _ = tx.send((id, buf.len()));
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(b"PUT /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
        let r = c.read_response(false).expect("the 401");
        assert_eq!((r.status, r.text().as_str()), (401, "nope"));
        assert_eq!(r.header("connection"), Some("close"));
        assert!(
            c.time_until_closed(5 * SEC).is_some(),
            "client connection kept"
        );
        let (id, extra) = rx
            .recv_timeout(5 * SEC)
            .expect("edge did not close the upstream connection that answered early");
        assert_eq!((id, extra), (1, 0), "the upstream received body bytes");
        // The next request gets a fresh upstream connection; nothing was counted as an upstream error.
        assert_eq!(Client::connect(edge.addr).get("/next").status, 200);
        assert_eq!(origin.accepted(), 2);
        assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
        assert_eq!(edge.metric("edge_requests_total", &["status=\"401\""]), 1.0);
    }
);

both_drivers!(
    expect_continue_silent_upstream_gets_edges_100_after_the_wait,
    |d| {
        let origin = Origin::echo();
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        let started = Instant::now();
        c.send(
            b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        );
        let go = c.read_any_head().expect("a 100");
        assert_eq!(go.status, 100);
        assert_eq!(go.header("via"), None, "edge's own 100");
        assert_about(
            "edge's own 100 Continue",
            started.elapsed(),
            SEC,
            Duration::from_millis(700),
        );
        c.send(b"hello");
        let r = c.read_response(false).expect("the final response");
        assert_eq!((r.status, r.text().as_str()), (200, "hello"));
        assert_eq!(origin.last().header("expect"), Some("100-continue"));
        // An HTTP/1.0 client's Expect is ignored (RFC 9110 §10.1.1): not forwarded, no 100.
        let mut c = Client::connect(edge.addr);
        c.send(b"POST /up HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab");
        let (bytes, _) = c.read_until_closed(5 * SEC);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text:?}");
        assert_eq!(origin.last().header("expect"), None);
        edge.assert_upstream_settled();
    }
);

/// An origin that answers an upgrade request with 101 and `hi`, then echoes bytes; on EOF it sends `bye`
/// and closes. A request without Upgrade gets 200 `plain`. Request heads go to `tx`.
fn upgrading_origin(tx: mpsc::Sender<String>) -> Origin {
    Origin::script(move |mut s, _| {
        let mut buf = Vec::new();
        while let Some(head) = read_head(&mut s, &mut buf) {
            let upgrade = has(&head, "upgrade: websocket");
            let _ = tx.send(head);
            if !upgrade {
                if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
                    .is_err()
                {
                    return;
                }
                continue;
            }
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: abc\r\n\r\nhi")
                .unwrap();
            if !buf.is_empty() && s.write_all(&std::mem::take(&mut buf)).is_err() {
                return;
            }
            let mut b = [0u8; 4096];
            loop {
                match s.read(&mut b) {
                    Ok(0) => break,
                    Ok(n) => {
                        if s.write_all(&b[..n]).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
            let _ = s.write_all(b"bye");
            return;
        }
    })
}

const UPGRADE: &[u8] =
    b"GET /chat HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n";

/// Reads exactly `n` bytes from the client (its buffered bytes first).
fn client_exact(c: &mut Client, n: usize) -> Vec<u8> {
    let mut got = c.take_buffered();
    let mut b = [0u8; 4096];
    while got.len() < n {
        let k = c.s.read(&mut b).expect("tunnel bytes");
        assert!(k > 0, "EOF inside the tunnel after {got:?}");
        got.extend_from_slice(&b[..k]);
    }
    assert_eq!(got.len(), n, "{got:?}");
    got
}

both_drivers!(upgrade_tunnels_bytes_after_101_with_half_close, |d| {
    let (tx, rx) = mpsc::channel();
    let origin = upgrading_origin(tx);
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(UPGRADE);
    let r = c.read_any_head().expect("the 101");
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    assert_eq!(r.header("connection"), Some("upgrade"));
    assert_eq!(r.header("sec-websocket-accept"), Some("abc"));
    let head = rx.recv_timeout(5 * SEC).unwrap();
    assert!(has(&head, "upgrade: websocket"), "{head}");
    assert!(has(&head, "connection: upgrade"), "{head}");
    assert!(has(&head, "sec-websocket-key: k"), "{head}");
    assert_eq!(client_exact(&mut c, 2), b"hi");
    for msg in [&b"ping"[..], &b"a longer frame of bytes"[..]] {
        c.send(msg);
        assert_eq!(client_exact(&mut c, msg.len()), msg);
    }
    assert_eq!(
        edge.wait_metric("edge_upstream_connections", &["state=\"active\""], 1.0),
        1.0
    );
    // The client's half-close reaches the origin, whose last bytes still reach the client.
    c.s.shutdown(Shutdown::Write).unwrap();
    let (rest, closed) = c.read_until_closed(5 * SEC);
    assert_eq!(rest, b"bye");
    assert!(closed.is_some(), "the tunnel did not close");
    assert_eq!(edge.metric("edge_requests_total", &["status=\"101\""]), 1.0);
    assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
    edge.assert_upstream_settled();
});

both_drivers!(upgrade_answered_without_101_is_a_normal_response, |d| {
    let origin = Origin::start(|_| Reply::ok(b"no switch"));
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(UPGRADE);
    let r = c.read_response(false).expect("the 200");
    assert_eq!((r.status, r.text().as_str()), (200, "no switch"));
    assert_eq!(r.header("connection"), None);
    assert_eq!(origin.last().header("upgrade"), Some("websocket"));
    // The Upgrade is forgotten: the same connections serve the next request.
    assert_eq!(c.get("/next").status, 200);
    assert_eq!(origin.accepted(), 1);
    // h2c is stripped (edge speaks HTTP/1.1 upstream) with the fields Connection names.
    c.send(b"GET /h2c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
    let seen = origin.last();
    assert_eq!(seen.target, "/h2c");
    for gone in ["upgrade", "http2-settings", "connection"] {
        assert_eq!(
            seen.header(gone),
            None,
            "{gone} forwarded: {:?}",
            seen.headers
        );
    }
});

both_drivers!(unsolicited_101_is_502, |d| {
    let (tx, _rx) = mpsc::channel();
    let origin = Origin::script(move |mut s, _| {
        let mut buf = Vec::new();
        if let Some(head) = read_head(&mut s, &mut buf) {
            let _ = tx.send(head);
            let _ = s.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
            );
            let _ = fill(&mut s, &mut buf);
        }
    });
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(b"GET /h2c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
    let r = c.read_response(false).expect("a 502");
    assert_eq!(r.status, 502);
    edge.assert_counted_and_logged(
        "edge_upstream_errors_total",
        &["kind=\"bad_response\""],
        1.0,
        "upstream.error",
    );
    edge.assert_upstream_settled();
});

both_drivers!(idle_tunnel_is_closed_after_the_idle_timeout, |d| {
    let (tx, _rx) = mpsc::channel();
    let origin = upgrading_origin(tx);
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("idle", "1s"));
    let mut c = Client::connect(edge.addr);
    c.send(UPGRADE);
    assert_eq!(c.read_any_head().unwrap().status, 101);
    assert_eq!(client_exact(&mut c, 2), b"hi");
    let started = Instant::now();
    let (_, closed) = c.read_until_closed(5 * SEC);
    assert!(closed.is_some(), "an idle tunnel stayed open");
    assert_about(
        "idle tunnel",
        started.elapsed(),
        SEC,
        Duration::from_millis(700),
    );
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 1.0),
        1.0
    );
    edge.assert_upstream_settled();
});

both_drivers!(
    max_forwards_zero_is_answered_by_edge_and_decremented_otherwise,
    |d| {
        let origin =
            Origin::start(|req| Reply::ok(req.header("max-forwards").unwrap_or("none").as_bytes()));
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(b"OPTIONS * HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\n\r\n");
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("0"));
        assert!(
            r.header("allow").is_some_and(|a| a.contains("GET")),
            "{r:?}"
        );
        c.send(b"TRACE /x HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\nCookie: secret\r\n\r\n");
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 405);
        assert!(r.header("allow").is_some());
        assert!(!r.text().contains("secret"), "edge reflected the request");
        assert_eq!(origin.seen_count(), 0);
        for (req, want) in [
            (
                "OPTIONS /x HTTP/1.1\r\nHost: x\r\nMax-Forwards: 3\r\n\r\n",
                "2",
            ),
            (
                "TRACE /x HTTP/1.1\r\nHost: x\r\nMax-Forwards: 1\r\n\r\n",
                "0",
            ),
            ("GET /x HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\n\r\n", "0"),
        ] {
            c.send(req.as_bytes());
            let r = c.read_response(false).unwrap();
            assert_eq!((r.status, r.text().as_str()), (200, want), "{req:?}");
        }
        assert_eq!(edge.metric("edge_requests_total", &["status=\"405\""]), 1.0);
    }
);
