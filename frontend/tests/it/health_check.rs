//! Active health checks (DESIGN.md "Upstream health, discovery and balancing"), fault matrix group f:
//! an endpoint that starts failing its check while serving gets no new requests after
//! `unhealthy_threshold` probes and returns after `healthy_threshold` passes; with every endpoint
//! unhealthy edge fails open (requests still 200, counted and logged); a probe that times out is a
//! failure; the probe carries `Host` (the configured address text) and `User-Agent: edge-health`; a
//! reload keeps the state of endpoints that stay and stops checking removed ones. Intervals are 100 ms; every wait is on a log line or a
//! metric, never a fixed sleep.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU16, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::harness::{metric_sum, Cfg, Client, Driver, Edge, Origin, Reply, Value};

const HEALTH_PATH: &str = "/healthz";
const WAIT: Duration = Duration::from_secs(5);
const SIGHUP: i32 = 1;

/// An origin answering `body` to traffic and the status in `health` (200 at first) to `HEALTH_PATH`.
struct Checked {
    origin: Origin,
    health: Arc<AtomicU16>,
}

impl Checked {
    fn start(body: &'static [u8]) -> Checked {
        let health = Arc::new(AtomicU16::new(200));
        let h = health.clone();
        let origin = Origin::start(move |req| match req.target == HEALTH_PATH {
            true => {
                let status = h.load(Ordering::SeqCst);
                Reply::raw(
                    format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                    false,
                )
            }
            false => Reply::ok(body),
        });
        Checked { origin, health }
    }

    fn addr(&self) -> SocketAddr {
        self.origin.addr
    }

    fn set_health(&self, status: u16) {
        self.health.store(status, Ordering::SeqCst);
    }

    /// Requests other than probes seen so far.
    fn traffic(&self) -> usize {
        let seen = self.origin.seen.lock().unwrap();
        seen.iter().filter(|s| s.target != HEALTH_PATH).count()
    }
}

/// The harness config on `endpoints`, checked every 100 ms, unhealthy after 2 failures, healthy after 2
/// passes.
fn checked_cfg(d: Driver, endpoints: &[SocketAddr]) -> Cfg {
    Cfg::new(d, endpoints[0])
        .endpoints(endpoints)
        .health_check("path", HEALTH_PATH)
        .health_check("interval", "100ms")
        .health_check("timeout", "500ms")
        .health_check("unhealthy_threshold", 2)
        .health_check("healthy_threshold", 2)
}

/// Sends `n` GETs on one kept-alive connection; each must be 200.
fn send(edge: &Edge, n: usize) {
    let mut c = Client::connect(edge.addr);
    for i in 0..n {
        assert_eq!(c.get("/x").status, 200, "request {i}");
    }
}

/// The gauge of endpoint `addr` (its configured text) reaches `want`.
/// The series must exist: a gauge not exported yet sums to 0, which would pass for "unhealthy" before
/// the first verdict.
fn assert_gauge(edge: &Edge, addr: &str, want: f64) {
    let label = format!("endpoint=\"{addr}\"");
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

both_drivers!(
    an_endpoint_failing_its_check_gets_no_new_requests_and_returns,
    |d| {
        let (a, b) = (Checked::start(b"a"), Checked::start(b"b"));
        let edge = Edge::start(&checked_cfg(d, &[a.addr(), b.addr()]));
        assert_gauge(&edge, &b.addr().to_string(), 1.0);
        send(&edge, 10);
        assert!(b.traffic() > 0, "both endpoints serve while healthy");

        // b fails its checks while still serving traffic.
        b.set_health(500);
        let ep = format!("endpoint={}", b.addr());
        let line = edge
            .wait_log_all(&["upstream.unhealthy", &ep], WAIT)
            .expect("upstream.unhealthy logged");
        assert!(line.contains("failures=2"), "{line}");
        assert!(line.contains("status 500"), "{line}");
        assert_gauge(&edge, &b.addr().to_string(), 0.0);
        assert_eq!(
            edge.metric(
                "edge_upstream_endpoint_healthy",
                &[&format!("endpoint=\"{}\"", a.addr())]
            ),
            1.0
        );
        let (at_a, at_b) = (a.traffic(), b.traffic());
        send(&edge, 20);
        assert_eq!(
            b.traffic(),
            at_b,
            "no new request reached the unhealthy endpoint"
        );
        assert_eq!(a.traffic(), at_a + 20);
        assert!(edge.metric("edge_upstream_health_checks_total", &["result=\"fail\""]) >= 2.0);
        assert_eq!(edge.metric("edge_upstream_fail_open_total", &[]), 0.0);

        // It passes again: back after 2 passes.
        b.set_health(200);
        let line = edge
            .wait_log_all(&["upstream.healthy", &ep], WAIT)
            .expect("upstream.healthy logged");
        assert!(line.contains("passes=2"), "{line}");
        assert_gauge(&edge, &b.addr().to_string(), 1.0);
        send(&edge, 10);
        assert!(b.traffic() >= at_b + 4, "the endpoint serves again");
        assert_eq!(edge.count_log("upstream.unhealthy"), 1);
    }
);

both_drivers!(every_endpoint_unhealthy_fails_open, |d| {
    let (a, b) = (Checked::start(b"a"), Checked::start(b"b"));
    a.set_health(503);
    b.set_health(503);
    let edge = Edge::start(&checked_cfg(d, &[a.addr(), b.addr()]));
    assert_gauge(&edge, &a.addr().to_string(), 0.0);
    assert_gauge(&edge, &b.addr().to_string(), 0.0);
    send(&edge, 6);
    assert!(
        a.traffic() > 0 && b.traffic() > 0,
        "fail open uses them all"
    );
    edge.assert_counted_and_logged(
        "edge_upstream_fail_open_total",
        &["worker=\"0\""],
        6.0,
        "upstream.fail_open",
    );
    // Rate-limited: six picks within a second log one line.
    assert_eq!(edge.count_log("upstream.fail_open"), 1);
});

both_drivers!(a_probe_that_times_out_counts_as_a_failure, |d| {
    let slow = Origin::start(|req| match req.target == HEALTH_PATH {
        true => Reply::ok(b"late").delayed(Duration::from_secs(2)),
        false => Reply::ok(b"slow"),
    });
    let fine = Checked::start(b"fine");
    let cfg = checked_cfg(d, &[slow.addr, fine.addr()]).health_check("timeout", "150ms");
    let edge = Edge::start(&cfg);
    let ep = format!("endpoint={}", slow.addr);
    let line = edge
        .wait_log_all(&["upstream.unhealthy", &ep], WAIT)
        .expect("upstream.unhealthy logged");
    assert!(line.contains("reason=timeout"), "{line}");
    assert_gauge(&edge, &slow.addr.to_string(), 0.0);
    // The healthy endpoint's probes were not held up by the slow one.
    assert_gauge(&edge, &fine.addr().to_string(), 1.0);
    assert_eq!(edge.count_log(&format!("endpoint={}", fine.addr())), 0);
    let before = slow.seen_count();
    send(&edge, 5);
    let traffic = slow.seen.lock().unwrap()[before..]
        .iter()
        .filter(|s| s.target != HEALTH_PATH)
        .count();
    assert_eq!(
        traffic, 0,
        "no traffic to the endpoint whose probe timed out"
    );
});

both_drivers!(the_probe_carries_host_and_user_agent, |d| {
    let origin = Checked::start(b"ok");
    // Configured by name: Host is the address text as configured, not the resolved address.
    let text = format!("localhost:{}", origin.addr().port());
    let cfg = checked_cfg(d, &[origin.addr()])
        .upstream_field("endpoints", Value::Strs(vec![text.clone()]));
    let edge = Edge::start(&cfg);
    assert!(
        origin.origin.wait_until(WAIT, |o| o
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.target == HEALTH_PATH)),
        "no probe arrived"
    );
    let probe = origin
        .origin
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.target == HEALTH_PATH)
        .cloned()
        .unwrap();
    assert_eq!(probe.method, "GET");
    assert_eq!(probe.minor, 1);
    assert_eq!(probe.header("host"), Some(text.as_str()));
    assert_eq!(probe.header("user-agent"), Some("edge-health"));
    assert_eq!(probe.header("connection"), Some("close"));
    // The gauge's label is the configured text too.
    assert!(
        edge.metrics().contains(&format!("endpoint=\"{text}\"")),
        "{}",
        edge.metrics()
    );
});

both_drivers!(a_reload_keeps_the_state_of_endpoints_that_stay, |d| {
    let (a, b, c) = (
        Checked::start(b"a"),
        Checked::start(b"b"),
        Checked::start(b"c"),
    );
    b.set_health(500);
    let edge = Edge::start(&checked_cfg(d, &[a.addr(), b.addr()]));
    let ep = format!("endpoint={}", b.addr());
    edge.wait_log_all(&["upstream.unhealthy", &ep], WAIT)
        .expect("upstream.unhealthy logged");

    // A new endpoint joins; b stays (and stays unhealthy), a stays healthy.
    edge.rewrite_config(&checked_cfg(d, &[a.addr(), b.addr(), c.addr()]));
    edge.signal(SIGHUP);
    edge.wait_log("config.reloaded", WAIT)
        .expect("config.reloaded logged");
    assert_gauge(&edge, &c.addr().to_string(), 1.0);
    assert!(
        c.origin.wait_until(WAIT, |o| o.seen_count() > 0),
        "the new endpoint is probed"
    );
    let at_b = b.traffic();
    send(&edge, 10);
    assert_eq!(b.traffic(), at_b, "b is still unhealthy after the reload");
    assert!(a.traffic() > 0 && c.traffic() > 0);
    assert_eq!(
        edge.count_log("upstream.unhealthy"),
        1,
        "no second transition"
    );
    assert_eq!(edge.count_log("upstream.healthy"), 0);

    // b is removed: no longer probed, and its gauge is NaN (neither healthy nor alerting).
    edge.rewrite_config(&checked_cfg(d, &[a.addr(), c.addr()]));
    edge.signal(SIGHUP);
    edge.wait_log("generation=3", WAIT)
        .expect("second config.reloaded logged");
    let label = format!("endpoint=\"{}\"", b.addr());
    let v = edge.wait_metric_where(
        "edge_upstream_endpoint_healthy",
        &[&label],
        WAIT,
        f64::is_nan,
    );
    assert!(v.is_nan(), "removed endpoint's gauge: {v}");
    send(&edge, 4);
    assert_eq!(b.traffic(), at_b);
});
