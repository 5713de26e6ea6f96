//! The per-worker free list shape shared by the IO buffer pools (`buf`) and the request slot pool
//! (`slot`): it grows to the worker's peak number of items in use, so steady traffic at any concurrency
//! recycles instead of allocating, and [`FreeList::trim`] frees what a quiet period did not need.

/// Free items of one kind, with the low-water mark that [`FreeList::trim`] reads.
pub(crate) struct FreeList<T> {
    free: Vec<T>,
    /// Shortest length of `free` since the last trim: that many items were never needed.
    low_water: usize,
}

impl<T> FreeList<T> {
    pub(crate) const fn new() -> Self {
        FreeList {
            free: Vec::new(),
            low_water: 0,
        }
    }

    /// The most recently returned item.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let item = self.free.pop();
        self.low_water = self.low_water.min(self.free.len());
        item
    }

    /// Keeps `item` unless `max` are kept already (then it is dropped).
    pub(crate) fn push(&mut self, item: T, max: usize) {
        if self.free.len() < max {
            self.free.push(item);
        }
    }

    /// Drops the items that stayed free since the previous call, keeping at least `floor`. Returns how
    /// many remain.
    pub(crate) fn trim(&mut self, floor: usize) -> usize {
        let len = self.free.len();
        let surplus = self.low_water.min(len.saturating_sub(floor));
        let kept = len - surplus;
        self.free.truncate(kept);
        self.free.shrink_to(kept.max(floor));
        self.low_water = kept;
        kept
    }
}
