//! What the admin API's `GET /upstreams` reads (DESIGN.md "Observability"), published off the request
//! path:
//!
//! - [`UpstreamBoard`]: per endpoint (upstream name, address), one cell per worker with that worker's
//!   requests in flight, idle pooled connections and passive-ejection state. Each worker writes only
//!   its own cells, at its heartbeat (every 250 ms), with relaxed stores; cells are cache-line aligned,
//!   so no two cores ever write the same line, and the request path writes nothing here. Workers take
//!   an endpoint's entry when they build the upstream (the table's mutex is taken then, never per
//!   request); the admin thread sums the cells when asked.
//! - [`Resolutions`]: the last resolution of each endpoint name, written by the supervisor when it
//!   publishes a configuration (at load, reload and re-resolution) and read by the admin thread.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::SystemTime,
};

/// One worker's numbers for one endpoint, in a cache line of its own.
#[derive(Default)]
#[repr(align(64))]
struct WorkerCell {
    in_flight: AtomicU32,
    idle: AtomicU32,
    /// Consecutive connect failures (passive ejection's count).
    failures: AtomicU32,
    /// Milliseconds of ejection left at the last publication; 0 when not ejected.
    ejected_ms: AtomicU64,
}

/// What a worker publishes for one endpoint ([`EndpointBoard::publish`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointSample {
    /// This worker's requests in flight on the endpoint.
    pub in_flight: u32,
    /// This worker's idle pooled connections to it.
    pub idle: u32,
    /// Consecutive connect failures on this worker.
    pub failures: u32,
    /// Milliseconds of passive ejection left on this worker; 0 when not ejected.
    pub ejected_ms: u64,
}

/// The cells of one endpoint, one per worker.
pub struct EndpointBoard {
    cells: Box<[WorkerCell]>,
}

impl EndpointBoard {
    /// Stores `worker`'s numbers (relaxed; only that worker calls it for its index). An index past the
    /// worker count is ignored.
    pub fn publish(&self, worker: usize, s: EndpointSample) {
        let Some(c) = self.cells.get(worker) else {
            return;
        };
        c.in_flight.store(s.in_flight, Ordering::Relaxed);
        c.idle.store(s.idle, Ordering::Relaxed);
        c.failures.store(s.failures, Ordering::Relaxed);
        c.ejected_ms.store(s.ejected_ms, Ordering::Relaxed);
    }

    /// Every worker's last publication, in worker order.
    pub fn samples(&self) -> Vec<EndpointSample> {
        self.cells
            .iter()
            .map(|c| EndpointSample {
                in_flight: c.in_flight.load(Ordering::Relaxed),
                idle: c.idle.load(Ordering::Relaxed),
                failures: c.failures.load(Ordering::Relaxed),
                ejected_ms: c.ejected_ms.load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// The process-wide table of [`EndpointBoard`]s, in [`crate::runtime::Shared`].
pub struct UpstreamBoard {
    workers: usize,
    entries: Mutex<HashMap<(String, SocketAddr), Arc<EndpointBoard>>>,
}

impl UpstreamBoard {
    /// An empty table for `workers` workers.
    pub fn new(workers: usize) -> Self {
        UpstreamBoard {
            workers,
            entries: Mutex::default(),
        }
    }

    /// The cells of endpoint `addr` of `upstream`, created (all zero) when nobody holds them. Takes the
    /// table's mutex: call it when building an upstream, never per request. Entries nobody else holds
    /// any more (endpoints gone from every worker's configuration) are dropped here.
    pub fn endpoint(&self, upstream: &str, addr: SocketAddr) -> Arc<EndpointBoard> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, e| Arc::strong_count(e) > 1);
        entries
            .entry((upstream.to_string(), addr))
            .or_insert_with(|| {
                Arc::new(EndpointBoard {
                    cells: (0..self.workers).map(|_| WorkerCell::default()).collect(),
                })
            })
            .clone()
    }

    /// Every worker's last publication for endpoint `addr` of `upstream`; `None` when no worker holds
    /// it (yet).
    pub fn read(&self, upstream: &str, addr: SocketAddr) -> Option<Vec<EndpointSample>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(&(upstream.to_string(), addr))
            .map(|e| e.samples())
    }
}

/// The last resolution of one endpoint name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// When the answer came.
    pub at: SystemTime,
    /// The addresses, or why the lookup failed (the last good addresses are kept meanwhile).
    pub result: Result<Vec<SocketAddr>, String>,
}

/// The last resolution of each endpoint name, by (upstream name, `host:port` text), in
/// [`crate::runtime::Shared`]. Written by the supervisor, read by the admin thread; never touched on
/// the request path.
#[derive(Default)]
pub struct Resolutions {
    entries: Mutex<HashMap<(String, String), Resolution>>,
}

impl Resolutions {
    /// Records the answer for `name` of `upstream`.
    pub fn record(&self, upstream: &str, name: &str, r: Resolution) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.insert((upstream.to_string(), name.to_string()), r);
    }

    /// Keeps only the entries for which `keep(upstream, name)` holds (after a reload removed names).
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|(u, n), _| keep(u, n));
    }

    /// The last resolution of `name` of `upstream`.
    pub fn get(&self, upstream: &str, name: &str) -> Option<Resolution> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(&(upstream.to_string(), name.to_string()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_writes_its_own_cell_and_unheld_entries_go() {
        let board = UpstreamBoard::new(2);
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let w0 = board.endpoint("u", a);
        let w1 = board.endpoint("u", a);
        assert!(Arc::ptr_eq(&w0, &w1), "one entry per (upstream, address)");
        w0.publish(
            0,
            EndpointSample {
                in_flight: 2,
                idle: 1,
                ..Default::default()
            },
        );
        w1.publish(
            1,
            EndpointSample {
                idle: 3,
                failures: 5,
                ejected_ms: 900,
                ..Default::default()
            },
        );
        w1.publish(7, EndpointSample::default()); // no such worker: ignored
        let got = board.read("u", a).unwrap();
        assert_eq!(got[0].in_flight, 2);
        assert_eq!(got[1].idle + got[0].idle, 4);
        assert_eq!(got[1].ejected_ms, 900);
        assert!(board.read("other", a).is_none());
        drop((w0, w1));
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let _held = board.endpoint("u", b);
        assert!(board.read("u", a).is_none(), "pruned once nobody held it");
    }

    #[test]
    fn cells_do_not_share_a_cache_line() {
        assert_eq!(std::mem::align_of::<WorkerCell>(), 64);
        assert_eq!(std::mem::size_of::<WorkerCell>(), 64);
    }
}
