//! The steps of [`crate::start`], in the order it takes them (DESIGN.md "Process model", "Drain and
//! upgrade"): claim the upgrade socket (take the listeners over from the running edge, or bind the offer
//! for the next upgrade), fit `max_connections` to the fd limit, choose the io driver, adopt or bind the
//! traffic listeners, install the metrics recorder, publish the shared state, start the admin thread, the
//! health thread and the workers, log the plan, finish a takeover and tell systemd, log `startup.ready`,
//! then supervise until a signal or a handover.
//!
//! A step that fails has logged `startup.failed` (or what the step names) and returns `Err` with the exit
//! code: [`EXIT_CONFIG`] for what the operator must fix, [`EXIT_RUNTIME`] otherwise.

use std::{net::SocketAddr, net::TcpListener, sync::Arc, time::Duration};

use edge_core::{
    config::{IoDriverSetting, Resolved, Workers},
    runtime::{self, listen, IoDriver, ListenerKind, Shared, Supervisor, WorkerMain},
};
use metrics_exporter_prometheus::PrometheusHandle;

use super::{admin, handover as upgrade, reload, supervise, worker};
use crate::{EXIT_CONFIG, EXIT_RUNTIME};

/// A step's outcome: its value, or the exit code once the failure is logged.
type Step<T> = Result<T, i32>;

/// The traffic listeners and the workers that serve them.
struct Traffic {
    /// One SO_REUSEPORT plain listener per worker; none when `server.listen = ""`.
    plain: Vec<socket2::Socket>,
    /// One SO_REUSEPORT TLS listener per worker; none without `[server.tls]`.
    tls: Vec<socket2::Socket>,
    /// The address the plain ones are bound to (the real port when `server.listen` asks for port 0).
    bound: Option<SocketAddr>,
    /// The address the TLS ones are bound to.
    tls_bound: Option<SocketAddr>,
    /// Worker count.
    workers: usize,
    /// The CPU each worker is pinned to, in worker order; `None` for unpinned.
    cpus: Vec<Option<usize>>,
}

/// Everything of [`crate::start`] after logging, the panic hook and signal masking: returns the exit
/// code of the supervision loop.
///
/// # Errors
/// The exit code of the first step that failed (already logged).
pub(crate) fn run(resolved: &Resolved, source: &reload::ConfigSource, upgrade: bool) -> Step<i32> {
    let cfg = &resolved.config;
    let upgrade_path = cfg.server.upgrade_socket.as_str();
    let mut inherited = if upgrade {
        Some(take_over(upgrade_path, source.file())?)
    } else {
        None
    };
    // Bound before anything else so a second edge on the same socket fails early (the handover's new
    // process rebinds it once it serves).
    let mut offer = if !upgrade && !upgrade_path.is_empty() {
        Some(bind_offer(upgrade_path, source.file())?)
    } else {
        None
    };

    let (fd_limit, max_connections) = fit_fd_limit(cfg.server.max_connections);
    let driver = choose_driver(cfg.server.io_driver)?;
    let traffic = match inherited.as_mut() {
        Some(i) => adopt_listeners(i, resolved, source.file())?,
        None => bind_listeners(resolved)?,
    };
    let prom = install_recorder()?;
    let shared = publish(resolved, traffic.workers, max_connections, driver);
    // The access-log writer runs before the workers that hand it lines (edge_core::access_log).
    if let Err(e) = shared.access.start(&resolved.config.log.access_path) {
        tracing::error!(event = "startup.failed", error = %e, "cannot start the access-log writer thread");
        return Err(EXIT_RUNTIME);
    }
    if let Some(a) = traffic.tls_bound {
        shared
            .tls_port
            .store(a.port(), std::sync::atomic::Ordering::Relaxed);
    }
    crate::process::reload::announce(resolved);
    crate::request::route::log_warnings(resolved);

    // Taken from the handover even when admin is disabled now; held (unserved) until the process ends.
    let mut inherited_admin = inherited.as_mut().and_then(|i| i.admin.take());
    let (admin_addr, admin_keep) = match resolved.admin_listen {
        Some(a) => {
            let (addr, keep) = start_admin(a, inherited_admin.take(), &shared, prom)?;
            (Some(addr), keep)
        }
        None => (None, None),
    };

    start_health(&shared)?;
    let mut sup = start_workers(&shared, driver, &traffic)?;
    log_plan(resolved, &traffic, driver, max_connections, fd_limit);
    match inherited {
        // In an upgrade no offer was bound above; this process offers its sockets once it serves.
        Some(i) => offer = finish_take_over(i, upgrade_path),
        None => supervise::sd_notify("READY=1"),
    }
    // The certificate and configuration files' stamps are taken before `startup.ready`: a file changed
    // after that line is seen by the first `reload_check` / `config_check` poll.
    let watches = supervise::Watches {
        certs: crate::process::cert_watch::CertWatch::start(&shared),
        config: crate::process::config_watch::ConfigWatch::start(&shared, source),
    };
    log_ready(&traffic, admin_addr, driver);

    let handover = supervise::Handover {
        offer,
        admin: admin_keep,
    };
    let listeners = supervise::TrafficListeners {
        plain: &traffic.plain,
        tls: &traffic.tls,
    };
    let code = supervise::supervise(&mut sup, &shared, source, listeners, &handover, watches);
    sup.join(Duration::from_millis(200));
    // The workers handed over their last access lines as they ended.
    shared.access.sync(Duration::from_millis(500));
    Ok(code)
}

/// `--upgrade`: receives the listening sockets from the running edge at `path` (the configured
/// `server.upgrade_socket`; `file` is where that came from, for the error).
///
/// # Errors
/// [`EXIT_CONFIG`] when no upgrade socket is configured, [`EXIT_RUNTIME`] when the handover fails.
fn take_over(path: &str, file: &str) -> Step<upgrade::Inherited> {
    if path.is_empty() {
        tracing::error!(
            event = "startup.failed",
            file,
            key = "server.upgrade_socket",
            reason = "--upgrade needs the running edge's upgrade socket; it is \"\""
        );
        return Err(EXIT_CONFIG);
    }
    match upgrade::take_over(path) {
        Ok(i) => {
            tracing::info!(
                event = "upgrade.received",
                old_pid = i.old_pid,
                traffic = i.traffic.len(),
                tls = i.tls.len(),
                admin = i.admin.is_some(),
                "listening sockets received from the running edge"
            );
            Ok(i)
        }
        Err(e) => {
            tracing::error!(event = "startup.failed", error = %e, "--upgrade: cannot take the listeners over");
            Err(EXIT_RUNTIME)
        }
    }
}

/// Binds the upgrade socket at `path` that a later `edge --upgrade` takes the listeners from.
///
/// # Errors
/// [`EXIT_CONFIG`] when it cannot be bound (another edge answers there, or the path is unusable).
fn bind_offer(path: &str, file: &str) -> Step<upgrade::Offer> {
    upgrade::Offer::bind(path).map_err(|reason| {
        tracing::error!(event = "startup.failed", file, key = "server.upgrade_socket", %reason);
        EXIT_CONFIG
    })
}

/// Below this many effective connections, a lowered `max_connections` is logged at warn (at info above).
const FD_LIMIT_WARN_BELOW: usize = 1000;

/// Raises RLIMIT_NOFILE and lowers `max_connections` to what it can hold (DESIGN.md "Process model"),
/// with a line when it had to (warn when fewer than [`FD_LIMIT_WARN_BELOW`] connections fit); returns (the fd limit, the effective `max_connections`).
fn fit_fd_limit(configured: usize) -> (u64, usize) {
    let fd_limit = listen::raise_fd_limit();
    let max_connections = listen::fit_max_connections(configured, fd_limit);
    // A limit that still holds a thousand connections is an ordinary machine's, not a misconfiguration:
    // said at info, so a default start does not open with a warning.
    if max_connections < configured && max_connections >= FD_LIMIT_WARN_BELOW {
        tracing::info!(
            event = "startup.fd_limit",
            fd_limit,
            configured,
            effective = max_connections,
            "RLIMIT_NOFILE cannot hold 2 x max_connections + 256; max_connections lowered"
        );
    } else if max_connections < configured {
        tracing::warn!(
            event = "startup.fd_limit",
            fd_limit,
            configured,
            effective = max_connections,
            "RLIMIT_NOFILE cannot hold 2 x max_connections + 256; max_connections lowered"
        );
    }
    (fd_limit, max_connections)
}

/// The io driver for all workers, with a warning when `auto` falls back to epoll.
///
/// # Errors
/// [`EXIT_CONFIG`] when `io_driver = "io_uring"` and the kernel refuses it.
fn choose_driver(setting: IoDriverSetting) -> Step<IoDriver> {
    let (driver, fallback) = runtime::choose_driver(setting).map_err(|e| {
        tracing::error!(event = "startup.failed", error = %e, "io_driver = \"io_uring\" but the kernel refuses io_uring");
        EXIT_CONFIG
    })?;
    if let Some(e) = fallback {
        tracing::warn!(event = "startup.io_uring_unavailable", error = %e, "io_uring cannot be set up; using epoll");
    }
    Ok(driver)
}

/// The plain listener's address; `None` when `server.listen = ""` disables it.
fn plain_addr(resolved: &Resolved) -> Option<SocketAddr> {
    resolved.plain_listener.then_some(resolved.listen)
}

/// The TLS listener's address, with `[server.tls]`.
fn tls_addr(resolved: &Resolved) -> Option<SocketAddr> {
    resolved.tls_listen
}

/// Binds one SO_REUSEPORT traffic listener per planned worker, plain and TLS.
///
/// # Errors
/// [`EXIT_CONFIG`] when a port is held by another process, [`EXIT_RUNTIME`] for any other failure.
fn bind_listeners(resolved: &Resolved) -> Step<Traffic> {
    let server = &resolved.config.server;
    let (workers, cpus) = runtime::cpus::plan(server.workers, server.pin_workers);
    let bind = |addr: Option<SocketAddr>, which: &str| match addr {
        None => Ok((Vec::new(), None)),
        Some(a) => match listen::reuseport_listeners(a, workers, server.backlog) {
            Ok((sockets, bound)) => Ok((sockets, Some(bound))),
            Err(e) => {
                tracing::error!(event = "startup.failed", error = %e, "cannot bind the {which} listener");
                Err(match e {
                    listen::ListenError::InUse(_) => EXIT_CONFIG,
                    listen::ListenError::Other(..) => EXIT_RUNTIME,
                })
            }
        },
    };
    let (plain, bound) = bind(plain_addr(resolved), "traffic")?;
    let (tls, tls_bound) = bind(tls_addr(resolved), "TLS")?;
    Ok(Traffic {
        plain,
        tls,
        bound,
        tls_bound,
        workers,
        cpus,
    })
}

/// The inherited traffic sockets as listeners: one worker per socket (the running process's count; a
/// different `server.workers` is reported and overridden, since each socket has its own accept queue
/// that needs a worker).
///
/// # Errors
/// [`EXIT_CONFIG`] for a listener address that differs from the running edge's (or a listener added or
/// removed), [`EXIT_RUNTIME`] when an inherited socket has no address.
fn adopt_listeners(i: &mut upgrade::Inherited, resolved: &Resolved, file: &str) -> Step<Traffic> {
    let cfg = &resolved.config;
    let plain = std::mem::take(&mut i.traffic);
    let tls = std::mem::take(&mut i.tls);
    let bound = adopted_address(&plain, plain_addr(resolved), file, "server.listen")?;
    let tls_bound = adopted_address(&tls, tls_addr(resolved), file, "server.tls.listen")?;
    let (planned, _) = runtime::cpus::plan(cfg.server.workers, cfg.server.pin_workers);
    let workers = plain.len().max(tls.len());
    if (!plain.is_empty() && plain.len() != workers) || (!tls.is_empty() && tls.len() != workers) {
        tracing::error!(
            event = "startup.failed",
            plain = plain.len(),
            tls = tls.len(),
            "--upgrade: the running edge handed over unequal numbers of plain and TLS listeners"
        );
        return Err(EXIT_RUNTIME);
    }
    if planned != workers {
        tracing::warn!(event = "upgrade.workers", configured = planned, inherited = workers, "--upgrade keeps the running process's worker count (one per inherited listener); restart to change it");
    }
    for s in plain.iter().chain(&tls) {
        // A listener of an older edge may not bound its sockets' unsent queue yet.
        let _ = listen::bound_unsent(s);
    }
    let (_, cpus) = runtime::cpus::plan(Workers::Count(workers), cfg.server.pin_workers);
    Ok(Traffic {
        plain,
        tls,
        bound,
        tls_bound,
        workers,
        cpus,
    })
}

/// The address of inherited listeners `socks`, checked against the configured `want` (`key` in
/// `file`): an upgrade keeps every listener where it is.
fn adopted_address(
    socks: &[socket2::Socket],
    want: Option<SocketAddr>,
    file: &str,
    key: &str,
) -> Step<Option<SocketAddr>> {
    let Some(first) = socks.first() else {
        if want.is_some() {
            tracing::error!(event = "startup.failed", file, key, reason = "the running edge has no such listener; a listener cannot be added in an upgrade");
            return Err(EXIT_CONFIG);
        }
        return Ok(None);
    };
    let Some(bound) = first.local_addr().ok().and_then(|a| a.as_socket()) else {
        tracing::error!(
            event = "startup.failed",
            key,
            "--upgrade: the inherited socket has no address"
        );
        return Err(EXIT_RUNTIME);
    };
    match want {
        Some(w) if w.ip() == bound.ip() && (w.port() == 0 || w.port() == bound.port()) => {
            Ok(Some(bound))
        }
        _ => {
            let want = want.map_or("no listener".to_string(), |w| w.to_string());
            tracing::error!(event = "startup.failed", file, key, reason = %format!("the running edge listens on {bound}, not {want}; the listener cannot change in an upgrade"));
            Err(EXIT_CONFIG)
        }
    }
}

/// The metrics recorder that the admin listener renders.
///
/// # Errors
/// [`EXIT_RUNTIME`] when a recorder cannot be installed.
fn install_recorder() -> Step<PrometheusHandle> {
    edge_core::metrics::install_recorder().map_err(|e| {
        tracing::error!(event = "startup.failed", error = %e, "cannot install the metrics recorder");
        EXIT_RUNTIME
    })
}

/// Sets the process gauges and builds the state every worker, the admin thread and the supervisor
/// share, with `resolved` as the published configuration.
fn publish(
    resolved: &Resolved,
    workers: usize,
    max_connections: usize,
    driver: IoDriver,
) -> Arc<Shared> {
    edge_core::metrics::set_process_gauges(
        env!("CARGO_PKG_VERSION"),
        driver.as_str(),
        max_connections,
    );
    let shared = Arc::new(Shared::new(
        workers,
        max_connections,
        driver,
        resolved.clone(),
    ));
    crate::process::discovery::record_load(&shared, resolved);
    shared
}

/// Starts the admin thread on `inherited` (from an upgrade) or on a listener bound to `at`; returns the
/// address it serves on and a copy of its fd, which the supervisor keeps to hand over at the next upgrade.
///
/// # Errors
/// [`EXIT_CONFIG`] when the address is in use, [`EXIT_RUNTIME`] for any other failure.
fn start_admin(
    at: SocketAddr,
    inherited: Option<TcpListener>,
    shared: &Arc<Shared>,
    prom: PrometheusHandle,
) -> Step<(SocketAddr, Option<TcpListener>)> {
    let l = inherited
        .map_or_else(|| TcpListener::bind(at), Ok)
        .map_err(|e| {
            tracing::error!(event = "startup.failed", error = %e, admin = %at, "cannot bind the admin listener");
            if e.kind() == std::io::ErrorKind::AddrInUse {
                EXIT_CONFIG
            } else {
                EXIT_RUNTIME
            }
        })?;
    let addr = l.local_addr().unwrap_or(at);
    let keep = l.try_clone().ok();
    if let Err(e) = admin::start(l, shared.clone(), prom) {
        tracing::error!(event = "startup.failed", error = %e);
        return Err(EXIT_RUNTIME);
    }
    Ok((addr, keep))
}

/// Starts the health thread of DESIGN.md "Upstream health, discovery and balancing" (one for the
/// process, unpinned; it follows reloads and stops at `closing`), also when no upstream has a
/// `[upstreams.health_check]` yet, since a reload may add one.
///
/// # Errors
/// [`EXIT_RUNTIME`] when the thread cannot be spawned.
fn start_health(shared: &Arc<Shared>) -> Step<()> {
    match edge_upstream::health::start(shared.clone()) {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(event = "startup.failed", error = %e, "cannot start the health thread");
            Err(EXIT_RUNTIME)
        }
    }
}

/// Starts one worker per traffic listener (on a duplicate of its fd: the supervisor keeps the originals
/// for restarts and handovers). Workers, and restarted workers, take the configuration published in
/// `shared`.
///
/// # Errors
/// [`EXIT_RUNTIME`] when a worker does not start.
fn start_workers(shared: &Arc<Shared>, driver: IoDriver, traffic: &Traffic) -> Step<Supervisor> {
    let main: WorkerMain = Arc::new(|env| Box::pin(worker::run(env)));
    let dup = |s: &socket2::Socket| s.try_clone().expect("dup");
    let dups = (0..traffic.workers)
        .map(|i| {
            let plain = traffic.plain.get(i).map(|s| (ListenerKind::Plain, dup(s)));
            let tls = traffic.tls.get(i).map(|s| (ListenerKind::Tls, dup(s)));
            plain.into_iter().chain(tls).collect()
        })
        .collect();
    Supervisor::start(shared.clone(), driver, main, dups, traffic.cpus.clone()).map_err(|e| {
        tracing::error!(event = "startup.failed", error = %e, "workers did not start");
        EXIT_RUNTIME
    })
}

/// Logs what started: workers and their CPUs, the io driver, the connection limit and each upstream's
/// resolved endpoints.
fn log_plan(
    resolved: &Resolved,
    traffic: &Traffic,
    driver: IoDriver,
    max_connections: usize,
    fd_limit: u64,
) {
    let mask = runtime::cpus::affinity_cpus();
    let pinned: Vec<String> = traffic
        .cpus
        .iter()
        .map(|c| c.map_or("-".into(), |c| c.to_string()))
        .collect();
    let quota = runtime::cpus::cgroup_cpu_limit().map_or("none".into(), |n| n.to_string());
    tracing::info!(event = "startup.workers", workers = traffic.workers, cpus_in_mask = mask.len(), cgroup_cpu_limit = %quota, pinned_cpus = %pinned.join(","));
    tracing::info!(event = "startup.io_driver", io_driver = driver.as_str());
    tracing::info!(event = "startup.limits", max_connections, fd_limit);
    for u in &resolved.upstreams {
        let eps: Vec<String> = u.endpoints.iter().map(ToString::to_string).collect();
        tracing::info!(event = "startup.upstream", name = %u.config.name, endpoints = %eps.join(","));
    }
}

/// Ends an upgrade once this process serves: tells the old process to drain, binds the upgrade socket
/// afresh so this process can be upgraded in turn (`None` when it cannot), and tells systemd this is the
/// main process now.
fn finish_take_over(i: upgrade::Inherited, path: &str) -> Option<upgrade::Offer> {
    let old_pid = i.old_pid;
    if let Err(e) = i.confirm() {
        // The sockets are ours either way; the old process will notice and keep serving too.
        tracing::warn!(event = "upgrade.confirm_failed", old_pid, error = %e, "could not tell the old process to drain");
    }
    let offer = match upgrade::Offer::rebind(path) {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::warn!(event = "upgrade.unavailable", error = %e, "this process cannot be upgraded in turn");
            None
        }
    };
    tracing::info!(
        event = "upgrade.done",
        old_pid,
        "serving on the inherited sockets; the old process drains"
    );
    supervise::sd_notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    offer
}

/// The `startup.ready` line: where traffic and admin are served, by how many workers, on which driver.
fn log_ready(traffic: &Traffic, admin: Option<SocketAddr>, driver: IoDriver) {
    tracing::info!(
        event = "startup.ready",
        traffic = %traffic.bound.map_or("disabled".to_string(), |a| a.to_string()),
        tls = %traffic.tls_bound.map_or("disabled".to_string(), |a| a.to_string()),
        admin = %admin.map_or("disabled".to_string(), |a| a.to_string()),
        workers = traffic.workers,
        io_driver = driver.as_str(),
        "edge is serving"
    );
}

/// Panics are logged as one `panic` line (thread, location, message) instead of the default stderr
/// report. A backtrace is captured only with `EDGE_PANIC_BACKTRACE=1`: resolving one loads the binary's
/// debug info (about 100 MiB of RSS that stays), and a connection panic is caught and survived, so an
/// inherited `RUST_BACKTRACE=1` must not cost that.
pub(crate) fn set_panic_hook() {
    let backtrace = std::env::var_os("EDGE_PANIC_BACKTRACE").is_some_and(|v| v == "1");
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if backtrace {
            let bt = std::backtrace::Backtrace::force_capture();
            tracing::error!(event = "panic", thread = thread.name().unwrap_or("?"), %location, %message, backtrace = %bt);
        } else {
            tracing::error!(event = "panic", thread = thread.name().unwrap_or("?"), %location, %message);
        }
    }));
}
