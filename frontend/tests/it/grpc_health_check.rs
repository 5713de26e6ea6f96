//! gRPC health checks (DESIGN.md "HTTP/2 and gRPC upstreams", `[upstreams.health_check] grpc_service`):
//! edge probes a real grpcio server's standard health service (`grpc.health.v1.Health/Check`) over h2c
//! and over TLS (`protocol = "auto"`, ALPN h2): SERVING keeps the endpoint healthy and serving; a switch
//! to NOT_SERVING makes it unhealthy after `unhealthy_threshold` probes, counted and logged with the
//! reason, and SERVING brings it back; a service the server does not know fails with grpc status 5
//! (NOT_FOUND); `grpc_service` on an HTTP/1.1 upstream is a config error. Intervals are 100 ms; every
//! wait is on a log line, a metric or a server event, never a fixed sleep.

use std::{net::SocketAddr, time::Duration};

use crate::harness::{
    check_config, metric_sum, Cfg, Driver, Edge, GrpcCall, GrpcServer, Site, TempDir,
};

const WAIT: Duration = Duration::from_secs(10);

/// `cfg` with a gRPC health check of `service` every 100 ms, unhealthy after 2 failures, healthy
/// after 2 passes.
fn grpc_checked(cfg: Cfg, service: &str) -> Cfg {
    cfg.health_check("grpc_service", service)
        .health_check("interval", "100ms")
        .health_check("timeout", "2s")
        .health_check("unhealthy_threshold", 2)
        .health_check("healthy_threshold", 2)
}

/// An edge with h2c on its plain listener in front of the h2c gRPC `server`, checking `service`.
fn h2c_edge(d: Driver, server: SocketAddr, service: &str) -> Edge {
    let cfg = Cfg::new(d, server)
        .server("h2c", true)
        .upstream_field("protocol", "h2");
    Edge::start(&grpc_checked(cfg, service))
}

/// Waits until the gauge of `endpoint` is exported with `want` (a series not exported yet sums to 0,
/// which must not pass for "unhealthy").
fn assert_gauge(edge: &Edge, endpoint: SocketAddr, want: f64) {
    let label = format!("endpoint=\"{endpoint}\"");
    let until = std::time::Instant::now() + WAIT;
    let seen = loop {
        let text = edge.metrics();
        let exported = text
            .lines()
            .any(|l| l.starts_with("edge_upstream_endpoint_healthy{") && l.contains(&label));
        let v = metric_sum(&text, "edge_upstream_endpoint_healthy", &[&label]);
        if (exported && v == want) || std::time::Instant::now() > until {
            break (exported, v);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        seen,
        (true, want),
        "edge_upstream_endpoint_healthy{{{label}}}"
    );
}

both_drivers!(a_grpc_health_check_follows_the_serving_status, |d| {
    let server = GrpcServer::start();
    let edge = h2c_edge(d, server.addr, "edge.test.Echo");
    let pass = ["result=\"pass\""];
    let passes = edge.wait_metric_where("edge_upstream_health_checks_total", &pass, WAIT, |v| {
        v >= 2.0
    });
    assert!(passes >= 2.0, "passes counted: {passes}");
    assert_gauge(&edge, server.addr, 1.0);
    let probe = server
        .wait_event(WAIT, |e| e["event"] == "health_check")
        .expect("a Health/Check call reached the server");
    assert_eq!(probe["service"], "edge.test.Echo", "{probe}");
    assert_eq!(probe["metadata"]["user-agent"], "edge-health", "{probe}");
    let r = GrpcCall::unary().run(edge.addr);
    assert_eq!(r.code, 0, "served while healthy: {r:?}");

    // The service stops serving: unhealthy after 2 probes, with the reason.
    server.set_health("edge.test.Echo", "NOT_SERVING");
    let ep = format!("endpoint={}", server.addr);
    let line = edge
        .wait_log_all(&["upstream.unhealthy", &ep], WAIT)
        .expect("upstream.unhealthy logged");
    assert!(line.contains("failures=2"), "{line}");
    assert!(line.contains("not serving (status 2)"), "{line}");
    assert_gauge(&edge, server.addr, 0.0);
    assert!(edge.metric("edge_upstream_health_checks_total", &["result=\"fail\""]) >= 2.0);

    // Serving again: healthy after 2 passes.
    server.set_health("edge.test.Echo", "SERVING");
    let line = edge
        .wait_log_all(&["upstream.healthy", &ep], WAIT)
        .expect("upstream.healthy logged");
    assert!(line.contains("passes=2"), "{line}");
    assert_gauge(&edge, server.addr, 1.0);
    let r = GrpcCall::unary().run(edge.addr);
    assert_eq!(r.code, 0, "served again: {r:?}");
});

both_drivers!(a_service_the_server_does_not_know_fails_not_found, |d| {
    let server = GrpcServer::start();
    let edge = h2c_edge(d, server.addr, "no.such.Service");
    let line = edge
        .wait_log_all(
            &["upstream.unhealthy", &format!("endpoint={}", server.addr)],
            WAIT,
        )
        .expect("upstream.unhealthy logged");
    assert!(line.contains("grpc status 5"), "NOT_FOUND: {line}");
    assert_gauge(&edge, server.addr, 0.0);
    let probe = server
        .wait_event(WAIT, |e| e["event"] == "health_check")
        .expect("a Health/Check call reached the server");
    assert_eq!(probe["service"], "no.such.Service", "{probe}");
});

both_drivers!(the_server_as_a_whole_is_checked_over_tls_with_auto, |d| {
    let site = Site::new();
    let server = GrpcServer::start_tls(&site.cert, &site.key);
    let ca = site.ca_file.to_string_lossy().into_owned();
    let cfg = site
        .cfg(d, server.addr)
        .upstream_field("protocol", "auto")
        .upstream_field("tls", true)
        .upstream_field("tls_ca", ca.as_str())
        .upstream_field("tls_server_name", "localhost");
    let edge = Edge::start(&grpc_checked(cfg, ""));
    let pass = ["result=\"pass\""];
    let passes = edge.wait_metric_where("edge_upstream_health_checks_total", &pass, WAIT, |v| {
        v >= 2.0
    });
    assert!(passes >= 2.0, "passes counted: {passes}");
    assert_gauge(&edge, server.addr, 1.0);
    let probe = server
        .wait_event(WAIT, |e| e["event"] == "health_check")
        .expect("a Health/Check call reached the server");
    assert_eq!(probe["service"], "", "the server as a whole: {probe}");

    server.set_health("", "NOT_SERVING");
    let line = edge
        .wait_log_all(
            &["upstream.unhealthy", &format!("endpoint={}", server.addr)],
            WAIT,
        )
        .expect("upstream.unhealthy logged");
    assert!(line.contains("not serving (status 2)"), "{line}");
    assert_gauge(&edge, server.addr, 0.0);
});

#[test]
fn grpc_service_on_an_http1_upstream_is_a_config_error() {
    let dir = TempDir::new();
    let path = dir.0.join("edge.toml");
    let config = |protocol: &str| {
        format!(
            "[[upstreams]]\nname = \"o\"\nendpoints = [\"127.0.0.1:9\"]\nprotocol = \"{protocol}\"\n\
             [upstreams.health_check]\ngrpc_service = \"\"\n\
             [[routes]]\npath_prefix = \"/\"\nupstream = \"o\"\n"
        )
    };
    std::fs::write(&path, config("http1")).unwrap();
    let out = check_config(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("upstreams[0].health_check.grpc_service"),
        "{err}"
    );
    assert!(err.contains("needs HTTP/2"), "{err}");
    assert!(err.contains("edge.toml"), "{err}");
    std::fs::write(&path, config("h2")).unwrap();
    let out = check_config(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("grpc_service = \"\""), "printed back: {text}");
}
