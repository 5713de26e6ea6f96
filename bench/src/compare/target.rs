//! The targets of `edge-bench compare`: edge (io_uring and epoll), nginx, HAProxy and "direct to
//! origin", started as pinned child processes on free loopback ports, plus the CPU accounting
//! from `/proc` (DESIGN.md, Benchmark method).
//!
//! Every proxy runs through `taskset -c PROXY_CPUS BIN …` (taskset execs the proxy, so the child
//! pid is the proxy's) inside [`EdgeProcess`], which captures its output, gives it its own process
//! group and `PR_SET_PDEATHSIG`, and stops it by its own pid (SIGTERM, then SIGKILL to its group):
//! nothing here signals a process by name. Configurations:
//! - edge: `edge --listen L --admin-listen "" --upstream O --workers 1 --io-driver X` (with a
//!   one-CPU mask and one worker, edge's `pin_workers = "auto"` pins the worker to that CPU);
//! - nginx: `nginx -p DIR -e DIR/error.log -c DIR/nginx.conf`, one worker, `daemon off`,
//!   upstream `keepalive 64`, `proxy_http_version 1.1`, `Connection ""`, access log off, every
//!   pid/temp path in DIR; bodies are streamed both ways like edge and HAProxy do
//!   (`proxy_request_buffering off`, `proxy_max_temp_file_size 0`: no spooling of a 1 MiB body to
//!   a temp file) and `client_max_body_size 0` (no limit; the default 1m is at the POST size);
//! - HAProxy: `haproxy -db -f DIR/haproxy.cfg`, `nbthread 1`, `maxconn 4000`, `mode http`,
//!   `option http-keep-alive`, `http-reuse always`.
//!
//! Other settings stay at each server's defaults (nginx and edge both end a client connection
//! after 1000 requests; HAProxy has no such limit).
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
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::support::edge_proc::EdgeProcess;

/// Default nginx executable (Debian package).
pub const NGINX_BIN: &str = "/usr/sbin/nginx";
/// Default HAProxy executable (Debian package).
pub const HAPROXY_BIN: &str = "/usr/sbin/haproxy";

/// Path every target is loaded and health-checked on (the origin never delays it).
pub const LOAD_PATH: &str = "/fast";

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// edge with `--io-driver io_uring`.
    EdgeUring,
    /// edge with `--io-driver epoll`.
    EdgeEpoll,
    /// nginx, one worker.
    Nginx,
    /// HAProxy, one thread.
    Haproxy,
    /// wrk straight at the origin.
    Direct,
}

impl TargetKind {
    /// Every kind, in the default order.
    pub const ALL: [TargetKind; 5] = [
        TargetKind::EdgeUring,
        TargetKind::EdgeEpoll,
        TargetKind::Nginx,
        TargetKind::Haproxy,
        TargetKind::Direct,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::EdgeUring => "edge-io_uring",
            TargetKind::EdgeEpoll => "edge-epoll",
            TargetKind::Nginx => "nginx",
            TargetKind::Haproxy => "haproxy",
            TargetKind::Direct => "direct",
        }
    }

    /// Whether this is an edge build.
    pub fn is_edge(self) -> bool {
        matches!(self, TargetKind::EdgeUring | TargetKind::EdgeEpoll)
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
    /// The proxy process (none for `direct`).
    pub process: Option<EdgeProcess>,
    /// Scratch directory with configs, pid and logs (removed on drop).
    dir: Option<PathBuf>,
}

impl Target {
    /// The `direct` target: load straight at the origin.
    pub fn direct(origin: SocketAddr) -> Target {
        Target {
            kind: TargetKind::Direct,
            addr: origin,
            process: None,
            dir: None,
        }
    }

    /// Starts proxy `kind` on a free loopback port in front of `origin`, pinned to `cpus`, and
    /// waits until `GET /fast` through it answers 200.
    ///
    /// # Errors
    /// Config-writing and spawn failures; the proxy exiting or not answering within `timeout`
    /// (its captured output is in the message).
    pub fn start(
        kind: TargetKind,
        bins: &Binaries,
        origin: SocketAddr,
        cpus: &str,
        timeout: Duration,
    ) -> io::Result<Target> {
        if !kind.is_proxy() {
            return Ok(Target::direct(origin));
        }
        let listen = crate::support::stack::free_port()?;
        let dir = std::env::temp_dir().join(format!(
            "edge-bench-compare-{}-{}",
            std::process::id(),
            kind.name()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let mut target = Target {
            kind,
            addr: listen,
            process: None,
            dir: Some(dir.clone()),
        };
        let (bin, args) = match kind {
            TargetKind::EdgeUring | TargetKind::EdgeEpoll => {
                let driver = if kind == TargetKind::EdgeUring {
                    "io_uring"
                } else {
                    "epoll"
                };
                let args = [
                    "--listen",
                    &listen.to_string(),
                    "--admin-listen",
                    "",
                    "--upstream",
                    &origin.to_string(),
                    "--workers",
                    "1",
                    "--io-driver",
                    driver,
                ]
                .map(String::from)
                .to_vec();
                (bins.edge.clone(), args)
            }
            TargetKind::Nginx => {
                let conf = dir.join("nginx.conf");
                fs::write(&conf, nginx_config(&dir, listen, origin))?;
                let d = dir.display().to_string();
                let args = vec![
                    "-p".to_string(),
                    format!("{d}/"),
                    "-e".to_string(),
                    format!("{d}/error.log"),
                    "-c".to_string(),
                    conf.display().to_string(),
                ];
                (bins.nginx.clone(), args)
            }
            TargetKind::Haproxy => {
                let conf = dir.join("haproxy.cfg");
                fs::write(&conf, haproxy_config(listen, origin))?;
                let args = vec![
                    "-db".to_string(),
                    "-f".to_string(),
                    conf.display().to_string(),
                ];
                (bins.haproxy.clone(), args)
            }
            TargetKind::Direct => unreachable!("handled above"),
        };
        let mut taskset_args = vec![
            "-c".to_string(),
            cpus.to_string(),
            bin.display().to_string(),
        ];
        taskset_args.extend(args);
        println!(
            "starting {}: taskset {}",
            kind.name(),
            shell_words(&taskset_args)
        );
        let mut process = EdgeProcess::start(Path::new("taskset"), &taskset_args)?;
        let health = process.wait_healthy(listen, LOAD_PATH, timeout);
        if let Err(e) = health {
            // EdgeProcess words its errors for edge; name the real program.
            let e = io::Error::new(e.kind(), e.to_string().replacen("edge", kind.name(), 1));
            let out = process.output();
            let log = target
                .dir
                .as_ref()
                .and_then(|d| fs::read_to_string(d.join("error.log")).ok())
                .unwrap_or_default();
            let _ = process.stop(Duration::from_secs(2));
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "{} did not come up: {e}\n--- output ---\n{out}{log}--- end ---",
                    kind.name()
                ),
            ));
        }
        target.process = Some(process);
        Ok(target)
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
        // Stop the process (EdgeProcess's own drop) before removing its directory.
        self.process = None;
        if let Some(dir) = self.dir.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Starts `edge-bench origin` (this executable) as a child pinned to `cpus` with `workers`
/// worker threads on a free loopback port, and waits until `GET /fast` answers 200.
///
/// A separate process rather than the in-process origin: the in-process origin's accepted
/// sockets are not close-on-exec, so every wrk and proxy started later would inherit the
/// origin's open connections (wrk then ran out of event-loop slots and counted connect errors,
/// and a connection the origin closed stayed open in the child).
///
/// # Errors
/// Spawn failures, the origin exiting, or not answering within `timeout`.
pub fn start_origin(
    cpus: &str,
    workers: usize,
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    let exe = std::env::current_exe()?;
    let args = [
        "-c",
        cpus,
        &exe.display().to_string(),
        "origin",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &workers.to_string(),
        "--cpus",
        cpus,
    ]
    .map(String::from);
    let mut p = EdgeProcess::start(Path::new("taskset"), &args)?;
    let deadline = std::time::Instant::now() + timeout;
    let addr = loop {
        if let Some(addr) = listening_addr(&p.output()) {
            break addr;
        }
        if let Some(st) = p.exited()? {
            return Err(io::Error::other(format!(
                "origin exited during startup ({st}): {}",
                p.output()
            )));
        }
        if std::time::Instant::now() >= deadline {
            let _ = p.stop(Duration::from_secs(1));
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("origin printed no address: {}", p.output()),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    p.wait_healthy(addr, LOAD_PATH, timeout)?;
    Ok((p, addr))
}

/// The address in the origin's `origin listening on ADDR` line.
pub fn listening_addr(output: &str) -> Option<SocketAddr> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("origin listening on "))
        .and_then(|a| a.trim().parse().ok())
}

/// Cumulative CPU use of a proxy (see [`Target::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// utime + stime, clock ticks.
    pub cpu_ticks: u64,
    /// Time runnable but waiting on a run queue (`/proc/PID/task/*/schedstat`, live threads), ns.
    pub wait_ns: u64,
}

/// Run-queue wait of every live thread of `pid` (second field of each thread's `schedstat`), ns;
/// 0 when unavailable.
pub fn run_wait_ns(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| {
            let text = fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            text.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum()
}

/// One `/proc/PID/stat` line, the fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Parent pid.
    pub ppid: u32,
    /// utime + stime in clock ticks (all threads, live and exited).
    pub cpu_ticks: u64,
}

/// Reads `/proc/PID/stat`.
///
/// # Errors
/// Read failures (no such process) and unparseable content.
pub fn proc_stat(pid: u32) -> io::Result<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::other(format!("cannot parse /proc/{pid}/stat")))
}

/// Parses a `/proc/PID/stat` line (the command name may contain spaces and parentheses).
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": state(3) ppid(4) … utime(14) stime(15), numbered as in proc(5).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        cpu_ticks: utime + stime,
    })
}

/// Pids whose parent is `pid` (scans `/proc`; processes that vanish mid-scan are skipped).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut kids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| proc_stat(p).is_ok_and(|s| s.ppid == pid))
        .collect();
    kids.sort_unstable();
    kids
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// A `Key:   1234 kB` value of `/proc/PID/status`, in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        v.trim().strip_suffix("kB")?.trim().parse().ok()
    })
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

/// `Cpus_allowed_list` of a process from `/proc/PID/status`.
pub fn cpus_allowed(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// The nginx configuration: one worker, upstream keepalive, everything under `dir`.
pub fn nginx_config(dir: &Path, listen: SocketAddr, origin: SocketAddr) -> String {
    let d = dir.display();
    format!(
        "# written by edge-bench compare
worker_processes 1;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_max_body_size 0;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream origin {{
        server {origin};
        keepalive 64;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_request_buffering off;
            proxy_max_temp_file_size 0;
        }}
    }}
}}
"
    )
}

/// The HAProxy configuration: one thread, connection reuse always, keep-alive both sides.
pub fn haproxy_config(listen: SocketAddr, origin: SocketAddr) -> String {
    format!(
        "# written by edge-bench compare
global
    nbthread 1
    maxconn 4000

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend bench
    bind {listen}
    default_backend origin

backend origin
    server origin {origin}
"
    )
}

/// Arguments joined for display, quoting empty and spaced ones.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("\"{a}\"")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_odd_name() {
        let line = "1234 (ng inx) (x)) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 \
                    5000 1000 200 18446744073709551615\n";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                ppid: 77,
                cpu_ticks: 281
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        let s = proc_stat(me).unwrap();
        assert!(s.ppid > 0);
        assert!(cpus_allowed(me).is_some());
        let _ = run_wait_ns(me);
        assert_eq!(
            listening_addr("x\norigin listening on 127.0.0.1:4000\n"),
            Some("127.0.0.1:4000".parse().unwrap())
        );
        assert_eq!(listening_addr("origin listening on\n"), None);
    }

    #[test]
    fn target_names_round_trip() {
        for k in TargetKind::ALL {
            assert_eq!(k.name().parse::<TargetKind>(), Ok(k));
        }
        assert!("apache".parse::<TargetKind>().is_err());
    }

    #[test]
    fn configs_name_origin_and_listener() {
        let l: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let o: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let n = nginx_config(Path::new("/tmp/x"), l, o);
        assert!(n.contains("listen 127.0.0.1:1000;") && n.contains("server 127.0.0.1:2000;"));
        assert!(n.contains("keepalive 64;") && n.contains("pid /tmp/x/nginx.pid;"));
        assert!(n.contains("worker_processes 1;") && n.contains("daemon off;"));
        assert!(
            n.contains("proxy_http_version 1.1;")
                && n.contains("proxy_set_header Connection \"\";")
        );
        assert!(
            n.contains("proxy_request_buffering off;") && n.contains("client_max_body_size 0;")
        );
        assert!(n.contains("proxy_temp_path /tmp/x/proxy;"));
        // Balanced braces: every block the template opens, it closes.
        assert_eq!(n.matches('{').count(), n.matches('}').count());
        let h = haproxy_config(l, o);
        assert!(h.contains("bind 127.0.0.1:1000") && h.contains("server origin 127.0.0.1:2000"));
        assert!(h.contains("nbthread 1") && h.contains("http-reuse always"));
        assert!(h.contains("mode http") && h.contains("option http-keep-alive"));
        assert!(h.contains("default_backend origin") && h.contains("\nbackend origin\n"));
    }

    #[test]
    fn status_values() {
        let st = "Name:\tnginx\nVmPeak:\t  9000 kB\nVmHWM:\t    5120 kB\nVmRSS:\t 4000 kB\n";
        assert_eq!(status_kib(st, "VmHWM"), Some(5120));
        assert_eq!(status_kib(st, "VmRSS"), Some(4000));
        assert_eq!(status_kib(st, "VmSwap"), None);
        let me = fs::read_to_string("/proc/self/status").unwrap();
        assert!(status_kib(&me, "VmHWM").unwrap() > 0);
    }

    #[test]
    fn words_are_quoted_when_needed() {
        let args = ["--admin-listen", "", "a b"].map(String::from);
        assert_eq!(shell_words(&args), "--admin-listen \"\" \"a b\"");
    }
}
