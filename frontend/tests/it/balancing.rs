//! Balancing (DESIGN.md "Upstream health, discovery and balancing"): weighted round robin splits by
//! weight, `least_request` steers away from a slow endpoint under concurrent load, `random` follows the
//! weights, a reload that changes weights applies to the next requests, and a refused connect is retried
//! on another endpoint under every policy. Two (or three) origins count what they receive.

use std::{net::SocketAddr, thread, time::Duration};

use crate::harness::{refused_addr, Cfg, Client, Driver, Edge, Origin, Reply};

const SIGHUP: i32 = 1;

/// Sends `per_client` GETs on each of `clients` keep-alive connections at once; every one must be 200.
fn load(edge: SocketAddr, clients: usize, per_client: usize) {
    let threads: Vec<_> = (0..clients)
        .map(|k| {
            thread::spawn(move || {
                let mut c = Client::connect(edge);
                for i in 0..per_client {
                    assert_eq!(c.get(&format!("/{k}/{i}")).status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
}

/// Asserts `got` is within `pct` percent of `expected`.
fn near(what: &str, got: usize, expected: f64, pct: f64) {
    let off = (got as f64 - expected).abs() / expected * 100.0;
    assert!(off <= pct, "{what}: {got} is {off:.1}% off {expected}");
}

/// Two origins answering "a" and "b".
fn two() -> (Origin, Origin) {
    (Origin::fixed(b"a"), Origin::fixed(b"b"))
}

both_drivers!(round_robin_splits_two_to_one_by_weight, |d: Driver| {
    let (a, b) = two();
    // Two workers, each with its own smooth weighted round robin; clients spread over both.
    let cfg = Cfg::new(d, a.addr)
        .workers(2)
        .weighted_endpoints(&[(a.addr, 2), (b.addr, 1)]);
    let edge = Edge::start(&cfg);
    load(edge.addr, 6, 500);
    assert_eq!(a.seen_count() + b.seen_count(), 3000);
    near("weight 2", a.seen_count(), 2000.0, 2.0);
    near("weight 1", b.seen_count(), 1000.0, 4.0);
});

both_drivers!(round_robin_weights_interleave_on_one_worker, |d: Driver| {
    let (a, b) = two();
    let cfg = Cfg::new(d, a.addr).weighted_endpoints(&[(a.addr, 2), (b.addr, 1)]);
    let edge = Edge::start(&cfg);
    let mut c = Client::connect(edge.addr);
    // Smooth, not bunched: a b a, a b a, ...
    let seq: Vec<u8> = (0..6).map(|_| c.get("/").body[0]).collect();
    assert_eq!(seq, b"abaaba");
});

both_drivers!(
    least_request_sends_a_slow_endpoint_far_fewer_requests,
    |d: Driver| {
        let fast = Origin::fixed(b"fast");
        let slow = Origin::start(|_| Reply::ok(b"slow").delayed(Duration::from_millis(50)));
        let cfg = Cfg::new(d, fast.addr)
            .endpoints(&[fast.addr, slow.addr])
            .balance("least_request");
        let edge = Edge::start(&cfg);
        load(edge.addr, 16, 40);
        let (f, s) = (fast.seen_count(), slow.seen_count());
        assert_eq!(f + s, 640);
        // Round robin would send it half (320); with its requests in flight for 50 ms the slow endpoint
        // loses nearly every comparison.
        assert!(s * 5 < 320, "slow endpoint got {s} of 640 (fast {f})");
        assert!(s > 0, "the slow endpoint still gets ties");
        edge.assert_upstream_settled();
    }
);

both_drivers!(random_follows_weights_three_to_one, |d: Driver| {
    let (a, b) = two();
    let cfg = Cfg::new(d, a.addr)
        .weighted_endpoints(&[(a.addr, 3), (b.addr, 1)])
        .balance("random");
    let edge = Edge::start(&cfg);
    load(edge.addr, 4, 1000);
    assert_eq!(a.seen_count() + b.seen_count(), 4000);
    // Binomial: the standard deviation of b's count is about 27, 5 % is 50 (almost 2 for a).
    near("weight 3", a.seen_count(), 3000.0, 5.0);
    near("weight 1", b.seen_count(), 1000.0, 15.0);
});

both_drivers!(
    reload_with_new_weights_applies_to_the_next_requests,
    |d: Driver| {
        let (a, b) = two();
        let even = Cfg::new(d, a.addr).endpoints(&[a.addr, b.addr]);
        let edge = Edge::start(&even);
        let mut kept = Client::connect(edge.addr);
        for _ in 0..100 {
            assert_eq!(kept.get("/").status, 200);
        }
        assert_eq!((a.seen_count(), b.seen_count()), (50, 50));

        edge.rewrite_config(&even.clone().weighted_endpoints(&[(a.addr, 3), (b.addr, 1)]));
        edge.signal(SIGHUP);
        edge.wait_log("config.reloaded", Duration::from_secs(5))
            .expect("config.reloaded logged");
        // One worker, a fresh round-robin state: exactly 3:1 from the first request after the reload, on
        // the kept-alive connection and on a new one.
        let mut fresh = Client::connect(edge.addr);
        for i in 0..400 {
            let c = if i % 2 == 0 { &mut kept } else { &mut fresh };
            assert_eq!(c.get("/").status, 200);
        }
        assert_eq!((a.seen_count() - 50, b.seen_count() - 50), (300, 100));
        assert_eq!(edge.count_log("config.rejected"), 0);
    }
);

both_drivers!(
    refused_connect_is_retried_on_another_endpoint_by_every_policy,
    |d: Driver| {
        for policy in ["round_robin", "least_request", "random"] {
            // The origins first: a port `refused_addr` has just freed could otherwise be handed to one
            // of them, and the "dead" endpoint would be that live origin.
            let (a, b) = two();
            let dead = refused_addr();
            let cfg = Cfg::new(d, a.addr)
                .endpoints(&[dead, a.addr, b.addr])
                .balance(policy);
            let edge = Edge::start(&cfg);
            let mut c = Client::connect(edge.addr);
            // Until the dead endpoint is ejected (5 failures), a request that lands on it is retried on a
            // live one: every request succeeds.
            for _ in 0..60 {
                assert_eq!(c.get("/").status, 200, "{policy}");
            }
            let retries = edge.metric("edge_upstream_retries_total", &[]);
            assert!(
                (1.0..=5.0).contains(&retries),
                "{policy}: {retries} retries"
            );
            assert_eq!(a.seen_count() + b.seen_count(), 60, "{policy}");
            assert!(a.seen_count() > 0 && b.seen_count() > 0, "{policy}");
        }
    }
);
