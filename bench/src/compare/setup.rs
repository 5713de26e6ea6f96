//! The target sets of `edge-bench compare`: the workloads are split into [`Group`]s, each run
//! over its own origin and its own proxies (started for the group, stopped after it), so a
//! group's proxy settings do not leak into another's figures: the plain and TLS workloads against
//! edge-bench's origin, the `@nginx` ones against the nginx origin, and the HTTP/2 ones against
//! edge-bench's origin with the h2 settings of [`super::proxies::H2_SETTINGS`] (without `direct`:
//! the origin speaks HTTP/1.1 only), and the HTTP/2-upstream ones against an h2c origin
//! ([`super::h2_upstream`]).

use std::io;

use super::plan::Plan;
use super::proxies;
use super::target::{check_tls, Target, TargetKind, TargetTls};
use super::tls::TlsSetup;
use super::workload::{OriginKind, Workload};
use super::START_TIMEOUT;
use crate::peers::origin::child::{start_origin, start_origin_with};
use crate::support::edge_proc::{EdgeProcess, STOP_GRACE};
use crate::support::procfs::cpus_allowed;

/// Workloads that share an origin and the proxies' settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Plain and TLS HTTP/1.1 workloads against edge-bench's origin.
    Own,
    /// The `@nginx` workloads, against the nginx origin.
    Nginx,
    /// The HTTP/2 workloads (`h2-…`): edge-bench's origin, proxies with the h2 settings.
    H2,
    /// The HTTP/2-upstream workloads (`grpc-…`, `h1-to-h2`): an h2c origin, proxies with h2
    /// upstreams and an h2c listener.
    H2Upstream,
}

impl Group {
    /// Every group, in the order they run.
    pub const ALL: [Group; 4] = [Group::Own, Group::Nginx, Group::H2, Group::H2Upstream];

    /// The group of a workload.
    pub fn of(w: Workload) -> Group {
        match (w.is_h2(), w.origin()) {
            (true, _) => Group::H2,
            (false, OriginKind::Own) => Group::Own,
            (false, OriginKind::Nginx) => Group::Nginx,
            (false, OriginKind::H2c) => Group::H2Upstream,
        }
    }

    /// The origin its targets proxy to.
    pub fn origin(self) -> OriginKind {
        match self {
            Group::Nginx => OriginKind::Nginx,
            Group::H2Upstream => OriginKind::H2c,
            _ => OriginKind::Own,
        }
    }

    /// Whether `kind` runs in this group (`direct` does not speak h2).
    pub fn runs(self, kind: TargetKind) -> bool {
        self != Group::H2 || kind != TargetKind::Direct
    }

    /// The suffix of its targets' scratch directories.
    fn tag(self) -> &'static str {
        match self {
            Group::Own => "",
            Group::Nginx => "-nginx-origin",
            Group::H2 => "-h2",
            Group::H2Upstream => "-h2-upstream",
        }
    }
}

/// Starts the origin the workloads of `kind` proxy to, on the load CPUs: `edge-bench origin`, or
/// nginx (`return 200` with an application's fields; [`proxies::nginx_origin_config`]).
///
/// # Errors
/// The origin does not start.
pub fn start_origin_of(
    kind: OriginKind,
    plan: &Plan,
) -> io::Result<(EdgeProcess, std::net::SocketAddr)> {
    match kind {
        OriginKind::Own => {
            let (origin, addr) =
                start_origin(&plan.load_list, plan.load_cpus.len(), START_TIMEOUT)?;
            println!(
                "origin: edge-bench origin (pid {}, {} worker(s) on CPU {}) on {addr}",
                origin.pid(),
                plan.load_cpus.len(),
                plan.load_list,
            );
            Ok((origin, addr))
        }
        OriginKind::Nginx => {
            let (origin, addr) =
                proxies::start_nginx_origin(&plan.bins.nginx, &plan.load_list, START_TIMEOUT)?;
            println!(
                "origin: nginx (pid {}, 1 worker on CPU {}) on {addr}",
                origin.pid(),
                plan.load_list
            );
            Ok((origin, addr))
        }
        OriginKind::H2c => start_h2c_origin(plan),
    }
}

/// The h2c origin of the HTTP/2-upstream workloads: nginx (`listen … http2`, checked with one h2c
/// GET), else `edge-bench origin --h2c`; says which.
///
/// # Errors
/// Neither starts.
fn start_h2c_origin(plan: &Plan) -> io::Result<(EdgeProcess, std::net::SocketAddr)> {
    match start_nginx_h2c_origin(plan) {
        Ok((origin, addr)) => {
            println!(
                "origin: nginx h2c (pid {}, 1 worker on CPU {}) on {addr}",
                origin.pid(),
                plan.load_list
            );
            Ok((origin, addr))
        }
        Err(e) => {
            println!(
                "nginx as the h2c origin failed ({e}); falling back to edge-bench origin --h2c"
            );
            let (origin, addr) = crate::peers::origin::child::start_h2c_origin(
                &plan.load_list,
                plan.load_cpus.len(),
                START_TIMEOUT,
            )?;
            println!(
                "origin: edge-bench origin --h2c (pid {}, {} worker(s) on CPU {}) on {addr}",
                origin.pid(),
                plan.load_cpus.len(),
                plan.load_list
            );
            Ok((origin, addr))
        }
    }
}

/// nginx as the h2c origin, its gRPC answers written first (see [`super::h2_upstream`]).
fn start_nginx_h2c_origin(plan: &Plan) -> io::Result<(EdgeProcess, std::net::SocketAddr)> {
    use super::h2_upstream::{h2c_get_ok, nginx_h2c_origin_config, write_grpc_answers};
    let listen = crate::support::stack::free_port()?;
    let dir = std::env::temp_dir().join(format!(
        "edge-bench-compare-{}-nginx-h2c-origin",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let www = dir.join("www");
    write_grpc_answers(&www)?;
    let args = proxies::nginx_args(&dir, &nginx_h2c_origin_config(&dir, listen, &www))?;
    let mut taskset = vec!["-c".to_string(), plan.load_list.clone()];
    taskset.push(plan.bins.nginx.display().to_string());
    taskset.extend(args);
    let mut p = EdgeProcess::start(std::path::Path::new("taskset"), &taskset)?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        match h2c_get_ok(listen, "/fast", std::time::Duration::from_secs(1)) {
            Ok(()) => return Ok((p, listen)),
            Err(e) if std::time::Instant::now() >= deadline || p.exited()?.is_some() => {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                let _ = p.stop(STOP_GRACE);
                return Err(io::Error::other(format!("{e}; {}{log}", p.output())));
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
}

/// Starts `edge-bench origin` in TLS mode (the `direct` target of the TLS workloads) on the load
/// CPUs and checks it with one HTTPS request.
///
/// # Errors
/// The origin does not start or does not answer over TLS.
pub fn start_tls_origin(
    plan: &Plan,
    tls: &TlsSetup,
) -> io::Result<(EdgeProcess, std::net::SocketAddr)> {
    let certs = &tls.certs;
    let (origin, addr) = start_origin_with(
        &plan.load_list,
        plan.load_cpus.len(),
        Some((&certs.cert, &certs.key)),
        START_TIMEOUT,
    )?;
    check_tls(addr, certs)?;
    println!(
        "TLS origin: edge-bench origin --tls-cert {} (pid {}, on CPU {}) on {addr}",
        certs.cert.display(),
        origin.pid(),
        plan.load_list
    );
    Ok((origin, addr))
}

/// Stops the TLS origin, recording a failure when it had exited during the runs.
///
/// # Errors
/// Failure to check on it.
pub fn stop_tls_origin(
    origin: Option<(EdgeProcess, std::net::SocketAddr)>,
    failures: &mut Vec<String>,
) -> io::Result<()> {
    if let Some((mut p, _)) = origin {
        if let Some(st) = p.exited()? {
            failures.push(format!("the TLS origin exited during the runs ({st})"));
        }
        let _ = p.stop(STOP_GRACE);
    }
    Ok(())
}

/// Starts every target of the plan in front of `origin` (those that fail are recorded and left
/// out); with `tls`, each also gets a TLS listener (`direct`: the TLS origin's address).
pub fn start_targets(
    plan: &Plan,
    origin: std::net::SocketAddr,
    group: Group,
    tls: Option<TargetTls<'_>>,
    failures: &mut Vec<String>,
) -> Vec<Target> {
    let tag = group.tag();
    let mut targets = Vec::new();
    for &k in &plan.kinds {
        if !group.runs(k) {
            println!(
                "{}: not run for the HTTP/2 workloads (edge-bench origin speaks HTTP/1.1 only)",
                k.name()
            );
            continue;
        }
        let started = if group == Group::H2Upstream {
            Target::start_h2_upstream(k, &plan.bins, origin, &plan.proxy_list, tag, START_TIMEOUT)
        } else {
            Target::start(
                k,
                &plan.bins,
                origin,
                &plan.proxy_list,
                tag,
                START_TIMEOUT,
                tls,
            )
        };
        let limited = started.and_then(|mut t| match plan.cpu_quota {
            Some(percent) => t.limit_cpu(percent, tag).map(|()| t),
            None => Ok(t),
        });
        match limited {
            Ok(t) => targets.push(t),
            Err(e) => {
                eprintln!("{e}");
                failures.push(format!("{} failed to start: {e}", k.name()));
            }
        }
    }
    targets
}

/// The CPU placement, with each proxy's pids and their actual affinity from `/proc`.
pub fn placement(targets: &[Target], proxy: &str, load: &str, origin: u32) -> String {
    let origin_cpus = cpus_allowed(origin).unwrap_or_else(|| "?".into());
    let mut s = format!(
        "CPU placement: proxy under test on CPU {proxy} (edge --workers 1, nginx worker_processes 1, \
         HAProxy nbthread 1); wrk -t1, the origin and edge-bench on CPU {load}\n  origin: pid {origin} on CPU {origin_cpus}\n"
    );
    if let Some(q) = targets.iter().find_map(Target::quota_text) {
        s.push_str(&format!("  CPU quota of each proxy: {q}\n"));
    }
    for t in targets.iter().filter(|t| t.kind.is_proxy()) {
        let pids: Vec<String> = t
            .pids()
            .into_iter()
            .map(|p| {
                format!(
                    "{p} on CPU {}",
                    cpus_allowed(p).unwrap_or_else(|| "?".into())
                )
            })
            .collect();
        s.push_str(&format!(
            "  {} on {}: pid {}\n",
            t.kind.name(),
            t.addr,
            pids.join(", pid ")
        ));
    }
    s
}

/// Stops every proxy (SIGTERM to its own pid, SIGKILL after [`STOP_GRACE`]) in parallel and
/// removes their scratch directories.
pub fn stop_all(targets: Vec<Target>) {
    std::thread::scope(|scope| {
        for mut t in targets {
            scope.spawn(move || {
                let name = t.kind.name();
                if let Some(p) = t.process.as_mut() {
                    let pid = p.pid();
                    match p.stop(STOP_GRACE) {
                        Ok(how) => println!("stopped {name} (pid {pid}): {how}"),
                        Err(e) => eprintln!("stopping {name} (pid {pid}): {e}"),
                    }
                }
                drop(t);
            });
        }
    });
}
