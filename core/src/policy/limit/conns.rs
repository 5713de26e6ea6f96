//! Open connections per client address for the whole process (`server.limits.max_connections_per_client`,
//! DESIGN.md "Request pipeline and traffic rules"): an open-addressing table of atomic words, each a
//! client's key (the top 48 bits of a keyed hash of its address) and its count of open connections (16
//! bits), so entering and leaving are one compare-and-swap each, exact across workers, with no lock.
//!
//! Linear probing; a slot whose count fell to 0 keeps its key as a tombstone that a new client may
//! take (after the probe made sure the client is not further on). Sized at start to twice
//! `max_connections` (a power of two, 8 bytes a slot): every client with an open connection holds at
//! least one connection, so the table is at most half full. Were it ever full (a reload raising
//! `max_connections` far), a connection is admitted uncounted rather than refused.
//!
//! Race left: two connections of a new client entering at the same instant on two cores may take two
//! tombstones; each is counted in its own slot (and leaves it), and that client's limit is checked
//! against one of them until they close.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::*};

/// The low 16 bits of a slot: the count.
const COUNT: u64 = 0xffff;

/// Per-client connection counts, shared by every worker.
pub struct ClientConns {
    slots: Box<[AtomicU64]>,
    mask: usize,
    hasher: RandomState,
}

/// What [`ClientConns::enter`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Counted in this slot; [`ClientConns::leave`] it when the connection closes.
    Counted(usize),
    /// The client already has `limit` connections open.
    Over,
    /// Not counted: the table is full (see the module docs).
    Uncounted,
}

impl ClientConns {
    /// A table for up to `max_connections` open connections.
    pub fn new(max_connections: usize) -> ClientConns {
        let n = max_connections
            .saturating_mul(2)
            .max(1024)
            .checked_next_power_of_two()
            .unwrap_or(1 << 32);
        ClientConns {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n - 1,
            hasher: RandomState::new(),
        }
    }

    /// The table's memory in bytes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// Counts one more connection of `ip` unless it has `limit` open already (`limit` at most 65 535).
    pub fn enter(&self, ip: IpAddr, limit: u32) -> Entry {
        let h = self.hasher.hash_one(ip.to_canonical());
        // The key: the hash's top 48 bits, never 0 (0 marks a slot never used).
        let key = (h & !COUNT) | (1 << 16);
        let limit = u64::from(limit.min(COUNT as u32));
        'again: loop {
            let mut tombstone = None;
            for probe in 0..=self.mask {
                let at = (h as usize).wrapping_add(probe) & self.mask;
                let word = self.slots[at].load(Acquire);
                if word & !COUNT == key {
                    if word & COUNT >= limit {
                        return Entry::Over;
                    }
                    match self.slots[at].compare_exchange(word, word + 1, AcqRel, Acquire) {
                        Ok(_) => return Entry::Counted(at),
                        Err(_) => continue 'again,
                    }
                }
                if word == 0 {
                    // The end of the probe: the client is not in the table.
                    let (at, old) = tombstone.unwrap_or((at, 0));
                    match self.slots[at].compare_exchange(old, key | 1, AcqRel, Acquire) {
                        Ok(_) => return Entry::Counted(at),
                        Err(_) => continue 'again,
                    }
                }
                if word & COUNT == 0 && tombstone.is_none() {
                    tombstone = Some((at, word));
                }
            }
            return match tombstone {
                Some((at, old)) => {
                    match self.slots[at].compare_exchange(old, key | 1, AcqRel, Acquire) {
                        Ok(_) => Entry::Counted(at),
                        Err(_) => continue 'again,
                    }
                }
                None => Entry::Uncounted,
            };
        }
    }

    /// Counts a connection counted in `slot` ([`Entry::Counted`]) as closed.
    pub fn leave(&self, slot: usize) {
        self.slots[slot].fetch_sub(1, AcqRel);
    }

    /// Open connections of `ip` (for tests and the admin view).
    pub fn open(&self, ip: IpAddr) -> u64 {
        let h = self.hasher.hash_one(ip.to_canonical());
        let key = (h & !COUNT) | (1 << 16);
        (0..=self.mask)
            .map(|p| self.slots[(h as usize).wrapping_add(p) & self.mask].load(Acquire))
            .take_while(|&w| w != 0)
            .filter(|w| w & !COUNT == key)
            .map(|w| w & COUNT)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn ip(n: u32) -> IpAddr {
        IpAddr::from(n.to_be_bytes())
    }

    #[test]
    fn a_client_gets_its_limit_and_others_are_apart() {
        let t = ClientConns::new(100);
        let slots: Vec<Entry> = (0..3).map(|_| t.enter(ip(1), 3)).collect();
        assert!(slots.iter().all(|e| matches!(e, Entry::Counted(_))));
        assert_eq!(t.enter(ip(1), 3), Entry::Over);
        assert!(matches!(t.enter(ip(2), 3), Entry::Counted(_)));
        assert_eq!(t.open(ip(1)), 3);
        if let Entry::Counted(s) = slots[0] {
            t.leave(s);
        }
        assert!(
            matches!(t.enter(ip(1), 3), Entry::Counted(_)),
            "a closed connection frees room"
        );
        assert_eq!(t.open(ip(1)), 3);
    }

    #[test]
    fn closed_clients_leave_slots_that_new_clients_reuse() {
        let t = ClientConns::new(512);
        let size = t.bytes();
        for round in 0..20u32 {
            let entered: Vec<usize> = (0..1000)
                .map(|i| match t.enter(ip(round * 1000 + i), 1) {
                    Entry::Counted(s) => s,
                    e => panic!("{e:?}"),
                })
                .collect();
            entered.into_iter().for_each(|s| t.leave(s));
        }
        assert_eq!(t.bytes(), size, "fixed size");
        assert_eq!(t.open(ip(5)), 0);
    }

    #[test]
    fn threads_entering_for_one_client_never_pass_the_limit() {
        let t = Arc::new(ClientConns::new(1000));
        let start = Arc::new(Barrier::new(4));
        t.enter(ip(9), 10); // the client is known: its slot exists
        let counted: usize = (0..4)
            .map(|_| {
                let (t, start) = (t.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    (0..1000)
                        .filter(|_| matches!(t.enter(ip(9), 10), Entry::Counted(_)))
                        .count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(counted, 9, "10 at most, one was open already");
        assert_eq!(t.open(ip(9)), 10);
    }
}
