//! The per-worker rate limit on warn-level drop logs (DESIGN.md "Status codes": warn-level drop logs
//! are rate-limited per worker, a summary line carries the suppressed count).

use std::cell::Cell;

/// A per-worker limit on warn-level drop logs: at most `PER_SECOND` lines a second; the first line of the
/// next second carries a summary of how many were suppressed.
#[derive(Default)]
pub struct LogLimit {
    worker: usize,
    window: Cell<u64>,
    count: Cell<u32>,
    suppressed: Cell<u64>,
}

impl LogLimit {
    const PER_SECOND: u32 = 20;

    /// A limiter for worker `worker`'s warn lines.
    pub fn new(worker: usize) -> Self {
        LogLimit {
            worker,
            ..Default::default()
        }
    }

    /// Whether a warn line may be written now.
    pub fn allow(&self) -> bool {
        self.roll(coarse_secs());
        let c = self.count.get() + 1;
        self.count.set(c);
        if c > Self::PER_SECOND {
            self.suppressed.set(self.suppressed.get() + 1);
            false
        } else {
            true
        }
    }

    /// Writes the summary of a finished window that suppressed lines; called from the worker's timer so
    /// the summary appears even when no further warn line follows.
    pub fn flush(&self) {
        if self.suppressed.get() > 0 {
            self.roll(coarse_secs());
        }
    }

    fn roll(&self, sec: u64) {
        if sec == self.window.get() {
            return;
        }
        self.window.set(sec);
        self.count.set(0);
        let s = self.suppressed.replace(0);
        if s > 0 {
            tracing::warn!(
                event = "log.suppressed",
                worker = self.worker,
                suppressed = s,
                "warn-level drop logs were rate-limited"
            );
        }
    }
}

fn coarse_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
