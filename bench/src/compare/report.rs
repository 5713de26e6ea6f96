//! Results of `edge-bench compare`: one [`Sample`] per (workload, round, target), the per-target
//! medians, the ratios (edge against the others; every target against nginx), the merged latency
//! percentiles for the CDF plot, and the tables that print them. Functions that summarise take
//! the samples of one workload.
//!
//! Rules (DESIGN.md, Benchmark method): a proxy round whose proxy used under
//! [`LOAD_BOUND_UTIL`] of one CPU over the run is *load-bound*: shown, but left out of that
//! target's medians and of the ratios. `direct` has no proxy, so all its rounds count. When every
//! round of a target is load-bound its medians are taken over all rounds and marked `*`, so the
//! table still shows what was measured. Ratios are `edge / other`: above 1 for req/s means edge
//! served more, below 1 for CPU/request means edge spent less.

use std::time::Duration;

use crate::compare::target::TargetKind;
use crate::compare::workload::Workload;
use crate::compare::wrk::WrkResult;

/// Under this share of one CPU, a proxy round is load-bound.
pub const LOAD_BOUND_UTIL: f64 = 0.85;

/// One measured run of one target.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Which workload.
    pub workload: Workload,
    /// Round number, from 1.
    pub round: usize,
    /// Which target.
    pub kind: TargetKind,
    /// What wrk reported.
    pub wrk: WrkResult,
    /// Wall time around the wrk process.
    pub wall: Duration,
    /// CPU time the proxy (all threads, plus nginx's worker) used over the run; `None` for direct.
    pub cpu: Option<Duration>,
    /// Time the proxy's threads were runnable but waiting for a CPU over the run.
    pub wait: Option<Duration>,
    /// Peak RSS over the run (VmHWM, reset before it; nginx: master + worker), KiB.
    pub rss_kib: Option<u64>,
    /// The HTTP/2-upstream workloads: the most ESTABLISHED connections to the origin seen during
    /// the run (see [`super::h2_upstream`]).
    pub upstream_conns: Option<u64>,
    /// The share of one CPU the proxy's CPU quota allowed (`--proxy-cpu-quota`); `None`: no quota.
    pub cpu_quota: Option<f64>,
    /// Time the quota held the proxy off its CPU over the run.
    pub throttled: Option<Duration>,
}

impl Sample {
    /// Proxy CPU time over wall time (1.0 = one CPU busy all the run).
    pub fn utilisation(&self) -> Option<f64> {
        let wall = self.wall.as_secs_f64();
        self.cpu
            .filter(|_| wall > 0.0)
            .map(|c| c.as_secs_f64() / wall)
    }

    /// Proxy run-queue wait over wall time: the share of the run its CPU was taken by others.
    pub fn wait_share(&self) -> Option<f64> {
        let wall = self.wall.as_secs_f64();
        self.wait
            .filter(|_| wall > 0.0)
            .map(|w| w.as_secs_f64() / wall)
    }

    /// Proxy CPU microseconds per completed request.
    pub fn cpu_us_per_req(&self) -> Option<f64> {
        self.cpu
            .filter(|_| self.wrk.requests > 0)
            .map(|c| c.as_secs_f64() * 1e6 / self.wrk.requests as f64)
    }

    /// Proxy CPU seconds per 100 000 completed requests.
    pub fn cpu_s_per_100k(&self) -> Option<f64> {
        self.cpu_us_per_req().map(per_100k)
    }

    /// The CPU the proxy could use, in CPUs: its quota's share, else one CPU.
    pub fn cpu_allowance(&self) -> f64 {
        self.cpu_quota.unwrap_or(1.0)
    }

    /// A proxy round where the proxy was not the bottleneck: it used under [`LOAD_BOUND_UTIL`]
    /// of its [allowance](Self::cpu_allowance).
    pub fn load_bound(&self) -> bool {
        self.utilisation()
            .is_some_and(|u| u < LOAD_BOUND_UTIL * self.cpu_allowance())
    }

    /// The quota's throttled time over wall time: the share of the run it held the proxy off
    /// its CPU.
    pub fn throttled_share(&self) -> Option<f64> {
        let wall = self.wall.as_secs_f64();
        self.throttled
            .filter(|_| wall > 0.0)
            .map(|t| t.as_secs_f64() / wall)
    }

    /// Counts as a result: requests completed and not load-bound.
    pub fn counted(&self) -> bool {
        self.wrk.requests > 0 && !self.load_bound()
    }
}

/// Medians of one target over its counted rounds.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Which target.
    pub kind: TargetKind,
    /// Rounds run.
    pub rounds: usize,
    /// Load-bound rounds.
    pub load_bound: usize,
    /// Socket errors plus non-2xx answers over all rounds.
    pub errors: u64,
    /// No round counted; the medians are over all rounds.
    pub all_load_bound: bool,
    /// Median requests/s.
    pub req_per_sec: f64,
    /// Median of the rounds' p50.
    pub p50: Duration,
    /// Median of the rounds' p99.
    pub p99: Duration,
    /// Median of the rounds' p99.9 (wrk script report).
    pub p999: Option<Duration>,
    /// Median proxy CPU µs per request.
    pub cpu_us_per_req: Option<f64>,
    /// Median proxy CPU utilisation.
    pub utilisation: Option<f64>,
    /// Median run-queue wait share.
    pub wait_share: Option<f64>,
    /// Median peak RSS, KiB.
    pub rss_kib: Option<f64>,
}

impl Summary {
    /// Median proxy CPU seconds per 100 000 requests.
    pub fn cpu_s_per_100k(&self) -> Option<f64> {
        self.cpu_us_per_req.map(per_100k)
    }
}

/// CPU µs per request as CPU seconds per 100 000 requests.
pub fn per_100k(us_per_req: f64) -> f64 {
    us_per_req * 100_000.0 / 1e6
}

/// The samples of one workload.
pub fn of_workload(samples: &[Sample], w: Workload) -> Vec<Sample> {
    samples
        .iter()
        .filter(|s| s.workload == w)
        .cloned()
        .collect()
}

/// The median of `v` (mean of the middle two for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// The samples of `kind` that count (all of them when none does).
fn used(samples: &[Sample], kind: TargetKind) -> (Vec<&Sample>, bool) {
    let all: Vec<&Sample> = samples.iter().filter(|s| s.kind == kind).collect();
    let counted: Vec<&Sample> = all.iter().copied().filter(|s| s.counted()).collect();
    if counted.is_empty() {
        (all, true)
    } else {
        (counted, false)
    }
}

/// The summary of `kind`, or `None` when it has no samples.
pub fn summarize(samples: &[Sample], kind: TargetKind) -> Option<Summary> {
    let all: Vec<&Sample> = samples.iter().filter(|s| s.kind == kind).collect();
    if all.is_empty() {
        return None;
    }
    let (used, all_load_bound) = used(samples, kind);
    let med = |f: &dyn Fn(&Sample) -> Option<f64>| {
        median(&used.iter().filter_map(|s| f(s)).collect::<Vec<_>>())
    };
    let secs = |v: Option<f64>| Duration::from_secs_f64(v.unwrap_or(0.0).max(0.0));
    Some(Summary {
        kind,
        rounds: all.len(),
        load_bound: all.iter().filter(|s| s.load_bound()).count(),
        errors: all.iter().map(|s| s.wrk.errors()).sum(),
        all_load_bound,
        req_per_sec: med(&|s| Some(s.wrk.req_per_sec)).unwrap_or(0.0),
        p50: secs(med(&|s| Some(s.wrk.p50.as_secs_f64()))),
        p99: secs(med(&|s| Some(s.wrk.p99.as_secs_f64()))),
        p999: med(&|s| s.wrk.p999().map(|d| d.as_secs_f64())).map(|v| secs(Some(v))),
        cpu_us_per_req: med(&|s| s.cpu_us_per_req()),
        utilisation: med(&|s| s.utilisation()),
        wait_share: med(&|s| s.wait_share()),
        rss_kib: med(&|s| s.rss_kib.map(|k| k as f64)),
    })
}

/// `a / b`, when both are there and `b` is positive.
fn quotient(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    }
}

/// One target's medians over nginx's, in one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct VsNginx {
    /// The target.
    pub kind: TargetKind,
    /// req/s over nginx's (above 1: more).
    pub req_per_sec: Option<f64>,
    /// p99 over nginx's (below 1: faster).
    pub p99: Option<f64>,
    /// CPU per request over nginx's (below 1: cheaper).
    pub cpu: Option<f64>,
    /// Peak RSS over nginx's.
    pub rss: Option<f64>,
}

/// Every target's medians over nginx's (nginx itself is 1x); empty without nginx samples.
pub fn vs_nginx(samples: &[Sample], kinds: &[TargetKind]) -> Vec<VsNginx> {
    let Some(n) = summarize(samples, TargetKind::Nginx) else {
        return Vec::new();
    };
    kinds
        .iter()
        .filter_map(|&k| summarize(samples, k))
        .map(|s| VsNginx {
            kind: s.kind,
            req_per_sec: quotient(Some(s.req_per_sec), Some(n.req_per_sec)),
            p99: quotient(Some(s.p99.as_secs_f64()), Some(n.p99.as_secs_f64())),
            cpu: quotient(s.cpu_us_per_req, n.cpu_us_per_req),
            rss: quotient(s.rss_kib, n.rss_kib),
        })
        .collect()
}

/// The latency percentiles of several runs merged into one curve: for every percentile that
/// all runs report, the median of their latencies at it (ascending by percentile). Used for the
/// CDF plot; the rounds of a target are merged this way, not their raw requests (wrk does not
/// export its histogram).
pub fn merge_percentiles(runs: &[&[(f64, Duration)]]) -> Vec<(f64, Duration)> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let mut out: Vec<(f64, Duration)> = first
        .iter()
        .filter_map(|&(p, _)| {
            let at: Vec<f64> = runs
                .iter()
                .map(|r| r.iter().find(|(q, _)| (q - p).abs() < 1e-9).map(|x| x.1))
                .collect::<Option<Vec<Duration>>>()?
                .iter()
                .map(Duration::as_secs_f64)
                .collect();
            Some((p, Duration::from_secs_f64(median(&at)?)))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The CDF of `kind` in one workload: its counted rounds' percentiles, merged.
pub fn cdf(samples: &[Sample], kind: TargetKind) -> Vec<(f64, Duration)> {
    let (used, _) = used(samples, kind);
    let runs: Vec<&[(f64, Duration)]> = used
        .iter()
        .map(|s| s.wrk.percentiles.as_slice())
        .filter(|p| !p.is_empty())
        .collect();
    merge_percentiles(&runs)
}

/// edge against one other target.
#[derive(Debug, Clone)]
pub struct Ratio {
    /// The edge target.
    pub edge: TargetKind,
    /// The target compared with.
    pub other: TargetKind,
    /// Median req/s of edge over median req/s of the other.
    pub req_per_sec: f64,
    /// Median over rounds (both counted) of the same-round req/s ratio.
    pub per_round: Option<f64>,
    /// Median CPU µs/request of edge over the other's (proxies only).
    pub cpu_per_req: Option<f64>,
    /// The same-round CPU µs/request ratios (rounds where both were counted): their median and their
    /// range, the figure to quote for a noisy machine (DESIGN.md "Benchmark method": ratios from one
    /// run; a round's two targets ran minutes apart at most).
    pub cpu_per_round: Option<RoundRatios>,
    /// Either side's medians come from load-bound rounds only.
    pub load_bound: bool,
}

/// Same-round ratios of one pair of targets: median, lowest and highest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundRatios {
    /// Median over the rounds.
    pub median: f64,
    /// Lowest round.
    pub min: f64,
    /// Highest round.
    pub max: f64,
}

impl RoundRatios {
    /// `None` for no rounds.
    fn of(ratios: &[f64]) -> Option<Self> {
        Some(RoundRatios {
            median: median(ratios)?,
            min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// `f(edge) / f(other)` for every round where both targets were counted and both values exist.
fn same_round(
    samples: &[Sample],
    edge: TargetKind,
    other: TargetKind,
    f: impl Fn(&Sample) -> Option<f64>,
) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.kind == edge && s.counted())
        .filter_map(|s| {
            let o = samples
                .iter()
                .find(|x| x.kind == other && x.round == s.round && x.counted())?;
            let (a, b) = (f(s)?, f(o)?);
            (b > 0.0).then(|| a / b)
        })
        .collect()
}

/// The targets an edge target is compared with: every non-edge target, and for an edge build its
/// baseline build on the same driver (the A/B of `--baseline-edge-bin`).
fn compared_with(edge: TargetKind, other: TargetKind) -> bool {
    !other.is_edge()
        || (!edge.is_baseline() && other.is_baseline() && edge.edge_driver() == other.edge_driver())
}

/// Ratios of every edge target against every non-edge target present, and of each edge build against
/// its baseline build on the same driver ([`compared_with`]).
pub fn ratios(samples: &[Sample], kinds: &[TargetKind]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for &e in kinds.iter().filter(|k| k.is_edge()) {
        let Some(es) = summarize(samples, e) else {
            continue;
        };
        for &o in kinds.iter().filter(|&&o| compared_with(e, o)) {
            let Some(os) = summarize(samples, o) else {
                continue;
            };
            let rps = same_round(samples, e, o, |s| Some(s.wrk.req_per_sec));
            let cpu = same_round(samples, e, o, Sample::cpu_us_per_req);
            let cpu_per_req = match (es.cpu_us_per_req, os.cpu_us_per_req) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            };
            out.push(Ratio {
                edge: e,
                other: o,
                req_per_sec: if os.req_per_sec > 0.0 {
                    es.req_per_sec / os.req_per_sec
                } else {
                    f64::NAN
                },
                per_round: median(&rps),
                cpu_per_req,
                cpu_per_round: RoundRatios::of(&cpu),
                load_bound: es.all_load_bound || os.all_load_bound,
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample(round: usize, kind: TargetKind, rps: f64, cpu_ms: Option<u64>) -> Sample {
        Sample {
            workload: Workload::Get64,
            round,
            kind,
            wrk: WrkResult {
                requests: (rps * 10.0) as u64,
                window: Duration::from_secs(10),
                req_per_sec: rps,
                p50: Duration::from_micros(1000),
                p99: Duration::from_micros(3000),
                socket_errors: 0,
                socket_detail: String::new(),
                non_2xx: 0,
                percentiles: vec![
                    (50.0, Duration::from_micros(1000)),
                    (99.9, Duration::from_micros(5000)),
                ],
                max: None,
                protocol: None,
            },
            wall: Duration::from_secs(10),
            cpu: cpu_ms.map(Duration::from_millis),
            wait: cpu_ms.map(|_| Duration::ZERO),
            rss_kib: cpu_ms.map(|_| 4096),
            upstream_conns: None,
            cpu_quota: None,
            throttled: None,
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    /// Under a CPU quota the bar is 85 % of the quota, not of one CPU.
    #[test]
    fn a_quota_sets_the_load_bound_bar() {
        let mut s = sample(1, TargetKind::EdgeUring, 20_000.0, Some(4_500)); // 45 % of one CPU
        assert!(s.load_bound());
        s.cpu_quota = Some(0.5);
        assert!(!s.load_bound() && s.counted());
        s.cpu = Some(Duration::from_millis(4_000)); // 40 %: under 85 % of 50 %
        assert!(s.load_bound());
        s.throttled = Some(Duration::from_secs(5));
        assert_eq!(s.throttled_share(), Some(0.5));
    }

    #[test]
    fn load_bound_rounds_are_left_out() {
        use TargetKind::*;
        let s = vec![
            sample(1, EdgeEpoll, 60_000.0, Some(9_900)),
            sample(1, Nginx, 50_000.0, Some(9_800)),
            sample(1, Direct, 120_000.0, None),
            sample(2, EdgeEpoll, 30_000.0, Some(5_000)), // 50 %: load-bound
            sample(2, Nginx, 40_000.0, Some(9_900)),
            sample(2, Direct, 100_000.0, None),
        ];
        assert!(s[3].load_bound() && !s[3].counted() && s[2].counted());
        assert!((s[0].utilisation().unwrap() - 0.99).abs() < 1e-9);
        let e = summarize(&s, EdgeEpoll).unwrap();
        assert_eq!((e.rounds, e.load_bound, e.all_load_bound), (2, 1, false));
        assert_eq!(e.req_per_sec, 60_000.0);
        assert!((e.cpu_us_per_req.unwrap() - 16.5).abs() < 1e-9);
        let n = summarize(&s, Nginx).unwrap();
        assert_eq!(n.req_per_sec, 45_000.0);
        let r = ratios(&s, &[EdgeEpoll, Nginx, Direct]);
        assert_eq!(r.len(), 2);
        assert!((r[0].req_per_sec - 60.0 / 45.0).abs() < 1e-9);
        assert!((r[0].per_round.unwrap() - 1.2).abs() < 1e-9);
        assert!(r[0].cpu_per_req.is_some() && r[1].cpu_per_req.is_none());
        assert!((r[1].req_per_sec - 60.0 / 110.0).abs() < 1e-9);
    }

    #[test]
    fn same_round_cpu_ratios_and_the_baseline_pair() {
        use TargetKind::*;
        // A counted round (9 s of CPU in 10 s) at `us` CPU µs per request.
        let at = |round, kind, us: f64| sample(round, kind, 900_000.0 / us, Some(9_000));
        // CPU µs per request of (edge-io_uring, baseline-io_uring, nginx) in rounds 1 to 4; nginx's
        // round 4 is the load-bound one below.
        let rounds = [
            (16.0, 20.0, Some(20.0)),
            (18.0, 18.0, Some(16.0)),
            (14.0, 14.0, Some(20.0)),
            (19.0, 19.0, None),
        ];
        let mut s: Vec<Sample> = (1..)
            .zip(rounds)
            .flat_map(|(round, (edge, base, nginx))| {
                let nginx = nginx.map(|us| at(round, Nginx, us));
                [at(round, EdgeUring, edge), at(round, BaselineUring, base)]
                    .into_iter()
                    .chain(nginx)
            })
            .collect();
        s.push(at(3, EdgeEpoll, 14.0));
        // nginx load-bound in round 4 (1 s of CPU in 10 s): that round leaves every nginx pair.
        s.push(sample(4, Nginx, 50_000.0, Some(1_000)));
        let r = ratios(&s, &[EdgeUring, BaselineUring, EdgeEpoll, Nginx]);
        let pair = |e, o| r.iter().find(|r| r.edge == e && r.other == o);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-3;
        let vs_nginx = pair(EdgeUring, Nginx).unwrap().cpu_per_round.unwrap();
        assert!(close(vs_nginx.median, 0.8), "{vs_nginx:?}");
        assert!(
            close(vs_nginx.min, 0.7) && close(vs_nginx.max, 1.125),
            "{vs_nginx:?}"
        );
        let ab = pair(EdgeUring, BaselineUring)
            .unwrap()
            .cpu_per_round
            .unwrap();
        assert!(
            close(ab.median, 1.0) && close(ab.min, 0.8) && close(ab.max, 1.0),
            "{ab:?}"
        );
        // The A/B pair is per driver and one way only; baselines are still compared with nginx.
        assert!(pair(EdgeEpoll, BaselineUring).is_none());
        assert!(pair(BaselineUring, EdgeUring).is_none());
        assert!(pair(BaselineUring, Nginx).is_some());
        let one = pair(EdgeEpoll, Nginx).unwrap().cpu_per_round.unwrap();
        assert!(close(one.median, 0.7) && close(one.min, one.max), "{one:?}");
        // No round in common: no same-round figure.
        let lone = vec![at(1, EdgeUring, 16.0), at(2, Nginx, 16.0)];
        assert!(ratios(&lone, &[EdgeUring, Nginx])[0]
            .cpu_per_round
            .is_none());
    }

    #[test]
    fn all_load_bound_is_marked() {
        let s = vec![sample(1, TargetKind::Haproxy, 10_000.0, Some(1_000))];
        let h = summarize(&s, TargetKind::Haproxy).unwrap();
        assert!(h.all_load_bound && h.req_per_sec == 10_000.0);
    }

    #[test]
    fn per_100k_requests() {
        assert!((per_100k(12.5) - 1.25).abs() < 1e-12);
        let s = sample(1, TargetKind::Nginx, 50_000.0, Some(9_000));
        // 9 s of CPU over 500 000 requests = 18 µs each = 1.8 s per 100k.
        assert!((s.cpu_s_per_100k().unwrap() - 1.8).abs() < 1e-9);
    }

    #[test]
    fn ratios_to_nginx() {
        use TargetKind::*;
        let mut s = vec![
            sample(1, EdgeUring, 60_000.0, Some(9_000)),
            sample(1, Nginx, 50_000.0, Some(9_000)),
            sample(1, Direct, 100_000.0, None),
        ];
        s[0].rss_kib = Some(2048);
        s[0].wrk.p99 = Duration::from_micros(1500);
        let r = vs_nginx(&s, &[EdgeUring, Nginx, Direct]);
        assert_eq!(r.len(), 3);
        assert!((r[0].req_per_sec.unwrap() - 1.2).abs() < 1e-9);
        assert!((r[0].cpu.unwrap() - 50.0 / 60.0).abs() < 1e-9);
        assert!((r[0].rss.unwrap() - 0.5).abs() < 1e-9);
        assert!((r[0].p99.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(r[1].req_per_sec, Some(1.0));
        assert_eq!((r[2].cpu, r[2].rss), (None, None));
        assert!(vs_nginx(&s[..1], &[EdgeUring]).is_empty());
        let e = summarize(&s, EdgeUring).unwrap();
        assert_eq!(e.p999, Some(Duration::from_micros(5000)));
        assert_eq!(e.rss_kib, Some(2048.0));
    }

    #[test]
    fn percentile_merge() {
        let us = Duration::from_micros;
        let a = [(50.0, us(100)), (99.0, us(900)), (99.9, us(2000))];
        let b = [(50.0, us(300)), (99.0, us(700))];
        let c = [(50.0, us(200)), (99.0, us(800)), (99.9, us(1000))];
        // Only percentiles every run reports; the median of the runs at each.
        assert_eq!(
            merge_percentiles(&[&a, &b, &c]),
            vec![(50.0, us(200)), (99.0, us(800))]
        );
        assert_eq!(
            merge_percentiles(&[&a, &c]),
            vec![(50.0, us(150)), (99.0, us(850)), (99.9, us(1500))]
        );
        assert!(merge_percentiles(&[]).is_empty());
        let mut s = vec![
            sample(1, TargetKind::Nginx, 50_000.0, Some(9_900)),
            sample(2, TargetKind::Nginx, 50_000.0, Some(1_000)), // load-bound: left out
        ];
        s[1].wrk.percentiles = vec![(50.0, us(9999))];
        assert_eq!(cdf(&s, TargetKind::Nginx)[0], (50.0, us(1000)));
    }
}
