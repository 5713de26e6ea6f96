//! One workload of `edge-bench compare` over every target: one unmeasured warm-up per target,
//! then interleaved rounds (A B C … per round); each run resets the proxy's peak RSS and samples
//! its CPU counters right before the load generator (wrk, h2load or the handshake loader)
//! starts, and reads both right after it exits.

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use crate::compare::h2_upstream::ConnSampler;
use crate::compare::h2load::{run_h2load, H2loadSpec, STREAMS};

/// h2load's request fields of the gRPC workloads.
const GRPC_HEADERS: [&str; 2] = ["content-type: application/grpc", "te: trailers"];
use crate::compare::handshake::{run_handshakes, HandshakeSpec};
use crate::compare::report::Sample;
use crate::compare::target::Target;
use crate::compare::tls::TlsSetup;
use crate::compare::workload::Workload;
use crate::compare::wrk::{run_wrk, wrk_seconds, WrkRun, WrkSpec};
use crate::compare::{Args, SETTLE};
use crate::support::edge_proc::EdgeProcess;
use crate::support::procfs::clock_ticks_per_sec;

/// One workload over every target: warm-up, then interleaved rounds.
pub(crate) struct WorkloadRun<'a> {
    /// The options of the run.
    pub args: &'a Args,
    /// Which workload.
    pub workload: Workload,
    /// Its wrk Lua script.
    pub script: &'a Path,
    /// `taskset -c` list of the load CPUs.
    pub load_list: &'a str,
    /// The run's TLS material, when it has TLS workloads.
    pub tls: Option<&'a TlsSetup>,
    /// The origin whose connections are counted during each run (HTTP/2-upstream workloads).
    pub origin: Option<std::net::SocketAddr>,
    /// h2load's request body of the gRPC workloads.
    pub grpc_data: Option<&'a Path>,
}

impl WorkloadRun<'_> {
    fn spec(&self, duration: Duration) -> WrkSpec<'_> {
        WrkSpec {
            wrk: &self.args.wrk_bin,
            cpus: self.load_list,
            connections: self.workload.connections(self.args.connections),
            duration,
            script: Some(self.script),
            headers: self.workload.headers(),
            openssl_conf: self
                .tls
                .filter(|_| self.workload.is_tls())
                .map(|t| t.openssl_conf_for(self.workload.tls12())),
        }
    }

    /// Where a run against `t` connects: `http://ADDR` or, for TLS workloads, `https://TLS_ADDR`
    /// (`None` when the target has no TLS listener).
    fn base_url(&self, t: &Target) -> Option<String> {
        if self.workload.is_grpc() {
            return t.h2c_addr.map(|a| format!("http://{a}"));
        }
        if !self.workload.is_tls() {
            return Some(format!("http://{}", t.addr));
        }
        t.tls_addr.map(|a| format!("https://{a}"))
    }

    /// h2load's settings for a run of `duration` (its files go beside the wrk script).
    fn h2load_spec(&self, duration: Duration) -> H2loadSpec<'_> {
        H2loadSpec {
            h2load: &self.args.h2load_bin,
            cpus: self.load_list,
            connections: self.workload.connections(self.args.connections),
            streams: STREAMS,
            duration,
            openssl_conf: self.tls.map(|t| t.openssl_conf_for(false)),
            dir: self.script.parent().unwrap_or(Path::new("/tmp")),
            plain: self.workload.is_grpc(),
            data: self.grpc_data,
            headers: if self.workload.is_grpc() {
                &GRPC_HEADERS
            } else {
                &[]
            },
        }
    }

    /// One run of `duration` against `t`: wrk, h2load for the HTTP/2 workloads, or the handshake
    /// loader for the connection-per-request TLS workloads.
    fn load_once(
        &self,
        t: &Target,
        duration: Duration,
        before: impl FnOnce(),
    ) -> io::Result<WrkRun> {
        let base = self.base_url(t).ok_or_else(|| {
            io::Error::other(format!("{} has no TLS (or h2c) listener", t.kind.name()))
        })?;
        match (self.workload.handshake_loader(), self.tls, t.tls_addr) {
            (Some(resume), Some(tls), Some(addr)) => {
                let spec = HandshakeSpec {
                    connections: self.workload.connections(self.args.connections),
                    duration,
                    resume,
                    ca: &tls.certs.ca,
                };
                run_handshakes(&spec, addr, self.workload.path(), before)
            }
            _ if self.workload.is_h2() || self.workload.is_grpc() => run_h2load(
                &self.h2load_spec(duration),
                &format!("{base}{}", self.workload.path()),
                before,
            ),
            _ => run_wrk(
                &self.spec(duration),
                &format!("{base}{}", self.workload.path()),
                before,
            ),
        }
    }

    /// Runs it: the warm-up of every target, then the rounds; samples and failures are appended.
    ///
    /// # Errors
    /// Failure to check on the origin.
    pub fn run(
        &self,
        targets: &mut [Target],
        dead: &mut [bool],
        origin: &mut EdgeProcess,
        samples: &mut Vec<Sample>,
        failures: &mut Vec<String>,
    ) -> io::Result<()> {
        let (args, w) = (self.args, self.workload);
        self.print_command(targets);
        if !args.warmup.is_zero() {
            for t in targets.iter().filter(|t| w.runs_on(t.kind)) {
                if let Err(e) = self.load_once(t, args.warmup, || {}) {
                    failures.push(format!("{} {w} warm-up: {e}", t.kind.name()));
                }
            }
        }
        let hz = clock_ticks_per_sec();
        for round in 1..=args.rounds {
            if let Some(st) = origin.exited()? {
                failures.push(format!("the origin exited before {w} round {round} ({st})"));
                return Ok(());
            }
            for (i, t) in targets.iter_mut().enumerate() {
                if dead[i] || !w.runs_on(t.kind) {
                    continue;
                }
                if let Err(e) = t.check_alive() {
                    eprintln!("{e}");
                    failures.push(format!("{w} round {round}: {e}"));
                    dead[i] = true;
                    continue;
                }
                let mut before = Ok(None);
                let mut throttled_before = None;
                let mut sampler = None;
                let run = self.load_once(t, args.duration, || {
                    t.reset_peak_rss();
                    before = t.usage();
                    throttled_before = t.throttled();
                    // The proxy's upstream connections; `direct` has none (its connections are
                    // the load generator's).
                    sampler = self
                        .origin
                        .filter(|_| t.kind.is_proxy())
                        .map(ConnSampler::start);
                });
                let after = t.usage();
                let throttled = t
                    .throttled()
                    .zip(throttled_before)
                    .map(|(a, b)| a.saturating_sub(b));
                let upstream_conns = sampler.map(ConnSampler::finish);
                let rss_kib = t.peak_rss_kib();
                let sample = run.and_then(|run| {
                    let (cpu, wait) = match (before?, after?) {
                        (Some(b), Some(a)) => (
                            Some(Duration::from_micros(
                                a.cpu_ticks.saturating_sub(b.cpu_ticks) * 1_000_000 / hz,
                            )),
                            Some(Duration::from_nanos(a.wait_ns.saturating_sub(b.wait_ns))),
                        ),
                        _ => (None, None),
                    };
                    Ok(Sample {
                        workload: w,
                        round,
                        kind: t.kind,
                        wrk: run.result,
                        wall: run.wall,
                        cpu,
                        wait,
                        rss_kib,
                        upstream_conns,
                        cpu_quota: t.cpu_share(),
                        throttled,
                    })
                });
                match sample {
                    Ok(s) => {
                        print_round(&s, args.rounds);
                        samples.push(s);
                    }
                    Err(e) => {
                        eprintln!("{w} round {round} {}: {e}", t.kind.name());
                        failures.push(format!("{w} round {round} {}: {e}", t.kind.name()));
                    }
                }
                let _ = io::stdout().flush();
                std::thread::sleep(SETTLE);
            }
        }
        Ok(())
    }
}

impl WorkloadRun<'_> {
    /// The load's command line, printed before the workload's runs.
    fn print_command(&self, targets: &[Target]) {
        let (args, w) = (self.args, self.workload);
        let order = targets
            .iter()
            .map(|t| t.kind.name())
            .collect::<Vec<_>>()
            .join(" ");
        let c = w.connections(args.connections);
        let d = wrk_seconds(args.duration);
        let load = match (w.handshake_loader(), self.tls) {
            (None, _) if w.is_grpc() => format!(
                "taskset -c {} {} {}; {}",
                self.load_list,
                args.h2load_bin.display(),
                self.h2load_spec(args.duration)
                    .args(&format!("http://TARGET_H2C{}", w.path()), Path::new("LOG"))
                    .join(" "),
                crate::compare::h2_upstream::SETTINGS
            ),
            (None, tls) if w.is_h2() => format!(
                "{}taskset -c {} {} {}; {}",
                tls.map_or(String::new(), |t| format!("OPENSSL_CONF={} ", t.openssl_conf_for(false).display())),
                self.load_list,
                args.h2load_bin.display(),
                self.h2load_spec(args.duration)
                    .args(&format!("https://TARGET{}", w.path()), Path::new("LOG"))
                    .join(" "),
                crate::compare::proxies::H2_SETTINGS
            ),
            (Some(resume), _) => format!(
                "edge-bench's handshake loader (TLS 1.3, {}) on CPU {}, -c{c} -d{d}s, GET {} with Connection: close",
                if resume { "sessions resumed" } else { "full handshakes" },
                self.load_list,
                w.path()
            ),
            (None, tls) => format!(
                "{}taskset -c {} {} -t1 -c{c} -d{d}s --latency -s {}{} {}://TARGET{}",
                tls.filter(|_| w.is_tls())
                    .map_or(String::new(), |t| format!("OPENSSL_CONF={} ", t.openssl_conf_for(w.tls12()).display())),
                self.load_list,
                args.wrk_bin.display(),
                self.script.display(),
                w.headers().iter().map(|h| format!(" -H \"{h}\"")).collect::<String>(),
                if w.is_tls() { "https" } else { "http" },
                w.path()
            ),
        };
        println!(
            "\n{}: {load}; {} round(s), targets in order: {order}",
            w.name(),
            args.rounds
        );
    }
}

/// One progress line per run.
fn print_round(s: &Sample, rounds: usize) {
    let pct = |v: Option<f64>| v.map_or("-".into(), |u| format!("{:.0} %", u * 100.0));
    println!(
        "{} round {}/{rounds} {:<14} {:>8.0} req/s  p99 {:>9}  p99.9 {:>9}  CPU {} (runq wait {}){}{}{}",
        s.workload,
        s.round,
        s.kind.name(),
        s.wrk.req_per_sec,
        crate::support::table::ms(s.wrk.p99),
        s.wrk.p999().map_or("-".into(), crate::support::table::ms),
        pct(s.utilisation()),
        pct(s.wait_share()),
        if s.load_bound() { "  load-bound" } else { "" },
        s.wrk.protocol.as_ref().map_or(String::new(), |p| format!("  {p}")),
        if s.wrk.errors() > 0 {
            format!("  errors: {}", s.wrk.error_detail())
        } else {
            String::new()
        }
    );
}
