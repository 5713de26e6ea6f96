//! Resident memory of a proxy while a run goes on: the sum of `VmRSS` over the proxy's processes
//! (nginx: master + worker), read from `/proc/PID/status` every interval on a thread of its own,
//! keeping the peak and the series.

use std::fs;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::support::procfs::status_kib;

/// The sum of `VmRSS` of `pids`, KiB; `None` when none of them could be read.
pub fn rss_kib(pids: &[u32]) -> Option<u64> {
    let read: Vec<u64> = pids
        .iter()
        .filter_map(|p| {
            let text = fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            status_kib(&text, "VmRSS")
        })
        .collect();
    (!read.is_empty()).then(|| read.iter().sum())
}

/// What a sampler saw.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RssSeries {
    /// The highest sum read, KiB.
    pub peak_kib: u64,
    /// When it was read, seconds after the sampler started.
    pub peak_at_s: f64,
    /// Every reading: (seconds after the start, KiB).
    pub samples: Vec<(f64, u64)>,
}

impl RssSeries {
    /// Adds one reading.
    fn push(&mut self, at: f64, kib: u64) {
        if kib > self.peak_kib {
            self.peak_kib = kib;
            self.peak_at_s = at;
        }
        self.samples.push((at, kib));
    }
}

/// A thread reading the RSS of a fixed set of pids every interval until [`finish`](Self::finish).
#[derive(Debug)]
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<RssSeries>,
}

impl RssSampler {
    /// Starts sampling `pids` every `every` (the first reading at once).
    ///
    /// # Errors
    /// Thread spawn failures.
    pub fn start(pids: Vec<u32>, every: Duration) -> io::Result<RssSampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                let t0 = Instant::now();
                let mut series = RssSeries::default();
                let mut next = t0;
                while !flag.load(Ordering::Relaxed) {
                    if let Some(kib) = rss_kib(&pids) {
                        series.push(t0.elapsed().as_secs_f64(), kib);
                    }
                    next += every;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
                series
            })?;
        Ok(RssSampler { stop, handle })
    }

    /// Stops the thread and returns what it saw.
    pub fn finish(self) -> RssSeries {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_rss_is_sampled() {
        let me = std::process::id();
        assert!(rss_kib(&[me]).unwrap() > 0);
        assert_eq!(rss_kib(&[]), None);
        let s = RssSampler::start(vec![me], Duration::from_millis(10)).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let series = s.finish();
        assert!(series.samples.len() >= 2, "{series:?}");
        assert!(series.peak_kib >= series.samples[0].1);
    }
}
