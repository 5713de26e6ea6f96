//! The keyed rate-limit table every worker shares: one [`KeyTable`] per `[[rate_limits]]` entry,
//! holding each key's GCRA state ([`super::Gcra`]) in one atomic word, so a client's limit is exact for
//! the whole process whichever cores its connections land on, and no request takes a lock.
//!
//! Shape: a power-of-two array of 8-way buckets, each 128 bytes (the keys' cache line, then their
//! states'); a key is a 64-bit keyed hash of what the limit keys on (SipHash with a per-process
//! random key, so clients cannot aim keys at one bucket), 0 meaning an empty slot. The table is sized
//! at build time from `max_keys` with 1.5x headroom, rounded up to a power of two: at most 48 bytes
//! per key tracked, and nothing allocated afterwards.
//!
//! Forgetting a key (`max_keys`): a new key takes an empty slot of its bucket, else the slot whose
//! state has recovered (TAT at or before now: forgetting it changes no decision), else the one
//! closest to recovering. That is "least recently used" measured on the limit's own clock, and it
//! differs from plain LRU where that matters: a client flooding the table with fresh keys evicts its
//! own one-off keys, not the state of a client that is being limited.
//!
//! Concurrency: a key's state changes by compare-and-swap; a new key is placed by swapping the
//! slot's state first and its key second, so a reader of the new key never sees the evicted key's
//! state. The one race left is two cores placing the same new key in the same instant into
//! different slots of its bucket: each admits that first request, once, and the duplicate slot is
//! the first to be forgotten.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::*};

use super::{Gcra, Verdict};

/// Slots per bucket.
const WAYS: usize = 8;
/// The key of an empty slot (a key that hashes to it is stored as 1).
const EMPTY: u64 = 0;

/// One bucket: the keys' cache line, then their TATs'.
#[repr(C, align(64))]
struct Bucket {
    keys: [AtomicU64; WAYS],
    tats: [AtomicU64; WAYS],
}

/// Where a key is, or where it would go.
enum Place {
    /// The key's slot.
    Found(usize),
    /// The slot to take, with the key and TAT it holds now.
    Take(usize, u64, u64),
}

impl Bucket {
    fn new() -> Bucket {
        Bucket {
            keys: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            tats: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// One pass: the key's slot, else the slot a new key takes (see the module docs).
    fn place(&self, key: u64, now: u64) -> Place {
        // (slot, rank, its key, its TAT); empty slots rank 0, then by how far the TAT is ahead of
        // `now` (every recovered state ranks 1).
        let mut take = (0, u64::MAX, EMPTY, 0);
        for i in 0..WAYS {
            let k = self.keys[i].load(Acquire);
            if k == key {
                return Place::Found(i);
            }
            let tat = self.tats[i].load(Acquire);
            let rank = if k == EMPTY {
                0
            } else {
                tat.max(now) - now + 1
            };
            if rank < take.1 {
                take = (i, rank, k, tat);
            }
        }
        let (i, _, k, tat) = take;
        Place::Take(i, k, tat)
    }
}

/// What [`KeyTable::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The decision for this request.
    pub verdict: Verdict,
    /// A key whose state had not recovered was forgotten to make room (the table is too small for
    /// the keys in use: count it).
    pub evicted_active: bool,
}

/// Rate-limit state for up to `max_keys` keys, shared by every worker (`Send + Sync`; wrap it in an
/// `Arc`). See the module docs for shape, eviction and concurrency.
pub struct KeyTable {
    buckets: Box<[Bucket]>,
    mask: u64,
    hasher: RandomState,
    epoch: std::time::Instant,
}

impl KeyTable {
    /// A table for `max_keys` keys (at least one bucket).
    pub fn new(max_keys: u64) -> KeyTable {
        let slots = max_keys
            .saturating_add(max_keys / 2)
            .max(WAYS as u64)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63);
        let buckets = slots / WAYS as u64;
        KeyTable {
            buckets: (0..buckets).map(|_| Bucket::new()).collect(),
            mask: buckets - 1,
            hasher: RandomState::new(),
            epoch: std::time::Instant::now(),
        }
    }

    /// `at` on the table's clock: nanoseconds since the table was built (every worker sharing the
    /// table reads the same monotonic clock, so their times compare).
    pub fn clock(&self, at: std::time::Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The table's memory in bytes (fixed at build).
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
    }

    /// The key of a byte string (a header value, a route's name).
    pub fn key(&self, bytes: &[u8]) -> u64 {
        nonzero(self.hasher.hash_one(bytes))
    }

    /// The key of a client address (an IPv4-mapped IPv6 address is the IPv4 address).
    pub fn key_ip(&self, ip: IpAddr) -> u64 {
        nonzero(self.hasher.hash_one(ip.to_canonical()))
    }

    /// Decides one request by `key` at `now` (nanoseconds on a monotonic clock that every caller of
    /// this table shares) under `limit`, and records it when admitted. Lock-free: a few atomic loads
    /// and one compare-and-swap, retried only when another core changed the same slot meanwhile.
    pub fn admit(&self, key: u64, limit: &Gcra, now: u64) -> Admission {
        let bucket = &self.buckets[(key & self.mask) as usize];
        loop {
            match bucket.place(key, now) {
                Place::Found(i) => {
                    if let Some(verdict) = update(bucket, i, key, limit, now) {
                        return Admission {
                            verdict,
                            evicted_active: false,
                        };
                    }
                }
                Place::Take(i, old_key, old_tat) => {
                    let verdict = limit.decide(0, now);
                    let tat = match verdict {
                        Verdict::Admit { tat } => tat,
                        Verdict::Limit { .. } => 0,
                    };
                    // State first, then key: a reader of `key` never sees `old_key`'s state.
                    if bucket.tats[i]
                        .compare_exchange(old_tat, tat, AcqRel, Acquire)
                        .is_err()
                        || bucket.keys[i]
                            .compare_exchange(old_key, key, AcqRel, Acquire)
                            .is_err()
                    {
                        continue;
                    }
                    return Admission {
                        verdict,
                        evicted_active: old_key != EMPTY && old_tat > now,
                    };
                }
            }
        }
    }
}

/// The decision for `key` in slot `i`, its state updated when admitted; `None` when the slot was
/// given to another key meanwhile (the caller places the key again).
fn update(bucket: &Bucket, i: usize, key: u64, limit: &Gcra, now: u64) -> Option<Verdict> {
    loop {
        let tat = bucket.tats[i].load(Acquire);
        if bucket.keys[i].load(Acquire) != key {
            return None;
        }
        match limit.decide(tat, now) {
            v @ Verdict::Limit { .. } => return Some(v),
            v @ Verdict::Admit { tat: next } => {
                if bucket.tats[i]
                    .compare_exchange_weak(tat, next, AcqRel, Acquire)
                    .is_ok()
                {
                    return Some(v);
                }
            }
        }
    }
}

fn nonzero(hash: u64) -> u64 {
    if hash == EMPTY {
        1
    } else {
        hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn memory_is_at_most_48_bytes_per_key_and_fixed() {
        for max_keys in [1, 1000, 65_536, 1_000_000] {
            let t = KeyTable::new(max_keys);
            assert!(
                t.bytes() as u64 <= 48 * max_keys.max(WAYS as u64 * 2),
                "{max_keys}"
            );
            assert!(
                t.bytes() as u64 >= 16 * max_keys,
                "{max_keys}: room for every key"
            );
        }
        assert_eq!(std::mem::size_of::<Bucket>(), 128);
    }

    #[test]
    fn keys_are_limited_separately() {
        let t = KeyTable::new(100);
        let g = Gcra::new(1, Duration::from_secs(1), 2);
        let (a, b) = (t.key(b"a"), t.key(b"b"));
        let admitted = |k| {
            (0..10)
                .filter(|_| t.admit(k, &g, SEC).verdict.admitted())
                .count()
        };
        assert_eq!(admitted(a), 3);
        assert_eq!(admitted(b), 3);
        let v4 = t.key_ip("10.0.0.1".parse().unwrap());
        assert_eq!(v4, t.key_ip("::ffff:10.0.0.1".parse().unwrap()));
    }

    /// The whole-process exactness DESIGN.md asks for: threads sharing one key admit exactly what one
    /// thread would, at one instant and again after the clock moved.
    #[test]
    fn threads_sharing_a_key_admit_exactly_the_limit() {
        let t = Arc::new(KeyTable::new(1000));
        let g = Gcra::new(1000, Duration::from_secs(1), 50);
        let key = t.key(b"client");
        let threads = 4;
        let race = |now: u64| -> usize {
            let start = Arc::new(Barrier::new(threads));
            (0..threads)
                .map(|_| {
                    let (t, start) = (t.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        (0..10_000)
                            .filter(|_| t.admit(key, &g, now).verdict.admitted())
                            .count()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum()
        };
        assert_eq!(race(SEC), 51, "burst + 1 at once");
        assert_eq!(race(SEC + 10_000_000), 10, "then one per millisecond");
    }

    #[test]
    fn a_limited_key_outlives_a_flood_of_one_off_keys() {
        let t = KeyTable::new(64);
        let g = Gcra::new(1, Duration::from_secs(1), 5);
        let limited = t.key(b"abuser");
        while t.admit(limited, &g, SEC).verdict.admitted() {}
        let mut evicted_active = 0;
        for n in 0u64..10_000 {
            let a = t.admit(t.key(&n.to_be_bytes()), &g, SEC);
            assert!(a.verdict.admitted());
            evicted_active += usize::from(a.evicted_active);
        }
        assert!(evicted_active > 0, "the flood overflowed the table");
        let v = t.admit(limited, &g, SEC).verdict;
        assert!(!v.admitted(), "still limited: {v:?}");
        assert_eq!(v.retry_after_secs(), Some(1));
    }

    #[test]
    fn recovered_keys_make_room_before_active_ones() {
        let t = KeyTable::new(8);
        let g = Gcra::new(1, Duration::from_secs(1), 0);
        // Fill the table (2 buckets of 8) at 1 s; 10 s later every state has recovered.
        for n in 0u64..64 {
            t.admit(t.key(&n.to_be_bytes()), &g, SEC);
        }
        // Up to 8 new keys fit in any one bucket's recovered slots: no active key is forgotten.
        for n in 100u64..108 {
            let a = t.admit(t.key(&n.to_be_bytes()), &g, 11 * SEC);
            assert!(a.verdict.admitted() && !a.evicted_active, "key {n}");
        }
    }
}
