//! Eviction of idle connections near the connection limit (DESIGN.md "Capacity"): each worker keeps its
//! idle connections (keep-alive with no request in progress, or accepted with no byte yet) in
//! least-recently-active order. When fewer than 1/16 of `max_connections` are free, accepting a connection
//! closes the oldest idle one (RFC 9112 §9.5 lets a server close an idle connection at any time).
//!
//! An intrusive doubly linked list over a slab: entering and leaving the idle state allocates nothing once
//! the slab has grown to the worker's peak idle count.

use std::{
    cell::{Cell, RefCell},
    future::Future,
    os::fd::RawFd,
    pin::Pin,
    task::{Context, Poll, Waker},
};

const NIL: u32 = u32::MAX;

struct Entry {
    prev: u32,
    next: u32,
    fd: RawFd,
    evicted: bool,
    waker: Option<Waker>,
}

/// Oldest idle entries examined per eviction before giving up.
const SCAN: usize = 16;

/// One worker's idle connections, oldest first.
#[derive(Default)]
pub struct IdleList {
    slab: RefCell<Vec<Entry>>,
    free: RefCell<Vec<u32>>,
    head: Cell<Option<u32>>,
    tail: Cell<Option<u32>>,
    len: Cell<usize>,
}

impl IdleList {
    /// Registers a connection as idle (newest). The returned guard resolves when the connection is
    /// evicted and unregisters it on drop. `fd` is the connection's socket, checked for pending input
    /// before it is evicted.
    pub fn enter(&self, fd: RawFd) -> Idle<'_> {
        let mut slab = self.slab.borrow_mut();
        let entry = Entry {
            prev: self.tail.get().unwrap_or(NIL),
            next: NIL,
            fd,
            evicted: false,
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
        match self.tail.get() {
            Some(t) => slab[t as usize].next = i,
            None => self.head.set(Some(i)),
        }
        self.tail.set(Some(i));
        self.len.set(self.len.get() + 1);
        Idle {
            list: self,
            index: i,
        }
    }

    fn unlink(&self, slab: &mut [Entry], i: u32) {
        let (prev, next) = (slab[i as usize].prev, slab[i as usize].next);
        match prev {
            NIL => self.head.set((next != NIL).then_some(next)),
            p => slab[p as usize].next = next,
        }
        match next {
            NIL => self.tail.set((prev != NIL).then_some(prev)),
            n => slab[n as usize].prev = prev,
        }
        self.len.set(self.len.get() - 1);
    }

    /// Evicts the least recently active idle connection that has no request bytes waiting (one whose
    /// request already arrived is about to be served, not idle); `false` when none is evictable.
    pub fn evict_oldest(&self) -> bool {
        let mut slab = self.slab.borrow_mut();
        let mut cursor = self.head.get();
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
            cursor = match slab[i as usize].next {
                NIL => None,
                n => Some(n),
            };
        };
        self.unlink(&mut slab, i);
        let e = &mut slab[i as usize];
        e.evicted = true;
        if let Some(w) = e.waker.take() {
            w.wake();
        }
        true
    }

    /// Idle connections registered now.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    /// Whether no connection is idle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether bytes are waiting on the socket (a peek; EOF and errors count as nothing pending: closing such a
/// connection loses nothing).
fn has_pending_input(fd: RawFd) -> bool {
    if fd < 0 {
        return false;
    }
    let mut b = 0u8;
    // SAFETY: a one-byte non-blocking peek into a local on a socket the connection owns.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// A connection's registration in the idle list; as a future it completes when the connection is evicted.
pub struct Idle<'a> {
    list: &'a IdleList,
    index: u32,
}

impl Future for Idle<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut slab = self.list.slab.borrow_mut();
        let e = &mut slab[self.index as usize];
        if e.evicted {
            Poll::Ready(())
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
        if !slab[self.index as usize].evicted {
            self.list.unlink(&mut slab, self.index);
        }
        slab[self.index as usize].waker = None;
        self.list.free.borrow_mut().push(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_evicted(i: &mut Idle<'_>) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(i).poll(&mut cx).is_ready()
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
        assert!(is_evicted(&mut a));
        assert!(!is_evicted(&mut c));
        assert!(list.evict_oldest());
        assert!(is_evicted(&mut c));
        assert!(!list.evict_oldest());
        drop((a, c));
        assert_eq!(list.len(), 0);
        b = list.enter(-1);
        assert_eq!(list.slab.borrow().len(), 3, "slots are reused");
        assert!(!is_evicted(&mut b));
    }
}
