//! The coarse clock for deadlines and lifetimes: `CLOCK_MONOTONIC_COARSE`, the kernel's time at its
//! last tick. On this machine a read costs 3 ns against 22 ns for `CLOCK_MONOTONIC` (what
//! `Instant::now` reads), and its resolution is one tick (4 ms here, `clock_getres`). A proxied request
//! has about ten deadlines and lifetimes to compute; on the precise clock each would be a read
//! (bench/README.md "Per-request user time").
//!
//! What reads it: every timeout and deadline of the request path (`send`, the keep-alive fast wait, the
//! upstream's send and response deadlines), pool lifetimes and the zombie activity clock. Their
//! settings are in seconds or in milliseconds well above a tick, so firing up to two ticks late does
//! not matter (never early: [`coarse_now`] rounds up)
//! (DESIGN.md "Inbound deadlines" counts them on the worker's own timer, and timing tests allow a
//! second). What does not read it: request durations (the `edge_request_duration_seconds` histogram,
//! `duration_ms` in logs) and the `request` deadline armed at a request's first byte, which come from
//! `Instant::now`.

use std::{
    cell::Cell,
    fmt,
    future::Future,
    pin::Pin,
    sync::OnceLock,
    task::{Context, Poll},
    time::{Duration, Instant as StdInstant},
};

use monoio::time::{sleep_until, Instant, Sleep};

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

/// Now, rounded up by the coarse clock's lag: never earlier than `Instant::now()` and at most two ticks
/// (8 ms here) later. So a deadline `coarse_now() + d` never passes before `d` has, and fires at most two
/// ticks late. For deadlines and lifetimes, never for durations that are reported.
///
/// Two ticks, not one: the coarse clock is the time of the kernel's last timekeeping update, and on this
/// VM (tickless idle, a virtual timer) that update runs up to two ticks apart: `CLOCK_MONOTONIC` was
/// measured up to 7.98 ms ahead of `CLOCK_MONOTONIC_COARSE`, and more than one tick ahead in 5-10 % of
/// readings between short sleeps. With one tick, a zombie deadline fired 0.2-1.3 ms early in about one
/// run of `upstream::silent_upstream_is_a_zombie_at_the_cap` in four.
///
/// The coarse reading changes once a tick, so this thread keeps the last reading with its result and
/// gives it again while the reading is the same: a clock read and a compare, and the conversion runs
/// once a tick instead of at every deadline (callgrind counts: bench/README.md "User-space instructions
/// per request").
pub fn coarse_now() -> Instant {
    thread_local! {
        /// The last coarse reading and what it gave.
        static LAST: Cell<Option<(Duration, Instant)>> = const { Cell::new(None) };
    }
    let coarse = reading(libc::CLOCK_MONOTONIC_COARSE);
    LAST.with(|last| match last.get() {
        Some((seen, now)) if seen == coarse => now,
        _ => {
            let b = base();
            // The time now is below the coarse reading plus two ticks (see above). The coarse clock never
            // reads below `b.reading - 2 ticks`, so the sum is never below `b.reading`.
            let ahead = (coarse + 2 * b.tick).saturating_sub(b.reading);
            let now = Instant::from_std(b.instant + ahead);
            last.set(Some((coarse, now)));
            now
        }
    })
}

/// The coarse clock's resolution: the step between two readings of [`coarse_now`] (4 ms here).
pub fn tick() -> Duration {
    base().tick
}

/// `fut` within `d` of the first poll that finds it pending, on the coarse clock (at most two ticks
/// late), or `Err(Elapsed)`: [`timeout_at`] with the deadline [`after`] `d`, read only when `fut` must
/// wait (an operation that completes at once reads no clock). A `d` too large to add is no deadline.
/// Cancel safety: that of `fut` (dropped when the deadline passes).
#[inline(always)]
pub fn timeout<F: Future>(d: Duration, fut: F) -> Deadline<F> {
    Deadline {
        fut,
        until: Until::After(d),
        sleep: None,
    }
}

/// `fut` raced against `deadline` on the worker's timer: `Ok` with its output when it completes first
/// (it is polled before the timer, so an operation that completes as the deadline passes still counts),
/// `Err(Elapsed)` once the deadline has passed. Cancel safety: that of `fut` (dropped when the deadline
/// passes).
///
/// What `monoio::time::timeout_at` does, built so that it costs less on the request path (bench/README.md
/// "Future moves"): making one only stores its fields, so the compiler builds a large `fut` (an upstream
/// write is over a kilobyte: the TLS variant's state is in it) where it will run instead of copying it
/// there; and the timer entry is made at the first poll that finds `fut` pending, so an operation that
/// completes at once (a send ahead on epoll) never touches the timer wheel.
#[inline(always)]
pub fn timeout_at<F: Future>(deadline: Instant, fut: F) -> Deadline<F> {
    Deadline {
        fut,
        until: Until::At(deadline),
        sleep: None,
    }
}

/// The deadline `d` from now on the coarse clock (never early, at most two ticks late); a `d` too large to
/// add is 30 years.
pub fn after(d: Duration) -> Instant {
    let now = coarse_now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// The future of [`timeout_at`] and [`timeout`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Deadline<F> {
    fut: F,
    until: Until,
    /// The timer entry, made at the first poll that finds `fut` pending.
    sleep: Option<Sleep>,
}

/// When a [`Deadline`] passes.
#[derive(Clone, Copy)]
enum Until {
    At(Instant),
    /// This long after the first poll that finds the future pending.
    After(Duration),
}

/// The deadline of a [`Deadline`] passed before its future completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of `fut` and of the `Sleep` inside `sleep`: neither is moved out of
        // `self` or replaced while it lives (`sleep` goes from `None` to `Some` once, which moves no
        // pinned value), and both are dropped in place with `self`. (`Deadline` is never `Unpin`:
        // `Sleep` is not.)
        let this = unsafe { self.get_unchecked_mut() };
        let fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        if let Poll::Ready(v) = fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let until = this.until;
        let sleep = this.sleep.get_or_insert_with(|| {
            sleep_until(match until {
                Until::At(at) => at,
                Until::After(d) => after(d),
            })
        });
        // SAFETY: as above.
        match unsafe { Pin::new_unchecked(sleep) }.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_now_is_never_early_and_at_most_two_ticks_late() {
        let tick = base().tick;
        assert!(
            tick > Duration::ZERO && tick <= Duration::from_millis(10),
            "{tick:?}"
        );
        // Counted, not asserted one by one: on a loaded virtual machine the kernel's timekeeping
        // update can run later still, and this thread can be preempted between the readings. Either
        // is rare; rounding up too far is not. A deadline that fires early is caught end to end by
        // `upstream::silent_upstream_is_a_zombie_at_the_cap`.
        let (samples, mut behind, mut ahead) = (10_000, 0, 0);
        for _ in 0..samples {
            let before = Instant::now();
            let coarse = coarse_now();
            let after = Instant::now();
            if coarse + Duration::from_millis(1) < before {
                behind += 1;
            }
            if coarse > after + 2 * tick {
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
