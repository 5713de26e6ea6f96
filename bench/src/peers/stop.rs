//! A single-threaded stop signal for the tasks of one monoio runtime.
//!
//! monoio has no task abort, and dropping a runtime does not drop the tasks still parked on IO or
//! timers, so their sockets would stay open. The origin therefore races every connection task
//! against a [`StopSignal`]: when the worker triggers it, each [`StopSignal::or_stop`] returns
//! `None`, the connection future is dropped and its socket closed. Per-thread (`Rc`, `Cell`),
//! never shared across threads; wakers are kept one slot per waiting future and freed on drop, so
//! re-polling a long-lived wait does not grow anything.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// A cloneable handle on one thread's stop flag.
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    inner: Rc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stopped: Cell<bool>,
    /// One slot per pending [`Wait`]; `None` when free.
    wakers: RefCell<Vec<Option<Waker>>>,
    free: RefCell<Vec<usize>>,
}

impl StopSignal {
    /// A signal not triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the flag and wakes every pending wait. Idempotent.
    pub fn trigger(&self) {
        self.inner.stopped.set(true);
        let woken: Vec<Waker> = self
            .inner
            .wakers
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for w in woken {
            w.wake();
        }
    }

    /// True once [`trigger`](Self::trigger) ran.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.get()
    }

    /// Resolves once the signal is triggered.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only frees its waker slot.
    pub fn wait(&self) -> Wait<'_> {
        Wait {
            inner: &self.inner,
            slot: None,
        }
    }

    /// Runs `fut` until it completes (`Some(output)`) or the signal is triggered (`None`, with
    /// `fut` dropped).
    pub async fn or_stop<F: Future>(&self, fut: F) -> Option<F::Output> {
        let mut fut = pin!(fut);
        let mut wait = self.wait();
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            match Pin::new(&mut wait).poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }
}

/// Future of [`StopSignal::wait`].
#[derive(Debug)]
pub struct Wait<'a> {
    inner: &'a Inner,
    slot: Option<usize>,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.inner.stopped.get() {
            return Poll::Ready(());
        }
        let mut wakers = self.inner.wakers.borrow_mut();
        match self.slot {
            Some(i) => match &mut wakers[i] {
                Some(w) if w.will_wake(cx.waker()) => {}
                w => *w = Some(cx.waker().clone()),
            },
            None => {
                let i = self.inner.free.borrow_mut().pop().unwrap_or_else(|| {
                    wakers.push(None);
                    wakers.len() - 1
                });
                wakers[i] = Some(cx.waker().clone());
                drop(wakers);
                self.slot = Some(i);
            }
        }
        Poll::Pending
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.inner.wakers.borrow_mut()[i] = None;
            self.inner.free.borrow_mut().push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn trigger_ends_waiting_tasks_and_reuses_slots() {
        let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        rt.block_on(async {
            let stop = StopSignal::new();
            // A completed race frees its slot.
            assert_eq!(stop.or_stop(async { 7 }).await, Some(7));
            let tasks: Vec<_> = (0..3)
                .map(|_| {
                    let stop = stop.clone();
                    monoio::spawn(async move {
                        stop.or_stop(monoio::time::sleep(Duration::from_secs(30)))
                            .await
                    })
                })
                .collect();
            monoio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(stop.inner.wakers.borrow().len(), 3);
            let t0 = Instant::now();
            stop.trigger();
            for t in tasks {
                assert_eq!(t.await, None);
            }
            assert!(t0.elapsed() < Duration::from_secs(1));
            assert!(stop.is_stopped());
            assert!(stop.inner.wakers.borrow().iter().all(Option::is_none));
            assert_eq!(stop.inner.free.borrow().len(), 3);
        });
    }
}
