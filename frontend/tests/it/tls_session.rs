//! Deadlines, capacity and the HTTP/1.1 session over the TLS transport (DESIGN.md "TLS", "Inbound
//! deadlines", "Capacity", "HTTP/1.1 rules"): `handshake_timeout` from accept, then `idle`; unfinished
//! handshakes at `max_connections` do not stop health probes, and a TLS client over a busy limit is
//! shed; the `request` and `send` deadlines hold over TLS as over plain TCP; Expect: 100-continue and
//! Upgrade (a byte tunnel) work through TLS.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use crate::harness::{
    assert_about, read_request, Client, Drip, Edge, Origin, Reply, Site, TlsConn,
};

const SEC: Duration = Duration::from_secs(1);
const HANDSHAKES: &str = "edge_tls_handshakes_total";

/// A real ClientHello for `localhost` (the bytes a rustls client sends first).
fn client_hello(site: &Site) -> Vec<u8> {
    let mut conn =
        rustls::ClientConnection::new(site.client(), "localhost".try_into().unwrap()).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

both_drivers!(handshake_timeout_closes_silent_and_dripping_sockets, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).tls("handshake_timeout", "1s"));
    let addr = edge.tls_addr();
    let active = || edge.metric("edge_connections_active", &[]);
    assert_eq!(edge.wait_metric("edge_connections_active", &[], 0.0), 0.0);

    // Connects and sends nothing.
    let started = Instant::now();
    let mut silent = Client::connect(addr);
    let took = silent
        .time_until_closed(5 * SEC)
        .expect("silent socket closed");
    assert_about("silent socket closed", took, SEC, SEC);

    // Drips a real ClientHello, one byte every 300 ms: the deadline runs from accept, not per read.
    let hello = client_hello(&site);
    let mut drip = Client::connect(addr);
    let dripping = Drip::start(&drip.s, hello.clone(), 1, Duration::from_millis(300));
    let took = drip
        .time_until_closed(5 * SEC)
        .expect("dripping socket closed");
    let written = dripping.stop();
    assert_about("dripping socket closed", took, SEC, SEC);
    assert!(
        written < hello.len(),
        "the whole hello went out ({written} bytes)"
    );

    assert_eq!(
        edge.wait_metric(HANDSHAKES, &["result=\"timeout\""], 2.0),
        2.0
    );
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"handshake\""], 2.0),
        2.0
    );
    assert_eq!(edge.wait_metric("edge_connections_active", &[], 0.0), 0.0);
    assert!(started.elapsed() < 10 * SEC);
    // A client that completes its handshake in time is served.
    let mut c = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
    assert_eq!(c.get("/").body, b"ok");
    drop(c);
    assert_eq!(
        edge.wait_metric("edge_connections_active", &[], 0.0),
        0.0,
        "{}",
        active()
    );
});

both_drivers!(
    unfinished_handshakes_at_the_limit_do_not_stop_health_probes,
    |d| {
        let origin = Origin::fixed(b"ok");
        let site = Site::new();
        let edge = Edge::start(&site.cfg(d, origin.addr).server("max_connections", 16));
        let addr = edge.tls_addr();
        let hello = client_hello(&site);
        // 20 TLS sockets that never finish: each sent the first half of a ClientHello.
        let stuck: Vec<TcpStream> = (0..20)
            .map(|_| {
                let s = TcpStream::connect(addr).unwrap();
                std::io::Write::write_all(&mut &s, &hello[..hello.len() / 2]).unwrap();
                s
            })
            .collect();
        assert!(
            crate::harness::wait_until(5 * SEC, || edge.metric("edge_connections_active", &[])
                >= 15.0),
            "the stuck sockets were not accepted"
        );
        let mut plain = Client::connect(edge.plain.unwrap());
        let r = plain.get("/_health");
        assert_eq!(r.status, 200, "plain health probe: {:?}", r.text());
        let mut tls = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
        let r = tls.get("/_health");
        assert_eq!(r.status, 200, "TLS health probe: {:?}", r.text());
        // The 4 sockets over the limit were evicted, shed or timed out (over capacity a handshake gets
        // 1 s), and the process settles back within the limit.
        let made_room = || {
            edge.metric("edge_connections_evicted_total", &[])
                + edge.metric("edge_connections_shed_total", &[])
                + edge.metric(HANDSHAKES, &["result=\"timeout\""])
        };
        assert!(
            crate::harness::wait_until(5 * SEC, || made_room() >= 4.0),
            "only {} connections evicted, shed or timed out",
            made_room()
        );
        assert!(
            crate::harness::wait_until(5 * SEC, || edge.metric("edge_connections_active", &[])
                <= 16.0),
            "{} connections active against max_connections = 16",
            edge.metric("edge_connections_active", &[])
        );
        drop(stuck);
    }
);

both_drivers!(
    busy_at_the_limit_a_tls_client_is_shed_with_503_but_health_answers,
    |d| {
        const MAX: usize = 16;
        // Slow requests hold every slot: nothing is evictable.
        let origin = Origin::start(|req| match req.target.as_str() {
            "/slow" => Reply::ok(b"slow").delayed(3 * SEC),
            _ => Reply::ok(b"fast"),
        });
        let site = Site::new();
        let edge = Edge::start(&site.cfg(d, origin.addr).server("max_connections", MAX));
        let busy: Vec<Client> = (0..MAX)
            .map(|_| {
                let mut c = Client::connect(edge.plain.unwrap());
                c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
                c
            })
            .collect();
        assert!(
            origin.wait_until(5 * SEC, |o| o.seen_count() >= MAX),
            "the slow requests did not all reach the origin ({})",
            origin.seen_count()
        );
        let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
        let r = c.get("/x");
        crate::harness::assert_error_response("TLS over the limit", &r, 503, true);
        assert_eq!(r.header("retry-after"), Some("1"));
        let mut h = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
        let r = h.get("/_health");
        assert_eq!(
            r.status,
            200,
            "TLS health probe at the limit: {:?}",
            r.text()
        );
        assert!(
            edge.wait_metric_where(
                "edge_connections_shed_total",
                &["reason=\"limit\""],
                2 * SEC,
                |v| v >= 1.0
            ) >= 1.0
        );
        drop(busy);
    }
);

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

both_drivers!(
    garbage_and_cut_hellos_count_as_failed_but_a_bare_connect_does_not,
    |d| {
        let origin = Origin::fixed(b"ok");
        let site = Site::new();
        let edge = Edge::start(&site.cfg(d, origin.addr));
        let addr = edge.tls_addr();
        let failed = || edge.metric(HANDSHAKES, &["result=\"failed\""]);

        // Connects and closes without a byte (a TCP health check): no failed handshake.
        drop(TcpStream::connect(addr).unwrap());
        // Bytes that are neither TLS nor HTTP: a TLS alert, then close; counted as failed.
        let mut g = Client::connect(addr);
        g.send(&[0x00, 0x01, 0x02, 0x03, 0xff, 0xfe, 0x10, 0x20]);
        assert!(g.time_until_closed(5 * SEC).is_some(), "garbage left open");
        assert_eq!(
            edge.wait_metric(HANDSHAKES, &["result=\"failed\""], 1.0),
            1.0
        );
        // Half a ClientHello, then the client closes: a handshake started and failed.
        let hello = client_hello(&site);
        let mut cut = TcpStream::connect(addr).unwrap();
        cut.write_all(&hello[..hello.len() / 2]).unwrap();
        drop(cut);
        assert_eq!(
            edge.wait_metric(HANDSHAKES, &["result=\"failed\""], 2.0),
            2.0
        );
        assert_eq!(
            edge.wait_metric("edge_connections_active", &[], 0.0),
            0.0,
            "a failed handshake left its connection counted"
        );
        assert_eq!(
            failed(),
            2.0,
            "the bare connect was counted as a failed handshake"
        );
        assert_eq!(edge.metric(HANDSHAKES, &["result=\"full\""]), 0.0);
    }
);

both_drivers!(the_idle_deadline_starts_once_the_handshake_is_done, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(
        &site
            .cfg(d, origin.addr)
            .tls("handshake_timeout", "1s")
            .timeout("idle", "3s"),
    );
    // Handshake done, no request: the idle deadline (3 s) applies, not handshake_timeout (1 s).
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    let took = c.time_until_closed(8 * SEC).expect("closed when idle");
    assert_about("idle TLS connection closed", took, 3 * SEC, SEC);
    assert_eq!(edge.metric(HANDSHAKES, &["result=\"timeout\""]), 0.0);
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 1.0),
        1.0
    );
});
