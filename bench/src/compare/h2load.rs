//! Running h2load (nghttp2-client) for the HTTP/2 workloads of `edge-bench compare` (DESIGN.md,
//! Benchmark method: HTTP/2): one bounded run pinned to the load CPU set, its text report parsed
//! into the same [`WrkResult`] as wrk's, latency percentiles computed from its per-request log.
//!
//! h2load is started as `taskset -c CPUS h2load -t 1 -c N -m M -D S --tls13-ciphers=… --ciphers=…
//! --log-file=LOG https://TARGET/PATH` with `OPENSSL_CONF` limiting it to TLS 1.3 (the file the
//! wrk runs get, [`super::tls`]) and `PR_SET_PDEATHSIG = SIGKILL`. Its output goes to files in the
//! scratch directory, not pipes. h2load negotiates the protocol by ALPN (it offers h2 first); the
//! run fails unless it reports `Application protocol: h2` over TLSv1.3, so a proxy falling back to
//! HTTP/1.1 is never counted.
//!
//! After its duration h2load waits for every stream it started; a stream that never ends would
//! keep it running for ever, so a run that has not exited [`DRAIN_GRACE`] after its duration is
//! killed (by its own pid) and fails.
//!
//! The per-request log (`--log-file`: start µs since the epoch, status, µs to the end of the
//! response, tab-separated) gives p50, p99, p99.9, the [`PERCENTILES`] of the CDF and the maximum
//! (nearest rank over the requests with a status); h2load's own summary has only min, max, mean and
//! standard deviation.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::workload::PERCENTILES;
use super::wrk::{load_generator_env, wrk_seconds, WrkResult, WrkRun};

/// How long after its duration an h2load run may take to finish its streams before it is killed.
pub const DRAIN_GRACE: Duration = Duration::from_secs(20);

/// Concurrent streams per connection of the HTTP/2 workloads (`-m`).
pub const STREAMS: usize = 10;

/// How to run h2load.
#[derive(Debug, Clone)]
pub struct H2loadSpec<'a> {
    /// The h2load executable.
    pub h2load: &'a Path,
    /// CPU list for `taskset -c`.
    pub cpus: &'a str,
    /// Connections (`-c`).
    pub connections: usize,
    /// Concurrent streams per connection (`-m`).
    pub streams: usize,
    /// Run length (`-D`, whole seconds).
    pub duration: Duration,
    /// `OPENSSL_CONF` (TLS 1.3 only, AES-128-GCM).
    pub openssl_conf: Option<&'a Path>,
    /// Scratch directory for the output and the per-request log.
    pub dir: &'a Path,
    /// h2c with prior knowledge to an `http://` URL (the gRPC workloads) instead of TLS with ALPN h2.
    pub plain: bool,
    /// Request body file (`-d`: every request is a POST of it).
    pub data: Option<&'a Path>,
    /// Extra request fields (`-H`).
    pub headers: &'a [&'a str],
}

impl H2loadSpec<'_> {
    /// The arguments after the executable, URL last.
    pub fn args(&self, url: &str, log: &Path) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-t".into(),
            "1".into(),
            "-c".into(),
            self.connections.to_string(),
            "-m".into(),
            self.streams.to_string(),
            "-D".into(),
            wrk_seconds(self.duration).to_string(),
        ];
        if !self.plain {
            a.push("--tls13-ciphers=TLS_AES_128_GCM_SHA256".into());
            a.push("--ciphers=ECDHE-ECDSA-AES128-GCM-SHA256".into());
        }
        if let Some(d) = self.data {
            a.push("-d".into());
            a.push(d.display().to_string());
        }
        for h in self.headers {
            a.push("-H".into());
            a.push((*h).to_string());
        }
        a.push(format!("--log-file={}", log.display()));
        a.push(url.into());
        a
    }
}

/// What h2load's text report says (see the fixtures in `testdata/`).
#[derive(Debug, Clone, PartialEq)]
pub struct H2loadReport {
    /// `requests: N total`.
    pub total: u64,
    /// `… N started`.
    pub started: u64,
    /// `… N done`.
    pub done: u64,
    /// `… N succeeded`.
    pub succeeded: u64,
    /// `… N failed`.
    pub failed: u64,
    /// `… N errored`.
    pub errored: u64,
    /// `… N timeout`.
    pub timeout: u64,
    /// `finished in …, R req/s`.
    pub req_per_sec: f64,
    /// `status codes: … N 4xx, N 5xx`, summed.
    pub status_4xx_5xx: u64,
    /// Response body bytes received (`traffic: … (N) data`).
    pub data_bytes: Option<u64>,
    /// `Application protocol: …` (absent when no connection was made).
    pub alpn: Option<String>,
    /// `TLS Protocol: …`.
    pub tls: Option<String>,
    /// `Cipher: …`.
    pub cipher: Option<String>,
}

impl H2loadReport {
    /// The negotiated protocol in words, e.g. `h2, TLSv1.3 TLS_AES_128_GCM_SHA256` (`h2c` alone
    /// without TLS).
    pub fn protocol(&self) -> String {
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        if self.tls.is_none() && self.alpn.as_deref() == Some("h2c") {
            return "h2c".into();
        }
        format!("{}, {} {}", or(&self.alpn), or(&self.tls), or(&self.cipher))
    }

    /// Fails unless the run spoke h2 over TLS 1.3 and completed requests (a run that negotiated
    /// nothing fails as one without requests).
    ///
    /// # Errors
    /// `Other`, naming what was negotiated.
    pub fn check_h2(&self) -> io::Result<()> {
        self.check_protocol(false)
    }

    /// [`check_h2`](Self::check_h2), or with `plain`: fails unless the run spoke h2c (h2load's
    /// `Application protocol: h2c`) and completed requests.
    ///
    /// # Errors
    /// As [`check_h2`](Self::check_h2).
    pub fn check_protocol(&self, plain: bool) -> io::Result<()> {
        let h2 = if plain {
            self.alpn.as_deref() == Some("h2c")
        } else {
            self.alpn.as_deref() == Some("h2") && self.tls.as_deref() == Some("TLSv1.3")
        };
        let wrong = || {
            io::Error::other(format!(
                "negotiated {} instead of {}: not counted",
                self.protocol(),
                if plain { "h2c" } else { "h2 over TLSv1.3" }
            ))
        };
        if !h2 && self.alpn.is_some() {
            return Err(wrong());
        }
        if self.succeeded == 0 {
            return Err(io::Error::other(format!(
                "no request succeeded in the run ({} started, {} done, {} failed, {} errored, {} \
                 timeout; {} bytes of response data received)",
                self.started,
                self.done,
                self.failed,
                self.errored,
                self.timeout,
                self.data_bytes.map_or("?".into(), |b| b.to_string())
            )));
        }
        if !h2 {
            return Err(wrong());
        }
        Ok(())
    }

    /// The report with the latencies of the per-request log, in wrk's terms.
    pub fn to_result(&self, window: Duration, latencies_us: &mut [u64]) -> Option<WrkResult> {
        latencies_us.sort_unstable();
        let us = Duration::from_micros;
        let at = |p: f64| nearest_rank(latencies_us, p).map(us);
        let mut detail = Vec::new();
        for (kind, n) in [
            ("failed", self.failed),
            ("errored", self.errored),
            ("timeout", self.timeout),
        ] {
            if n > 0 {
                detail.push(format!("{kind} {n}"));
            }
        }
        Some(WrkResult {
            requests: self.succeeded,
            window,
            req_per_sec: self.req_per_sec,
            p50: at(50.0)?,
            p99: at(99.0)?,
            // h2load counts a failed request as errored or timed out too: the largest, not the sum.
            socket_errors: self.failed.max(self.errored).max(self.timeout),
            socket_detail: detail.join(", "),
            non_2xx: self.status_4xx_5xx,
            percentiles: PERCENTILES
                .iter()
                .filter_map(|&p| Some((p, at(p)?)))
                .collect(),
            max: latencies_us.last().copied().map(us),
            protocol: Some(self.protocol()),
        })
    }
}

/// The value at percentile `p` (in %) of ascending `v`, nearest rank; `None` when empty.
pub fn nearest_rank(v: &[u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The next number in `words` after the one-word `label` (e.g. `succeeded,` in `N succeeded,`).
fn count_before(line: &str, label: &str) -> Option<u64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words
        .iter()
        .position(|w| w.trim_end_matches(',') == label)?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

/// Parses h2load's report; `None` when the `finished in` or `requests:` line is missing.
pub fn parse_h2load(out: &str) -> Option<H2loadReport> {
    let mut requests = None;
    let mut req_per_sec = None;
    let mut status = 0;
    let mut data_bytes = None;
    let (mut alpn, mut tls, mut cipher) = (None, None, None);
    for line in out.lines().map(str::trim) {
        let value = |prefix: &str| line.strip_prefix(prefix).map(|v| v.trim().to_string());
        if let Some(v) = line.strip_prefix("finished in ") {
            // "finished in 4.05s, 1085.67 req/s, 40.44KB/s"
            req_per_sec = v
                .split(',')
                .nth(1)
                .and_then(|r| r.trim().strip_suffix(" req/s"))
                .and_then(|r| r.trim().parse::<f64>().ok());
        } else if line.starts_with("requests:") {
            let n = |label| count_before(line, label);
            requests = Some((
                n("total")?,
                n("started")?,
                n("done")?,
                n("succeeded")?,
                n("failed")?,
                n("errored")?,
                n("timeout")?,
            ));
        } else if let Some(v) = line.strip_prefix("traffic:") {
            // "traffic: 121.33KB (124246) total, 23.04KB (23591) headers (…), 41.86KB (42861) data"
            data_bytes = v
                .rsplit_once(") data")
                .and_then(|(head, _)| head.rsplit_once('('))
                .and_then(|(_, n)| n.parse().ok());
        } else if line.starts_with("status codes:") {
            status = count_before(line, "4xx")? + count_before(line, "5xx")?;
        } else if let Some(v) = value("Application protocol:") {
            alpn = Some(v);
        } else if let Some(v) = value("TLS Protocol:") {
            tls = Some(v);
        } else if let Some(v) = value("Cipher:") {
            cipher = Some(v);
        }
    }
    let (total, started, done, succeeded, failed, errored, timeout) = requests?;
    Some(H2loadReport {
        total,
        started,
        done,
        succeeded,
        failed,
        errored,
        timeout,
        req_per_sec: req_per_sec?,
        status_4xx_5xx: status,
        data_bytes,
        alpn,
        tls,
        cipher,
    })
}

/// The latencies (µs to the end of the response) of the requests in an h2load `--log-file` that
/// got a status; lines that do not parse are skipped.
pub fn parse_log(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            let mut cols = l.split('\t');
            let _start = cols.next()?;
            let status: u16 = cols.next()?.trim().parse().ok()?;
            let us: u64 = cols.next()?.trim().parse().ok()?;
            (status > 0).then_some(us)
        })
        .collect()
}

/// Runs h2load once against `url` (an `https://` URL, or `http://` with `spec.plain`), waiting for it to finish (at most the
/// duration plus [`DRAIN_GRACE`]); `before` runs right before the spawn.
///
/// # Errors
/// Spawn failures, h2load exiting non-zero or not finishing in time, a report that cannot be
/// parsed, a protocol other than h2 over TLS 1.3, or no request succeeding (the output is in the
/// message).
pub fn run_h2load(spec: &H2loadSpec<'_>, url: &str, before: impl FnOnce()) -> io::Result<WrkRun> {
    fs::create_dir_all(spec.dir)?;
    let (log, out_path) = (spec.dir.join("h2load.tsv"), spec.dir.join("h2load.out"));
    let _ = fs::remove_file(&log);
    let out = File::create(&out_path)?;
    let mut cmd = Command::new("taskset");
    cmd.arg("-c")
        .arg(spec.cpus)
        .arg(spec.h2load)
        .args(spec.args(url, &log))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    load_generator_env(&mut cmd, spec.openssl_conf);
    before();
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("running taskset/h2load: {e}")))?;
    let deadline = started + Duration::from_secs(wrk_seconds(spec.duration)) + DRAIN_GRACE;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if Instant::now() >= deadline {
            // The child is h2load itself (taskset execs it): kill it by its own pid.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall = started.elapsed();
    let text = fs::read_to_string(&out_path).unwrap_or_default();
    let status = status.ok_or_else(|| {
        io::Error::other(format!(
            "h2load {url} did not finish {} s after its duration (streams that never end); killed:\n{text}",
            DRAIN_GRACE.as_secs()
        ))
    })?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "h2load {url} failed ({status}):\n{text}"
        )));
    }
    let report = parse_h2load(&text).ok_or_else(|| {
        io::Error::other(format!("cannot parse h2load output for {url}:\n{text}"))
    })?;
    report
        .check_protocol(spec.plain)
        .map_err(|e| io::Error::other(format!("h2load {url}: {e}")))?;
    let mut latencies = parse_log(&fs::read_to_string(&log)?);
    let _ = fs::remove_file(&log);
    let result = report
        .to_result(
            Duration::from_secs(wrk_seconds(spec.duration)),
            &mut latencies,
        )
        .ok_or_else(|| io::Error::other(format!("h2load {url}: empty per-request log")))?;
    Ok(WrkRun { result, wall })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real run: `h2load -t 1 -c 64 -m 10 -D 3 --warm-up-time=1 …` through a debug edge.
    const H2: &str = include_str!("testdata/h2load-h2.txt");
    /// The same server with `--npn-list=http/1.1` (the progress lines filtered out).
    const HTTP11: &str = include_str!("testdata/h2load-http11.txt");
    /// `h2load -c 1 -n 1` to a closed port.
    const REFUSED: &str = include_str!("testdata/h2load-refused.txt");
    /// The first 20 lines of the `--log-file` of the [`H2`] run.
    const LOG: &str = include_str!("testdata/h2load-log.tsv");

    #[test]
    fn parses_a_real_report() {
        let r = parse_h2load(H2).unwrap();
        assert_eq!(
            (r.total, r.started, r.done, r.succeeded),
            (3257, 3257, 3257, 3257)
        );
        assert_eq!(r.data_bytes, Some(42861));
        assert_eq!(
            (r.failed, r.errored, r.timeout, r.status_4xx_5xx),
            (0, 0, 0, 0)
        );
        assert!((r.req_per_sec - 1085.67).abs() < 1e-9);
        assert_eq!(r.protocol(), "h2, TLSv1.3 TLS_AES_128_GCM_SHA256");
        assert!(r.check_h2().is_ok());
    }

    /// `h2load -t1 -c 2 -n 20 -d MSG -H 'content-type: application/grpc' -H 'te: trailers'
    /// http://…` against the nginx h2c origin.
    const H2C: &str = include_str!("testdata/h2load-h2c.txt");

    #[test]
    fn h2c_runs_are_checked_as_h2c() {
        let r = parse_h2load(H2C).unwrap();
        assert_eq!((r.succeeded, r.status_4xx_5xx), (20, 0));
        assert_eq!(r.protocol(), "h2c");
        assert!(r.check_protocol(true).is_ok());
        let e = r.check_h2().unwrap_err().to_string();
        assert!(e.contains("instead of h2 over TLSv1.3"), "{e}");
        let tls = parse_h2load(H2).unwrap();
        assert!(tls.check_protocol(true).is_err());
    }

    #[test]
    fn http11_fails_loudly() {
        let r = parse_h2load(HTTP11).unwrap();
        assert_eq!(r.alpn.as_deref(), Some("http/1.1"));
        assert_eq!(r.succeeded, 420);
        let e = r.check_h2().unwrap_err().to_string();
        assert!(
            e.contains("negotiated http/1.1") && e.contains("not counted"),
            "{e}"
        );
    }

    #[test]
    fn a_refused_run_fails() {
        let r = parse_h2load(REFUSED).unwrap();
        assert_eq!((r.total, r.succeeded, r.failed, r.errored), (1, 0, 1, 1));
        assert_eq!(r.alpn, None);
        let e = r.check_h2().unwrap_err().to_string();
        assert!(
            e.contains("0 started, 0 done, 1 failed") && e.contains("0 bytes"),
            "{e}"
        );
        assert_eq!(parse_h2load("starting benchmark...\n"), None);
    }

    #[test]
    fn latencies_from_the_log() {
        let mut l = parse_log(&format!("{LOG}garbage\n1796146405368999\t0\t5\n"));
        assert_eq!(l.len(), 20);
        let r = parse_h2load(H2)
            .unwrap()
            .to_result(Duration::from_secs(3), &mut l)
            .unwrap();
        let us = Duration::from_micros;
        assert_eq!((r.p50, r.p99), (us(629_226), us(629_374)));
        assert_eq!(r.max, Some(us(629_374)));
        assert_eq!(r.percentile(1.0), Some(us(629_008)));
        assert_eq!(r.percentiles.len(), PERCENTILES.len());
        assert_eq!((r.requests, r.errors()), (3257, 0));
        assert!(r.protocol.as_deref().unwrap().starts_with("h2, "));
        assert!(parse_h2load(H2)
            .unwrap()
            .to_result(Duration::ZERO, &mut [])
            .is_none());
    }

    #[test]
    fn ranks_and_errors() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 99.0), Some(99));
        assert_eq!(nearest_rank(&v, 99.9), Some(100));
        assert_eq!(nearest_rank(&v, 0.0), Some(1));
        assert_eq!(nearest_rank(&[], 50.0), None);
        let mut r = parse_h2load(REFUSED).unwrap();
        r.succeeded = 1;
        r.alpn = Some("h2".into());
        r.tls = Some("TLSv1.3".into());
        let w = r.to_result(Duration::from_secs(1), &mut [7]).unwrap();
        assert_eq!(
            (w.socket_errors, w.error_detail().as_str()),
            (1, "failed 1, errored 1")
        );
    }

    #[test]
    fn command_line() {
        let spec = H2loadSpec {
            h2load: Path::new("/usr/bin/h2load"),
            cpus: "1",
            connections: 64,
            streams: STREAMS,
            duration: Duration::from_millis(2600),
            openssl_conf: None,
            dir: Path::new("/tmp/x"),
            plain: false,
            data: None,
            headers: &[],
        };
        let a = spec
            .args("https://127.0.0.1:1/fast", Path::new("/tmp/x/l.tsv"))
            .join(" ");
        assert_eq!(
            a,
            "-t 1 -c 64 -m 10 -D 3 --tls13-ciphers=TLS_AES_128_GCM_SHA256 \
             --ciphers=ECDHE-ECDSA-AES128-GCM-SHA256 --log-file=/tmp/x/l.tsv https://127.0.0.1:1/fast"
        );
        let grpc = H2loadSpec {
            plain: true,
            data: Some(Path::new("/tmp/x/m.bin")),
            headers: &["content-type: application/grpc", "te: trailers"],
            ..spec
        };
        assert_eq!(
            grpc.args("http://127.0.0.1:1/a.B/C", Path::new("L")).join(" "),
            "-t 1 -c 64 -m 10 -D 3 -d /tmp/x/m.bin -H content-type: application/grpc -H te: trailers \
             --log-file=L http://127.0.0.1:1/a.B/C"
        );
    }
}
