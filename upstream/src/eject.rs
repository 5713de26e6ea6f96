//! Passive ejection (DESIGN.md "Upstream pools and retries"), per worker and endpoint: after 5
//! consecutive connect failures an endpoint is skipped for a backoff of 1 s, doubling to 30 s, while
//! other endpoints serve; when every endpoint is ejected, the least recently failed one is tried
//! ([`least_recently_failed`]; skipping ejected endpoints is `Upstream::usable`'s job). Sans-IO:
//! callers pass the current instant.

use std::{cell::Cell, time::Duration};

use monoio::time::Instant;

/// Consecutive connect failures that eject an endpoint.
pub const EJECT_AFTER: u32 = 5;
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What a connect outcome changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Nothing to report.
    None,
    /// The endpoint was ejected for this long.
    Ejected(Duration),
    /// A previously ejected endpoint connected again.
    Returned,
}

/// Connect health of one endpoint.
#[derive(Debug)]
pub struct Health {
    failures: Cell<u32>,
    ejected_until: Cell<Option<Instant>>,
    backoff: Cell<Duration>,
    last_failure: Cell<Option<Instant>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            failures: Cell::new(0),
            ejected_until: Cell::new(None),
            backoff: Cell::new(BACKOFF_MIN),
            last_failure: Cell::new(None),
        }
    }
}

impl Health {
    /// Whether the endpoint is skipped at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until.get().is_some_and(|t| now < t)
    }

    /// How long the endpoint stays ejected after `now` (`None`: not ejected).
    pub fn ejected_for(&self, now: Instant) -> Option<Duration> {
        self.ejected_until
            .get()
            .filter(|&t| now < t)
            .map(|t| t - now)
    }

    /// Consecutive connect failures so far.
    pub fn failures(&self) -> u32 {
        self.failures.get()
    }

    /// When it last failed to connect (for choosing among all-ejected endpoints).
    pub fn last_failure(&self) -> Option<Instant> {
        self.last_failure.get()
    }

    /// Records a failed connect.
    pub fn failed(&self, now: Instant) -> Transition {
        self.last_failure.set(Some(now));
        let n = self.failures.get() + 1;
        self.failures.set(n);
        if n < EJECT_AFTER || self.is_ejected(now) {
            return Transition::None;
        }
        let backoff = self.backoff.get();
        self.ejected_until.set(Some(now + backoff));
        self.backoff.set((backoff * 2).min(BACKOFF_MAX));
        Transition::Ejected(backoff)
    }

    /// Records a successful connect.
    pub fn succeeded(&self) -> Transition {
        self.failures.set(0);
        let was = self.ejected_until.replace(None).is_some();
        self.backoff.set(BACKOFF_MIN);
        if was {
            Transition::Returned
        } else {
            Transition::None
        }
    }
}

/// The fallback when no endpoint is usable: the least recently failed of the `n` endpoints other than
/// `except` (all of them when `except` is the only one); one that never failed counts as least recent.
pub fn least_recently_failed<'a>(
    n: usize,
    except: Option<usize>,
    health: impl Fn(usize) -> &'a Health,
) -> usize {
    (0..n)
        .filter(|&i| n == 1 || except != Some(i))
        .min_by_key(|&i| health(i).last_failure())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_eject_with_doubling_backoff() {
        let h = Health::default();
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(h.failed(t0), Transition::None);
        }
        assert_eq!(h.failed(t0), Transition::Ejected(Duration::from_secs(1)));
        assert!(h.is_ejected(t0));
        assert!(!h.is_ejected(t0 + Duration::from_secs(2)));
        // Still failing after the backoff: ejected again for twice as long.
        assert_eq!(
            h.failed(t0 + Duration::from_secs(2)),
            Transition::Ejected(Duration::from_secs(2))
        );
        assert_eq!(h.succeeded(), Transition::Returned);
        assert!(!h.is_ejected(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn fallback_is_the_least_recently_failed_other_than_the_failed_one() {
        let (a, b, c) = (Health::default(), Health::default(), Health::default());
        let t0 = Instant::now();
        for _ in 0..5 {
            a.failed(t0);
            b.failed(t0 + Duration::from_millis(10));
        }
        let hs = [&a, &b, &c];
        // c never failed: it is the least recent.
        assert_eq!(least_recently_failed(3, None, |i| hs[i]), 2);
        assert_eq!(least_recently_failed(2, None, |i| hs[i]), 0);
        // A retry after a's connect failed goes elsewhere even though a failed longer ago.
        assert_eq!(least_recently_failed(2, Some(0), |i| hs[i]), 1);
        assert_eq!(least_recently_failed(1, Some(0), |i| hs[i]), 0);
    }
}
