//! Active health as one worker sees it (DESIGN.md "Upstream health, discovery and balancing"): the
//! health flag of each endpoint of one upstream, taken from the shared table when the worker builds the
//! upstream and read with plain atomic loads afterwards. When no endpoint is healthy the worker fails
//! open: every endpoint is usable as if unchecked (a wrong check must not take the site down), each such
//! pick counts in `edge_upstream_fail_open_total{worker}` and logs `upstream.fail_open` at warn, at most
//! once a second per upstream and worker (with the count of picks since the last line).

use std::{
    cell::Cell,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use edge_core::runtime::health::{ActiveHealth, HealthFlag};

use crate::Upstream;

/// At most one `upstream.fail_open` line this often per upstream and worker.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The active-health view of one upstream on one worker.
pub struct Checks {
    /// One flag per endpoint, in endpoint order; empty when the upstream has no health check.
    flags: Vec<HealthFlag>,
    /// Set by [`Checks::begin_pick`]: no endpoint is healthy, so all are used.
    open: Cell<bool>,
    fail_open: metrics::Counter,
    next_log: Cell<Option<Instant>>,
    unlogged: Cell<u64>,
}

impl Default for Checks {
    /// No active checks: every endpoint is healthy.
    fn default() -> Self {
        Checks {
            flags: Vec::new(),
            open: Cell::new(false),
            fail_open: metrics::Counter::noop(),
            next_log: Cell::new(None),
            unlogged: Cell::new(0),
        }
    }
}

impl Checks {
    /// Whether endpoint `i` may get new requests by active checks: healthy, or failing open (see
    /// [`Checks::begin_pick`]). Two relaxed loads at most.
    pub fn healthy(&self, i: usize) -> bool {
        self.open.get() || self.flags.get(i).is_none_or(|f| f.load(Ordering::Relaxed))
    }

    /// Called once at the start of every pick of `upstream` on `worker`: decides whether the pick fails
    /// open (no endpoint healthy), and if so counts and logs it. Stops at the first healthy endpoint, so
    /// it costs one load when the first endpoint is healthy and nothing when the upstream is unchecked.
    pub fn begin_pick(&self, upstream: &str, worker: usize) {
        let open = !self.flags.is_empty() && !self.flags.iter().any(|f| f.load(Ordering::Relaxed));
        self.open.set(open);
        if open {
            self.fail_open.increment(1);
            self.log_fail_open(upstream, worker);
        }
    }

    /// `upstream.fail_open` at warn, at most once per [`LOG_EVERY`], with the picks since the last line.
    #[cold]
    fn log_fail_open(&self, upstream: &str, worker: usize) {
        let now = Instant::now();
        let picks = self.unlogged.get() + 1;
        if self.next_log.get().is_some_and(|t| now < t) {
            self.unlogged.set(picks);
            return;
        }
        self.next_log.set(Some(now + LOG_EVERY));
        self.unlogged.set(0);
        tracing::warn!(
            event = "upstream.fail_open",
            worker,
            upstream,
            endpoints = self.flags.len(),
            picks,
            "every endpoint is unhealthy by active checks; using them all"
        );
    }
}

impl Upstream {
    /// Takes the health flag of every endpoint from `table` when the upstream has a
    /// `[upstreams.health_check]`, and registers this worker's fail-open counter (exported either way).
    /// Call it after [`Upstream::new`] / [`Upstream::rebuild`].
    pub fn with_checks(mut self, table: &ActiveHealth) -> Self {
        let flags = match self.config.health_check {
            Some(_) => self
                .endpoints
                .iter()
                .map(|e| table.flag(&self.config.name, e.addr))
                .collect(),
            None => Vec::new(),
        };
        self.checks = Checks {
            flags,
            fail_open: edge_core::metrics::fail_open(self.worker),
            ..Checks::default()
        };
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(table: &ActiveHealth, n: u16) -> (Checks, Vec<HealthFlag>) {
        let addrs: Vec<std::net::SocketAddr> = (1..=n)
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        let c = Checks {
            flags: addrs.iter().map(|a| table.flag("u", *a)).collect(),
            ..Checks::default()
        };
        let checker = addrs.iter().map(|a| table.flag("u", *a)).collect();
        (c, checker)
    }

    #[test]
    fn unhealthy_endpoints_are_skipped_until_none_is_healthy() {
        let table = ActiveHealth::default();
        let (c, flags) = checks(&table, 2);
        c.begin_pick("u", 0);
        assert!(c.healthy(0) && c.healthy(1), "all start healthy");
        flags[0].store(false, Ordering::Relaxed);
        c.begin_pick("u", 0);
        assert!(!c.healthy(0) && c.healthy(1));
        flags[1].store(false, Ordering::Relaxed);
        c.begin_pick("u", 0);
        assert!(c.healthy(0) && c.healthy(1), "fail open");
        flags[1].store(true, Ordering::Relaxed);
        c.begin_pick("u", 0);
        assert!(!c.healthy(0) && c.healthy(1), "closed again");
    }

    #[test]
    fn an_unchecked_upstream_is_all_healthy_and_never_fails_open() {
        let c = Checks::default();
        c.begin_pick("u", 0);
        assert!(!c.open.get());
        assert!(c.healthy(0) && c.healthy(7));
    }
}
