//! The relay buffer that follows the client's pace (DESIGN.md "Memory under slow readers and large
//! bodies"): sans-IO, unit-tested here, driven by the response relay loop.
//!
//! A relay reads a chunk from the upstream, writes it to the client and only then reads the next one,
//! so what it holds is one chunk, whose size the upstream read sets ([`crate::buf::RecvBuf::fill_sized`]).
//! [`RelayPace`] picks that size among the pool's size classes by how long the client took the last
//! chunk: a full chunk taken at once (the client keeps up) grows it toward [`RELAY_BUF_SIZE`], whose
//! large reads cost the least CPU per byte; a chunk that took long shrinks it toward [`BUF_SIZE`], so a
//! slow reader holds about what it takes in [`SLOW`], never a 256 KiB buffer.

use std::{
    cell::{Cell, RefCell},
    collections::VecDeque,
    future::Future,
    pin::Pin,
    task::{Context, Poll, Waker},
    time::Duration,
};

use crate::buf::{BUF_SIZE, LARGE_BUF_SIZE, RELAY_BUF_SIZE};

/// A chunk written within this kept up: the next may be larger. A write the socket takes whole
/// completes in microseconds; this leaves room for a busy worker's loop.
pub const KEPT_UP: Duration = Duration::from_millis(10);
/// A chunk that took this long or longer to write: the next is smaller.
pub const SLOW: Duration = Duration::from_millis(50);
/// A client whose socket sends on at least this many bytes a second keeps up, however long each
/// write waits (bytes/s; [`drains_fast`]): at this pace a [`RELAY_BUF_SIZE`] chunk leaves in 25 ms,
/// half of [`SLOW`], so a relay that grew for it does not shrink again.
pub const FAST_DRAIN: u64 = 10 << 20;

/// A write that took at least this long waited for the client's socket to drain; only such a write's
/// drain counts ([`RelayPace::wrote`]). A write that did not wait may have gone into the client's
/// open receive window, which a client that has stopped reading still offers once: a burst that
/// looks fast over the microseconds between two chunks, from a client that reads nothing.
pub const WAITED: Duration = Duration::from_millis(1);

/// Whether a client's socket sent on at least [`FAST_DRAIN`] between the ends of two chunks `over`
/// apart: `len` bytes were written in between, and `unsent_before` and `unsent_after` bytes sat in
/// the kernel's unsent queue at the two ends (`SIOCOUTQNSD`), so `len + unsent_before -
/// unsent_after` left it.
///
/// A write that waits proves nothing by its length: with `TCP_NOTSENT_LOWAT` the socket takes bytes
/// only as its queue drains, so a client that reads steadily at tens of MB/s, but slower than the
/// worker can write (a busy client, a long path), makes every chunk wait for it, and a chunk of a
/// socket that always holds a queue looks unsent. What left the queue over time tells such a
/// client from a slow one; a client that reads nothing drains nothing.
pub fn drains_fast(len: usize, unsent_before: usize, unsent_after: usize, over: Duration) -> bool {
    let left = (len + unsent_before).saturating_sub(unsent_after) as u128;
    left * 1_000_000_000 >= u128::from(FAST_DRAIN) * over.as_nanos()
}

/// The size of a relay's next upstream read, bytes: one of the pool's size classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayPace {
    size: usize,
}

impl Default for RelayPace {
    fn default() -> Self {
        Self::new()
    }
}

impl RelayPace {
    /// A relay's start: the small size ([`BUF_SIZE`]). A client that has not read yet proves
    /// nothing, so its relay starts as small as a slow reader's; one that keeps up reaches
    /// [`RELAY_BUF_SIZE`] after two chunks.
    pub const fn new() -> Self {
        RelayPace { size: BUF_SIZE }
    }

    /// A pace at `size`'s size class ([`crate::buf::size_class`]): a relay whose growth the budget
    /// refused goes on from the size it has.
    pub fn with_size(size: usize) -> Self {
        RelayPace {
            size: crate::buf::size_class(size),
        }
    }

    /// Where the next response on a keep-alive connection starts after a relay that ended at the
    /// full pace ([`RelayPace::is_full`]): one size below it ([`LARGE_BUF_SIZE`]). That client has
    /// read a whole body at the full pace on this connection, so its next relay skips the small
    /// size's chunks (a system call each way and a `SIOCOUTQNSD` query per 16 KiB, bench/README.md
    /// "Large bodies under a CPU quota"). One size below rather than the full pace: a client that
    /// kept up before and stops reading now holds at most one large chunk until its pace shrinks.
    pub const fn carried() -> RelayPace {
        RelayPace {
            size: LARGE_BUF_SIZE,
        }
    }

    /// Whether a relay at this pace has reached the full size ([`RELAY_BUF_SIZE`]).
    pub const fn is_full(self) -> bool {
        self.size >= RELAY_BUF_SIZE
    }

    /// The next read's size, bytes.
    pub const fn size(self) -> usize {
        self.size
    }

    /// Records that a chunk of `len` bytes took `took` to write to the client, of which `unsent` bytes
    /// were still in the kernel's unsent queue right after (0 when unknown). The next chunk grows
    /// after a chunk of at least half the current size (a short chunk proves nothing) that either
    /// was written at once ([`KEPT_UP`]) and sent on, or waited ([`WAITED`]) for a client whose
    /// socket has been sending on at least [`FAST_DRAIN`] (`fast`: [`drains_fast`]), however long it
    /// waited. A chunk the socket took at once but could not send on (the client's window closed: a
    /// client that does not read yet, whose socket buffers absorbed it) does not grow the next one.
    pub fn wrote(&mut self, len: usize, took: Duration, unsent: usize, fast: bool) {
        // At least half the current size (a short chunk proves nothing), below the relay size.
        let can_grow = len * 2 >= self.size && !self.is_full();
        let kept_up = took <= KEPT_UP && unsent * 2 <= len;
        let drained = fast && took >= WAITED;
        if can_grow && (kept_up || drained) {
            self.size = match self.size {
                BUF_SIZE => LARGE_BUF_SIZE,
                _ => RELAY_BUF_SIZE,
            };
        } else if took >= SLOW {
            self.size = match self.size {
                RELAY_BUF_SIZE => LARGE_BUF_SIZE,
                _ => BUF_SIZE,
            };
        }
    }
}

/// A worker's relay-memory budget by default, bytes (`server.limits.relay_buffer_budget`; DESIGN.md
/// "Memory under slow readers and large bodies"): 64 MiB, as many relays as 4096 slow readers at the
/// small size or 256 fast ones at the relay size.
pub const RELAY_BUDGET: usize = 64 << 20;

/// What one worker's relays hold of their budget, and the relays waiting to start: a relay takes its
/// first buffer with [`RelayBudget::acquire`] (waiting while the budget is spent: a pause, never a
/// failure), grows only within the budget ([`RelayBudget::resize`]) and gives it all back at its end
/// ([`RelayBudget::release`]). One per worker, used from its own thread only.
pub struct RelayBudget {
    limit: Cell<usize>,
    held: Cell<usize>,
    /// The pace of the last chunk its relays wrote ([`RelayBudget::pace`]).
    pace: Cell<RelayPace>,
    /// Relays waiting to start, first come first served: (ticket, waker).
    waiting: RefCell<VecDeque<(u64, Waker)>>,
    next_ticket: Cell<u64>,
}

impl RelayBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        RelayBudget {
            limit: Cell::new(limit),
            held: Cell::new(0),
            pace: Cell::new(RelayPace::new()),
            waiting: RefCell::new(VecDeque::new()),
            next_ticket: Cell::new(0),
        }
    }

    /// Sets the limit to `limit` bytes (`server.limits.relay_buffer_budget`, at start and after a
    /// reload). Relays holding more than a lowered limit keep what they hold; new ones wait.
    pub fn set_limit(&self, limit: usize) {
        self.limit.set(limit);
        self.wake_first();
    }

    /// Bytes the worker's relays hold now (`edge_relay_buffer_bytes{worker}`).
    pub fn held(&self) -> usize {
        self.held.get()
    }

    /// The pace its relays last wrote at ([`RelayBudget::set_pace`]; at first the small size). A
    /// multiplexed connection's share keeps it so that a new stream's relay starts at the pace the
    /// connection's client is known to keep (its streams take turns at one TCP pace, bench/README.md
    /// "Large bodies after the slow-reader work") rather than at the small size: its chunks then stay
    /// in one size class, so the worker's buffer pools do not hold the buffers of every class that
    /// streams growing in step once needed.
    pub fn pace(&self) -> RelayPace {
        self.pace.get()
    }

    /// Records the pace a relay sharing this budget reached after its last chunk.
    pub fn set_pace(&self, pace: RelayPace) {
        self.pace.set(pace);
    }

    /// Whether `n` more bytes fit. With nothing held anything fits, so one relay always runs.
    fn fits(&self, n: usize) -> bool {
        self.held.get() == 0 || self.held.get() + n <= self.limit.get()
    }

    /// Takes `n` bytes for a relay that starts, waiting in line while they do not fit (and while
    /// relays that came first wait). Resolves to whether it had to wait
    /// (`edge_relay_buffer_waits_total{worker}`).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait takes nothing and leaves the line, passing its turn on.
    pub fn acquire(&self, n: usize) -> Acquire<'_> {
        Acquire {
            budget: self,
            n,
            ticket: None,
        }
    }

    /// Changes a relay's hold from `from` to `to` bytes: always when shrinking, when growing only as
    /// far as the budget allows (then the hold stays `from`). Returns the hold.
    pub fn resize(&self, from: usize, to: usize) -> usize {
        if to <= from {
            self.release(from - to);
            return to;
        }
        match self.waiting.borrow().is_empty() && self.held.get() + (to - from) <= self.limit.get()
        {
            true => {
                self.held.set(self.held.get() + (to - from));
                to
            }
            false => from,
        }
    }

    /// Gives `n` bytes back and wakes the first waiting relay.
    pub fn release(&self, n: usize) {
        self.held.set(self.held.get().saturating_sub(n));
        self.wake_first();
    }

    fn wake_first(&self) {
        if let Some((_, w)) = self.waiting.borrow().front() {
            w.wake_by_ref();
        }
    }
}

/// The future of [`RelayBudget::acquire`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Acquire<'a> {
    budget: &'a RelayBudget,
    n: usize,
    /// Its place in line, once it had to wait.
    ticket: Option<u64>,
}

impl Future for Acquire<'_> {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let b = self.budget;
        let mut waiting = b.waiting.borrow_mut();
        let first = match (self.ticket, waiting.front()) {
            (_, None) => true,
            (Some(t), Some((f, _))) => t == *f,
            (None, Some(_)) => false,
        };
        if first && b.fits(self.n) {
            if self.ticket.is_some() {
                waiting.pop_front();
            }
            b.held.set(b.held.get() + self.n);
            drop(waiting);
            // The next in line may fit as well.
            b.wake_first();
            let waited = self.ticket.take().is_some();
            return Poll::Ready(waited);
        }
        match self.ticket {
            Some(t) => {
                if let Some(e) = waiting.iter_mut().find(|(x, _)| *x == t) {
                    e.1.clone_from(cx.waker());
                }
            }
            None => {
                let t = b.next_ticket.get();
                b.next_ticket.set(t.wrapping_add(1));
                waiting.push_back((t, cx.waker().clone()));
                self.ticket = Some(t);
            }
        }
        Poll::Pending
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        let Some(t) = self.ticket else { return };
        let mut waiting = self.budget.waiting.borrow_mut();
        let was_first = waiting.front().is_some_and(|(f, _)| *f == t);
        waiting.retain(|(x, _)| *x != t);
        drop(waiting);
        if was_first {
            self.budget.wake_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_micros(50);
    const BEHIND: Duration = Duration::from_millis(200);

    /// A keep-alive connection's next relay starts one size below the full pace, and one chunk that
    /// keeps up takes it there.
    #[test]
    fn a_carried_pace_is_one_size_below_the_full_pace() {
        let mut p = RelayPace::carried();
        assert_eq!(p.size(), LARGE_BUF_SIZE);
        assert!(!p.is_full() && !RelayPace::new().is_full());
        p.wrote(LARGE_BUF_SIZE, FAST, 0, false);
        assert!(p.is_full() && p.size() == RELAY_BUF_SIZE);
        // A client that stopped reading shrinks it as it would any relay.
        let mut q = RelayPace::carried();
        q.wrote(LARGE_BUF_SIZE, BEHIND, LARGE_BUF_SIZE, false);
        assert_eq!(q.size(), BUF_SIZE);
    }

    #[test]
    fn a_client_that_keeps_up_grows_the_chunk_to_the_relay_size() {
        let mut p = RelayPace::new();
        assert_eq!(p.size(), BUF_SIZE, "a relay starts small");
        p.wrote(BUF_SIZE, FAST, 0, false);
        assert_eq!(p.size(), LARGE_BUF_SIZE);
        p.wrote(LARGE_BUF_SIZE, FAST, 0, false);
        assert_eq!(p.size(), RELAY_BUF_SIZE);
        p.wrote(RELAY_BUF_SIZE, FAST, 0, false);
        assert_eq!(p.size(), RELAY_BUF_SIZE, "no larger than the relay size");
    }

    #[test]
    fn a_slow_client_shrinks_it_to_the_small_size_and_stays_there() {
        let mut p = RelayPace::with_size(LARGE_BUF_SIZE);
        p.wrote(LARGE_BUF_SIZE, FAST, 0, false);
        p.wrote(RELAY_BUF_SIZE, BEHIND, 0, false);
        assert_eq!(p.size(), LARGE_BUF_SIZE);
        p.wrote(LARGE_BUF_SIZE, BEHIND, 0, false);
        assert_eq!(p.size(), BUF_SIZE);
        p.wrote(BUF_SIZE, BEHIND, 0, false);
        assert_eq!(p.size(), BUF_SIZE, "no smaller than the small size");
        // Between the two bounds: unchanged.
        p.wrote(BUF_SIZE, Duration::from_millis(20), 0, false);
        assert_eq!(p.size(), BUF_SIZE);
        // A slow reader that catches up grows again.
        p.wrote(BUF_SIZE, FAST, 0, false);
        assert_eq!(p.size(), LARGE_BUF_SIZE);
    }

    #[test]
    fn a_chunk_left_unsent_proves_nothing() {
        // Taken at once by a socket whose client does not read: it sits unsent.
        let mut p = RelayPace::new();
        p.wrote(BUF_SIZE, FAST, BUF_SIZE, false);
        assert_eq!(p.size(), BUF_SIZE);
        p.wrote(BUF_SIZE, FAST, 1000, false);
        assert_eq!(p.size(), LARGE_BUF_SIZE);
    }

    #[test]
    fn a_client_that_drains_fast_grows_it_even_when_each_write_waits() {
        // Each write waits for the socket's queue to drain: not kept up by its time alone.
        let waited = Duration::from_millis(20);
        let mut p = RelayPace::new();
        p.wrote(BUF_SIZE, waited, 128 << 10, false);
        assert_eq!(p.size(), BUF_SIZE);
        p.wrote(BUF_SIZE, waited, 128 << 10, true);
        assert_eq!(p.size(), LARGE_BUF_SIZE);
        p.wrote(LARGE_BUF_SIZE, waited, 128 << 10, true);
        assert_eq!(p.size(), RELAY_BUF_SIZE);
        // A short chunk proves nothing, fast or not.
        let mut p = RelayPace::new();
        p.wrote(100, waited, 0, true);
        assert_eq!(p.size(), BUF_SIZE);
        // Nor does a write that did not wait and was left unsent: the drain before it was a burst
        // into the client's open window.
        let mut p = RelayPace::new();
        p.wrote(BUF_SIZE, FAST, BUF_SIZE, true);
        assert_eq!(p.size(), BUF_SIZE);
    }

    #[test]
    fn the_drain_counts_what_left_the_unsent_queue_over_time() {
        let ms = Duration::from_millis;
        // 64 KiB written, the queue steady at 128 KiB: 64 KiB left in 5 ms (12.8 MiB/s).
        assert!(drains_fast(64 << 10, 128 << 10, 128 << 10, ms(5)));
        // The same in 10 ms: 6.4 MiB/s.
        assert!(!drains_fast(64 << 10, 128 << 10, 128 << 10, ms(10)));
        // A client that reads nothing: the chunk only grew the queue.
        assert!(!drains_fast(64 << 10, 0, 64 << 10, ms(1)));
        // The queue shrank as well: that left too.
        assert!(drains_fast(64 << 10, 128 << 10, 64 << 10, ms(10)));
        // At the threshold exactly: fast.
        assert!(drains_fast(10 << 20, 0, 0, ms(1000)));
    }

    #[test]
    fn short_chunks_prove_nothing() {
        // An upstream that sends little at a time: a quick write of a few bytes does not grow the buffer.
        let mut p = RelayPace::new();
        p.wrote(100, FAST, 0, false);
        assert_eq!(p.size(), BUF_SIZE);
    }

    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(f).poll(&mut cx)
    }

    #[test]
    fn relays_wait_in_line_for_the_budget_and_never_fail() {
        let b = RelayBudget::new(100);
        assert_eq!(poll_once(&mut b.acquire(60)), Poll::Ready(false));
        // 60 + 60 > 100: the second waits, and a third behind it even though 30 would fit.
        let mut second = b.acquire(60);
        assert_eq!(poll_once(&mut second), Poll::Pending);
        let mut third = b.acquire(30);
        assert_eq!(poll_once(&mut third), Poll::Pending);
        // Growing is refused while relays wait; shrinking always works.
        assert_eq!(b.resize(60, 80), 60);
        assert_eq!(b.resize(60, 50), 50);
        assert_eq!(poll_once(&mut second), Poll::Pending, "50 + 60 > 100");
        b.release(50);
        assert_eq!(poll_once(&mut second), Poll::Ready(true));
        assert_eq!(poll_once(&mut third), Poll::Ready(true));
        assert_eq!(b.held(), 90);
    }

    #[test]
    fn a_dropped_wait_leaves_the_line() {
        let b = RelayBudget::new(100);
        assert_eq!(poll_once(&mut b.acquire(100)), Poll::Ready(false));
        let mut gone = b.acquire(10);
        assert_eq!(poll_once(&mut gone), Poll::Pending);
        let mut next = b.acquire(10);
        assert_eq!(poll_once(&mut next), Poll::Pending);
        drop(gone);
        b.release(100);
        assert_eq!(poll_once(&mut next), Poll::Ready(true));
        assert_eq!(b.held(), 10);
        // With nothing held, anything fits: one relay always runs.
        let b = RelayBudget::new(10);
        assert_eq!(poll_once(&mut b.acquire(64)), Poll::Ready(false));
    }

    #[test]
    fn a_shared_budget_keeps_the_pace_its_relays_last_wrote_at() {
        let share = RelayBudget::new(LARGE_BUF_SIZE);
        assert_eq!(
            share.pace(),
            RelayPace::new(),
            "a new connection proves nothing yet"
        );
        let mut p = share.pace();
        p.wrote(BUF_SIZE, FAST, 0, false);
        p.wrote(LARGE_BUF_SIZE, FAST, 0, false);
        share.set_pace(p);
        assert_eq!(
            share.pace().size(),
            RELAY_BUF_SIZE,
            "the next stream starts at it"
        );
        p.wrote(RELAY_BUF_SIZE, BEHIND, 0, false);
        share.set_pace(p);
        assert_eq!(
            share.pace().size(),
            LARGE_BUF_SIZE,
            "and follows a slower client down"
        );
    }

    #[test]
    fn a_connection_share_of_one_large_chunk_holds_one_full_size_chunk_alone() {
        // A multiplexed connection's share (`server/h2/tasks.rs`): four small chunks at once while
        // the connection proves its pace, one large one, and a full-size one alone.
        let share = RelayBudget::new(LARGE_BUF_SIZE);
        for _ in 0..4 {
            assert_eq!(poll_once(&mut share.acquire(BUF_SIZE)), Poll::Ready(false));
        }
        let mut fifth = share.acquire(BUF_SIZE);
        assert_eq!(poll_once(&mut fifth), Poll::Pending);
        share.release(4 * BUF_SIZE);
        assert_eq!(poll_once(&mut fifth), Poll::Ready(true));
        let mut large = share.acquire(LARGE_BUF_SIZE);
        assert_eq!(poll_once(&mut large), Poll::Pending, "16 + 64 KiB > 64 KiB");
        share.release(BUF_SIZE);
        assert_eq!(poll_once(&mut large), Poll::Ready(true));
        share.release(LARGE_BUF_SIZE);
        assert_eq!(
            poll_once(&mut share.acquire(RELAY_BUF_SIZE)),
            Poll::Ready(false),
            "a full-size chunk fits alone"
        );
        let mut next = share.acquire(BUF_SIZE);
        assert_eq!(poll_once(&mut next), Poll::Pending, "and alone");
    }
}
