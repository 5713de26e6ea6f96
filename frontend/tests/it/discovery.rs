//! Re-resolution of endpoint names (DESIGN.md "Upstream health, discovery and balancing", Discovery),
//! through the real binary. Names come from the debug build's test resolver (`EDGE_TEST_HOSTS`: a file
//! of `name addr...` lines the test rewrites), so nothing global is edited. Origins listen on 127.0.0.2
//! and 127.0.0.3 with one port, so `app.test:PORT` can move between them.

use std::{
    io::Write,
    net::{SocketAddr, TcpListener},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use crate::harness::{
    read_request, wait_until, Cfg, Client, Driver, Edge, Origin, Route, TempDir, Upstream, Value,
};

/// An origin on one address that answers every request with its own name and counts them.
struct Named {
    addr: SocketAddr,
    served: Arc<AtomicUsize>,
}

impl Named {
    fn start(listener: TcpListener, name: &'static str) -> Named {
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let count = count.clone();
                thread::spawn(move || {
                    let mut s = s;
                    let mut buf = Vec::new();
                    while let Some((_, used)) = read_request(&mut s, &mut buf) {
                        buf.drain(..used);
                        count.fetch_add(1, Ordering::SeqCst);
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}",
                            name.len()
                        );
                        if s.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Named { addr, served }
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

/// Two origins on 127.0.0.2 and 127.0.0.3 sharing one free port.
fn two_origins() -> (Named, Named) {
    for _ in 0..50 {
        let a = TcpListener::bind("127.0.0.2:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if let Ok(b) = TcpListener::bind(("127.0.0.3", port)) {
            return (Named::start(a, "a"), Named::start(b, "b"));
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

/// The test resolver's file.
struct Hosts {
    _dir: TempDir,
    path: std::path::PathBuf,
}

impl Hosts {
    fn new(lines: &str) -> Hosts {
        let dir = TempDir::new();
        let path = dir.0.join("hosts");
        let h = Hosts { _dir: dir, path };
        h.set(lines);
        h
    }

    /// Replaces the file at once (write then rename), so edge never reads half of it.
    fn set(&self, lines: &str) {
        let tmp = self.path.with_extension("new");
        std::fs::write(&tmp, lines).unwrap();
        std::fs::rename(&tmp, &self.path).unwrap();
    }
}

fn start(d: Driver, hosts: &Hosts, port: u16) -> Edge {
    let cfg = Cfg::new(d, "127.0.0.1:9".parse().unwrap())
        .upstream_field("endpoints", Value::Strs(vec![format!("app.test:{port}")]))
        .upstream_field("resolve", "200ms");
    Edge::start_env(
        &cfg,
        &[],
        &[("EDGE_TEST_HOSTS", hosts.path.to_str().unwrap())],
    )
}

both_drivers!(
    an_endpoint_name_whose_address_changes_moves_traffic_and_no_request_fails,
    |d| {
        let (a, b) = two_origins();
        let hosts = Hosts::new("app.test 127.0.0.2\n");
        let edge = start(d, &hosts, a.addr.port());
        let mut client = Client::connect(edge.addr);
        for _ in 0..20 {
            assert_eq!(client.get("/x").status, 200);
        }
        assert_eq!((a.served(), b.served()), (20, 0));

        hosts.set("app.test 127.0.0.3\n");
        // Keep sending while the change propagates: every request must succeed.
        let moved = wait_until(Duration::from_secs(10), || {
            let r = client.get("/x");
            assert_eq!(r.status, 200, "a request failed while the address changed");
            b.served() > 0
        });
        assert!(moved, "traffic did not move to the new address");
        assert!(edge
            .wait_log("upstream.resolved", Duration::from_secs(1))
            .is_some_and(|l| l.contains("127.0.0.3")));
        let before = a.served();
        for _ in 0..20 {
            assert_eq!(client.get("/x").text(), "b");
        }
        assert_eq!(a.served(), before, "the vanished address got new requests");
    }
);

both_drivers!(a_failed_resolution_keeps_the_last_good_addresses, |d| {
    let (a, _b) = two_origins();
    let hosts = Hosts::new("app.test 127.0.0.2\n");
    let edge = start(d, &hosts, a.addr.port());
    let mut client = Client::connect(edge.addr);
    assert_eq!(client.get("/x").text(), "a");
    hosts.set("other.test 127.0.0.3\n");
    assert!(edge
        .wait_log("upstream.resolve_failed", Duration::from_secs(5))
        .is_some_and(|l| l.contains("app.test")));
    for _ in 0..10 {
        assert_eq!(client.get("/x").text(), "a");
    }
});

both_drivers!(a_name_with_two_addresses_gives_two_endpoints, |d| {
    let (a, b) = two_origins();
    let hosts = Hosts::new("app.test 127.0.0.2 127.0.0.3\n");
    let edge = start(d, &hosts, a.addr.port());
    assert!(edge
        .wait_log("startup.upstream", Duration::from_secs(1))
        .is_some_and(|l| l.contains("127.0.0.2") && l.contains("127.0.0.3")));
    let mut client = Client::connect(edge.addr);
    for _ in 0..20 {
        assert_eq!(client.get("/x").status, 200);
    }
    assert_eq!(
        (a.served(), b.served()),
        (10, 10),
        "round robin over both addresses"
    );
});

both_drivers!(
    a_name_that_does_not_resolve_at_start_is_503_until_it_resolves_and_other_upstreams_serve,
    |d| {
        let (a, _b) = two_origins();
        let other = Origin::fixed(b"other");
        // `app.test` has no address yet; the default `resolve` (30 s) must not delay the retry.
        let hosts = Hosts::new("app.test\n");
        let cfg = Cfg::new(d, "127.0.0.1:9".parse().unwrap())
            .upstream_field(
                "endpoints",
                Value::Strs(vec![format!("app.test:{}", a.addr.port())]),
            )
            .add_upstream(Upstream::new("other", &[other.addr]))
            .add_route(Route::new("/other", "other"));
        let edge = Edge::start_env(
            &cfg,
            &[],
            &[("EDGE_TEST_HOSTS", hosts.path.to_str().unwrap())],
        );
        assert!(edge
            .wait_log_all(
                &["upstream.resolve_failed", "app.test"],
                Duration::from_secs(2)
            )
            .is_some());
        let mut client = Client::connect(edge.addr);
        let r = client.get("/x");
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(
            edge.wait_metric("edge_requests_shed_total", &["reason=\"no_endpoint\""], 1.0),
            1.0
        );
        assert!(edge
            .wait_log_all(&["request.shed", "no_endpoint"], Duration::from_secs(2))
            .is_some());
        // The other upstream serves meanwhile, on the same connection.
        assert_eq!(client.get("/other/y").text(), "other");

        hosts.set("app.test 127.0.0.2\n");
        // Looked up again within 5 s of start (then every 5 s) until it resolves.
        let resolved = wait_until(Duration::from_secs(15), || {
            Client::connect(edge.addr).get("/x").status == 200
        });
        assert!(resolved, "the name was not resolved again");
        assert_eq!(client.get("/x").text(), "a");
        assert!(a.served() >= 1);
    }
);
