//! The TLS listener (DESIGN.md "TLS", "Status codes" TLS rows, "Metrics"): requests through TLS are
//! byte-exact and marked `X-Forwarded-Proto: https`; SNI picks the certificate (exact, wildcard, first);
//! ALPN in the configured order (HTTP/2 itself is in `h2`); TLS 1.2 and 1.3 and `min_version`; session
//! resumption on whichever worker accepts; a clean close; plain HTTP to the TLS port; a TLS-only
//! edge; `redirect_plain`. Deadlines and capacity over TLS are in `tls_session`.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use rustls::ProtocolVersion;

use crate::harness::{Cfg, Client, Edge, Origin, Reply, Site, TlsConn, TlsOpts, Versions};

const SEC: Duration = Duration::from_secs(1);
const HANDSHAKES: &str = "edge_tls_handshakes_total";

/// `n` bytes of a pattern that no shift or truncation maps onto itself.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// An origin: `/big` answers 1 MiB of [`pattern`]; everything else echoes the request body.
fn echo_or_big() -> Origin {
    Origin::start(|req| {
        if req.target == "/big" {
            return Reply::ok(&pattern(1 << 20));
        }
        Reply::echo(req)
    })
}

both_drivers!(get_and_post_through_tls_are_byte_exact, |d| {
    let origin = echo_or_big();
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();

    // A client's own X-Forwarded-Proto is replaced (the peer is not a trusted proxy).
    c.send(b"GET /hello?x=1 HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-Proto: http\r\n\r\n")
        .unwrap();
    let r = c.read_response().expect("GET response");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-method"), Some("GET"));
    let seen = origin.last();
    assert_eq!(seen.target, "/hello?x=1");
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));

    // A small POST and a 1 MiB upload on the same connection: the origin sees exactly the body and
    // the echoed response is exact.
    for body in [b"hello over tls".to_vec(), pattern(1 << 20)] {
        let mut req = format!(
            "POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        c.send(&req).unwrap();
        let r = c.read_response().expect("POST response");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-method"), Some("POST"));
        assert!(
            r.body == body,
            "echoed body differs ({} bytes)",
            r.body.len()
        );
        let seen = origin.last();
        assert!(
            seen.body == body,
            "origin body differs ({} bytes)",
            seen.body.len()
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    }

    // A 1 MiB response.
    let r = c.get("/big");
    assert_eq!(r.status, 200);
    assert!(
        r.body == pattern(1 << 20),
        "1 MiB body differs ({} bytes)",
        r.body.len()
    );
    assert_eq!(edge.metric(HANDSHAKES, &["result=\"full\""]), 1.0);
    assert_eq!(
        edge.metric("edge_tls_handshake_duration_seconds_count", &[]),
        1.0
    );
});

both_drivers!(a_trusted_proxy_keeps_its_x_forwarded_proto_over_tls, |d| {
    let origin = echo_or_big();
    let site = Site::new();
    let edge = Edge::start(
        &site
            .cfg(d, origin.addr)
            .server("trusted_proxies", ["127.0.0.1/32"]),
    );
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    c.send(b"GET /t HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 10.1.2.3\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().status, 200);
    let seen = origin.last();
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    assert_eq!(seen.header("x-forwarded-for"), Some("10.1.2.3, 127.0.0.1"));
    // Without one, edge adds its own.
    assert_eq!(c.get("/u").status, 200);
    assert_eq!(origin.last().header("x-forwarded-proto"), Some("https"));
});

both_drivers!(pipelined_requests_over_tls_are_answered_in_order, |d| {
    let origin = echo_or_big();
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    // Two requests in one write: both answered, in order.
    c.send(
        b"POST /a HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n\r\none\
          POST /b HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n\r\ntwo",
    )
    .unwrap();
    assert_eq!(c.read_response().unwrap().body, b"one");
    assert_eq!(c.read_response().unwrap().body, b"two");
});

// Regression: a TLS connection edge closes after `Connection: close` must end with close_notify
// (RFC 8446 §6.1: each party MUST send close_notify before closing its write side), so a client can
// tell the end of the data from a truncation; edge closed with a bare TCP FIN.
both_drivers!(a_connection_close_response_ends_with_close_notify, |d| {
    let origin = echo_or_big();
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    c.send(b"GET /c HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let mut b = [0u8; 1];
    c.s.sock.set_read_timeout(Some(5 * SEC)).unwrap();
    match std::io::Read::read(&mut c.s, &mut b) {
        Ok(0) => {}
        other => panic!("expected close_notify then EOF, got {other:?}"),
    }
});

both_drivers!(sni_picks_exact_then_wildcard_then_the_first, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let a = site.ca.leaf("a-test", &["a.test"]);
    let wild = site.ca.leaf("wild-test", &["*.wild.test"]);
    let (a_cert, a_key) = a.write(&site.dir, "a");
    let (w_cert, w_key) = wild.write(&site.dir, "wild");
    // A later certificate naming a.test exactly and x.wild.test exactly: the first naming a.test wins,
    // and an exact name beats the wildcard.
    let later = site.ca.leaf("later", &["a.test", "x.wild.test"]);
    let (l_cert, l_key) = later.write(&site.dir, "later");
    let cfg = Cfg::new(d, origin.addr).tls_certs(&[
        (&site.cert, &site.key),
        (&a_cert, &a_key),
        (&w_cert, &w_key),
        (&l_cert, &l_key),
    ]);
    let edge = Edge::start(&cfg);
    let any = TlsOpts::any_cert().build();
    let served = |name: &str| {
        let mut c = TlsConn::connect(edge.tls_addr(), &any, name).unwrap();
        assert_eq!(c.get("/").body, b"ok", "request with SNI {name}");
        c.peer_cert()
    };
    assert!(served("a.test") == a.der, "a.test: exact name");
    assert!(
        served("A.Test") == a.der,
        "A.Test: names are case-insensitive"
    );
    assert!(served("y.wild.test") == wild.der, "y.wild.test: wildcard");
    assert!(
        served("x.wild.test") == later.der,
        "x.wild.test: an exact name beats a wildcard"
    );
    assert!(served("localhost") == site.leaf.der, "localhost: the first");
    assert!(
        served("unknown.test") == site.leaf.der,
        "unknown: the first"
    );
    assert!(
        served("a.b.wild.test") == site.leaf.der,
        "a wildcard covers one label only"
    );
    assert!(
        served("wild.test") == site.leaf.der,
        "a wildcard does not cover its base"
    );
    // An IP address as the name: the client sends no SNI.
    assert!(served("127.0.0.1") == site.leaf.der, "no SNI: the first");
    // And a verifying client accepts each pick for its own name.
    let verifying = site.client();
    let mut c = TlsConn::connect(edge.tls_addr(), &verifying, "x.wild.test").unwrap();
    assert_eq!(c.get("/").status, 200);
});

both_drivers!(alpn_offers_h2_then_http11_in_config_order, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    // The default `alpn` is ["h2", "http/1.1"], offered in that order (DESIGN.md "TLS"): a client that
    // offers both gets h2, one that offers only http/1.1 gets HTTP/1.1.
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let addr = edge.tls_addr();

    let mut c = TlsConn::connect(addr, &site.opts().build(), "localhost").unwrap();
    assert_eq!(c.alpn().as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(c.get("/").body, b"ok");

    let both = site.opts().alpn(&["http/1.1", "h2"]).build();
    let c = TlsConn::connect(addr, &both, "localhost").unwrap();
    assert_eq!(c.alpn().as_deref(), Some(&b"h2"[..]), "edge's order wins");

    let none = site.opts().alpn(&[]).build();
    let mut c = TlsConn::connect(addr, &none, "localhost").unwrap();
    assert_eq!(c.alpn(), None);
    assert_eq!(c.get("/").body, b"ok", "no ALPN: HTTP/1.1");
    drop(edge);

    // `alpn = ["http/1.1"]`: h2 is not offered, and an h2-only client has no common protocol: rustls
    // refuses the handshake with a no_application_protocol alert (RFC 7301 §3.2), counted as failed.
    let edge = Edge::start(
        &site
            .cfg(d, origin.addr)
            .tls("alpn", crate::harness::Value::Strs(vec!["http/1.1".into()])),
    );
    let addr = edge.tls_addr();
    let c = TlsConn::connect(addr, &both, "localhost").unwrap();
    assert_eq!(c.alpn().as_deref(), Some(&b"http/1.1"[..]), "h2 not listed");
    let h2 = site.opts().alpn(&["h2"]).build();
    let before = edge.metric(HANDSHAKES, &["result=\"failed\""]);
    let err = TlsConn::connect(addr, &h2, "localhost")
        .err()
        .expect("an h2-only client must not get a session");
    assert!(
        err.to_string().to_lowercase().contains("application"),
        "expected a no_application_protocol alert, got {err}"
    );
    assert_eq!(
        edge.wait_metric(HANDSHAKES, &["result=\"failed\""], before + 1.0),
        before + 1.0
    );
    drop(edge);

    // `alpn = []`: nothing is offered, and a client offering http/1.1 gets no ALPN.
    let edge = Edge::start(
        &site
            .cfg(d, origin.addr)
            .tls("alpn", crate::harness::Value::Strs(Vec::new())),
    );
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    assert_eq!(c.alpn(), None);
    assert_eq!(c.get("/").body, b"ok");
});

both_drivers!(tls12_and_tls13_work_and_min_version_13_refuses_12, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    for (v, want) in [
        (Versions::Tls12, ProtocolVersion::TLSv1_2),
        (Versions::Tls13, ProtocolVersion::TLSv1_3),
        (Versions::Both, ProtocolVersion::TLSv1_3),
    ] {
        let cfg = site.opts().versions(v).build();
        let mut c = TlsConn::connect(edge.tls_addr(), &cfg, "localhost").unwrap();
        assert_eq!(c.version(), Some(want), "{v:?}");
        assert_eq!(c.get("/").body, b"ok", "{v:?}");
    }
    assert_eq!(edge.metric(HANDSHAKES, &["result=\"failed\""]), 0.0);
    drop(edge);

    let edge = Edge::start(&site.cfg(d, origin.addr).tls("min_version", "1.3"));
    let addr = edge.tls_addr();
    let old = site.opts().versions(Versions::Tls12).build();
    let err = TlsConn::connect(addr, &old, "localhost")
        .err()
        .expect("a TLS 1.2-only client must be refused");
    assert!(
        err.to_string().to_lowercase().contains("version"),
        "expected a protocol_version alert, got {err}"
    );
    assert_eq!(
        edge.wait_metric(HANDSHAKES, &["result=\"failed\""], 1.0),
        1.0
    );
    let mut c = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
    assert_eq!(c.version(), Some(ProtocolVersion::TLSv1_3));
    assert_eq!(c.get("/").body, b"ok");
});

/// Makes `n` connections with one client configuration, each a GET (so TLS 1.3 tickets are read);
/// asserts the first is full and every later one resumed.
fn assert_resumes(addr: SocketAddr, cfg: &Arc<rustls::ClientConfig>, n: usize, what: &str) {
    for i in 0..n {
        let mut c = TlsConn::connect(addr, cfg, "localhost").unwrap();
        assert_eq!(c.get("/").body, b"ok", "{what}: connection {i}");
        assert_eq!(c.resumed(), i > 0, "{what}: connection {i} resumed?");
    }
}

both_drivers!(sessions_resume_with_tls13_and_tls12, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let addr = edge.tls_addr();
    assert_resumes(
        addr,
        &site.opts().versions(Versions::Tls13).build(),
        3,
        "TLS 1.3",
    );
    assert_resumes(
        addr,
        &site.opts().versions(Versions::Tls12).build(),
        3,
        "TLS 1.2",
    );
    let ids = site
        .opts()
        .versions(Versions::Tls12)
        .session_id_only()
        .build();
    assert_resumes(addr, &ids, 3, "TLS 1.2 by session id");
    assert_eq!(
        edge.wait_metric(HANDSHAKES, &["result=\"resumed\""], 6.0),
        6.0
    );
    assert_eq!(edge.metric(HANDSHAKES, &["result=\"full\""]), 3.0);
});

both_drivers!(sessions_resume_on_whichever_worker_accepts, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).workers(2));
    let addr = edge.tls_addr();
    let n = 24;
    assert_resumes(
        addr,
        &site.opts().versions(Versions::Tls13).build(),
        n,
        "TLS 1.3",
    );
    assert_resumes(
        addr,
        &site.opts().versions(Versions::Tls12).build(),
        n,
        "TLS 1.2",
    );
    let resumed = 2.0 * (n as f64 - 1.0);
    assert_eq!(
        edge.wait_metric(HANDSHAKES, &["result=\"resumed\""], resumed),
        resumed
    );
    // Both workers accepted some of them (SO_REUSEPORT spreads 48 connections over two sockets), so
    // the resumption held across workers.
    for w in ["worker=\"0\"", "worker=\"1\""] {
        assert!(
            edge.metric(HANDSHAKES, &[w]) > 0.0,
            "{w} handshook no connection: the cross-worker case was not exercised"
        );
    }
});

both_drivers!(resumption_off_makes_every_handshake_full, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).tls("session_resumption", false));
    for v in [Versions::Tls13, Versions::Tls12] {
        let cfg = site.opts().versions(v).build();
        for i in 0..2 {
            let mut c = TlsConn::connect(edge.tls_addr(), &cfg, "localhost").unwrap();
            assert_eq!(c.get("/").body, b"ok");
            assert!(
                !c.resumed(),
                "{v:?} connection {i} resumed with resumption off"
            );
        }
    }
    assert_eq!(edge.metric(HANDSHAKES, &["result=\"full\""]), 4.0);
});

both_drivers!(plain_http_to_the_tls_port_gets_a_plain_400, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut c = Client::connect(edge.tls_addr());
    c.send(b"GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let r = c.read_response(false).expect("a plain-text answer");
    crate::harness::assert_error_response("plain HTTP on TLS", &r, 400, true);
    assert_eq!(r.text().trim_end(), "plain HTTP sent to the TLS port");
    assert!(c.time_until_closed(5 * SEC).is_some(), "left open");
    edge.assert_counted_and_logged(
        "edge_requests_invalid_total",
        &["reason=\"plain_http_on_tls\""],
        1.0,
        "request.invalid",
    );
    assert_eq!(origin.seen_count(), 0, "forwarded");
    assert_eq!(
        edge.wait_metric("edge_connections_active", &[], 0.0),
        0.0,
        "the connection is still counted"
    );
});

both_drivers!(a_tls_only_edge_serves_tls_and_nothing_plain, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).server("listen", ""));
    assert_eq!(edge.plain, None, "a plain listener is reported");
    let ready = edge.wait_log("startup.ready", SEC).unwrap();
    assert!(ready.contains("traffic=disabled"), "{ready}");
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    assert_eq!(c.get("/").body, b"ok");
    let mut listening = listening_ports(edge.pid());
    listening.sort_unstable();
    let mut want = vec![edge.tls_addr().port(), edge.admin.port()];
    want.sort_unstable();
    assert_eq!(listening, want, "edge listens on more than TLS and admin");
});

/// The TCP ports process `pid` listens on (its socket fds matched against /proc/net/tcp in LISTEN).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

both_drivers!(redirect_plain_sends_308_to_https_but_answers_health, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).tls("redirect_plain", true));
    let port = edge.tls_addr().port();
    let plain = edge.plain.expect("a plain listener");
    let mut c = Client::connect(plain);
    for (host, target) in [
        ("test", "/x?y"),
        ("test:8080", "/a/b?c=d&e"),
        ("127.0.0.1", "/"),
    ] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        let r = c.read_response(false).expect("a redirect");
        assert_eq!(r.status, 308, "{host}{target}: {:?}", r.text());
        let name = host.split(':').next().unwrap();
        assert_eq!(
            r.header("location"),
            Some(format!("https://{name}:{port}{target}").as_str()),
            "{host}{target}"
        );
        assert_eq!(r.header("content-length"), Some("0"));
    }
    // A POST keeps its method across a 308; its body is read and the connection kept.
    c.send(b"POST /form HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.read_response(false).expect("a redirect for POST");
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://test:{port}/form").as_str())
    );
    // The health path is answered on plain, not redirected.
    let r = c.get("/_health");
    assert_eq!(r.status, 200, "{:?}", r.text());
    assert_eq!(origin.seen_count(), 0, "a plain request was proxied");
    // The TLS listener still proxies.
    let mut t = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    assert_eq!(t.get("/x").body, b"ok");
});
