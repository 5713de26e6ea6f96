//! The coarse clock for deadlines and lifetimes: `CLOCK_MONOTONIC_COARSE`, the kernel's time at its
//! last tick. On this machine a read costs 3 ns against 22 ns for `CLOCK_MONOTONIC` (what
//! `Instant::now` reads), and its resolution is one tick (4 ms here, `clock_getres`); a proxied request
//! used to read the precise clock ten times (bench/README.md "Per-request user time").
//!
//! What reads it: every timeout and deadline of the request path (`send`, the keep-alive fast wait, the
//! upstream's send and response deadlines), pool lifetimes and the zombie activity clock. Their
//! settings are in seconds or in milliseconds well above a tick, so firing up to a tick late does not
//! matter (never early: [`coarse_now`] rounds up)
//! (DESIGN.md "Inbound deadlines" counts them on the worker's own timer, and timing tests allow a
//! second). What does not read it: request durations (the `edge_request_duration_seconds` histogram,
//! `duration_ms` in logs) and the `request` deadline armed at a request's first byte, which come from
//! `Instant::now`.

use std::{
    future::Future,
    sync::OnceLock,
    time::{Duration, Instant as StdInstant},
};

use monoio::time::{Instant, Timeout};

/// The clock's origin: a precise [`StdInstant`], the `CLOCK_MONOTONIC` reading taken just before it
/// (the same clock as `Instant::now`, as a duration since boot), and the coarse clock's resolution.
struct Base {
    instant: StdInstant,
    reading: Duration,
    tick: Duration,
}

static BASE: OnceLock<Base> = OnceLock::new();

fn reading(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clocks used here exist on every Linux since
    // 2.6.32 and cannot fail with a valid pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn base() -> &'static Base {
    BASE.get_or_init(|| {
        let mut res = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: as in `reading`.
        unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut res) };
        let reading = reading(libc::CLOCK_MONOTONIC);
        Base {
            instant: StdInstant::now(),
            reading,
            tick: Duration::new(res.tv_sec as u64, res.tv_nsec as u32),
        }
    })
}

/// Now, rounded up to the coarse clock's next tick: never earlier than `Instant::now()` (unless the
/// kernel runs its tick late) and at most one tick (4 ms here) later. So a deadline `coarse_now() + d`
/// never passes before `d` has, and fires at most a tick late. For deadlines and lifetimes, never for
/// durations that are reported.
pub fn coarse_now() -> Instant {
    let b = base();
    // The coarse clock reads the time of the last tick: the time now is below that plus one tick. It
    // never reads below `b.reading - tick`, so the sum is never below `b.reading`.
    let ahead = (reading(libc::CLOCK_MONOTONIC_COARSE) + b.tick).saturating_sub(b.reading);
    Instant::from_std(b.instant + ahead)
}

/// `monoio::time::timeout` with its deadline taken from the coarse clock: `fut` within `d` of now (to
/// within a tick), or `Err(Elapsed)`. A `d` too large to add is no deadline. Cancel safety: that of
/// `fut` (dropped when the deadline passes).
pub fn timeout<F: Future>(d: Duration, fut: F) -> Timeout<F> {
    let now = coarse_now();
    let deadline = now
        .checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
    monoio::time::timeout_at(deadline, fut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_now_is_never_early_and_at_most_a_tick_late() {
        let tick = base().tick;
        assert!(
            tick > Duration::ZERO && tick <= Duration::from_millis(10),
            "{tick:?}"
        );
        // Counted, not asserted one by one: on a loaded virtual machine the kernel runs a tick late
        // now and then (the coarse clock then lags: a reading lagged by more than a millisecond once
        // in a full parallel test run), and this thread can be preempted between the
        // readings. Either is rare; rounding up a tick too far is not (2 768 of 10 000 readings
        // ahead). A deadline that fires early is caught end to end by
        // `upstream::silent_upstream_is_a_zombie_at_the_cap`.
        let (samples, mut behind, mut ahead) = (10_000, 0, 0);
        for _ in 0..samples {
            let before = Instant::now();
            let coarse = coarse_now();
            let after = Instant::now();
            if coarse + Duration::from_millis(1) < before {
                behind += 1;
            }
            if coarse > after + tick {
                ahead += 1;
            }
        }
        assert!(
            behind * 100 < samples,
            "{behind} of {samples} readings behind"
        );
        assert!(ahead * 100 < samples, "{ahead} of {samples} readings ahead");
    }

    #[test]
    fn coarse_now_moves_forward() {
        let first = coarse_now();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        let later = coarse_now();
        assert!(
            later - first >= Duration::from_millis(20),
            "{:?}",
            later - first
        );
    }
}
