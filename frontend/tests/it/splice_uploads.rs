//! Request bodies by splice (DESIGN.md "Memory under slow readers and large bodies"): to an upstream with
//! `splice_request_bodies = true`, the rest of a plain HTTP/1.1 `Content-Length` upload goes from the
//! client's socket to the upstream's through a pipe (`edge_request_spliced_total`); without it (the
//! default) it goes by copy. It arrives whole and byte-exact, both connections stay usable
//! afterwards, and its failures are answered as the copy's are: a client that stalls gets 408 at
//! `request`, a client that leaves ends the exchange and its upstream connection, an upstream that
//! answers early has its answer relayed.

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::mpsc,
    thread,
    time::Duration,
};

use crate::harness::{Cfg, Client, Edge, Origin, Reply};

const SEC: Duration = Duration::from_secs(1);

/// Far more than the head's read brings along, so the rest goes by splice.
const BODY: usize = 8 << 20;

fn byte_at(i: usize) -> u8 {
    (i % 251) as u8
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(byte_at).collect()
}

/// The head of a `POST /up` of `len` bytes.
fn post_head(len: usize) -> Vec<u8> {
    format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n").into_bytes()
}

/// An origin that answers each request with the length of its body and how many of its bytes matched
/// the pattern in a row from the start: `"<len> <matched>"`.
fn checking_origin() -> Origin {
    Origin::start(|req| {
        let matched = req
            .body
            .iter()
            .enumerate()
            .take_while(|&(i, b)| *b == byte_at(i))
            .count();
        Reply::ok(format!("{} {matched}", req.body.len()).as_bytes())
    })
}

/// The config of these tests: the origin's upstream splices request bodies.
fn splicing(d: crate::harness::Driver, origin: &Origin) -> Cfg {
    Cfg::new(d, origin.addr).upstream_field("splice_request_bodies", true)
}

fn spliced(edge: &Edge) -> f64 {
    edge.metric("edge_request_spliced_total", &[])
}

both_drivers!(
    large_uploads_go_by_splice_whole_on_kept_alive_connections,
    |d| {
        let origin = checking_origin();
        let edge = Edge::start(&splicing(d, &origin));
        let body = std::sync::Arc::new(pattern(BODY));
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let (addr, body) = (edge.addr, body.clone());
                thread::spawn(move || {
                    // Two uploads back to back, pipelined: the first one's splice must stop at its
                    // Content-Length, leaving the second in the socket.
                    let mut c = Client::connect(addr);
                    for _ in 0..2 {
                        c.send(&post_head(BODY));
                        c.send(&body);
                    }
                    (0..2)
                        .map(|_| {
                            let r = c.read_response(false).expect("a response");
                            (r.status, r.text())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let whole = (200, format!("{BODY} {BODY}"));
        for c in clients {
            assert_eq!(c.join().unwrap(), [whole.clone(), whole.clone()]);
        }
        assert_eq!(spliced(&edge), 8.0, "every upload went by splice");
        // The second upload of each client reused the upstream connection of its first: a spliced body
        // leaves nothing behind on either connection.
        assert_eq!(origin.accepted(), 4);
        // A short upload and a chunked one (its framing is checked on the way) stay on the copy.
        let mut c = Client::connect(edge.addr);
        c.send(&post_head(1000));
        c.send(&pattern(1000));
        let r = c.read_response(false).expect("a response");
        assert_eq!((r.status, r.text()), (200, "1000 1000".to_string()));
        c.send(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
        for chunk in body.chunks(1 << 20) {
            c.send(format!("{:x}\r\n", chunk.len()).as_bytes());
            c.send(chunk);
            c.send(b"\r\n");
        }
        c.send(b"0\r\n\r\n");
        let r = c.read_response(false).expect("a response");
        assert_eq!((r.status, r.text()), (200, format!("{BODY} {BODY}")));
        assert_eq!(spliced(&edge), 8.0);
        edge.assert_upstream_settled();
    }
);

both_drivers!(a_stalled_spliced_upload_gets_408_at_request, |d| {
    let origin = checking_origin();
    let edge = Edge::start(&splicing(d, &origin).timeout("request", "2s"));
    let mut c = Client::connect(edge.addr);
    c.send(&post_head(BODY));
    c.send(&pattern(1 << 20));
    let r = c.read_response(false).expect("a 408 for a stalled upload");
    assert_eq!(r.status, 408);
    assert!(
        c.time_until_closed(5 * SEC).is_some(),
        "connection still open after the 408"
    );
    edge.assert_counted_and_logged(
        "edge_inbound_timeouts_total",
        &["phase=\"request\""],
        1.0,
        "request.timeout",
    );
    assert_eq!(spliced(&edge), 1.0);
    // The origin never got a whole request, and its connection was given up.
    assert_eq!(origin.seen_count(), 0);
    assert!(
        origin.wait_until(5 * SEC, |o| o.closed() == o.accepted()),
        "edge kept the upstream connection of an aborted upload open"
    );
    edge.assert_upstream_settled();
});

both_drivers!(a_client_leaving_mid_spliced_upload_ends_the_exchange, |d| {
    let origin = checking_origin();
    let edge = Edge::start(&splicing(d, &origin));
    let mut s = TcpStream::connect(edge.addr).unwrap();
    s.write_all(&post_head(BODY)).unwrap();
    s.write_all(&pattern(2 << 20)).unwrap();
    drop(s);
    assert!(
        origin.wait_until(10 * SEC, |o| o.accepted() == 1 && o.closed() == 1),
        "edge kept the upstream connection of an abandoned upload open"
    );
    assert_eq!(origin.seen_count(), 0, "the origin got a whole request");
    assert_eq!(spliced(&edge), 1.0);
    // The worker goes on serving uploads.
    let mut c = Client::connect(edge.addr);
    c.send(&post_head(BODY));
    c.send(&pattern(BODY));
    let r = c.read_response(false).expect("a response");
    assert_eq!((r.status, r.text()), (200, format!("{BODY} {BODY}")));
    assert_eq!(spliced(&edge), 2.0);
    edge.assert_upstream_settled();
});

both_drivers!(an_upstream_answering_mid_spliced_upload_is_relayed, |d| {
    // The origin reads the head and 1 MiB of the body (by then the rest streams by splice), answers 413
    // and closes its sending side, then drains what still comes until edge closes.
    let (tx, rx) = mpsc::channel();
    let origin = Origin::script(move |mut s, _| {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < (1 << 20) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
        let _ = s.write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 7\r\n\r\ntoo big");
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.set_read_timeout(Some(30 * SEC));
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        let _ = tx.send(got);
    });
    let edge = Edge::start(&splicing(d, &origin));
    let mut c = Client::connect(edge.addr);
    c.send(&post_head(64 << 20));
    // The body goes from a thread of its own: edge stops taking it once the answer is relayed.
    let mut w = c.s.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let chunk = pattern(1 << 20);
        for _ in 0..64 {
            if w.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let r = c.read_response(false).expect("the upstream's early answer");
    assert_eq!((r.status, r.text()), (413, "too big".to_string()));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        c.time_until_closed(10 * SEC).is_some(),
        "client connection kept after an early answer"
    );
    let got = rx
        .recv_timeout(10 * SEC)
        .expect("edge closed the upstream connection");
    assert!(got < 64 << 20, "the whole body went upstream ({got} bytes)");
    sender.join().unwrap();
    assert_eq!(spliced(&edge), 1.0);
    assert_eq!(edge.metric("edge_requests_total", &["status=\"413\""]), 1.0);
    edge.assert_upstream_settled();
});

both_drivers!(uploads_go_by_copy_without_splice_request_bodies, |d| {
    let origin = checking_origin();
    let edge = Edge::start(&Cfg::new(d, origin.addr));
    let mut c = Client::connect(edge.addr);
    c.send(&post_head(BODY));
    c.send(&pattern(BODY));
    let r = c.read_response(false).expect("a response");
    assert_eq!((r.status, r.text()), (200, format!("{BODY} {BODY}")));
    assert_eq!(spliced(&edge), 0.0, "spliced without being asked to");
    edge.assert_upstream_settled();
});
