//! The per-worker free list shape shared by the IO buffer pools (`buf`), the request slot pool
//! (`slot`) and the frontend's spare request vectors: it grows to the worker's peak number of items in
//! use, so steady traffic at any concurrency recycles instead of allocating, and [`FreeList::trim`]
//! frees what a quiet period did not need.

/// Free items of one kind, with the low-water mark that [`FreeList::trim`] reads.
pub struct FreeList<T> {
    free: Vec<T>,
    /// Shortest length of `free` since the last trim: that many items were never needed.
    low_water: usize,
}

impl<T> Default for FreeList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> FreeList<T> {
    /// An empty list (no allocation until the first push).
    pub const fn new() -> Self {
        FreeList {
            free: Vec::new(),
            low_water: 0,
        }
    }

    /// The most recently returned item.
    pub fn pop(&mut self) -> Option<T> {
        let item = self.free.pop();
        self.low_water = self.low_water.min(self.free.len());
        item
    }

    /// Keeps `item` unless `max` are kept already (then it is dropped).
    pub fn push(&mut self, item: T, max: usize) {
        if self.free.len() < max {
            self.free.push(item);
        }
    }

    /// Drops the items that stayed free since the previous call, keeping at least `floor`. Returns how
    /// many remain.
    pub fn trim(&mut self, floor: usize) -> usize {
        let len = self.free.len();
        let surplus = self.low_water.min(len.saturating_sub(floor));
        let kept = len - surplus;
        self.free.truncate(kept);
        self.free.shrink_to(kept.max(floor));
        self.low_water = kept;
        kept
    }
}
