//! The HTTP/1.1 session over the TLS transport (DESIGN.md "TLS", "Inbound deadlines", "HTTP/1.1
//! rules"): the `request` and `send` deadlines hold over TLS as over plain TCP, and Expect:
//! 100-continue and Upgrade (a byte tunnel) work through TLS.

use std::{
    io::{Read, Write},
    time::{Duration, Instant},
};

use crate::harness::{assert_about, read_request, Edge, Origin, Reply, Site, TlsConn};

const SEC: Duration = Duration::from_secs(1);

both_drivers!(
    a_stalled_head_over_tls_gets_408_at_the_request_deadline,
    |d| {
        let origin = Origin::fixed(b"ok");
        let site = Site::new();
        let edge = Edge::start(&site.cfg(d, origin.addr).timeout("request", "1s"));
        let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
        let t = Instant::now();
        c.send(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n")
            .unwrap();
        let r = c.read_response().expect("a 408");
        assert_about("408 over TLS", t.elapsed(), SEC, SEC);
        crate::harness::assert_error_response("stalled head over TLS", &r, 408, true);
        assert_eq!(
            edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"request\""], 1.0),
            1.0
        );
        assert_eq!(origin.accepted(), 0);
    }
);

both_drivers!(a_tls_client_that_never_reads_is_closed_at_send, |d| {
    const BIG: usize = 64 << 20;
    let origin = Origin::start(|_| Reply::ok(&vec![b'x'; BIG]));
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).timeout("send", "1s"));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    c.send(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert!(
        origin.wait_until(5 * SEC, |o| o.seen_count() == 1),
        "the request did not reach the origin"
    );
    let t = Instant::now();
    // Never read: once the socket buffers are full edge makes no progress and `send` expires.
    let active = edge.wait_metric_where("edge_connections_active", &[], 10 * SEC, |v| v == 0.0);
    let took = t.elapsed();
    assert_eq!(
        active, 0.0,
        "a TLS client that never reads still holds its connection"
    );
    assert_about(
        "close of a TLS client that stopped reading",
        took,
        SEC,
        2 * SEC,
    );
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"send\""], 1.0),
        1.0
    );
    drop(c);
});

both_drivers!(expect_100_continue_over_tls, |d| {
    let origin = Origin::start(|req| Reply::ok(&req.body));
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    c.send(
        b"POST /e HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let interim = c.read_any_head().expect("an interim response");
    assert_eq!(interim.status, 100);
    c.send(b"hello").unwrap();
    let r = c.read_response().expect("the final response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello");
});

both_drivers!(an_upgrade_over_tls_tunnels_bytes_both_ways, |d| {
    // The origin answers 101, then echoes every byte, upper-cased.
    let origin = Origin::script(|mut s, _| {
        let mut buf = Vec::new();
        if read_request(&mut s, &mut buf).is_none() {
            return;
        }
        let _ = s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n",
        );
        let mut b = [0u8; 4096];
        while let Ok(n) = s.read(&mut b) {
            if n == 0 || s.write_all(&b[..n].to_ascii_uppercase()).is_err() {
                return;
            }
        }
    });
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    c.send(b"GET /ws HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n")
        .unwrap();
    let r = c.read_any_head().expect("101");
    assert_eq!(r.status, 101);
    let mut got = c.take_buffered();
    for word in [&b"hello"[..], b" through", b" the tunnel"] {
        c.send(word).unwrap();
        let want = word.to_ascii_uppercase();
        let mut b = [0u8; 4096];
        while got.len() < want.len() {
            let n = c.s.read(&mut b).expect("tunnel read");
            assert!(n > 0, "tunnel closed");
            got.extend_from_slice(&b[..n]);
        }
        assert_eq!(got, want);
        got.clear();
    }
});

both_drivers!(a_slow_but_reading_tls_client_is_not_cut_off, |d| {
    const BIG: usize = 8 << 20;
    let body: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let origin = Origin::start(move |_| Reply::ok(&body));
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).timeout("send", "1s"));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    c.send(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // `send` bounds lack of progress, not the whole response: reading 1 MiB every 200 ms takes about
    // 1.6 s in all and must not be cut off.
    let t = Instant::now();
    let r = c.read_any_head().expect("response head");
    assert_eq!(r.status, 200);
    let mut got = c.take_buffered();
    let mut buf = vec![0u8; 1 << 16];
    while got.len() < BIG {
        std::thread::sleep(Duration::from_millis(200));
        let target = (got.len() + (1 << 20)).min(BIG);
        while got.len() < target {
            let want = buf.len().min(target - got.len());
            let n = c.s.read(&mut buf[..want]).expect("read");
            assert!(
                n > 0,
                "connection closed after {} of {BIG} body bytes",
                got.len()
            );
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert!(
        got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8),
        "body bytes differ"
    );
    assert!(
        t.elapsed() > SEC,
        "the slow read took only {:?}",
        t.elapsed()
    );
    assert_eq!(
        edge.metric("edge_inbound_timeouts_total", &["phase=\"send\""]),
        0.0
    );
});

both_drivers!(a_request_in_one_byte_tls_records_is_reassembled, |d| {
    let origin = Origin::start(|req| Reply::ok(&req.body));
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    let req = b"POST /bytes HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\n\r\nhello bytes";
    for b in req {
        // One write and flush per byte: each byte is a TLS record of its own.
        c.send(std::slice::from_ref(b)).unwrap();
    }
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello bytes");
    assert_eq!(origin.last().target, "/bytes");
});
