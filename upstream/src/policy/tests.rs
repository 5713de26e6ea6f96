//! The policies over a table of endpoints: exact SWRR sequences, P2C preferring the less loaded per
//! weight, random by weight within a few percent (seeded), and every policy skipping unusable endpoints.

use super::*;

/// Endpoints as plain data: weight, in-flight count, usable.
struct Table(Vec<(u32, usize, bool)>);

impl Table {
    fn weights(ws: &[u32]) -> Table {
        Table(ws.iter().map(|&w| (w, 0, true)).collect())
    }
}

impl Endpoints for Table {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn usable(&self, i: usize) -> bool {
        self.0[i].2
    }
    fn weight(&self, i: usize) -> u32 {
        self.0[i].0
    }
    fn in_flight(&self, i: usize) -> usize {
        self.0[i].1
    }
}

/// How many of `picks` picks went to each endpoint.
fn counts(t: &Table, picks: usize, mut pick: impl FnMut(&Table) -> Option<usize>) -> Vec<usize> {
    let mut n = vec![0; t.count()];
    for _ in 0..picks {
        n[pick(t).expect("a usable endpoint")] += 1;
    }
    n
}

/// Asserts `got` is within `pct` percent of `expected`.
fn near(got: usize, expected: f64, pct: f64) {
    let off = (got as f64 - expected).abs() / expected * 100.0;
    assert!(off <= pct, "{got} is {off:.1}% off {expected}");
}

#[test]
fn swrr_gives_nginx_sequence_for_5_1_1() {
    let t = Table::weights(&[5, 1, 1]);
    let s = Swrr::new(3);
    let seq: String = (0..14)
        .map(|_| (b'a' + s.pick(&t).unwrap() as u8) as char)
        .collect();
    assert_eq!(seq, "aabacaaaabacaa");
}

#[test]
fn swrr_splits_2_to_1_exactly_and_interleaved() {
    let t = Table::weights(&[2, 1]);
    let s = Swrr::new(2);
    let seq: Vec<usize> = (0..6).map(|_| s.pick(&t).unwrap()).collect();
    assert_eq!(seq, [0, 1, 0, 0, 1, 0]);
    assert_eq!(counts(&t, 3000, |t| s.pick(t)), [2000, 1000]);
}

#[test]
fn swrr_equal_weights_alternate_from_the_first() {
    let t = Table::weights(&[1, 1, 1]);
    let s = Swrr::new(3);
    let seq: Vec<usize> = (0..6).map(|_| s.pick(&t).unwrap()).collect();
    assert_eq!(seq, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn p2c_prefers_fewer_in_flight_per_weight() {
    let rng = Rng::seeded(1);
    // Two endpoints: both are always the two candidates, so the less loaded always wins.
    let t = Table(vec![(1, 3, true), (1, 1, true)]);
    assert_eq!(counts(&t, 100, |t| least_request(t, &rng)), [0, 100]);
    // 4 in flight at weight 4 (1 per weight) beats 2 at weight 1.
    let t = Table(vec![(4, 4, true), (1, 2, true)]);
    assert_eq!(counts(&t, 100, |t| least_request(t, &rng)), [100, 0]);
    // Three endpoints, one loaded: whenever it is a candidate the other one is idle and wins.
    let t = Table(vec![(1, 5, true), (1, 0, true), (1, 0, true)]);
    let n = counts(&t, 3000, |t| least_request(t, &rng));
    assert_eq!(n[0], 0);
    near(n[1], 1500.0, 6.0);
}

#[test]
fn p2c_ties_follow_the_weights() {
    let rng = Rng::seeded(2);
    let t = Table(vec![(3, 0, true), (1, 0, true)]);
    let n = counts(&t, 40_000, |t| least_request(t, &rng));
    near(n[0], 30_000.0, 2.0);
    // Equal load per weight (2/2 and 1/1) is a tie too.
    let t = Table(vec![(2, 2, true), (1, 1, true)]);
    let n = counts(&t, 30_000, |t| least_request(t, &rng));
    near(n[0], 20_000.0, 2.0);
}

#[test]
fn p2c_candidates_are_distinct_and_uniform() {
    // Four idle endpoints of equal weight: every one is picked about a quarter of the time.
    let rng = Rng::seeded(3);
    let t = Table::weights(&[1, 1, 1, 1]);
    for n in counts(&t, 40_000, |t| least_request(t, &rng)) {
        near(n, 10_000.0, 3.0);
    }
}

#[test]
fn random_follows_the_weights_within_a_few_percent() {
    let rng = Rng::seeded(4);
    let t = Table::weights(&[3, 1]);
    let n = counts(&t, 100_000, |t| random(t, &rng));
    near(n[0], 75_000.0, 2.0);
    let t = Table::weights(&[5, 3, 2]);
    let n = counts(&t, 100_000, |t| random(t, &rng));
    near(n[0], 50_000.0, 2.0);
    near(n[1], 30_000.0, 3.0);
    near(n[2], 20_000.0, 3.0);
}

#[test]
fn every_policy_skips_unusable_endpoints() {
    let t = Table(vec![
        (5, 0, false),
        (1, 9, true),
        (1, 0, false),
        (1, 3, true),
    ]);
    let rng = Rng::seeded(5);
    for balance in [
        Balance::RoundRobin,
        Balance::LeastRequest,
        Balance::Random,
        Balance::Hash,
    ] {
        let p = Picker::new(balance, 4, Rng::seeded(6));
        let mut key = 0u64;
        let n = counts(&t, 1000, |t| {
            key += 1;
            p.pick(t, Some(fmix64(key)))
        });
        assert_eq!(
            (n[0], n[2]),
            (0, 0),
            "{balance:?} picked an unusable endpoint"
        );
        assert!(n[1] > 0 || balance == Balance::LeastRequest, "{balance:?}");
        assert!(n[3] > 0, "{balance:?}");
    }
    // Only one usable: every policy takes it; none usable: every policy says so.
    let one = Table(vec![(1, 0, false), (1, 7, true)]);
    let none = Table(vec![(1, 0, false), (1, 0, false)]);
    for balance in [
        Balance::RoundRobin,
        Balance::LeastRequest,
        Balance::Random,
        Balance::Hash,
    ] {
        let p = Picker::new(balance, 2, Rng::seeded(7));
        assert_eq!(p.pick(&one, Some(7)), Some(1), "{balance:?}");
        assert_eq!(p.pick(&none, Some(7)), None, "{balance:?}");
    }
    assert_eq!(random(&none, &rng), None);
}

#[test]
fn swrr_over_the_usable_subset_keeps_its_ratio() {
    // The middle endpoint drops out: the others keep their 2:1 split.
    let mut t = Table::weights(&[2, 5, 1]);
    t.0[1].2 = false;
    let s = Swrr::new(3);
    assert_eq!(counts(&t, 3000, |t| s.pick(t)), [2000, 0, 1000]);
}

#[test]
fn rng_below_stays_in_range_and_seeds_differ() {
    let r = Rng::seeded(0);
    assert!((0..10_000).all(|_| r.below(7) < 7));
    let (a, b) = (Rng::seeded(0), Rng::seeded(1));
    assert_ne!(a.below(1 << 40), b.below(1 << 40));
}

/// Where each of `keys` keys goes.
fn homes(t: &Table, keys: u64) -> Vec<usize> {
    (0..keys)
        .map(|k| rendezvous(t, fmix64(k), |i| 1000 + i as u64).expect("a usable endpoint"))
        .collect()
}

#[test]
fn rendezvous_spreads_keys_by_weight() {
    let t = Table::weights(&[1, 1, 1, 1]);
    let mut n = [0usize; 4];
    homes(&t, 40_000).into_iter().for_each(|i| n[i] += 1);
    n.iter().for_each(|&c| near(c, 10_000.0, 5.0));
    let t = Table::weights(&[3, 1]);
    let mut n = [0usize; 2];
    homes(&t, 40_000).into_iter().for_each(|i| n[i] += 1);
    near(n[0], 30_000.0, 5.0);
    near(n[1], 10_000.0, 5.0);
}

#[test]
fn rendezvous_moves_only_the_keys_of_an_endpoint_that_goes_or_comes() {
    let all = Table::weights(&[1; 10]);
    let before = homes(&all, 20_000);
    // Endpoint 3 unusable (ejected, unhealthy): exactly its keys move, spread over the other nine.
    let mut without = Table::weights(&[1; 10]);
    without.0[3].2 = false;
    let after = homes(&without, 20_000);
    let mut moved_to = [0usize; 10];
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(*b == 3, b != a, "only endpoint 3's keys move");
        if b != a {
            moved_to[*a] += 1;
        }
    }
    let moved: usize = moved_to.iter().sum();
    // At most 1/N + 5 % of the keys (DESIGN.md).
    assert!(moved as f64 <= 20_000.0 * (0.1 + 0.05), "{moved}");
    assert!(
        moved_to
            .iter()
            .enumerate()
            .all(|(i, &c)| (i == 3) == (c == 0)),
        "{moved_to:?}"
    );
    // Coming back, every key returns home.
    assert_eq!(homes(&all, 20_000), before);
}

#[test]
fn rendezvous_with_no_usable_endpoint_is_none() {
    let mut t = Table::weights(&[1, 2]);
    t.0.iter_mut().for_each(|e| e.2 = false);
    assert_eq!(rendezvous(&t, 7, |i| i as u64), None);
}
