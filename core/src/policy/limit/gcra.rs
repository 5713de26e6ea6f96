//! The generic cell rate algorithm (GCRA, ITU-T I.371's "virtual scheduling" form) as used for
//! request rate limits: a key's whole state is its theoretical arrival time (TAT), a `u64` of
//! nanoseconds on the caller's monotonic clock. A request at `now` is admitted when
//! `max(TAT, now) - now <= tolerance` and then moves the TAT one emission interval on; so an idle key
//! admits `burst + 1` requests at once and then one per interval, and over any time `t` at most
//! `rate × t + burst + 1`. A TAT at or before `now` says nothing a fresh key would not: such a key can
//! be forgotten without changing any decision (what [`super::KeyTable`] evicts first).

use std::time::Duration;

/// One limit's parameters: the emission interval (the time one request "costs") and the tolerance
/// (how far ahead of the clock a key may run: `burst` intervals), both in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    interval: u64,
    tolerance: u64,
}

/// What [`Gcra::decide`] says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted; the key's new TAT.
    Admit {
        /// The TAT to store.
        tat: u64,
    },
    /// Over the limit; the state is unchanged.
    Limit {
        /// Nanoseconds until a request would be admitted (> 0).
        retry_after_ns: u64,
    },
}

impl Verdict {
    /// Whether the request is admitted.
    pub fn admitted(self) -> bool {
        matches!(self, Verdict::Admit { .. })
    }

    /// The `Retry-After` value for a limited request: whole seconds, rounded up, at least 1
    /// (RFC 9110 §10.2.3 takes whole seconds; rounding down would invite a retry that is refused
    /// again). `None` when admitted.
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            Verdict::Admit { .. } => None,
            Verdict::Limit { retry_after_ns } => {
                Some(retry_after_ns.div_ceil(1_000_000_000).max(1))
            }
        }
    }
}

impl Gcra {
    /// `count` requests per `per` sustained, `burst` more at once. `count` 0 is treated as 1 (the
    /// configuration refuses it before this is built); intervals shorter than 1 ns are 1 ns.
    pub fn new(count: u64, per: Duration, burst: u64) -> Gcra {
        let per = u64::try_from(per.as_nanos()).unwrap_or(u64::MAX);
        let interval = (per / count.max(1)).max(1);
        Gcra {
            interval,
            tolerance: interval.saturating_mul(burst),
        }
    }

    /// The emission interval in nanoseconds.
    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// The decision for one request at `now` by a key whose TAT is `tat` (0 for a key not seen).
    pub fn decide(&self, tat: u64, now: u64) -> Verdict {
        let start = tat.max(now);
        let ahead = start - now;
        if ahead > self.tolerance {
            Verdict::Limit {
                retry_after_ns: ahead - self.tolerance,
            }
        } else {
            Verdict::Admit {
                tat: start.saturating_add(self.interval),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    /// Runs `n` requests at `now`, threading the TAT; returns how many were admitted.
    fn burst_at(g: &Gcra, tat: &mut u64, now: u64, n: usize) -> usize {
        (0..n)
            .filter(|_| match g.decide(*tat, now) {
                Verdict::Admit { tat: t } => {
                    *tat = t;
                    true
                }
                Verdict::Limit { .. } => false,
            })
            .count()
    }

    #[test]
    fn an_idle_key_admits_burst_plus_one_then_the_rate() {
        let g = Gcra::new(10, Duration::from_secs(1), 5);
        let mut tat = 0;
        assert_eq!(burst_at(&g, &mut tat, SEC, 100), 6);
        // 100 ms later one interval has passed: one more.
        assert_eq!(burst_at(&g, &mut tat, SEC + SEC / 10, 100), 1);
        // Over 10 s of requests every millisecond: rate × t more, within one.
        let mut admitted = 0;
        for ms in 1..=10_000 {
            admitted += burst_at(&g, &mut tat, SEC + SEC / 10 + ms * 1_000_000, 1);
        }
        assert!((99..=101).contains(&admitted), "{admitted}");
    }

    #[test]
    fn retry_after_is_the_time_until_the_next_admission_rounded_up() {
        let g = Gcra::new(1, Duration::from_secs(60), 0);
        let mut tat = 0;
        assert_eq!(burst_at(&g, &mut tat, SEC, 1), 1);
        let v = g.decide(tat, SEC + 30 * SEC);
        assert_eq!(
            v,
            Verdict::Limit {
                retry_after_ns: 30 * SEC
            }
        );
        assert_eq!(v.retry_after_secs(), Some(30));
        let v = g.decide(tat, SEC + 60 * SEC - 1);
        assert_eq!(
            v.retry_after_secs(),
            Some(1),
            "a nanosecond rounds up to a second"
        );
        assert!(g.decide(tat, SEC + 60 * SEC).admitted());
    }

    #[test]
    fn a_recovered_key_decides_like_a_fresh_one() {
        let g = Gcra::new(100, Duration::from_secs(1), 3);
        let mut tat = 0;
        burst_at(&g, &mut tat, SEC, 10);
        let later = SEC + 10 * SEC;
        assert!(tat <= later);
        assert_eq!(g.decide(tat, later), g.decide(0, later));
    }

    #[test]
    fn extreme_parameters_do_not_overflow() {
        let g = Gcra::new(0, Duration::from_secs(u64::MAX), u64::MAX);
        assert!(g.decide(u64::MAX - 1, u64::MAX - 1).admitted());
        let fast = Gcra::new(u64::MAX, Duration::from_nanos(1), 0);
        assert_eq!(fast.interval(), 1);
    }
}
