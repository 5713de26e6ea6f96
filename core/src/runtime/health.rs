//! The published result of active health checks (DESIGN.md "Upstream health, discovery and balancing"):
//! one `Arc<AtomicBool>` per (upstream name, endpoint address), `true` while the endpoint is healthy.
//!
//! Only the health thread stores into a flag, and only when the endpoint's state changes. Workers take
//! their flags from [`ActiveHealth::flag`] when they build an upstream (at start and after a config
//! reload, the same moments they compare the config generation) and afterwards read them with plain
//! atomic loads: no lock and no shared write on the request path. Both sides ask the table by name and
//! address and get the same `Arc`, whoever asks first, so a reload that keeps an endpoint keeps its
//! state. An entry lives while someone holds its flag: [`ActiveHealth::prune`] drops the ones nobody
//! holds any more, so an entry is never replaced while a worker still reads it.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{atomic::AtomicBool, Arc, Mutex, PoisonError},
};

/// A health flag: `true` while the endpoint passes its active checks (it starts healthy).
pub type HealthFlag = Arc<AtomicBool>;

/// The process-wide table of health flags, in [`crate::runtime::Shared`].
#[derive(Default)]
pub struct ActiveHealth {
    flags: Mutex<HashMap<(String, SocketAddr), HealthFlag>>,
}

impl ActiveHealth {
    /// The flag of endpoint `addr` of upstream `upstream`, created healthy when nobody holds one. Takes
    /// the table's mutex: call it when building an upstream, never per request.
    pub fn flag(&self, upstream: &str, addr: SocketAddr) -> HealthFlag {
        let mut flags = self.flags.lock().unwrap_or_else(PoisonError::into_inner);
        flags
            .entry((upstream.to_string(), addr))
            .or_insert_with(|| Arc::new(AtomicBool::new(true)))
            .clone()
    }

    /// The state of endpoint `addr` of `upstream` without creating an entry: `None` when nobody holds a
    /// flag for it (no check runs on it yet). For the admin API, never per request.
    pub fn state(&self, upstream: &str, addr: SocketAddr) -> Option<bool> {
        let flags = self.flags.lock().unwrap_or_else(PoisonError::into_inner);
        flags
            .get(&(upstream.to_string(), addr))
            .map(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Drops the entries whose flag nobody else holds (the health thread calls it after a reload).
    pub fn prune(&self) {
        let mut flags = self.flags.lock().unwrap_or_else(PoisonError::into_inner);
        flags.retain(|_, f| Arc::strong_count(f) > 1);
    }

    /// Number of entries (for tests).
    pub fn len(&self) -> usize {
        self.flags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn both_sides_get_the_same_flag_and_unheld_entries_are_pruned() {
        let t = ActiveHealth::default();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let worker = t.flag("origin", a);
        assert!(worker.load(Ordering::Relaxed), "starts healthy");
        let checker = t.flag("origin", a);
        checker.store(false, Ordering::Relaxed);
        assert!(!worker.load(Ordering::Relaxed));
        assert!(
            t.flag("other", a).load(Ordering::Relaxed),
            "keyed by upstream too"
        );
        t.prune();
        assert_eq!(t.len(), 1, "the flag of `other` was held by no one");
        drop((worker, checker));
        t.prune();
        assert!(t.is_empty());
    }
}
