//! PROXY protocol on the traffic listener (DESIGN.md "Upstream health, discovery and balancing", the
//! PROXY protocol paragraph; "Status codes", the PROXY row): the header's source becomes the client for
//! X-Forwarded-For, `trusted_proxies` and the access log; a missing or malformed header, or one from a
//! peer outside `proxy_protocol_from`, closes the connection, counted and logged.

use std::{net::SocketAddr, time::Duration};

use crate::harness::{block_on, h2_connect_after, h2_request, Cfg, Client, Driver, Edge, Origin};

const SEC: Duration = Duration::from_secs(1);
const SHED: &str = "edge_connections_shed_total";
const REASON: &str = "reason=\"proxy_protocol\"";
const GET: &[u8] = b"GET /p HTTP/1.1\r\nHost: test\r\n\r\n";

/// Edge with `server.proxy_protocol = version`, allowing `from`, with the access log on.
fn start(d: Driver, origin: &Origin, version: &str, from: &str) -> Edge {
    Edge::start(
        &Cfg::new(d, origin.addr)
            .server("proxy_protocol", version)
            .server("proxy_protocol_from", [from])
            .log("access", true),
    )
}

/// A v2 PROXY (TCP over IPv4) header from `src` to `dst`.
fn v2_tcp4(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) else {
        panic!("IPv4 only");
    };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&src.ip().octets());
    h.extend_from_slice(&dst.ip().octets());
    h.extend_from_slice(&src.port().to_be_bytes());
    h.extend_from_slice(&dst.port().to_be_bytes());
    h
}

/// A v2 LOCAL header (a load balancer's own health check) with an empty address block.
const V2_LOCAL: &[u8] = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";

/// Asserts edge closed `c` without an answer and counted and logged the refusal (`n` so far).
fn assert_rejected(edge: &Edge, c: &mut Client, n: f64, reason: &str) {
    let (bytes, closed) = c.read_until_closed(5 * SEC);
    assert!(closed.is_some(), "connection left open");
    assert!(
        bytes.is_empty(),
        "answered: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    edge.assert_counted_and_logged(SHED, &[REASON], n, "connection.rejected");
    assert!(
        edge.wait_log_all(&["connection.rejected", reason], 2 * SEC)
            .is_some(),
        "no connection.rejected line with {reason:?}"
    );
}

both_drivers!(v1_source_becomes_the_client_address, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = start(d, &origin, "v1", "127.0.0.0/8");
    let mut c = Client::connect(edge.addr);
    let header = format!(
        "PROXY TCP4 192.0.2.7 {} 40000 {}\r\n",
        edge.addr.ip(),
        edge.addr.port()
    );
    c.send(header.as_bytes());
    c.send(GET);
    let r = c.read_response(false).expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(origin.last().header("x-forwarded-for"), Some("192.0.2.7"));
    assert!(
        edge.wait_log_all(&["access", "192.0.2.7:40000"], 2 * SEC)
            .is_some(),
        "the access line does not carry the header's source"
    );
    // The rest of the connection keeps it.
    assert_eq!(c.get("/again").status, 200);
    assert_eq!(origin.last().header("x-forwarded-for"), Some("192.0.2.7"));
    assert_eq!(edge.metric(SHED, &[REASON]), 0.0);
});

both_drivers!(v2_source_is_checked_against_trusted_proxies, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("proxy_protocol", "v2")
            .server("proxy_protocol_from", ["127.0.0.1/32"])
            .server("trusted_proxies", ["10.0.0.0/8"]),
    );
    // A trusted source: its X-Forwarded-For is kept and appended to.
    let mut c = Client::connect(edge.addr);
    c.send(&v2_tcp4("10.1.2.3:5000".parse().unwrap(), edge.addr));
    c.send(b"GET / HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n");
    assert_eq!(c.read_response(false).expect("response").status, 200);
    let xff = origin.last().header("x-forwarded-for").map(str::to_owned);
    assert_eq!(xff.as_deref(), Some("203.0.113.9, 10.1.2.3"));
    // An untrusted source (the peer, 127.0.0.1, is not in trusted_proxies either): replaced.
    let mut c = Client::connect(edge.addr);
    c.send(&v2_tcp4("192.0.2.8:5001".parse().unwrap(), edge.addr));
    c.send(b"GET / HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n");
    assert_eq!(c.read_response(false).expect("response").status, 200);
    assert_eq!(origin.last().header("x-forwarded-for"), Some("192.0.2.8"));
});

both_drivers!(
    a_peer_outside_proxy_protocol_from_without_a_header_is_a_direct_client,
    |d| {
        // A container or node health check, or `edge healthcheck`, reaching edge beside the load balancer.
        let origin = Origin::echo();
        let edge = start(d, &origin, "v2", "127.0.0.2/32");
        let mut c = Client::connect(edge.addr);
        assert_eq!(c.get("/_health").status, 200);
        assert_eq!(c.get("/p").status, 200, "a plain request is served");
        assert_eq!(origin.last().header("x-forwarded-for"), Some("127.0.0.1"));
        // A request method that begins like the v1 prefix is not a header.
        c.send(b"PROPFIND /p HTTP/1.1\r\nHost: test\r\n\r\n");
        assert_eq!(c.read_response(false).expect("answer").status, 200);
        assert_eq!(
            edge.metric(SHED, &[REASON]),
            0.0,
            "nothing refused for a direct client"
        );
    }
);

both_drivers!(a_peer_outside_proxy_protocol_from_is_closed, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = start(d, &origin, "any", "127.0.0.2/32");
    let mut c = Client::connect(edge.addr);
    c.send(b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 443\r\n");
    c.send(GET);
    assert_rejected(&edge, &mut c, 1.0, "peer outside proxy_protocol_from");
    assert_eq!(origin.seen_count(), 0, "forwarded");
});

both_drivers!(a_missing_or_malformed_header_is_closed, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = start(d, &origin, "v2", "127.0.0.0/8");
    // No header: a plain request.
    let mut c = Client::connect(edge.addr);
    c.send(GET);
    assert_rejected(&edge, &mut c, 1.0, "no PROXY header");
    // The other version than configured.
    let mut c = Client::connect(edge.addr);
    c.send(b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 443\r\n");
    assert_rejected(&edge, &mut c, 2.0, "version not configured");
    // A v2 header with a bad command nibble.
    let mut c = Client::connect(edge.addr);
    let mut bad = v2_tcp4("192.0.2.7:1".parse().unwrap(), edge.addr);
    bad[12] = 0x23;
    c.send(&bad);
    c.send(GET);
    assert_rejected(&edge, &mut c, 3.0, "bad command");
    assert_eq!(origin.seen_count(), 0, "forwarded");
});

both_drivers!(a_v2_local_header_keeps_the_peer_address, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = start(d, &origin, "v2", "127.0.0.0/8");
    // A load balancer's health check through the header.
    let mut c = Client::connect(edge.addr);
    c.send(V2_LOCAL);
    c.send(b"GET /_health HTTP/1.1\r\nHost: lb\r\n\r\n");
    assert_eq!(c.read_response(false).expect("health").status, 200);
    let mut c = Client::connect(edge.addr);
    c.send(V2_LOCAL);
    c.send(GET);
    assert_eq!(c.read_response(false).expect("response").status, 200);
    assert_eq!(origin.last().header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(edge.metric(SHED, &[REASON]), 0.0);
});

both_drivers!(a_header_split_across_writes_is_read_whole, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = start(d, &origin, "any", "127.0.0.0/8");
    let mut c = Client::connect(edge.addr);
    c.s.set_nodelay(true).unwrap();
    let header = v2_tcp4("198.51.100.4:6000".parse().unwrap(), edge.addr);
    for part in [&header[..5], &header[5..13], &header[13..17], &header[17..]] {
        c.send(part);
    }
    c.send(&GET[..4]);
    c.send(&GET[4..]);
    assert_eq!(c.read_response(false).expect("response").status, 200);
    assert_eq!(
        origin.last().header("x-forwarded-for"),
        Some("198.51.100.4")
    );
    // v1 likewise, cut inside the address and before the LF.
    let mut c = Client::connect(edge.addr);
    c.s.set_nodelay(true).unwrap();
    let v1 = b"PROXY TCP6 2001:db8::7 ::1 40001 443\r\n";
    for part in [
        &v1[..3],
        &v1[3..20],
        &v1[20..v1.len() - 1],
        &v1[v1.len() - 1..],
    ] {
        c.send(part);
    }
    c.send(GET);
    assert_eq!(c.read_response(false).expect("response").status, 200);
    assert_eq!(origin.last().header("x-forwarded-for"), Some("2001:db8::7"));
});

both_drivers!(an_h2c_connection_reads_the_header_before_its_preface, |d| {
    // HTTP/2 with prior knowledge on the plain listener: the header comes first, then the preface.
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("h2c", true)
            .server("proxy_protocol", "v2")
            .server("proxy_protocol_from", ["127.0.0.0/8"])
            .log("access", true),
    );
    let header = v2_tcp4("198.51.100.23:7000".parse().unwrap(), edge.addr);
    let authority = edge.addr.to_string();
    let statuses = block_on(async {
        let c = h2_connect_after(edge.addr, &header).await;
        let mut statuses = Vec::new();
        for path in ["/one", "/two"] {
            let r = h2_request(&c, "GET", path, &authority, &[], b"").await;
            statuses.push(r.map(|r| r.status));
        }
        statuses
    });
    assert_eq!(statuses, [Ok(200), Ok(200)]);
    let seen = origin.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.header("x-forwarded-for"), Some("198.51.100.23"));
    }
    assert!(
        edge.wait_log_all(&["access", "198.51.100.23:7000"], 2 * SEC)
            .is_some(),
        "the access line does not carry the header's source"
    );
    // Without the header, the preface is no PROXY header: closed, counted and logged.
    let mut c = Client::connect(edge.addr);
    c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert_rejected(&edge, &mut c, 1.0, "no PROXY header");
    assert_eq!(origin.seen_count(), 2, "forwarded");
});

both_drivers!(a_header_and_pipelined_requests_in_one_write, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = start(d, &origin, "v1", "127.0.0.0/8");
    let mut c = Client::connect(edge.addr);
    let mut bytes = b"PROXY TCP4 192.0.2.9 127.0.0.1 40000 443\r\n".to_vec();
    bytes.extend_from_slice(GET);
    bytes.extend_from_slice(GET);
    c.send(&bytes);
    for _ in 0..2 {
        assert_eq!(c.read_response(false).expect("response").status, 200);
        assert_eq!(origin.last().header("x-forwarded-for"), Some("192.0.2.9"));
    }
    assert_eq!(origin.seen_count(), 2);
});

both_drivers!(a_reload_turning_it_on_applies_to_new_connections, |d| {
    let origin = Origin::fixed(b"ok");
    let cfg = Cfg::new(d, origin.addr);
    let edge = Edge::start(&cfg);
    let mut kept = Client::connect(edge.addr);
    assert_eq!(kept.get("/").status, 200);
    edge.rewrite_config(
        &cfg.server("proxy_protocol", "v1")
            .server("proxy_protocol_from", ["127.0.0.0/8"]),
    );
    edge.signal(1); // SIGHUP
    edge.wait_log("config.reloaded", 5 * SEC)
        .expect("config.reloaded logged");
    // A header comes first on a connection only: the kept-alive one goes on without.
    assert_eq!(kept.get("/").status, 200);
    let mut c = Client::connect(edge.addr);
    c.send(GET);
    assert_rejected(&edge, &mut c, 1.0, "no PROXY header");
    let mut c = Client::connect(edge.addr);
    c.send(b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 443\r\n");
    assert_eq!(c.get("/").status, 200);
    assert_eq!(origin.last().header("x-forwarded-for"), Some("192.0.2.7"));
});

both_drivers!(
    a_health_probe_with_a_header_is_answered_over_capacity,
    |d| {
        let origin = Origin::silent();
        let edge = Edge::start(
            &Cfg::new(d, origin.addr)
                .server("max_connections", 4)
                .server("proxy_protocol", "v2")
                .server("proxy_protocol_from", ["127.0.0.0/8"]),
        );
        // Every slot busy with a request in flight (nothing evictable).
        let busy: Vec<Client> = (0..4)
            .map(|_| {
                let mut c = Client::connect(edge.addr);
                c.send(V2_LOCAL);
                c.send(GET);
                c
            })
            .collect();
        assert!(
            origin.wait_until(5 * SEC, |o| o.accepted() >= 4),
            "requests did not reach the origin"
        );
        let mut c = Client::connect(edge.addr);
        c.send(V2_LOCAL);
        c.send(b"GET /_health HTTP/1.1\r\nHost: lb\r\n\r\n");
        let r = c
            .read_response(false)
            .expect("health answered over capacity");
        assert_eq!(r.status, 200);
        assert_eq!(edge.metric(SHED, &[REASON]), 0.0);
        drop(busy);
    }
);

both_drivers!(a_header_not_complete_within_request_is_closed, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("proxy_protocol", "v1")
            .server("proxy_protocol_from", ["127.0.0.0/8"])
            .timeout("request", "300ms"),
    );
    let mut c = Client::connect(edge.addr);
    c.send(b"PROXY TCP4 192.0.2.7 ");
    assert_rejected(&edge, &mut c, 1.0, "within the request timeout");
    assert_eq!(edge.metric("edge_inbound_timeouts_total", &[]), 0.0);
    // A peer that connects and closes without a byte (a TCP health check) is not counted.
    drop(Client::connect(edge.addr));
    let mut c = Client::connect(edge.addr);
    c.send(b"PROXY UNKNOWN\r\n");
    assert_eq!(c.get("/").status, 200);
    assert_eq!(edge.metric(SHED, &[REASON]), 1.0);
});
