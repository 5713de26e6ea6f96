//! Idle connections of one worker: eviction near the connection limit (DESIGN.md "Capacity") and the
//! `idle` deadline of HTTP/1.1 keep-alive connections (DESIGN.md "Inbound deadlines").
//!
//! - Eviction: each worker keeps its idle connections (keep-alive with no request in progress, accepted
//!   with no byte yet, or in the TLS handshake) in least-recently-active order. When fewer than 1/16 of
//!   `max_connections` are free, accepting a connection closes the oldest idle one (RFC 9112 §9.5 lets a
//!   server close an idle connection at any time).
//! - Expiry: a connection that entered with [`IdleList::enter_expiring`] is also on a second list, in the
//!   order it went idle, and [`IdleList::expire`] (run by the worker's one idle-sweep task,
//!   `crate::process::worker`) ends those idle for longer than the worker's `idle` timeout. Every such connection
//!   waits the same `idle`, so the oldest is always the next to expire: one timer per worker instead of
//!   one per connection. (A monoio timer entry is 128-byte aligned and takes about 640 bytes of the
//!   waiting future; an idle connection's memory is mostly that future: bench/README.md "Idle
//!   connections".) A reload that changes `idle` applies to connections already idle.
//!
//! Both lists are intrusive and doubly linked over one slab: entering and leaving the idle state
//! allocates nothing once the slab has grown to the worker's peak idle count.

use std::{
    cell::{Cell, RefCell},
    future::Future,
    os::fd::RawFd,
    pin::Pin,
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

const NIL: u32 = u32::MAX;

/// Links of one of the two lists.
#[derive(Clone, Copy)]
struct Links {
    prev: u32,
    next: u32,
}

/// Head, tail and length of one of the two lists.
#[derive(Default)]
struct Ends {
    head: Cell<Option<u32>>,
    tail: Cell<Option<u32>>,
    len: Cell<usize>,
}

/// Which of an entry's two link pairs a list uses.
#[derive(Clone, Copy)]
enum Which {
    /// All idle connections, least recently active first.
    Evict,
    /// Connections under the `idle` deadline, in the order they went idle.
    Expire,
}

struct Entry {
    evict: Links,
    expire: Links,
    fd: RawFd,
    /// When the connection went idle.
    since: Instant,
    /// On the expiry list (entered with [`IdleList::enter_expiring`] and not yet ended).
    expiring: bool,
    left: Option<Left>,
    waker: Option<Waker>,
}

impl Entry {
    fn links(&mut self, which: Which) -> &mut Links {
        match which {
            Which::Evict => &mut self.evict,
            Which::Expire => &mut self.expire,
        }
    }
}

/// Why a connection's idle wait ended, as the [`Idle`] future's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Evicted to make room for a new connection (DESIGN.md "Capacity").
    Evicted,
    /// Idle for longer than the worker's `idle` timeout (only for [`IdleList::enter_expiring`]).
    Expired,
}

/// Oldest idle entries examined per eviction before giving up.
const SCAN: usize = 16;

/// One worker's idle connections, oldest first.
#[derive(Default)]
pub struct IdleList {
    slab: RefCell<Vec<Entry>>,
    free: RefCell<Vec<u32>>,
    evict: Ends,
    expire: Ends,
    /// The idle-sweep task, waiting for the expiry list to become non-empty.
    sweeper: Cell<Option<Waker>>,
}

impl IdleList {
    /// Registers a connection as idle (newest) for eviction only. The returned guard resolves with
    /// [`Left::Evicted`] when the connection is evicted and unregisters it on drop. `fd` is the
    /// connection's socket, checked for pending input before it is evicted.
    pub fn enter(&self, fd: RawFd) -> Idle<'_> {
        self.insert(fd, false)
    }

    /// Like [`enter`](Self::enter), and the guard also resolves with [`Left::Expired`] once the
    /// connection has been idle for the worker's `idle` timeout ([`expire`](Self::expire)).
    pub fn enter_expiring(&self, fd: RawFd) -> Idle<'_> {
        let was_empty = self.expire.len.get() == 0;
        let idle = self.insert(fd, true);
        if was_empty {
            if let Some(w) = self.sweeper.take() {
                w.wake();
            }
        }
        idle
    }

    fn insert(&self, fd: RawFd, expiring: bool) -> Idle<'_> {
        let mut slab = self.slab.borrow_mut();
        let unlinked = Links {
            prev: NIL,
            next: NIL,
        };
        let entry = Entry {
            evict: unlinked,
            expire: unlinked,
            fd,
            since: Instant::now(),
            expiring,
            left: None,
            waker: None,
        };
        let i = match self.free.borrow_mut().pop() {
            Some(i) => {
                slab[i as usize] = entry;
                i
            }
            None => {
                slab.push(entry);
                (slab.len() - 1) as u32
            }
        };
        self.push_back(&mut slab, i, Which::Evict);
        if expiring {
            self.push_back(&mut slab, i, Which::Expire);
        }
        Idle {
            list: self,
            index: i,
        }
    }

    fn ends(&self, which: Which) -> &Ends {
        match which {
            Which::Evict => &self.evict,
            Which::Expire => &self.expire,
        }
    }

    fn push_back(&self, slab: &mut [Entry], i: u32, which: Which) {
        let ends = self.ends(which);
        *slab[i as usize].links(which) = Links {
            prev: ends.tail.get().unwrap_or(NIL),
            next: NIL,
        };
        match ends.tail.get() {
            Some(t) => slab[t as usize].links(which).next = i,
            None => ends.head.set(Some(i)),
        }
        ends.tail.set(Some(i));
        ends.len.set(ends.len.get() + 1);
    }

    fn unlink(&self, slab: &mut [Entry], i: u32, which: Which) {
        let ends = self.ends(which);
        let Links { prev, next } = *slab[i as usize].links(which);
        match prev {
            NIL => ends.head.set((next != NIL).then_some(next)),
            p => slab[p as usize].links(which).next = next,
        }
        match next {
            NIL => ends.tail.set((prev != NIL).then_some(prev)),
            n => slab[n as usize].links(which).prev = prev,
        }
        ends.len.set(ends.len.get() - 1);
    }

    /// Takes entry `i` off the eviction list and, if it is on it, the expiry list.
    fn leave(&self, slab: &mut [Entry], i: u32) {
        self.unlink(slab, i, Which::Evict);
        if slab[i as usize].expiring {
            self.unlink(slab, i, Which::Expire);
            slab[i as usize].expiring = false;
        }
    }

    /// Takes entry `i` off both lists and wakes its connection with `why`.
    fn end(&self, slab: &mut [Entry], i: u32, why: Left) {
        self.leave(slab, i);
        let e = &mut slab[i as usize];
        e.left = Some(why);
        if let Some(w) = e.waker.take() {
            w.wake();
        }
    }

    /// Evicts the least recently active idle connection that has no request bytes waiting (one whose
    /// request already arrived is about to be served, not idle); `false` when none is evictable.
    pub fn evict_oldest(&self) -> bool {
        let mut slab = self.slab.borrow_mut();
        let mut cursor = self.evict.head.get();
        let mut scanned = 0;
        let i = loop {
            let Some(i) = cursor else { return false };
            if scanned == SCAN {
                return false;
            }
            scanned += 1;
            if !has_pending_input(slab[i as usize].fd) {
                break i;
            }
            cursor = match slab[i as usize].evict.next {
                NIL => None,
                n => Some(n),
            };
        };
        self.end(&mut slab, i, Left::Evicted);
        true
    }

    /// Ends (with [`Left::Expired`]) every expiring connection idle for `idle` or longer at `now`.
    /// Returns when the next one expires, or `None` when none is left to expire.
    pub fn expire(&self, now: Instant, idle: Duration) -> Option<Instant> {
        let mut slab = self.slab.borrow_mut();
        while let Some(i) = self.expire.head.get() {
            let due = slab[i as usize].since + idle;
            if due > now {
                return Some(due);
            }
            self.end(&mut slab, i, Left::Expired);
        }
        None
    }

    /// Resolves once an expiring connection is registered (at once when one is). For the worker's one
    /// idle-sweep task; cancel safe.
    pub fn expiring_entered(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.expire.len.get() > 0 {
                return Poll::Ready(());
            }
            self.sweeper.set(Some(cx.waker().clone()));
            Poll::Pending
        })
    }

    /// Idle connections registered now.
    pub fn len(&self) -> usize {
        self.evict.len.get()
    }

    /// Whether no connection is idle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether bytes are waiting on the socket (a peek; EOF and errors count as nothing pending: closing such a
/// connection loses nothing).
fn has_pending_input(fd: RawFd) -> bool {
    fd >= 0 && edge_core::io::peek(fd) == edge_core::io::Peek::Bytes
}

/// A connection's registration in the idle list; as a future it completes when the connection is evicted
/// or (entered with [`IdleList::enter_expiring`]) its `idle` deadline passed. Cancel safe: dropping it
/// unregisters the connection.
pub struct Idle<'a> {
    list: &'a IdleList,
    index: u32,
}

impl Future for Idle<'_> {
    type Output = Left;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Left> {
        let mut slab = self.list.slab.borrow_mut();
        let e = &mut slab[self.index as usize];
        if let Some(why) = e.left {
            Poll::Ready(why)
        } else {
            if !e.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                e.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        }
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        let mut slab = self.list.slab.borrow_mut();
        let i = self.index;
        if slab[i as usize].left.is_none() {
            self.list.leave(&mut slab, i);
        }
        slab[i as usize].waker = None;
        self.list.free.borrow_mut().push(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(i: &mut Idle<'_>) -> Option<Left> {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(i).poll(&mut cx) {
            Poll::Ready(why) => Some(why),
            Poll::Pending => None,
        }
    }

    #[test]
    fn evicts_oldest_first_and_reuses_slots() {
        let list = IdleList::default();
        let mut a = list.enter(-1);
        let mut b = list.enter(-1);
        let mut c = list.enter(-1);
        assert_eq!(list.len(), 3);
        drop(b);
        assert!(list.evict_oldest());
        assert_eq!(left(&mut a), Some(Left::Evicted));
        assert_eq!(left(&mut c), None);
        assert!(list.evict_oldest());
        assert_eq!(left(&mut c), Some(Left::Evicted));
        assert!(!list.evict_oldest());
        drop((a, c));
        assert_eq!(list.len(), 0);
        b = list.enter(-1);
        assert_eq!(list.slab.borrow().len(), 3, "slots are reused");
        assert_eq!(left(&mut b), None);
    }

    #[test]
    fn expires_only_expiring_entries_oldest_first_and_reports_the_next_deadline() {
        let list = IdleList::default();
        let idle = Duration::from_secs(10);
        let mut plain = list.enter(-1);
        let mut a = list.enter_expiring(-1);
        let mut b = list.enter_expiring(-1);
        let (since_a, since_b) = {
            let slab = list.slab.borrow();
            (slab[a.index as usize].since, slab[b.index as usize].since)
        };
        assert_eq!(list.expire(since_a, idle), Some(since_a + idle));
        assert_eq!(left(&mut a), None);
        // At a's deadline a expires, b (which went idle at the same time or later) is next.
        let next = list.expire(since_a + idle, idle);
        assert_eq!(left(&mut a), Some(Left::Expired));
        if since_b > since_a {
            assert_eq!(next, Some(since_b + idle));
            assert_eq!(left(&mut b), None);
        }
        assert_eq!(list.expire(since_b + idle, idle), None);
        assert_eq!(left(&mut b), Some(Left::Expired));
        assert_eq!(
            left(&mut plain),
            None,
            "an eviction-only entry never expires"
        );
        assert_eq!(list.len(), 1);
        // Expired entries are off the eviction list too: the only one left to evict is `plain`.
        assert!(list.evict_oldest());
        assert_eq!(left(&mut plain), Some(Left::Evicted));
        assert!(!list.evict_oldest());
    }

    #[test]
    fn an_evicted_or_dropped_entry_leaves_the_expiry_list() {
        let list = IdleList::default();
        let idle = Duration::from_secs(10);
        let mut a = list.enter_expiring(-1);
        let b = list.enter_expiring(-1);
        let since_b = list.slab.borrow()[b.index as usize].since;
        assert!(list.evict_oldest());
        assert_eq!(left(&mut a), Some(Left::Evicted));
        drop(b);
        assert_eq!(
            list.expire(since_b + idle, idle),
            None,
            "nothing left to expire"
        );
        assert_eq!(
            left(&mut a),
            Some(Left::Evicted),
            "an evicted entry stays evicted"
        );
    }

    #[test]
    fn the_sweeper_is_woken_when_the_first_expiring_entry_enters() {
        use std::sync::{
            atomic::{AtomicBool, Ordering},
            Arc,
        };
        use std::task::Wake;
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let list = IdleList::default();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut entered = std::pin::pin!(list.expiring_entered());
        assert!(entered.as_mut().poll(&mut cx).is_pending());
        let _plain = list.enter(-1);
        assert!(
            !flag.0.load(Ordering::SeqCst),
            "eviction-only entries do not wake it"
        );
        let _a = list.enter_expiring(-1);
        assert!(flag.0.load(Ordering::SeqCst));
        assert!(entered.as_mut().poll(&mut cx).is_ready());
    }
}
