//! Running wrk for `edge-bench compare`: one bounded closed-loop run pinned to the load CPU set
//! with `taskset`, and parsing of wrk's text report (requests, requests/s, latency percentiles,
//! socket errors, non-2xx answers).
//!
//! wrk is started as `taskset -c CPUS wrk -t1 -cN -dDs --latency [-s SCRIPT] [-H H…] URL` (taskset execs wrk, so the
//! pinned process is wrk itself), with `PR_SET_PDEATHSIG = SIGKILL` so it does not outlive a killed
//! edge-bench. Its `-d` takes whole seconds, so durations are rounded to seconds (at least 1).
//! The script's `done()` hook prints `edge-bench percentile P MICROS` and `edge-bench latency max
//! MICROS` lines (see [`crate::compare::workload`]); they are parsed into
//! [`WrkResult::percentiles`].

use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one wrk run reported.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkResult {
    /// Completed requests (`N requests in …`).
    pub requests: u64,
    /// wrk's own measurement window (`… in 10.00s`).
    pub window: Duration,
    /// `Requests/sec:`.
    pub req_per_sec: f64,
    /// 50th percentile latency (`--latency` distribution).
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Socket errors (connect + read + write + timeout).
    pub socket_errors: u64,
    /// The non-zero socket error kinds, e.g. `read 52, timeout 1` (empty when none).
    pub socket_detail: String,
    /// `Non-2xx or 3xx responses:`.
    pub non_2xx: u64,
    /// (percentile in %, latency) from the script's report, ascending; empty without a script.
    pub percentiles: Vec<(f64, Duration)>,
    /// Slowest request, from the script's report.
    pub max: Option<Duration>,
    /// The negotiated protocol, when the load generator reports it (h2load: `h2, TLSv1.3 SUITE`).
    pub protocol: Option<String>,
}

impl WrkResult {
    /// Socket errors plus non-2xx/3xx answers.
    pub fn errors(&self) -> u64 {
        self.socket_errors + self.non_2xx
    }

    /// The latency at percentile `p` (in %) from the script's report.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        self.percentiles
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-9)
            .map(|&(_, d)| d)
    }

    /// The 99.9th percentile latency (script report).
    pub fn p999(&self) -> Option<Duration> {
        self.percentile(99.9)
    }

    /// The errors in words, e.g. `read 52, non-2xx 3`; empty when there were none.
    pub fn error_detail(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.socket_detail.is_empty() {
            parts.push(self.socket_detail.clone());
        }
        if self.non_2xx > 0 {
            parts.push(format!("non-2xx {}", self.non_2xx));
        }
        parts.join(", ")
    }
}

/// One measured wrk run: the parsed report and the wall time around the wrk process.
#[derive(Debug, Clone)]
pub struct WrkRun {
    /// The parsed report.
    pub result: WrkResult,
    /// From just before spawning wrk to just after it exited.
    pub wall: Duration,
}

/// How to run wrk.
#[derive(Debug, Clone)]
pub struct WrkSpec<'a> {
    /// The wrk executable.
    pub wrk: &'a Path,
    /// CPU list for `taskset -c` (e.g. `1` or `2,3`).
    pub cpus: &'a str,
    /// Keep-alive connections (`-c`).
    pub connections: usize,
    /// Run length (`-d`, whole seconds).
    pub duration: Duration,
    /// Lua script (`-s`).
    pub script: Option<&'a Path>,
    /// Extra request headers (`-H`).
    pub headers: &'a [&'a str],
    /// `OPENSSL_CONF` for wrk (limits its TLS versions and suites; see `compare::tls`).
    pub openssl_conf: Option<&'a Path>,
}

/// wrk's `-d` argument for `d`: whole seconds, rounded, at least 1.
pub fn wrk_seconds(d: Duration) -> u64 {
    (d.as_secs_f64().round() as u64).max(1)
}

/// Runs wrk once against `url`, waiting for it to finish; `before` runs right before the spawn
/// (to sample CPU counters as close to the run as possible).
///
/// # Errors
/// Spawn failures, wrk exiting non-zero, or a report that cannot be parsed (wrk's output is in
/// the message).
pub fn run_wrk(spec: &WrkSpec<'_>, url: &str, before: impl FnOnce()) -> io::Result<WrkRun> {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c")
        .arg(spec.cpus)
        .arg(spec.wrk)
        .arg("-t1")
        .arg(format!("-c{}", spec.connections))
        .arg(format!("-d{}s", wrk_seconds(spec.duration)))
        .arg("--latency");
    if let Some(script) = spec.script {
        cmd.arg("-s").arg(script);
    }
    for h in spec.headers {
        cmd.arg("-H").arg(h);
    }
    cmd.arg(url).stdin(Stdio::null());
    load_generator_env(&mut cmd, spec.openssl_conf);
    before();
    let started = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running taskset/wrk: {e}")))?;
    let wall = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "wrk {url} failed ({}): {stdout}{stderr}",
            out.status
        )));
    }
    let result = parse_wrk(&stdout).ok_or_else(|| {
        io::Error::other(format!(
            "cannot parse wrk output for {url}:\n{stdout}{stderr}"
        ))
    })?;
    Ok(WrkRun { result, wall })
}

/// Parses wrk's report (`--latency` form); `None` when a required line is missing.
pub fn parse_wrk(out: &str) -> Option<WrkResult> {
    let mut requests = None;
    let mut window = None;
    let mut req_per_sec = None;
    let mut p50 = None;
    let mut p99 = None;
    let mut socket_errors = 0;
    let mut socket_detail = Vec::new();
    let mut non_2xx = 0;
    let mut percentiles = Vec::new();
    let mut max = None;
    for line in out.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("edge-bench percentile ") {
            let (p, us) = v.split_once(' ')?;
            percentiles.push((p.trim().parse::<f64>().ok()?, micros(us)?));
        } else if let Some(v) = line.strip_prefix("edge-bench latency max ") {
            max = Some(micros(v)?);
        } else if let Some(v) = line.strip_prefix("Requests/sec:") {
            req_per_sec = v.trim().parse::<f64>().ok();
        } else if let Some(v) = line.strip_prefix("50%") {
            p50 = parse_wrk_time(v.trim());
        } else if let Some(v) = line.strip_prefix("99%") {
            p99 = parse_wrk_time(v.trim());
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = v.trim().parse().ok()?;
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for kv in v.split(',') {
                let mut w = kv.split_whitespace();
                let (Some(kind), Some(n)) =
                    (w.next(), w.next().and_then(|n| n.parse::<u64>().ok()))
                else {
                    continue;
                };
                if n > 0 {
                    socket_errors += n;
                    socket_detail.push(format!("{kind} {n}"));
                }
            }
        } else if line.contains(" requests in ") {
            // "1234567 requests in 10.00s, 160.12MB read"
            let mut words = line.split_whitespace();
            requests = words.next().and_then(|n| n.parse::<u64>().ok());
            window = words
                .nth(2)
                .map(|w| w.trim_end_matches(','))
                .and_then(parse_wrk_time);
        }
    }
    Some(WrkResult {
        requests: requests?,
        window: window?,
        req_per_sec: req_per_sec?,
        p50: p50?,
        p99: p99?,
        socket_errors,
        socket_detail: socket_detail.join(", "),
        non_2xx,
        percentiles: {
            percentiles.sort_by(|a, b| a.0.total_cmp(&b.0));
            percentiles
        },
        max,
        protocol: None,
    })
}

/// A whole number of microseconds as the script prints it.
fn micros(s: &str) -> Option<Duration> {
    s.trim().parse::<u64>().ok().map(Duration::from_micros)
}

/// Parses one of wrk's time values: `546.55us`, `1.23ms`, `10.00s`, `1.50m`, `2.00h`.
pub fn parse_wrk_time(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.trim().parse().ok()?;
    let secs = match unit.trim() {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Sets up a load generator's process: `OPENSSL_CONF` when the workload names one (TLS version and
/// suites), and SIGKILL when edge-bench dies, so no load generator outlives a comparison.
pub(super) fn load_generator_env(cmd: &mut Command, openssl_conf: Option<&Path>) {
    if let Some(conf) = openssl_conf {
        cmd.env("OPENSSL_CONF", conf);
    }
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 10s test @ http://127.0.0.1:40000/fast
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.15ms  243.01us   9.87ms   90.12%
    Req/Sec    55.80k     2.01k   59.12k    71.00%
  Latency Distribution
     50%    1.10ms
     75%    1.21ms
     90%    1.39ms
     99%    2.05ms
  555123 requests in 10.00s, 61.42MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  55510.42
Transfer/sec:      6.14MB
";

    #[test]
    fn parses_a_report() {
        let r = parse_wrk(REPORT).unwrap();
        assert_eq!(r.requests, 555_123);
        assert_eq!(r.window, Duration::from_secs(10));
        assert!((r.req_per_sec - 55_510.42).abs() < 1e-6);
        assert_eq!(r.p50, Duration::from_micros(1100));
        assert_eq!(r.p99, Duration::from_micros(2050));
        assert_eq!((r.socket_errors, r.non_2xx, r.errors()), (3, 7, 10));
        assert_eq!(r.error_detail(), "read 2, timeout 1, non-2xx 7");
    }

    #[test]
    fn parses_the_script_report() {
        let out = format!(
            "{REPORT}edge-bench percentile 50 1100\nedge-bench percentile 99.9 4321\n\
             edge-bench percentile 1 200\nedge-bench latency max 9870\n"
        );
        let r = parse_wrk(&out).unwrap();
        let us = Duration::from_micros;
        assert_eq!(
            r.percentiles,
            vec![(1.0, us(200)), (50.0, us(1100)), (99.9, us(4321))]
        );
        assert_eq!((r.p999(), r.max), (Some(us(4321)), Some(us(9870))));
        assert_eq!(r.percentile(99.0), None);
        assert!(parse_wrk(REPORT).unwrap().percentiles.is_empty());
        assert_eq!(
            parse_wrk(&format!("{REPORT}edge-bench percentile x 1\n")),
            None
        );
    }

    #[test]
    fn missing_lines_fail() {
        assert_eq!(parse_wrk("Requests/sec: 5\n"), None);
        let no_latency = REPORT.replace("99%", "98%");
        assert_eq!(parse_wrk(&no_latency), None);
    }

    #[test]
    fn time_units() {
        let us = |v| Duration::from_micros(v);
        assert_eq!(parse_wrk_time("546.00us"), Some(us(546)));
        assert_eq!(parse_wrk_time("1.50ms"), Some(us(1500)));
        assert_eq!(parse_wrk_time("2.00s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_wrk_time("1.00m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_wrk_time("5"), None);
        assert_eq!(parse_wrk_time("5.0xs"), None);
    }

    #[test]
    fn seconds_for_wrk() {
        assert_eq!(wrk_seconds(Duration::from_millis(200)), 1);
        assert_eq!(wrk_seconds(Duration::from_secs(10)), 10);
        assert_eq!(wrk_seconds(Duration::from_millis(2600)), 3);
    }
}
