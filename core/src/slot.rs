//! Heap blocks that run one future at a time in place, and the per-worker free list they come from.
//!
//! A connection's request-serving future (read the head, proxy, answer: about 4.4 KiB, much of it monoio
//! timer entries, which are 128-byte aligned) is needed only while a request is in progress. Inlined in
//! the connection's task it would stay reserved, and after the first request resident, for as long as the
//! connection lives, idle or not. Instead a connection takes a [`Slot`] from its worker's free list when
//! a request starts, runs the request's future inside it ([`Slot::run`]), keeps the slot while requests
//! keep coming (the keep-alive fast path), and gives it back ([`give`]) when it goes idle. Steady
//! keep-alive traffic therefore allocates nothing per request, and an idle keep-alive connection holds
//! only its small waiting future (DESIGN.md "Benchmark method": RSS per idle connection).
//!
//! Soundness: a future placed in a slot is pinned there (the block never moves) and is dropped in place
//! by the [`InPlace`] that runs it before the slot can be used again. If an [`InPlace`] is leaked
//! (`mem::forget`), the slot stays marked busy: it is never reused and never freed, so the pinned future's
//! memory is never overwritten without its destructor running.

use std::{
    alloc::{self, Layout},
    cell::RefCell,
    future::Future,
    marker::PhantomData,
    pin::Pin,
    ptr::NonNull,
    task::{Context, Poll},
};

use crate::freelist::FreeList;

/// Slots a worker's free list always keeps.
const POOL_FLOOR: usize = 16;
/// Slots a worker's free list keeps at most; more are freed.
const POOL_MAX: usize = 4096;

/// A heap block of a fixed [`Layout`] that runs one future at a time.
pub struct Slot {
    ptr: NonNull<u8>,
    layout: Layout,
    /// A future lives in the block (its [`InPlace`] has not been dropped).
    busy: bool,
}

impl Slot {
    /// Allocates a block for futures of at most `layout` (a zero size is rounded up to one byte).
    pub fn new(layout: Layout) -> Slot {
        let layout = Layout::from_size_align(layout.size().max(1), layout.align())
            .expect("a valid layout stays valid with a non-zero size");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Slot {
            ptr,
            layout,
            busy: false,
        }
    }

    /// Whether a value of `layout` fits in this block.
    pub fn fits(&self, layout: Layout) -> bool {
        layout.size() <= self.layout.size() && layout.align() <= self.layout.align()
    }

    /// Runs `fut` inside this block: the returned future polls it in place and drops it in place when it
    /// completes or is itself dropped. A future that does not fit (or a slot still busy after a leaked
    /// [`InPlace`]) is boxed instead: correct, one allocation.
    pub fn run<F: Future>(&mut self, fut: F) -> InPlace<'_, F> {
        if self.busy || !self.fits(Layout::new::<F>()) {
            return InPlace {
                state: State::Boxed(Box::pin(fut)),
            };
        }
        let p = self.ptr.cast::<F>();
        // SAFETY: the block is at least as large and as aligned as F (checked above) and holds no live
        // value (`busy` is false), so writing F there overwrites nothing that needs dropping.
        unsafe { p.as_ptr().write(fut) };
        self.busy = true;
        InPlace {
            state: State::InSlot {
                fut: p,
                live: true,
                busy: &mut self.busy,
                _owns: PhantomData,
            },
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.busy {
            return; // a leaked InPlace: its future stays pinned in this block for good
        }
        // SAFETY: allocated in `new` with this layout, and no value lives in it.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A future running inside a [`Slot`] (or boxed, when it did not fit).
pub struct InPlace<'a, F: Future> {
    state: State<'a, F>,
}

enum State<'a, F: Future> {
    InSlot {
        fut: NonNull<F>,
        /// `fut` has not been dropped yet.
        live: bool,
        busy: &'a mut bool,
        _owns: PhantomData<F>,
    },
    Boxed(Pin<Box<F>>),
}

// InPlace never holds F itself, only a pointer into the slot's block or a box, so moving it moves no F.
impl<F: Future> Unpin for InPlace<'_, F> {}

impl<F: Future> Future for InPlace<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match &mut self.get_mut().state {
            State::Boxed(f) => f.as_mut().poll(cx),
            State::InSlot { fut, live, .. } => {
                assert!(*live, "InPlace polled after completion");
                // SAFETY: `fut` points to a live F in the slot's block; the block never moves while this
                // InPlace borrows the slot, and F is dropped in place (below or in Drop) before the
                // borrow ends, so F stays pinned for its whole life.
                let res = unsafe { Pin::new_unchecked(&mut *fut.as_ptr()) }.poll(cx);
                if res.is_ready() {
                    *live = false;
                    // SAFETY: F is live (checked above) and is never used again (`live` is false).
                    unsafe { fut.as_ptr().drop_in_place() };
                }
                res
            }
        }
    }
}

impl<F: Future> Drop for InPlace<'_, F> {
    fn drop(&mut self) {
        if let State::InSlot {
            fut, live, busy, ..
        } = &mut self.state
        {
            if *live {
                *live = false;
                // SAFETY: F is live and is never used again.
                unsafe { fut.as_ptr().drop_in_place() };
            }
            // Only after F is gone: a panic in F's destructor leaves the slot busy (leaked, not reused).
            **busy = false;
        }
    }
}

thread_local! {
    /// This worker's free slots (`crate::freelist`: grows to the peak in use, trimmed every few seconds).
    static POOL: RefCell<FreeList<Slot>> = const { RefCell::new(FreeList::new()) };
}

/// Takes a slot that fits `layout` from this thread's free list, or allocates one.
pub fn take(layout: Layout) -> Slot {
    let reused = POOL.with(|p| p.borrow_mut().pop());
    match reused {
        Some(s) if s.fits(layout) => s,
        _ => Slot::new(layout),
    }
}

/// Runs `fut` in `held`'s slot, first taking one that fits from this thread's free list when `held` is
/// empty. (Takes the future by value so a caller's `async fn` does not keep a moved-out copy of it in its
/// own state: `run_in(&mut held, make_future()).await`.)
pub fn run_in<F: Future>(held: &mut Option<Slot>, fut: F) -> InPlace<'_, F> {
    held.get_or_insert_with(|| take(Layout::new::<F>()))
        .run(fut)
}

/// The slot a connection holds, if any, given back to this thread's free list when dropped (also
/// when the future holding it is dropped mid-request). Run futures in it with
/// `run_in(&mut held.0, fut)`.
#[derive(Default)]
pub struct Held(pub Option<Slot>);

impl Held {
    /// Gives the slot, if any, back to this thread's free list.
    pub fn release(&mut self) {
        if let Some(s) = self.0.take() {
            give(s);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

/// Returns a slot to this thread's free list (a busy one, or one over the list's cap, is dropped).
pub fn give(s: Slot) {
    if !s.busy {
        POOL.with(|p| p.borrow_mut().push(s, POOL_MAX));
    }
}

/// Frees the slots of this thread's free list that stayed unused since the previous call, keeping at
/// least `POOL_FLOOR`. Returns how many remain.
pub fn trim() -> usize {
    POOL.with(|p| p.borrow_mut().trim(POOL_FLOOR))
}

/// Like [`trim`], keeping no floor: for a worker with no connection open (its next request takes a
/// fresh slot). Returns how many remain.
pub fn trim_idle() -> usize {
    POOL.with(|p| p.borrow_mut().trim(0))
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, rc::Rc, task::Waker};

    use super::*;

    /// Counts drops of the value it holds.
    struct Tracked(Rc<Cell<u32>>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    /// A future that is pending once, then returns its value.
    fn yield_once<T>(v: T, drops: Tracked) -> impl Future<Output = T> {
        let mut first = true;
        let mut v = Some(v);
        std::future::poll_fn(move |cx| {
            let _keep = &drops;
            if std::mem::take(&mut first) {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(v.take().expect("polled once more"))
            }
        })
    }

    #[test]
    fn runs_in_place_and_drops_on_completion() {
        let drops = Rc::new(Cell::new(0));
        let mut slot = Slot::new(Layout::new::<[u64; 64]>());
        let fut = yield_once(7, Tracked(drops.clone()));
        let mut run = std::pin::pin!(slot.run(fut));
        assert!(matches!(run.as_mut().state, State::InSlot { .. }));
        assert_eq!(poll_once(run.as_mut()), Poll::Pending);
        assert_eq!(drops.get(), 0);
        assert_eq!(poll_once(run.as_mut()), Poll::Ready(7));
        assert_eq!(drops.get(), 1, "dropped as soon as it completed");
    }

    #[test]
    fn dropping_a_pending_run_drops_the_future_and_frees_the_slot() {
        let drops = Rc::new(Cell::new(0));
        let mut slot = Slot::new(Layout::new::<[u64; 64]>());
        {
            let mut run = std::pin::pin!(slot.run(yield_once(1, Tracked(drops.clone()))));
            assert_eq!(poll_once(run.as_mut()), Poll::Pending);
        }
        assert_eq!(drops.get(), 1);
        assert!(!slot.busy);
        // The slot is reused in place for the next future.
        let mut run = std::pin::pin!(slot.run(yield_once(2, Tracked(drops.clone()))));
        assert!(matches!(run.as_mut().state, State::InSlot { .. }));
    }

    #[test]
    fn a_future_too_large_or_too_aligned_is_boxed() {
        let mut slot = Slot::new(Layout::new::<u64>());
        let big = async {
            let a = [1u8; 256];
            std::future::ready(()).await;
            a[255]
        };
        let mut run = std::pin::pin!(slot.run(big));
        assert!(matches!(run.as_mut().state, State::Boxed(_)));
        assert_eq!(poll_once(run.as_mut()), Poll::Ready(1));
    }

    #[test]
    fn a_leaked_run_leaves_the_slot_busy_and_later_runs_boxed() {
        let drops = Rc::new(Cell::new(0));
        let mut slot = Slot::new(Layout::new::<[u64; 64]>());
        std::mem::forget(slot.run(yield_once(1, Tracked(drops.clone()))));
        assert!(slot.busy);
        {
            let mut run = std::pin::pin!(slot.run(async { 3 }));
            assert!(matches!(run.as_mut().state, State::Boxed(_)));
            assert_eq!(poll_once(run.as_mut()), Poll::Ready(3));
        }
        // The leaked future is never dropped, and the busy slot is never freed or pooled.
        give(slot);
        assert_eq!(drops.get(), 0);
    }

    #[test]
    fn pool_recycles_and_trims() {
        let layout = Layout::new::<[u64; 8]>();
        let slots: Vec<Slot> = (0..40).map(|_| take(layout)).collect();
        let first = slots[0].ptr;
        for s in slots {
            give(s);
        }
        // LIFO: the last given is the next taken.
        let again = take(layout);
        assert_ne!(again.ptr, first);
        give(again);
        // A larger layout than the pooled slots is allocated fresh.
        let big = take(Layout::new::<[u64; 16]>());
        assert!(big.fits(Layout::new::<[u64; 16]>()));
        // Nothing taken since: the next trims free all but the floor.
        trim();
        assert_eq!(trim(), POOL_FLOOR);
        // A worker with no connection open keeps none.
        assert_eq!(trim_idle(), 0);
    }
}
