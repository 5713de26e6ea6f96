//! edge's own answers to gRPC calls (DESIGN.md "Status codes", its gRPC paragraph; "HTTP/2 and gRPC
//! upstreams": `grpc-timeout`; "Observability": `grpc_status`), driven by a real gRPC client (grpcio,
//! the harness's gRPC fixture) over h2c and over TLS with ALPN h2, and by the harness's h2 client and
//! raw HTTP/1.1 where the wire form itself is checked: a trailers-only answer, HTTP 200, with the
//! status table's gRPC status and cause, counted and logged as the row says.

use std::time::{Duration, Instant};

use crate::harness::{
    block_on, h2_connect, h2_request, refused_addr, Cfg, Client, Driver, Edge, GrpcCall,
    GrpcServer, Origin, Reply, Route, Site, Value,
};

const SEC: Duration = Duration::from_secs(1);
/// The path of the fixture's unary method.
const UNARY: &str = "/edge.test.Echo/Unary";
/// An empty gRPC message: not compressed, length 0 (gRPC's "PROTOCOL-HTTP2.md", Length-Prefixed-Message).
const EMPTY_MESSAGE: &[u8] = &[0, 0, 0, 0, 0];

/// The harness config with h2c on, the access log on (to edge's log), and the only route at `/api`:
/// the fixture's methods have no route.
fn routeless(d: Driver, origin: std::net::SocketAddr) -> Cfg {
    Cfg::new(d, origin)
        .server("h2c", true)
        .log("access", true)
        .log("access_format", "text")
        .route_prefix("/api")
}

/// The fixture itself, straight from client to server (no edge): every call shape, metadata and
/// trailers, an asked status, payload and message counts, and a cancelled call seen by the server.
#[test]
fn the_grpc_fixture_runs_every_call_shape() {
    let server = GrpcServer::start();
    crate::harness::every_call_shape(server.addr, None);
    let call = server
        .wait_event(5 * SEC, |e| e["event"] == "call" && e["method"] == "Bidi")
        .expect("the bidi call was seen");
    assert_eq!(call["metadata"]["x-asked"], "yes");
    let failed = GrpcCall::unary()
        .ask(serde_json::json!({"statusCode": 7, "statusMessage": "no 100% \u{e9}"}))
        .run(server.addr);
    assert_eq!(
        (failed.code, failed.details.as_str()),
        (7, "no 100% \u{e9}")
    );
    // A deadline the server does not meet: the client ends the call, the server sees it cancelled.
    let late = GrpcCall::unary()
        .ask(serde_json::json!({"sleepMs": 5000}))
        .timeout(SEC / 2)
        .run(server.addr);
    assert_eq!(late.code, 4, "{late:?}");
    let started = server
        .wait_event(5 * SEC, |e| {
            e["event"] == "call" && e["time_remaining"].is_f64()
        })
        .expect("the deadline reached the server");
    // The client sends its 0.5 s as `grpc-timeout`, which gRPC rounds up to the unit it encodes, and
    // the server counts from its own clock: a few milliseconds over 0.5 s is the same deadline; the
    // server's default (no deadline) is none at all.
    let remaining = started["time_remaining"].as_f64().unwrap();
    assert!(
        remaining <= 0.55,
        "time remaining at the server: {remaining} s"
    );
    let done = server.wait_event(5 * SEC, |e| e["event"] == "done" && e["cancelled"] == true);
    assert!(
        done.is_some(),
        "the server saw the call cancelled: {:?}",
        server.events()
    );
}

both_drivers!(
    a_grpc_call_without_a_route_is_unimplemented_over_h2c,
    |d: Driver| {
        let origin = Origin::fixed(b"not gRPC");
        let edge = Edge::start(&routeless(d, origin.addr));
        let r = GrpcCall::unary().run(edge.addr);
        assert_eq!(
            (r.code, r.details.as_str()),
            (12, "no route for this request"),
            "{r:?}"
        );
        assert_eq!(origin.seen_count(), 0);
        // Counted and logged as the status table's 404 row, with its gRPC status in the access line.
        let line = edge.wait_log_all(&["event=access", "status=404"], 5 * SEC);
        let line = line.expect("an access line");
        assert!(line.contains(" grpc_status=12"), "{line}");
        assert_eq!(edge.metric("edge_requests_total", &["status=\"404\""]), 1.0);
    }
);

both_drivers!(
    a_grpc_call_without_a_route_is_unimplemented_over_tls_alpn_h2,
    |d: Driver| {
        let origin = Origin::fixed(b"not gRPC");
        let site = Site::new();
        let cfg = site.cfg(d, origin.addr).route_prefix("/api");
        let edge = Edge::start(&cfg);
        let r = GrpcCall::unary()
            .tls(&site.ca_file, Some("localhost"))
            .run(edge.tls_addr());
        assert_eq!(
            (r.code, r.details.as_str()),
            (12, "no route for this request"),
            "{r:?}"
        );
        assert_eq!(origin.seen_count(), 0);
    }
);

both_drivers!(
    a_grpc_call_to_a_down_upstream_is_unavailable,
    |d: Driver| {
        let edge = Edge::start(&Cfg::new(d, refused_addr()).server("h2c", true));
        let r = GrpcCall::unary().run(edge.addr);
        assert_eq!(r.code, 14, "{r:?}");
        assert_eq!(r.details, "bad gateway: upstream refused the connection");
        assert_eq!(
            edge.wait_metric("edge_upstream_errors_total", &["kind=\"refused\""], 1.0),
            1.0
        );
    }
);

both_drivers!(
    a_grpc_call_past_its_client_deadline_is_deadline_exceeded,
    |d: Driver| {
        let origin = Origin::start(|_| Reply::ok(b"late").delayed(5 * SEC));
        let edge = Edge::start(&Cfg::new(d, origin.addr).server("h2c", true));
        let r = GrpcCall::unary().timeout(SEC).run(edge.addr);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(r.elapsed < 2 * SEC, "ended after {:?}", r.elapsed);
        // The client's own deadline and edge's (its grpc-timeout) run out together; edge's answer is
        // checked on its own below.
        assert!(origin.wait_until(5 * SEC, |o| o.seen_count() == 1));
    }
);

both_drivers!(
    grpc_timeout_shortens_request_timeout_and_edge_answers_deadline_exceeded,
    |d: Driver| {
        let origin = Origin::start(|_| Reply::ok(b"late").delayed(5 * SEC));
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .log("access", true)
            .log("access_format", "text");
        let edge = Edge::start(&cfg);
        let authority = edge.addr.to_string();
        let grpc = [
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", "1S"),
        ];
        let started = Instant::now();
        let r = block_on(async {
            let c = h2_connect(edge.addr).await;
            h2_request(&c, "POST", UNARY, &authority, &grpc, EMPTY_MESSAGE).await
        });
        let took = started.elapsed();
        let r = r.expect("an answer");
        let field = |n: &str| r.headers.get(n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(r.status, 200);
        assert_eq!(field("content-type").as_deref(), Some("application/grpc"));
        assert_eq!(field("grpc-status").as_deref(), Some("4"));
        assert_eq!(
            field("grpc-message").as_deref(),
            Some("gateway timeout: upstream did not answer in time")
        );
        assert!(
            r.headers_ended_stream && r.body.is_empty(),
            "trailers-only: {r:?}"
        );
        assert!(r.headers.get("x-request-id").is_some());
        // The upstream's request_timeout is 10 s: the 1 s came from grpc-timeout.
        assert!(
            took >= SEC * 9 / 10 && took < 2 * SEC,
            "answered after {took:?}"
        );
        assert_eq!(
            edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"request\""], 1.0),
            1.0
        );
        let line = edge.wait_log_all(&["event=access", "status=504"], 5 * SEC);
        assert!(line.expect("an access line").contains(" grpc_status=4"));
        // A grpc-timeout longer than request_timeout does not lengthen it; a malformed one is ignored.
        let quick = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .upstream_field("request_timeout", "1s");
        let edge = Edge::start(&quick);
        for timeout in ["30S", "1 S"] {
            let grpc = [
                ("content-type", "application/grpc"),
                ("grpc-timeout", timeout),
            ];
            let started = Instant::now();
            let r = block_on(async {
                let c = h2_connect(edge.addr).await;
                h2_request(&c, "POST", UNARY, &authority, &grpc, EMPTY_MESSAGE).await
            });
            let took = started.elapsed();
            let r = r.expect("an answer");
            assert_eq!(r.headers.get("grpc-status").unwrap(), "4", "{timeout}");
            assert!(took < 2 * SEC, "{timeout}: answered after {took:?}");
        }
    }
);

both_drivers!(
    a_rate_limited_grpc_call_is_resource_exhausted,
    |d: Driver| {
        let origin = Origin::fixed(b"ok");
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .rate_limit("per-client", "client_ip", "1/m", 1)
            .clear_routes()
            .add_route(Route::new("/", "origin").set("rate_limit", "per-client"));
        let edge = Edge::start(&cfg);
        // The rate and burst spent by plain requests (1/m with burst 1: two pass), the third refused.
        let mut plain = Client::connect(edge.addr);
        let statuses: Vec<u16> = (0..3).map(|_| plain.get("/").status).collect();
        assert_eq!(statuses, [200, 200, 429]);
        let r = GrpcCall::unary().run(edge.addr);
        assert_eq!(
            (r.code, r.details.as_str()),
            (8, "too many requests"),
            "{r:?}"
        );
        assert_eq!(
            edge.wait_metric(
                "edge_requests_limited_total",
                &["limit=\"per-client\""],
                2.0
            ),
            2.0
        );
        assert_eq!(origin.seen_count(), 2);
    }
);

both_drivers!(
    a_grpc_call_over_http1_gets_a_trailers_only_head,
    |d: Driver| {
        let origin = Origin::fixed(b"not gRPC");
        let edge = Edge::start(&routeless(d, origin.addr));
        let mut c = Client::connect(edge.addr);
        c.send(
            format!(
            "POST {UNARY} HTTP/1.1\r\nHost: t\r\nContent-Type: application/grpc\r\nTE: trailers\r\n\
             Content-Length: 5\r\n\r\n\0\0\0\0\0"
        )
            .as_bytes(),
        );
        let r = c.read_response(false).expect("an answer");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/grpc"));
        assert_eq!(r.header("grpc-status"), Some("12"));
        assert_eq!(r.header("grpc-message"), Some("no route for this request"));
        assert_eq!(r.header("content-length"), Some("0"));
        assert!(r.body.is_empty());
        // The connection is kept (the body was read), as for the 404 it stands for.
        assert_eq!(c.get("/_health").status, 200);
        // A request that is not a gRPC call still gets the plain 404.
        assert_eq!(c.get(UNARY).status, 404);
    }
);

both_drivers!(
    a_routes_respond_stays_as_configured_and_can_be_a_grpc_answer,
    |d: Driver| {
        let origin = Origin::fixed(b"not gRPC");
        let retired = Route::at("/edge.test.Echo/")
        .set("respond", Value::Raw(r#"{ status = 200, body = "" }"#.into()))
        .set(
            "response_headers",
            Value::Raw(
                r#"{ set = { "content-type" = "application/grpc", "grpc-status" = "12", "grpc-message" = "retired" } }"#
                    .into(),
            ),
        );
        let plain = Route::at("/other.Service/").set(
            "respond",
            Value::Raw(r#"{ status = 403, body = "no\n" }"#.into()),
        );
        let cfg = routeless(d, origin.addr)
            .add_route(retired)
            .add_route(plain);
        let edge = Edge::start(&cfg);
        let r = GrpcCall::unary().run(edge.addr);
        assert_eq!((r.code, r.details.as_str()), (12, "retired"), "{r:?}");
        // A respond rule that is no gRPC answer reaches the client as configured (grpcio reads HTTP 403
        // as PERMISSION_DENIED).
        let authority = edge.addr.to_string();
        let r = block_on(async {
            let c = h2_connect(edge.addr).await;
            let grpc = [("content-type", "application/grpc")];
            h2_request(
                &c,
                "POST",
                "/other.Service/M",
                &authority,
                &grpc,
                EMPTY_MESSAGE,
            )
            .await
        });
        let r = r.expect("an answer");
        assert_eq!((r.status, r.body.as_slice()), (403, &b"no\n"[..]));
        assert!(r.headers.get("grpc-status").is_none());
        assert_eq!(origin.seen_count(), 0);
    }
);
