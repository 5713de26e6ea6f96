//! Capped zombie detection (DESIGN.md "Zombie detection"): an upstream connection with a request in
//! flight is a zombie once inactive for longer than
//! `max(max_inactive, min(max_inactive_cap, request_timeout + max_inactive))`, with `request_timeout =
//! none` giving `max(max_inactive, max_inactive_cap)`. Sans-IO; the exchange applies it on the worker's
//! timer through [`ActivityClock`].

use std::time::Duration;

use monoio::time::Instant;

/// The activity clock of one upstream exchange for the zombie rule: the reference instant is the last
/// byte sent (or the last byte received, when received bytes count as activity), and the exchange is a
/// zombie at reference + threshold. Time spent waiting on the client is not upstream inactivity
/// ([`ActivityClock::pause`]).
#[derive(Clone, Copy, Debug)]
pub struct ActivityClock {
    /// When the request's last byte went upstream.
    pub last_sent: Instant,
    /// When the last response byte arrived, if any did.
    pub last_received: Option<Instant>,
    /// `zombie_counts_received`.
    pub counts_received: bool,
    /// From [`threshold`].
    pub threshold: Duration,
}

impl ActivityClock {
    /// A clock whose request was sent at `sent`; `received` when response bytes are already buffered.
    pub fn started(
        sent: Instant,
        received: bool,
        counts_received: bool,
        threshold: Duration,
    ) -> Self {
        ActivityClock {
            last_sent: sent,
            last_received: received.then_some(sent),
            counts_received,
            threshold,
        }
    }

    /// The instant the exchange becomes a zombie.
    pub fn deadline(&self) -> Instant {
        let reference = match (self.counts_received, self.last_received) {
            (true, Some(r)) if r > self.last_sent => r,
            _ => self.last_sent,
        };
        reference + self.threshold
    }

    /// Marks response bytes received now (coarse clock: `edge_core::clock`).
    pub fn received(&mut self) {
        self.last_received = Some(edge_core::clock::coarse_now());
    }

    /// Shifts the clock by `d` spent waiting on the client (it does not count as upstream inactivity).
    pub fn pause(&mut self, d: Duration) {
        self.last_sent += d;
        if let Some(r) = &mut self.last_received {
            *r += d;
        }
    }
}

/// The inactivity threshold after which an in-flight upstream connection is a zombie.
pub fn threshold(
    max_inactive: Duration,
    max_inactive_cap: Duration,
    request_timeout: Option<Duration>,
) -> Duration {
    match request_timeout {
        Some(rt) => max_inactive.max(max_inactive_cap.min(rt.saturating_add(max_inactive))),
        None => max_inactive.max(max_inactive_cap),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_table() {
        let s = Duration::from_secs;
        assert_eq!(threshold(s(10), s(60), Some(s(5))), s(15));
        assert_eq!(threshold(s(10), s(60), Some(s(45))), s(55));
        assert_eq!(threshold(s(10), s(60), Some(s(600))), s(60));
        assert_eq!(threshold(s(10), s(60), None), s(60));
        assert_eq!(threshold(s(180), s(60), Some(s(600))), s(180));
    }

    #[test]
    fn edges_of_the_formula() {
        let s = Duration::from_secs;
        // max_inactive >= cap: max_inactive is authoritative whatever request_timeout is.
        assert_eq!(
            threshold(s(60), s(60), Some(s(1))),
            s(61).min(s(60)).max(s(60))
        );
        assert_eq!(threshold(s(90), s(60), None), s(90));
        assert_eq!(threshold(s(90), s(60), Some(s(0))), s(90));
        // request_timeout none is infinity: the cap applies.
        assert_eq!(threshold(s(1), s(2), None), s(2));
        assert_eq!(threshold(s(1), s(2), Some(Duration::MAX)), s(2));
        // A zero request_timeout leaves max_inactive.
        assert_eq!(threshold(s(10), s(60), Some(s(0))), s(10));
    }
}
