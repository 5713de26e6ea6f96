//! `max_active` per worker per endpoint (DESIGN.md "Configuration", `max_active` / `queue_timeout`): a
//! request takes a permit before it uses a connection (pooled or new) and gives it back when the exchange
//! ends. When none is free it waits up to `queue_timeout`, then the caller answers 503 (`upstream_queue`).
//! Per worker, single-threaded: a counter and a list of waiting tasks. The counter runs with
//! `max_active = 0` too: it is this worker's requests in flight on the endpoint, which `least_request`
//! compares (DESIGN.md "Upstream health, discovery and balancing"). The permit's drop gives it back on
//! every path: a checkin, an error, a cancelled request.

use std::{
    cell::{Cell, RefCell},
    future::poll_fn,
    rc::Rc,
    task::{Poll, Waker},
};

/// The active-connection budget of one endpoint within one worker.
#[derive(Default)]
pub struct Slots {
    active: Cell<usize>,
    waiters: RefCell<Vec<Waker>>,
}

/// One active use of an endpoint; released on drop.
pub struct Permit(Option<Rc<Slots>>);

impl Permit {
    /// A permit that counts nothing (held by a pooled connection, which is not in use).
    pub const fn unlimited() -> Self {
        Permit(None)
    }
}

impl Slots {
    /// Waits for a free slot (`max == 0` means unlimited, counted all the same). Not bounded here: the
    /// caller wraps it in `queue_timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait holds nothing (a stale waker is at most woken once for nothing).
    pub async fn acquire(self: &Rc<Self>, max: usize) -> Permit {
        poll_fn(|cx| {
            if max == 0 || self.active.get() < max {
                self.active.set(self.active.get() + 1);
                Poll::Ready(Permit(Some(self.clone())))
            } else {
                self.waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// A permit if one is free now (`max == 0` means unlimited, counted all the same), without
    /// waiting: the common case needs no `queue_timeout` timer.
    pub fn try_acquire(self: &Rc<Self>, max: usize) -> Option<Permit> {
        (max == 0 || self.active.get() < max).then(|| {
            self.active.set(self.active.get() + 1);
            Permit(Some(self.clone()))
        })
    }

    /// Permits held now: this worker's requests in flight on the endpoint.
    pub fn active(&self) -> usize {
        self.active.get()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.active.set(s.active.get() - 1);
            // Wake every waiter: one wins the slot, the others wait again (stale wakers of timed-out waits
            // would otherwise swallow the wake-up). Without `max_active` nobody waits.
            for w in s.waiters.borrow_mut().drain(..) {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_counted_and_released() {
        let slots = Rc::new(Slots::default());
        let mut cx = std::task::Context::from_waker(Waker::noop());
        let mut a = Box::pin(slots.acquire(1));
        let pa = match a.as_mut().poll(&mut cx) {
            Poll::Ready(p) => p,
            Poll::Pending => panic!("first permit must be free"),
        };
        let mut b = Box::pin(slots.acquire(1));
        assert!(b.as_mut().poll(&mut cx).is_pending());
        assert_eq!(slots.active(), 1);
        drop(pa);
        assert_eq!(slots.active(), 0);
        let pb = b.as_mut().poll(&mut cx);
        assert!(pb.is_ready());
        assert_eq!(slots.active(), 1);
        drop(pb);
        assert_eq!(slots.active(), 0);
    }

    #[test]
    fn unlimited_permits_are_counted_too() {
        let slots = Rc::new(Slots::default());
        let a = slots.try_acquire(0).unwrap();
        let b = slots.try_acquire(0).unwrap();
        assert_eq!(slots.active(), 2);
        drop(a);
        assert_eq!(slots.active(), 1);
        drop(b);
        assert_eq!(slots.active(), 0);
    }

    use std::future::Future;
}
