//! `Upstream::pick` over real endpoint state: passive ejection and the in-flight counts of the
//! `max_active` permits feed every policy, a connect retry goes to another endpoint, and workers start
//! round robin at different endpoints.

use edge_core::config::{Balance, ResolvedEndpoint, ResolvedUpstream, Upstream as Settings};

use super::*;

const ALL: [Balance; 3] = [Balance::RoundRobin, Balance::LeastRequest, Balance::Random];

/// An upstream of `n` endpoints (weight 1) with `balance`, for `worker`.
fn upstream(n: u16, balance: Balance, worker: usize) -> Upstream {
    let mut config = Settings::with_endpoints("t", vec![]);
    config.balance = balance;
    let endpoints = (0..n)
        .map(|i| ResolvedEndpoint {
            addr: SocketAddr::from(([127, 0, 0, 1], 1000 + i)),
            weight: 1,
            spec: usize::from(i),
        })
        .collect();
    let r = ResolvedUpstream {
        config,
        endpoints,
        tls: None,
    };
    Upstream::new(&r, worker, &crate::balance::UpstreamCounters::noop())
}

/// Ejects endpoint `i` (5 connect failures at `at`).
fn eject(up: &Upstream, i: usize, at: Instant) {
    for _ in 0..crate::eject::EJECT_AFTER {
        up.endpoints[i].health.failed(at);
    }
    assert!(!up.usable(i, Instant::now()));
}

#[test]
fn every_policy_skips_passively_ejected_endpoints() {
    for balance in ALL {
        let up = upstream(3, balance, 0);
        eject(&up, 0, Instant::now());
        let picks: Vec<usize> = (0..200).map(|_| up.pick(None, None)).collect();
        assert!(!picks.contains(&0), "{balance:?}");
        assert!(picks.contains(&1) && picks.contains(&2), "{balance:?}");
    }
}

#[test]
fn all_ejected_falls_back_to_the_least_recently_failed() {
    for balance in ALL {
        let up = upstream(3, balance, 0);
        let t0 = Instant::now();
        eject(&up, 1, t0);
        eject(&up, 0, t0 + Duration::from_millis(1));
        eject(&up, 2, t0 + Duration::from_millis(2));
        assert_eq!(up.pick(None, None), 1, "{balance:?}");
        // A retry after endpoint 1 failed goes elsewhere: the least recently failed of the others.
        assert_eq!(up.pick(Some(1), None), 0, "{balance:?}");
    }
}

#[test]
fn a_retry_never_picks_the_failed_endpoint() {
    for balance in ALL {
        let up = upstream(3, balance, 0);
        for failed in 0..3 {
            assert!(
                (0..100).all(|_| up.pick(Some(failed), None) != failed),
                "{balance:?}"
            );
        }
    }
}

#[test]
fn least_request_avoids_endpoints_with_requests_in_flight() {
    let up = upstream(2, Balance::LeastRequest, 0);
    let held: Vec<_> = (0..3)
        .map(|_| up.endpoints[0].slots.try_acquire(0).unwrap())
        .collect();
    assert!((0..100).all(|_| up.pick(None, None) == 1));
    drop(held);
    assert_eq!(up.endpoints[0].slots.active(), 0);
    let picks: Vec<usize> = (0..100).map(|_| up.pick(None, None)).collect();
    assert!(picks.contains(&0) && picks.contains(&1));
}

#[test]
fn workers_start_round_robin_at_different_endpoints() {
    let firsts: Vec<usize> = (0..3)
        .map(|w| upstream(3, Balance::RoundRobin, w).pick(None, None))
        .collect();
    assert_eq!(firsts, [0, 1, 2]);
}
