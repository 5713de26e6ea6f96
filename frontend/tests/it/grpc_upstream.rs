//! gRPC services behind edge (DESIGN.md "HTTP/2 and gRPC upstreams"): a real grpcio client and server
//! (the harness's gRPC fixture) with edge between them, the upstream speaking HTTP/2 over h2c and over
//! TLS: every call shape, metadata and trailers byte-exact, the server's status and message kept, a
//! 4 MiB message, deadlines, a client's cancel reaching the server, an upstream that is down, and a
//! server stream that outlives `request_timeout` while its messages flow.

use std::time::{Duration, Instant};

use crate::harness::{
    every_call_shape, refused_addr, Cfg, Driver, Edge, GrpcCall, GrpcCase, GrpcServer, Site,
};

const SEC: Duration = Duration::from_secs(1);

/// An edge in front of `upstream` (HTTP/2), h2c on its plain listener; `set` adds upstream fields.
fn grpc_edge(d: Driver, upstream: std::net::SocketAddr, set: &[(&str, &str)]) -> Edge {
    let mut cfg = Cfg::new(d, upstream)
        .server("h2c", true)
        .log("access", true)
        .log("access_format", "text")
        .upstream_field("protocol", "h2");
    for (k, v) in set {
        cfg = cfg.upstream_field(k, *v);
    }
    Edge::start(&cfg)
}

both_drivers!(every_call_shape_over_h2c, |d| {
    let server = GrpcServer::start();
    let edge = grpc_edge(d, server.addr, &[]);
    every_call_shape(edge.addr, None);
    let call = server
        .wait_event(5 * SEC, |e| e["event"] == "call" && e["method"] == "Unary")
        .expect("the unary call reached the server");
    assert_eq!(
        call["metadata"]["x-asked"], "yes",
        "request metadata forwarded"
    );
    // The server's own status and message, unchanged.
    let failed = GrpcCall::unary()
        .ask(serde_json::json!({"statusCode": 7, "statusMessage": "no 100% \u{e9}"}))
        .run(edge.addr);
    assert_eq!(
        (failed.code, failed.details.as_str()),
        (7, "no 100% \u{e9}")
    );
    // A 4 MiB message each way (grpcio's default limit is 4 MiB per message).
    let big = 4 * 1024 * 1024 - 64;
    let r = GrpcCall::unary()
        .ask(serde_json::json!({"payloadBytes": big}))
        .payload_bytes(big)
        .run(edge.addr);
    assert_eq!((r.code, r.bytes), (0, big as u64), "{r:?}");
});

both_drivers!(every_call_shape_over_tls_both_ways, |d| {
    let site = Site::new();
    let server = GrpcServer::start_tls(&site.cert, &site.key);
    let ca = site.ca_file.to_string_lossy().into_owned();
    let cfg = site
        .cfg(d, server.addr)
        .upstream_field("protocol", "h2")
        .upstream_field("tls", true)
        .upstream_field("tls_ca", ca.as_str())
        .upstream_field("tls_server_name", "localhost");
    let edge = Edge::start(&cfg);
    every_call_shape(edge.tls_addr(), Some((&site.ca_file, "localhost")));
    // `auto` over TLS speaks what the server chose in ALPN: h2 for a gRPC server.
    let edge = Edge::start(&cfg.upstream_field("protocol", "auto"));
    let r = GrpcCall::unary()
        .ask(serde_json::json!({"text": "hi"}))
        .tls(&site.ca_file, Some("localhost"))
        .run(edge.tls_addr());
    assert_eq!(r.code, 0, "{r:?}");
});

both_drivers!(deadline_and_cancel_reach_the_server, |d| {
    let server = GrpcServer::start();
    let edge = grpc_edge(d, server.addr, &[]);
    let started = Instant::now();
    let r = GrpcCall::unary()
        .ask(serde_json::json!({"sleepMs": 5000}))
        .timeout(SEC)
        .run(edge.addr);
    let took = started.elapsed();
    assert_eq!(r.code, 4, "DEADLINE_EXCEEDED: {r:?}");
    assert!(took < 2 * SEC, "{took:?}");
    // The client's cancel reset the upstream stream at once: the server saw the call cancelled long
    // before its own sleep ended.
    let done = server
        .wait_event(3 * SEC, |e| e["event"] == "done" && e["method"] == "Unary")
        .expect("the server saw the call end");
    assert_eq!(done["cancelled"], true, "{done}");
    assert!(
        started.elapsed() < 4 * SEC,
        "cancel seen before the server's sleep ended"
    );
});

both_drivers!(upstream_down_is_unavailable, |d| {
    let edge = grpc_edge(d, refused_addr(), &[]);
    let r = GrpcCall::unary()
        .ask(serde_json::json!({"text": "hi"}))
        .run(edge.addr);
    assert_eq!(r.code, 14, "UNAVAILABLE: {r:?}");
});

both_drivers!(
    a_server_stream_outlives_request_timeout_while_messages_flow,
    |d| {
        let server = GrpcServer::start();
        let edge = grpc_edge(d, server.addr, &[("request_timeout", "1s")]);
        let started = Instant::now();
        let r = GrpcCall::new(GrpcCase::ServerStream)
            .ask(serde_json::json!({"count": 8, "intervalMs": 400, "payloadBytes": 3}))
            .run(edge.addr);
        assert_eq!((r.code, r.messages), (0, 8), "{r:?}");
        // Seven 400 ms gaps between eight messages: well past the 1 s request_timeout.
        assert!(
            started.elapsed() > 2 * SEC,
            "the stream ran past request_timeout"
        );
    }
);

both_drivers!(
    a_bidi_stream_outlives_request_timeout_while_messages_flow,
    |d| {
        let server = GrpcServer::start();
        let edge = grpc_edge(d, server.addr, &[("request_timeout", "1s")]);
        let started = Instant::now();
        // The server answers each of six messages 400 ms after it arrives, while the call is open.
        let r = GrpcCall::new(GrpcCase::Bidi)
            .ask(serde_json::json!({"sleepMs": 400, "payloadBytes": 2}))
            .messages(6)
            .run(edge.addr);
        assert_eq!((r.code, r.messages), (0, 6), "{r:?}");
        assert!(
            started.elapsed() > 2 * SEC,
            "the stream ran past request_timeout"
        );
    }
);
