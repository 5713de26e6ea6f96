//! The results of `edge-bench slow-readers` (sans-IO): one row per target, the memory targets of
//! DESIGN.md "Memory under slow readers and large bodies" (reported, not asserted), the table and
//! the JSON document written under `bench/results/`.

use serde::Serialize;

use super::readers::ReadersOutcome;
use super::sampler::RssSeries;
use crate::support::table::{bytes, Table};

/// Growth per slow reader edge aims at, bytes (one relay buffer's worth).
pub const GROWTH_GOAL: i64 = 64 * 1024;

/// How far above its baseline a proxy's RSS may be once the clients are gone, percent.
pub const AFTER_SLACK_PERCENT: u64 = 10;

/// One target's run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlowRow {
    /// Target name (`edge-io_uring`, `edge-epoll`, `nginx`, `haproxy`).
    pub target: String,
    /// Whether it is an edge build (its lost bodies fail the run).
    pub is_edge: bool,
    /// Sum of VmRSS of the proxy's processes after start, before any client, KiB.
    pub baseline_kib: u64,
    /// The sampled series during the run, with its peak.
    pub rss: RssSeries,
    /// `(peak − baseline) / clients`, bytes.
    pub growth_per_reader: i64,
    /// RSS once every client has ended and the settle time passed, KiB.
    pub after_kib: u64,
    /// Whether `after_kib` is within [`AFTER_SLACK_PERCENT`] of the baseline.
    pub after_within_slack: bool,
    /// What the clients saw.
    pub readers: ReadersOutcome,
}

impl SlowRow {
    /// The row of one run; the derived figures computed here.
    pub fn new(
        target: &str,
        is_edge: bool,
        baseline_kib: u64,
        rss: RssSeries,
        after_kib: u64,
        readers: ReadersOutcome,
    ) -> SlowRow {
        let peak = rss.peak_kib.max(baseline_kib);
        SlowRow {
            target: target.to_string(),
            is_edge,
            baseline_kib,
            growth_per_reader: growth_per_reader(baseline_kib, peak, readers.clients),
            after_kib,
            after_within_slack: after_kib * 100 <= baseline_kib * (100 + AFTER_SLACK_PERCENT),
            rss,
            readers,
        }
    }

    /// Whether an edge target lost a body (the run's invariant).
    pub fn edge_lost_body(&self) -> bool {
        self.is_edge && !self.readers.all_complete()
    }
}

/// `(peak − baseline) / clients` in bytes from KiB readings (0 for no clients).
pub fn growth_per_reader(baseline_kib: u64, peak_kib: u64, clients: usize) -> i64 {
    if clients == 0 {
        return 0;
    }
    (peak_kib as i64 - baseline_kib as i64) * 1024 / clients as i64
}

/// The table: one row per target.
pub fn slow_table(rows: &[SlowRow]) -> Table {
    let mut t = Table::new(&[
        "target",
        "complete",
        "truncated",
        "failed",
        "RSS baseline",
        "RSS peak",
        "per reader",
        "RSS after",
        "after ≤ +10 %",
        "duration",
    ]);
    let kib = |v: u64| bytes((v * 1024) as i64);
    for r in rows {
        let n = r.readers.clients;
        t.row([
            r.target.clone(),
            format!("{}/{n}", r.readers.complete),
            r.readers.truncated.to_string(),
            r.readers.failed.to_string(),
            kib(r.baseline_kib),
            kib(r.rss.peak_kib.max(r.baseline_kib)),
            bytes(r.growth_per_reader),
            kib(r.after_kib),
            if r.after_within_slack { "yes" } else { "no" }.to_string(),
            format!("{:.1} s", r.readers.total_s),
        ]);
    }
    t
}

/// One line per edge target on the memory targets: growth per reader at most HAProxy's in the same
/// run and at most [`GROWTH_GOAL`].
pub fn memory_targets(rows: &[SlowRow]) -> Vec<String> {
    let haproxy = rows.iter().find(|r| r.target == "haproxy");
    rows.iter()
        .filter(|r| r.is_edge)
        .map(|r| {
            let g = r.growth_per_reader;
            let yes = |ok: bool| if ok { "met" } else { "missed" };
            let vs_haproxy = haproxy.map_or("no HAProxy row".to_string(), |h| {
                format!(
                    "≤ HAProxy's {}: {}",
                    bytes(h.growth_per_reader),
                    yes(g <= h.growth_per_reader)
                )
            });
            format!(
                "{}: {} per reader; ≤ {}: {}; {vs_haproxy}",
                r.target,
                bytes(g),
                bytes(GROWTH_GOAL),
                yes(g <= GROWTH_GOAL)
            )
        })
        .collect()
}

/// Where and how the run was made.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlowRun {
    /// `edge-bench slow-readers`.
    pub tool: String,
    /// UTC date, `YYYY-MM-DD`.
    pub date: String,
    /// Short commit of the working tree (`-dirty` when it has changes).
    pub commit: String,
    /// CPU model, CPU count and memory.
    pub machine: String,
    /// `uname -r`.
    pub kernel: String,
    /// Versions of what ran.
    pub versions: Vec<(String, String)>,
    /// CPU placement, in words.
    pub placement: String,
    /// The origin, in words.
    pub origin: String,
    /// The clients and the proxies' settings, in words.
    pub settings: String,
    /// The command line.
    pub command: String,
}

/// The JSON document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlowReport {
    /// Where and how.
    pub run: SlowRun,
    /// One row per target that ran.
    pub rows: Vec<SlowRow>,
    /// The memory-target lines (reported, not asserted).
    pub memory_targets: Vec<String>,
    /// Targets that did not run or did not finish, with the reason.
    pub failures: Vec<String>,
}

impl SlowReport {
    /// Pretty JSON.
    ///
    /// # Panics
    /// Never: every field serialises.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, is_edge: bool, peak_kib: u64, complete: usize) -> SlowRow {
        let rss = RssSeries {
            peak_kib,
            peak_at_s: 1.0,
            samples: vec![(0.0, 1000), (1.0, peak_kib)],
        };
        let readers = ReadersOutcome {
            clients: 100,
            complete,
            truncated: 100 - complete,
            ..ReadersOutcome::default()
        };
        SlowRow::new(target, is_edge, 1000, rss, 1050, readers)
    }

    #[test]
    fn growth_and_slack() {
        assert_eq!(growth_per_reader(1000, 1100, 100), 1024);
        assert_eq!(growth_per_reader(1000, 900, 100), -1024);
        assert_eq!(growth_per_reader(1, 2, 0), 0);
        let r = row("edge-epoll", true, 1000 + 100 * 32, 100);
        assert_eq!(r.growth_per_reader, 32 * 1024);
        assert!(r.after_within_slack && !r.edge_lost_body());
        assert!(row("edge-epoll", true, 2000, 99).edge_lost_body());
        assert!(!row("nginx", false, 2000, 0).edge_lost_body());
    }

    #[test]
    fn targets_compare_with_haproxy() {
        let rows = [
            row("edge-epoll", true, 1000 + 100 * 32, 100),
            row("haproxy", false, 1000 + 100 * 16, 100),
        ];
        let lines = memory_targets(&rows);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("≤ 64.0 KiB: met"), "{}", lines[0]);
        assert!(
            lines[0].contains("HAProxy's 16.0 KiB: missed"),
            "{}",
            lines[0]
        );
        let t = slow_table(&rows).render();
        assert!(t.contains("100/100") && t.contains("32.0 KiB"), "{t}");
    }
}
