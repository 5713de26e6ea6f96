//! A value the supervisor replaces at runtime and workers pick up (DESIGN.md "Configuration": reload on
//! SIGHUP). The supervisor alone writes: it swaps the `Arc` under a mutex, then bumps a generation number.
//! A worker compares that number (a plain load, no write) with the generation it runs on, and only when
//! they differ takes the mutex to clone the new `Arc`. The per-request path therefore reads one atomic
//! that changes only at a reload and never writes shared memory or takes a lock.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex,
};

/// The published value and its generation (starts at 1).
pub struct Published<T> {
    value: Mutex<Arc<T>>,
    generation: AtomicU64,
}

impl<T> Published<T> {
    /// Publishes `value` as generation 1.
    pub fn new(value: T) -> Self {
        Published {
            value: Mutex::new(Arc::new(value)),
            generation: AtomicU64::new(1),
        }
    }

    /// The current generation (a read-only load; cheap enough for every request).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current value and its generation (takes the mutex: call it when [`Self::generation`] moved,
    /// not per request).
    pub fn get(&self) -> (Arc<T>, u64) {
        let v = self
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Read under the lock: the supervisor bumps the generation while holding it, so the pair matches.
        (v.clone(), self.generation.load(Ordering::Acquire))
    }

    /// Replaces the value (supervisor only); returns the new generation.
    pub fn publish(&self, value: T) -> u64 {
        let mut v = self
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *v = Arc::new(value);
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_moves_the_generation_and_the_value_together() {
        let p = Published::new(1);
        assert_eq!(p.generation(), 1);
        assert_eq!(*p.get().0, 1);
        let old = p.get().0;
        assert_eq!(p.publish(2), 2);
        let (v, g) = p.get();
        assert_eq!((*v, g), (2, 2));
        assert_eq!(*old, 1, "holders of the old value keep it");
    }
}
