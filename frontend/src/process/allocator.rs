//! The worker's word to the `edge` binary's allocator (jemalloc, bench/README.md "Allocator").

/// Gives back what a quiet worker's allocator keeps for it: jemalloc's thread cache holds freed
/// objects for the thread's next allocations and returns them to their slabs only as the thread
/// allocates again, which a worker with no connection open does not, so the pages of those slabs stay
/// resident (`thread.tcache.flush`); then every arena's unused dirty pages go back to the kernel
/// (`arena.<all>.purge`). Called with the worker's idle trim (`process/worker.rs` `sweep_pools`);
/// costs a few microseconds, never per request. Does nothing in the `count-alloc` build, whose
/// allocator is the system's.
pub fn release_cached() {
    #[cfg(not(feature = "count-alloc"))]
    {
        // `MALLCTL_ARENAS_ALL` (4096) names every arena.
        for name in [c"thread.tcache.flush", c"arena.4096.purge"] {
            // SAFETY: both names are void controls: no old or new value is read or written.
            unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                );
            }
        }
    }
}
