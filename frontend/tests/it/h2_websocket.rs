//! WebSocket over HTTP/2 (RFC 8441, DESIGN.md "HTTP/2 and gRPC upstreams") to an HTTP/1.1 WebSocket
//! origin ([`WsOrigin`]), over h2c and over TLS with ALPN h2: edge's SETTINGS allow extended CONNECT;
//! the stream reaches the origin as `GET` + `Upgrade: websocket` with edge's own key and the client's
//! fields; the origin's `101` becomes the stream's `200` and the stream a byte tunnel both ways
//! (1 MiB byte-exact, half-close, either side ending); a refusal is relayed as the stream's answer;
//! a `101` with the wrong accept is 502; two tunnels and ordinary requests share one connection;
//! `idle` ends a silent tunnel; a CONNECT without `:protocol websocket` is still 405.

use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;

use crate::harness::{
    assert_about, block_on, h2_connect, h2_connect_tls, h2_request, h2_websocket, read_at_least,
    read_to_end, send_all, Cfg, Driver, Edge, Site, WsOrigin,
};

/// The handshake fields a browser's h2 WebSocket carries (RFC 8441 §5: no key, version 13).
const OFFER: [(&str, &str); 6] = [
    ("sec-websocket-version", "13"),
    ("sec-websocket-protocol", "chat, superchat"),
    ("sec-websocket-extensions", "permessage-deflate"),
    ("origin", "https://app.example"),
    ("cookie", "a=1"),
    ("cookie", "b=2"),
];

/// An edge serving h2c to `origin`, with `idle` as given.
fn h2c(d: Driver, origin: &WsOrigin, idle: &str) -> Edge {
    let cfg = Cfg::new(d, origin.origin.addr)
        .server("h2c", true)
        .timeout("idle", idle);
    Edge::start(&cfg)
}

/// One ordinary request, whose answer also proves the client has edge's SETTINGS (they come first).
async fn plain(c: &SendRequest<Bytes>, authority: &str) {
    let r = h2_request(c, "GET", "/p", authority, &[], b"")
        .await
        .unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"plain"[..]));
}

/// The whole echo case on connection `c` (to `authority`): the handshake both ways, small and 1 MiB
/// echoes, then the client's END_STREAM reaching the origin, whose `bye` and close end the stream.
async fn echo_case(c: SendRequest<Bytes>, authority: &str, origin: &WsOrigin) {
    plain(&c, authority).await;
    origin.next_head();
    assert!(
        c.is_extended_connect_protocol_enabled(),
        "edge's SETTINGS carry ENABLE_CONNECT_PROTOCOL = 1"
    );
    let mut t = h2_websocket(&c, "/chat?room=1", authority, &OFFER)
        .await
        .unwrap();
    assert_eq!(t.status, 200, "the switch is the stream's 200");
    let header = |n: &str| t.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(header("sec-websocket-protocol").as_deref(), Some("chat"));
    assert_eq!(
        header("sec-websocket-extensions").as_deref(),
        Some("permessage-deflate")
    );
    assert_eq!(header("x-origin").as_deref(), Some("ws"));
    for gone in ["sec-websocket-accept", "upgrade", "connection"] {
        assert_eq!(header(gone), None, "{gone} reached the h2 client");
    }
    let seen = origin.next_head();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("GET", "/chat?room=1")
    );
    assert_eq!(seen.minor, 1);
    assert_eq!(seen.header("upgrade"), Some("websocket"));
    assert_eq!(
        seen.header("connection")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("upgrade")
    );
    assert_eq!(seen.header("sec-websocket-version"), Some("13"));
    assert_eq!(seen.header("sec-websocket-key").map(str::len), Some(24));
    assert_eq!(
        seen.header("sec-websocket-protocol"),
        Some("chat, superchat")
    );
    assert_eq!(
        seen.header("sec-websocket-extensions"),
        Some("permessage-deflate")
    );
    assert_eq!(seen.header("origin"), Some("https://app.example"));
    assert_eq!(seen.header("cookie"), Some("a=1; b=2"), "cookies joined");
    assert_eq!(seen.header("host"), Some(authority));
    assert!(seen.header("x-forwarded-for").is_some());
    assert!(seen.header("content-length").is_none() && seen.header("transfer-encoding").is_none());

    let mut got = Vec::new();
    send_all(&mut t.send, b"hello", false).await.unwrap();
    assert!(read_at_least(&mut t.recv, &mut got, 5).await.unwrap());
    assert_eq!(got, b"hello");
    // 1 MiB both ways at once: the echo comes back while the rest is still being sent.
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let want = big.len();
    let mut recv = t.recv;
    let reader = monoio::spawn(async move {
        let mut got = Vec::new();
        let more = read_at_least(&mut recv, &mut got, want).await;
        (more, got, recv)
    });
    send_all(&mut t.send, &big, false).await.unwrap();
    let (more, got, mut recv) = reader.await;
    assert!(more.unwrap(), "the stream ended inside the echo");
    assert_eq!(got.len(), want);
    assert!(got == big, "the echoed MiB differs");
    // The client's END_STREAM half-closes the origin's side; its `bye` and close end the stream.
    send_all(&mut t.send, b"", true).await.unwrap();
    assert_eq!(read_to_end(&mut recv).await.unwrap(), b"bye");
    assert_eq!(origin.next_end(), ("/chat?room=1".to_owned(), "eof"));
}

/// The counters of a clean tunnel: a 200 logged per stream, no reset, nothing left active.
fn assert_clean(edge: &Edge) {
    assert_eq!(
        edge.wait_metric("edge_requests_total", &["status=\"200\""], 2.0),
        2.0
    );
    assert_eq!(edge.metric("edge_http2_resets_total", &[]), 0.0);
    assert_eq!(edge.metric("edge_upstream_errors_total", &[]), 0.0);
    edge.assert_upstream_settled();
}

both_drivers!(websocket_over_h2c_is_a_byte_exact_tunnel_to_http11, |d| {
    let origin = WsOrigin::start();
    let edge = h2c(d, &origin, "60s");
    let authority = edge.addr.to_string();
    block_on(async { echo_case(h2_connect(edge.addr).await, &authority, &origin).await });
    assert_clean(&edge);
});

both_drivers!(websocket_over_tls_alpn_h2_is_a_byte_exact_tunnel, |d| {
    let origin = WsOrigin::start();
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.origin.addr));
    let port = edge.tls_addr().port();
    let authority = format!("localhost:{port}");
    let cfg = site.opts().alpn(&["h2"]).build();
    block_on(async {
        let c = h2_connect_tls(edge.tls_addr(), cfg, "localhost").await;
        echo_case(c, &authority, &origin).await
    });
    assert_clean(&edge);
});

both_drivers!(
    an_upstream_refusing_the_upgrade_is_the_streams_answer,
    |d| {
        let origin = WsOrigin::start();
        let edge = h2c(d, &origin, "60s");
        let authority = edge.addr.to_string();
        block_on(async {
            let c = h2_connect(edge.addr).await;
            plain(&c, &authority).await;
            let mut t = h2_websocket(&c, "/deny", &authority, &OFFER).await.unwrap();
            assert_eq!(t.status, 403);
            assert_eq!(read_to_end(&mut t.recv).await.unwrap(), b"denied");
            // The connection goes on.
            plain(&c, &authority).await;
        });
        assert_eq!(
            edge.wait_metric("edge_requests_total", &["status=\"403\""], 1.0),
            1.0
        );
        assert_eq!(edge.metric("edge_http2_resets_total", &[]), 0.0);
        edge.assert_upstream_settled();
    }
);

both_drivers!(a_101_with_another_keys_accept_is_502, |d| {
    let origin = WsOrigin::start();
    let edge = h2c(d, &origin, "60s");
    let authority = edge.addr.to_string();
    let status = block_on(async {
        let c = h2_connect(edge.addr).await;
        plain(&c, &authority).await;
        let mut t = h2_websocket(&c, "/bad-accept", &authority, &OFFER)
            .await
            .unwrap();
        let _ = read_to_end(&mut t.recv).await;
        t.status
    });
    assert_eq!(status, 502);
    edge.assert_counted_and_logged(
        "edge_upstream_errors_total",
        &["kind=\"bad_response\""],
        1.0,
        "upstream.error",
    );
    edge.assert_upstream_settled();
});

both_drivers!(a_client_reset_closes_the_upstream_connection, |d| {
    let origin = WsOrigin::start();
    let edge = h2c(d, &origin, "60s");
    let authority = edge.addr.to_string();
    block_on(async {
        let c = h2_connect(edge.addr).await;
        plain(&c, &authority).await;
        let mut t = h2_websocket(&c, "/reset", &authority, &OFFER)
            .await
            .unwrap();
        assert_eq!(t.status, 200);
        let mut got = Vec::new();
        send_all(&mut t.send, b"ping", false).await.unwrap();
        assert!(read_at_least(&mut t.recv, &mut got, 4).await.unwrap());
        t.send.send_reset(h2::Reason::CANCEL);
        // The client's connection goes on; this request's round trip also carried the reset out (the
        // client's frames go in order) before the wait below blocks this runtime.
        plain(&c, &authority).await;
        // The origin sees its connection end (EOF or reset).
        let (path, _) = origin.next_end();
        assert_eq!(path, "/reset");
    });
    assert_eq!(
        edge.wait_metric("edge_http2_resets_total", &["side=\"client\""], 1.0),
        1.0
    );
    edge.assert_upstream_settled();
});

both_drivers!(an_upstream_close_ends_the_stream, |d| {
    let origin = WsOrigin::start();
    let edge = h2c(d, &origin, "60s");
    let authority = edge.addr.to_string();
    block_on(async {
        let c = h2_connect(edge.addr).await;
        plain(&c, &authority).await;
        let mut t = h2_websocket(&c, "/close", &authority, &OFFER)
            .await
            .unwrap();
        assert_eq!(t.status, 200);
        // The origin's last bytes, then END_STREAM (no reset).
        assert_eq!(read_to_end(&mut t.recv).await.unwrap(), b"hi");
        let _ = send_all(&mut t.send, b"", true).await;
        plain(&c, &authority).await;
    });
    edge.assert_upstream_settled();
});

both_drivers!(
    two_websockets_and_plain_requests_share_one_connection,
    |d| {
        let origin = WsOrigin::start();
        let edge = h2c(d, &origin, "60s");
        let authority = edge.addr.to_string();
        block_on(async {
            let c = h2_connect(edge.addr).await;
            plain(&c, &authority).await;
            let mut a = h2_websocket(&c, "/a", &authority, &OFFER).await.unwrap();
            let mut b = h2_websocket(&c, "/b", &authority, &OFFER).await.unwrap();
            assert_eq!((a.status, b.status), (200, 200));
            let mut plains = Vec::new();
            for _ in 0..10 {
                let (c, authority) = (c.clone(), authority.clone());
                plains.push(monoio::spawn(async move { plain(&c, &authority).await }));
            }
            for round in 0..3 {
                let (ma, mb) = (format!("a{round}"), format!("b-{round}"));
                send_all(&mut a.send, ma.as_bytes(), false).await.unwrap();
                send_all(&mut b.send, mb.as_bytes(), false).await.unwrap();
                let (mut ga, mut gb) = (Vec::new(), Vec::new());
                assert!(read_at_least(&mut b.recv, &mut gb, mb.len()).await.unwrap());
                assert!(read_at_least(&mut a.recv, &mut ga, ma.len()).await.unwrap());
                assert_eq!((ga, gb), (ma.into_bytes(), mb.into_bytes()));
            }
            for p in plains {
                p.await;
            }
            for t in [&mut a, &mut b] {
                send_all(&mut t.send, b"", true).await.unwrap();
                assert_eq!(read_to_end(&mut t.recv).await.unwrap(), b"bye");
            }
        });
        assert_eq!(
            edge.wait_metric("edge_requests_total", &["status=\"200\""], 13.0),
            13.0
        );
        assert_eq!(edge.metric("edge_http2_resets_total", &[]), 0.0);
        edge.assert_upstream_settled();
    }
);

both_drivers!(an_idle_websocket_stream_is_reset_after_idle, |d| {
    let origin = WsOrigin::start();
    let edge = h2c(d, &origin, "1s");
    let authority = edge.addr.to_string();
    let waited = block_on(async {
        let c = h2_connect(edge.addr).await;
        plain(&c, &authority).await;
        let mut t = h2_websocket(&c, "/idle", &authority, &OFFER).await.unwrap();
        assert_eq!(t.status, 200);
        let started = Instant::now();
        let end = read_to_end(&mut t.recv).await;
        assert!(end.is_err(), "an idle tunnel ends with a reset: {end:?}");
        started.elapsed()
    });
    assert_about(
        "idle tunnel",
        waited,
        Duration::from_secs(1),
        Duration::from_millis(700),
    );
    assert_eq!(origin.next_end().0, "/idle");
    assert_eq!(
        edge.wait_metric("edge_inbound_timeouts_total", &["phase=\"idle\""], 1.0),
        1.0
    );
    assert_eq!(
        edge.metric("edge_http2_resets_total", &["side=\"edge\""]),
        1.0
    );
    edge.assert_upstream_settled();
});

both_drivers!(connect_without_protocol_websocket_is_still_405, |d| {
    let origin = WsOrigin::start();
    let edge = h2c(d, &origin, "60s");
    let authority = edge.addr.to_string();
    let statuses = block_on(async {
        let c = h2_connect(edge.addr).await;
        plain(&c, &authority).await;
        // Plain CONNECT: only :authority.
        let plain_connect = h2_request(&c, "CONNECT", "", &authority, &[], b"x").await;
        // Extended CONNECT for a protocol edge does not tunnel.
        let mut req = http::Request::builder()
            .method("CONNECT")
            .uri(format!("http://{authority}/udp"))
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(h2::ext::Protocol::from_static("connect-udp"));
        let mut send = c.clone().ready().await.unwrap();
        let (resp, _stream) = send.send_request(req, false).unwrap();
        let other = resp.await.unwrap().status().as_u16();
        (plain_connect.map(|r| r.status), other)
    });
    assert_eq!(statuses, (Ok(405), 405));
    assert_eq!(
        origin.origin.accepted(),
        1,
        "only the plain GET reached the origin"
    );
});
