//! The three balancing policies of DESIGN.md "Upstream health, discovery and balancing", per worker and
//! sans-IO: smooth weighted round robin ([`Swrr`], as nginx does it), power of two choices over this
//! worker's in-flight counts divided by weight ([`least_request`]), and random by weight
//! ([`random`]), with the small per-worker generator they draw from ([`Rng`]).
//!
//! Each policy sees the endpoints through an [`Endpoints`] view: how many there are, which are usable
//! (health and passive ejection decide that, in one function of the caller), their weights and in-flight
//! counts. None of them allocates, locks or writes shared memory: state is in `Cell`s of the worker. Each
//! returns `None` when no endpoint is usable, and the caller falls back (DESIGN.md "Upstream pools and
//! retries": the least recently failed).

use std::cell::Cell;

use edge_core::config::Balance;

/// What a policy may ask about the endpoints of one upstream (indices `0..count()`).
pub trait Endpoints {
    /// How many endpoints there are.
    fn count(&self) -> usize;
    /// Whether endpoint `i` may be picked now.
    fn usable(&self, i: usize) -> bool;
    /// Its weight (at least 1).
    fn weight(&self, i: usize) -> u32;
    /// Requests this worker has in flight on it.
    fn in_flight(&self, i: usize) -> usize;
    /// Its stable name for consistent hashing (default: its index).
    fn id(&self, i: usize) -> u64 {
        i as u64
    }
}

/// A xorshift64* generator in a `Cell`: fast, per worker, not for secrets.
#[derive(Debug)]
pub struct Rng(Cell<u64>);

impl Rng {
    /// A generator whose sequence is fixed by `seed` (any value, 0 included).
    pub fn seeded(seed: u64) -> Rng {
        // splitmix64 of the seed: distinct, non-zero states for nearby seeds (worker ids).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(Cell::new(z.max(1)))
    }

    /// A generator for worker `worker`, seeded from it and the clock, so workers and restarts differ.
    pub fn for_worker(worker: usize) -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng::seeded(nanos ^ (worker as u64).rotate_left(32))
    }

    fn next(&self) -> u64 {
        let mut x = self.0.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`), by multiply-and-shift (bias below 2^-32 for the sizes used here).
    pub fn below(&self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// Smooth weighted round robin (nginx's `ngx_http_upstream_get_peer`): every pick adds each usable
/// endpoint's weight to its current weight, takes the largest (the first in file order on a tie) and
/// subtracts the usable total from it. Weights 5, 1, 1 give a a b a c a a, spread rather than bunched.
#[derive(Debug)]
pub struct Swrr {
    current: Box<[Cell<i64>]>,
}

impl Swrr {
    /// State for `n` endpoints, all current weights 0 (allocated once, per upstream and generation).
    pub fn new(n: usize) -> Swrr {
        Swrr {
            current: (0..n).map(|_| Cell::new(0)).collect(),
        }
    }

    /// The next usable endpoint, or `None` when none is.
    pub fn pick(&self, eps: &impl Endpoints) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        for (i, cur) in self.current.iter().enumerate().take(eps.count()) {
            if !eps.usable(i) {
                continue;
            }
            let w = i64::from(eps.weight(i));
            let c = cur.get() + w;
            cur.set(c);
            total += w;
            if best.is_none_or(|(_, b)| c > b) {
                best = Some((i, c));
            }
        }
        let (i, c) = best?;
        self.current[i].set(c - total);
        Some(i)
    }
}

/// The `k`-th usable endpoint (0-based), scanning in file order.
fn nth_usable(eps: &impl Endpoints, k: usize) -> usize {
    (0..eps.count())
        .filter(|&i| eps.usable(i))
        .nth(k)
        .expect("k is below the usable count")
}

/// Power of two choices: two distinct usable endpoints at random; the one with fewer of this worker's
/// requests in flight per unit of weight wins (compared cross-multiplied, `a/wa < b/wb` as
/// `a*wb < b*wa`). A tie goes to either at random in proportion to their weights, so with nothing in
/// flight the split still follows the weights. One usable endpoint is taken as is.
pub fn least_request(eps: &impl Endpoints, rng: &Rng) -> Option<usize> {
    let m = (0..eps.count()).filter(|&i| eps.usable(i)).count();
    match m {
        0 => return None,
        1 => return Some(nth_usable(eps, 0)),
        _ => {}
    }
    let ka = rng.below(m as u64) as usize;
    let mut kb = rng.below(m as u64 - 1) as usize;
    if kb >= ka {
        kb += 1;
    }
    let (a, b) = (nth_usable(eps, ka), nth_usable(eps, kb));
    let (wa, wb) = (u128::from(eps.weight(a)), u128::from(eps.weight(b)));
    let load_a = eps.in_flight(a) as u128 * wb;
    let load_b = eps.in_flight(b) as u128 * wa;
    Some(match load_a.cmp(&load_b) {
        std::cmp::Ordering::Less => a,
        std::cmp::Ordering::Greater => b,
        std::cmp::Ordering::Equal if (rng.below((wa + wb) as u64) as u128) < wa => a,
        std::cmp::Ordering::Equal => b,
    })
}

/// Random by weight: usable endpoint `i` with probability `weight(i) / sum of usable weights`.
pub fn random(eps: &impl Endpoints, rng: &Rng) -> Option<usize> {
    let usable = || (0..eps.count()).filter(|&i| eps.usable(i));
    let total: u64 = usable().map(|i| u64::from(eps.weight(i))).sum();
    if total == 0 {
        return None;
    }
    let mut r = rng.below(total);
    for i in usable() {
        let w = u64::from(eps.weight(i));
        if r < w {
            return Some(i);
        }
        r -= w;
    }
    unreachable!("r is below the total of the usable weights")
}

/// Consistent hashing by rendezvous (highest random weight, Thaler and Ravishankar 1998): every
/// usable endpoint scores `key` with a hash of (key, its `id`), weighted as `weight / -ln(u)` for the
/// hash as `u` in (0, 1) (Schindelhauer and Schomaker's weighted form), and the highest score wins. So a
/// key stays on its endpoint while that endpoint is usable; when an endpoint goes (removed, ejected,
/// unhealthy) only its own keys move, spread over the others by weight; when one comes, it takes its
/// weight's share and nothing else moves (DESIGN.md "Upstream health, discovery and balancing":
/// at most 1/N + 5 % of keys move). `id` names an endpoint stably (a hash of its address), so a
/// re-resolution that keeps an address keeps its keys. Cost: one hash per usable endpoint, and one
/// logarithm each when weights differ; no state, no allocation.
pub fn rendezvous(eps: &impl Endpoints, key: u64, id: impl Fn(usize) -> u64) -> Option<usize> {
    let usable = || (0..eps.count()).filter(|&i| eps.usable(i));
    let first = usable().next()?;
    let weighted = usable().any(|i| eps.weight(i) != eps.weight(first));
    let score = |i: usize| -> f64 {
        let h = fmix64(key ^ fmix64(id(i)));
        if !weighted {
            return h as f64;
        }
        // u in (0, 1): the top 53 bits, offset by half a step so neither end is reached.
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        f64::from(eps.weight(i)) / -u.ln()
    };
    usable()
        .map(|i| (i, score(i)))
        .fold(None, |best, (i, s)| match best {
            Some((_, b)) if b >= s => best,
            _ => Some((i, s)),
        })
        .map(|(i, _)| i)
}

/// MurmurHash3's 64-bit finaliser: every input bit flips each output bit with probability about 1/2.
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// One upstream's policy with its state, for one worker and one configuration generation.
#[derive(Debug)]
pub struct Picker {
    balance: Balance,
    swrr: Swrr,
    rng: Rng,
}

impl Picker {
    /// The `balance` policy over `n` endpoints, drawing from `rng`.
    pub fn new(balance: Balance, n: usize, rng: Rng) -> Picker {
        Picker {
            balance,
            swrr: Swrr::new(n),
            rng,
        }
    }

    /// The endpoint the policy picks among the usable ones, or `None` when none is usable. `key` is
    /// the request's hash for [`Balance::Hash`]; a request without one (the header or cookie it hashes
    /// is absent) is balanced by smooth weighted round robin.
    pub fn pick(&self, eps: &impl Endpoints, key: Option<u64>) -> Option<usize> {
        match (self.balance, key) {
            (Balance::Hash, Some(key)) => rendezvous(eps, key, |i| eps.id(i)),
            (Balance::RoundRobin | Balance::Hash, _) => self.swrr.pick(eps),
            (Balance::LeastRequest, _) => least_request(eps, &self.rng),
            (Balance::Random, _) => random(eps, &self.rng),
        }
    }
}

#[cfg(test)]
mod tests;
