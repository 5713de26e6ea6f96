//! A counting global allocator for the allocation check (`edge-bench alloc`: no allocation per request) (bench mode only, cargo
//! feature `count-alloc`): every allocation and reallocation on a thread bumps that thread's counter, and
//! each worker publishes its own as `edge_worker_allocations_total{worker}` on its heartbeat. Dividing the
//! growth of that counter by the requests served over a steady-state run gives allocations per request
//! on edge's own path (`edge-bench alloc`).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static REALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting calls per thread.
pub struct Counting;

fn count() {
    // `try_with`: the thread-local may be gone while a thread exits; those allocations are not counted.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded unchanged to `System`; counting touches only a thread-local `Cell`
// with a const initialiser and no destructor (it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        let _ = REALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (including reallocations) made so far by the calling thread.
pub fn thread_allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Of [`thread_allocations`], how many were reallocations (a growing `Vec`).
pub fn thread_reallocations() -> u64 {
    REALLOCATIONS.with(Cell::get)
}
