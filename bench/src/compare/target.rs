//! The targets of `edge-bench compare`: edge (io_uring and epoll), nginx, HAProxy and "direct to
//! origin", started as pinned child processes on free loopback ports, plus the CPU accounting
//! from `/proc` (DESIGN.md, Benchmark method).
//!
//! Every proxy runs through `taskset -c PROXY_CPUS BIN …` (taskset execs the proxy, so the child
//! pid is the proxy's) inside [`EdgeProcess`], which captures its output, gives it its own process
//! group and `PR_SET_PDEATHSIG`, and stops it by its own pid (SIGTERM, then SIGKILL to its group):
//! nothing here signals a process by name. The command lines and configuration files are in
//! [`super::proxies`].
//!
//! CPU time is utime + stime from `/proc/PID/stat` of the proxy process (all its threads) plus
//! its direct children (the nginx worker), in clock ticks. The run-queue wait of their threads
//! (`/proc/PID/task/*/schedstat`) tells a proxy starved by other work on its CPU from one that
//! was simply not given enough load.
//!
//! Peak RSS per run: `VmHWM` of `/proc/PID/status` of the proxy and its direct children (nginx:
//! master + worker, summed), reset before each run by writing `5` to `/proc/PID/clear_refs`
//! (Linux ≥ 4.0), so a run's peak is not an earlier workload's.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::proxies::proxy_command;
use crate::support::certs::CertFiles;
use crate::support::cgroup::CpuQuota;
use crate::support::edge_proc::{start_pinned_proxy, EdgeProcess};
use crate::support::procfs::{children_of, proc_stat, run_wait_ns, status_kib};

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// edge with `--io-driver io_uring`.
    EdgeUring,
    /// edge with `--io-driver epoll`.
    EdgeEpoll,
    /// A second edge build (`--baseline-edge-bin`, e.g. the previous commit's) with `--io-driver
    /// io_uring`: old and new binary measured side by side in one run.
    BaselineUring,
    /// The baseline build with `--io-driver epoll`.
    BaselineEpoll,
    /// nginx, one worker.
    Nginx,
    /// HAProxy, one thread.
    Haproxy,
    /// wrk straight at the origin.
    Direct,
}

impl TargetKind {
    /// Every kind, in the default order.
    pub const ALL: [TargetKind; 7] = [
        TargetKind::EdgeUring,
        TargetKind::EdgeEpoll,
        TargetKind::BaselineUring,
        TargetKind::BaselineEpoll,
        TargetKind::Nginx,
        TargetKind::Haproxy,
        TargetKind::Direct,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::EdgeUring => "edge-io_uring",
            TargetKind::EdgeEpoll => "edge-epoll",
            TargetKind::BaselineUring => "baseline-io_uring",
            TargetKind::BaselineEpoll => "baseline-epoll",
            TargetKind::Nginx => "nginx",
            TargetKind::Haproxy => "haproxy",
            TargetKind::Direct => "direct",
        }
    }

    /// Whether this is an edge build (the one under test or the baseline).
    pub fn is_edge(self) -> bool {
        self.edge_driver().is_some()
    }

    /// Whether this is the baseline edge build.
    pub fn is_baseline(self) -> bool {
        matches!(self, TargetKind::BaselineUring | TargetKind::BaselineEpoll)
    }

    /// The io driver of an edge target.
    pub fn edge_driver(self) -> Option<&'static str> {
        match self {
            TargetKind::EdgeUring | TargetKind::BaselineUring => Some("io_uring"),
            TargetKind::EdgeEpoll | TargetKind::BaselineEpoll => Some("epoll"),
            _ => None,
        }
    }

    /// Whether a proxy process is under test (everything but `direct`).
    pub fn is_proxy(self) -> bool {
        self != TargetKind::Direct
    }
}

impl FromStr for TargetKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TargetKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = TargetKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown target {s:?} (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// Executables the targets need.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The `edge` binary.
    pub edge: PathBuf,
    /// The baseline `edge` binary, when baseline targets run.
    pub baseline: Option<PathBuf>,
    /// A config file for the (non-baseline) edge targets, plain workloads only.
    pub edge_config: Option<PathBuf>,
    /// nginx.
    pub nginx: PathBuf,
    /// HAProxy.
    pub haproxy: PathBuf,
}

/// A running target: where to send load and, for proxies, the process to account CPU to.
#[derive(Debug)]
pub struct Target {
    /// Which target.
    pub kind: TargetKind,
    /// Where wrk connects.
    pub addr: SocketAddr,
    /// Where the TLS workloads connect (none when the run has no TLS workload).
    pub tls_addr: Option<SocketAddr>,
    /// Where the gRPC workloads connect over h2c (the HTTP/2-upstream targets; edge: `addr`, its
    /// plain listener takes h2c too; `direct`: the h2c origin).
    pub h2c_addr: Option<SocketAddr>,
    /// The proxy process (none for `direct`).
    pub process: Option<EdgeProcess>,
    /// Scratch directory with configs, pid and logs (removed on drop).
    dir: Option<PathBuf>,
    /// The CPU quota's cgroup the proxy runs in ([`Target::limit_cpu`]; removed on drop).
    cgroup: Option<CpuQuota>,
}

impl Target {
    /// The `direct` target: load straight at the origin (and at the origin in TLS mode).
    pub fn direct(origin: SocketAddr, tls_origin: Option<SocketAddr>) -> Target {
        Target {
            kind: TargetKind::Direct,
            addr: origin,
            tls_addr: tls_origin,
            h2c_addr: Some(origin),
            process: None,
            dir: None,
            cgroup: None,
        }
    }

    /// Starts proxy `kind` on a free loopback port in front of `origin`, pinned to `cpus`, and
    /// waits until `GET /fast` through it answers 200. `tag` tells apart the scratch directories of the
    /// target sets of different origins. With `tls`, the proxy also gets a TLS listener serving
    /// that certificate (`direct` gets the TLS origin), checked with one HTTPS `GET /fast`; with
    /// its `h2`, the proxy gets the HTTP/2 settings ([`super::proxies::H2_SETTINGS`]).
    ///
    /// # Errors
    /// Config-writing and spawn failures; the proxy exiting or not answering within `timeout`
    /// (its captured output is in the message), or its TLS listener not answering 200.
    pub fn start(
        kind: TargetKind,
        bins: &Binaries,
        origin: SocketAddr,
        cpus: &str,
        tag: &str,
        timeout: Duration,
        tls: Option<TargetTls<'_>>,
    ) -> io::Result<Target> {
        if !kind.is_proxy() {
            return Ok(Target::direct(origin, tls.and_then(|t| t.origin)));
        }
        let listen = crate::support::stack::free_port()?;
        let tls_listen = match &tls {
            Some(t) => Some((crate::support::stack::free_port()?, t.certs)),
            None => None,
        };
        let h2 = tls.is_some_and(|t| t.h2);
        let dir = std::env::temp_dir().join(format!(
            "edge-bench-compare-{}-{}{tag}",
            std::process::id(),
            kind.name()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let mut target = Target {
            kind,
            addr: listen,
            tls_addr: tls_listen.map(|(a, _)| a),
            h2c_addr: None,
            process: None,
            dir: Some(dir.clone()),
            cgroup: None,
        };
        let (bin, args) = proxy_command(kind, bins, &dir, listen, origin, tls_listen, h2)?;
        target.process = Some(start_pinned_proxy(
            kind.name(),
            &bin,
            args,
            cpus,
            listen,
            &dir,
            timeout,
        )?);
        if let Some((addr, certs)) = tls_listen {
            check_tls(addr, certs).map_err(|e| {
                let out = target
                    .process
                    .as_ref()
                    .map(|p| p.output())
                    .unwrap_or_default();
                io::Error::new(
                    e.kind(),
                    format!("{}: TLS listener {addr}: {e}\n{out}", kind.name()),
                )
            })?;
        }
        Ok(target)
    }

    /// [`Target::start`] for the HTTP/2-upstream workloads: the proxy speaks HTTP/2 to the h2c
    /// `origin` and gets an h2c listener ([`super::h2_upstream`]); the health check is an HTTP/1.1
    /// `GET /fast` through the proxy to the origin (so through its h2 upstream).
    ///
    /// # Errors
    /// As [`Target::start`]; an edge without HTTP/2 upstreams rejects its config (said so).
    pub fn start_h2_upstream(
        kind: TargetKind,
        bins: &Binaries,
        origin: SocketAddr,
        cpus: &str,
        tag: &str,
        timeout: Duration,
    ) -> io::Result<Target> {
        use super::h2_upstream::{edge_toml, haproxy_config, nginx_config};
        if !kind.is_proxy() {
            return Ok(Target::direct(origin, None));
        }
        let listen = crate::support::stack::free_port()?;
        let h2c = match kind {
            k if k.is_edge() => listen,
            _ => crate::support::stack::free_port()?,
        };
        let dir = std::env::temp_dir().join(format!(
            "edge-bench-compare-{}-{}{tag}",
            std::process::id(),
            kind.name()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let mut target = Target {
            kind,
            addr: listen,
            tls_addr: None,
            h2c_addr: Some(h2c),
            process: None,
            dir: Some(dir.clone()),
            cgroup: None,
        };
        let (bin, args) = match kind {
            TargetKind::Nginx => (
                bins.nginx.clone(),
                super::proxies::nginx_args(&dir, &nginx_config(&dir, listen, h2c, origin))?,
            ),
            TargetKind::Haproxy => {
                let conf = dir.join("haproxy.cfg");
                fs::write(&conf, haproxy_config(listen, h2c, origin))?;
                let args = vec!["-db".into(), "-f".into(), conf.display().to_string()];
                (bins.haproxy.clone(), args)
            }
            k => {
                let conf = dir.join("edge-h2-upstream.toml");
                fs::write(&conf, edge_toml(origin))?;
                let bin = match (k.is_baseline(), &bins.baseline) {
                    (true, Some(b)) => b.clone(),
                    _ => bins.edge.clone(),
                };
                let driver = k.edge_driver().unwrap_or("epoll");
                let args = [
                    "--listen",
                    &listen.to_string(),
                    "--admin-listen",
                    "",
                    "--workers",
                    "1",
                    "--io-driver",
                    driver,
                    "--config",
                    &conf.display().to_string(),
                ]
                .map(String::from)
                .to_vec();
                (bin, args)
            }
        };
        let started = start_pinned_proxy(kind.name(), &bin, args, cpus, listen, &dir, timeout);
        target.process = Some(started.map_err(|e| {
            if kind.is_edge() {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{e}\n(edge's HTTP/2 upstreams: protocol = \"h2\" in {}; an edge without \
                         them rejects this config)",
                        dir.join("edge-h2-upstream.toml").display()
                    ),
                )
            } else {
                e
            }
        })?);
        Ok(target)
    }

    /// A target whose proxy `process` already answers on `addr`, started by a scenario its own way
    /// (`slow-readers`: edge with a config file of its own); `dir`, its scratch directory, is removed
    /// on drop.
    pub fn running(
        kind: TargetKind,
        addr: SocketAddr,
        process: EdgeProcess,
        dir: PathBuf,
    ) -> Target {
        Target {
            kind,
            addr,
            tls_addr: None,
            h2c_addr: None,
            process: Some(process),
            dir: Some(dir),
            cgroup: None,
        }
    }

    /// The proxy's pid and its direct children's (nginx: master then worker), empty for `direct`.
    pub fn pids(&self) -> Vec<u32> {
        match &self.process {
            None => Vec::new(),
            Some(p) => {
                let mut pids = vec![p.pid()];
                pids.extend(children_of(p.pid()));
                pids
            }
        }
    }

    /// CPU ticks (utime + stime) used so far by the proxy and its direct children, and the time
    /// their threads spent runnable but waiting for a CPU; `None` for `direct`.
    ///
    /// # Errors
    /// `/proc` read or parse failures for the proxy itself (a child that just exited is skipped).
    pub fn usage(&self) -> io::Result<Option<Usage>> {
        let Some(p) = &self.process else {
            return Ok(None);
        };
        let mut usage = Usage {
            cpu_ticks: proc_stat(p.pid())?.cpu_ticks,
            wait_ns: run_wait_ns(p.pid()),
        };
        for child in children_of(p.pid()) {
            if let Ok(s) = proc_stat(child) {
                usage.cpu_ticks += s.cpu_ticks;
                usage.wait_ns += run_wait_ns(child);
            }
        }
        Ok(Some(usage))
    }

    /// Resets the peak RSS of the proxy and its children to their current RSS; `false` when a
    /// reset failed (the next [`peak_rss_kib`](Self::peak_rss_kib) is then the lifetime peak).
    pub fn reset_peak_rss(&self) -> bool {
        self.pids()
            .into_iter()
            .all(|p| fs::write(format!("/proc/{p}/clear_refs"), "5").is_ok())
    }

    /// `VmHWM` of the proxy plus its direct children, KiB; `None` for `direct` or when unreadable.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let pids = self.pids();
        if pids.is_empty() {
            return None;
        }
        pids.into_iter()
            .map(|p| {
                let text = fs::read_to_string(format!("/proc/{p}/status")).ok()?;
                status_kib(&text, "VmHWM")
            })
            .sum()
    }

    /// Holds the proxy (and its children, nginx's worker) to `percent` % of one CPU from now on,
    /// in a cgroup of its own named after the run, the target and `tag`; `direct` is left alone.
    ///
    /// # Errors
    /// Making the cgroup or moving a process into it ([`CpuQuota`]).
    pub fn limit_cpu(&mut self, percent: u32, tag: &str) -> io::Result<()> {
        if self.process.is_none() {
            return Ok(());
        }
        let name = format!(
            "edge-bench-{}-{}{tag}",
            std::process::id(),
            self.kind.name()
        );
        let quota = CpuQuota::create(&name, percent)?;
        for pid in self.pids() {
            quota.admit(pid)?;
        }
        self.cgroup = Some(quota);
        Ok(())
    }

    /// The share of one CPU the proxy's quota allows (`None`: no quota).
    pub fn cpu_share(&self) -> Option<f64> {
        self.cgroup.as_ref().map(CpuQuota::share)
    }

    /// Total time the quota has held the proxy off its CPU (`None`: no quota, or unreadable).
    pub fn throttled(&self) -> Option<Duration> {
        self.cgroup.as_ref().and_then(CpuQuota::throttled)
    }

    /// The quota in words ([`CpuQuota::describe`]).
    pub fn quota_text(&self) -> Option<String> {
        self.cgroup.as_ref().map(CpuQuota::describe)
    }

    /// Fails when the proxy has exited.
    ///
    /// # Errors
    /// `Other` with the exit status and the proxy's output.
    pub fn check_alive(&mut self) -> io::Result<()> {
        let name = self.kind.name();
        let Some(p) = &mut self.process else {
            return Ok(());
        };
        match p.exited()? {
            None => Ok(()),
            Some(st) => Err(io::Error::other(format!(
                "{name} (pid {}) exited unexpectedly ({st}):\n{}",
                p.pid(),
                p.output()
            ))),
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // Stop the process (EdgeProcess's own drop) before removing its directory and cgroup.
        self.process = None;
        self.cgroup = None;
        if let Some(dir) = self.dir.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// The TLS side of a target set: the certificate, the TLS origin of `direct`, and whether the
/// proxies get the HTTP/2 settings (ALPN h2 first, large upstream pools, no request cap).
#[derive(Debug, Clone, Copy)]
pub struct TargetTls<'a> {
    /// The certificate every TLS listener serves.
    pub certs: &'a CertFiles,
    /// Where `direct` connects over TLS (the TLS origin), when it runs.
    pub origin: Option<SocketAddr>,
    /// The HTTP/2 settings.
    pub h2: bool,
}

/// Cumulative CPU use of a proxy (see [`Target::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// utime + stime, clock ticks.
    pub cpu_ticks: u64,
    /// Time runnable but waiting on a run queue (`/proc/PID/task/*/schedstat`, live threads), ns.
    pub wait_ns: u64,
}

/// One HTTPS `GET /fast` to a TLS listener (TLS 1.3, full handshake, trusting the run's CA),
/// retried for up to 3 s while it starts; prints what was negotiated.
///
/// # Errors
/// The last attempt's error, or a non-200 answer.
pub fn check_tls(addr: SocketAddr, certs: &CertFiles) -> io::Result<()> {
    let config = crate::support::certs::client_config(&certs.ca, false, false)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        match crate::support::tls_probe::tls_get(
            addr,
            &config,
            "localhost",
            "/fast",
            Duration::from_secs(2),
        ) {
            Ok(a) if a.status == 200 => {
                println!("TLS check {addr}: 200 over {} {}", a.protocol, a.suite);
                return Ok(());
            }
            Ok(a) => return Err(io::Error::other(format!("answered {}", a.status))),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Whether the server at `addr` closes the connection after answering `GET path` sent with
/// `Connection: close`: `Ok(Some(true))` on EOF (or reset) within 2 s after a 200,
/// `Ok(Some(false))` when the connection stays open, `Ok(None)` when the answer is not 200.
///
/// # Errors
/// Connect, write and read errors before the answer.
pub fn closes_after_request(addr: SocketAddr, path: &str) -> io::Result<Option<bool>> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut s = crate::support::probe::connect(addr, Duration::from_secs(2))?;
    crate::support::probe::send_get(&mut s, &addr.to_string(), path, true)?;
    let r = crate::support::probe::read_response(&mut s, deadline)?;
    if r.status != 200 {
        return Ok(None);
    }
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut b = [0u8; 64];
    Ok(Some(match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_round_trip() {
        for k in TargetKind::ALL {
            assert_eq!(k.name().parse::<TargetKind>(), Ok(k));
        }
        assert!("apache".parse::<TargetKind>().is_err());
    }
}
