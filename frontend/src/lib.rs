//! edge-frontend: the downstream side of edge and the `edge` binary's startup. [`cli`] parses arguments;
//! [`start`] loads the configuration, raises the fd limit, chooses the io driver, binds the listeners (or
//! takes them over from a running edge, [`upgrade`]), starts the admin thread and one pinned worker per
//! core, then [`supervise`]s them until a signal or a handover; SIGHUP [`reload`]s the configuration.
//!
//! Per request: [`server`] (the downstream session: HTTP/1.1 keep-alive loop, inbound deadlines) →
//! [`route`] → [`proxy`] (the orchestrator, over the upstream HTTP/1.1 client of `edge_upstream::h1`)
//! with heads rewritten by [`forward`]; every failure is answered and recorded through [`respond`].

pub mod admin;
#[cfg(feature = "count-alloc")]
pub mod alloc_count;
pub mod cli;
pub mod evict;
pub mod faults;
pub mod forward;
pub mod proxy;
pub mod relay;
pub mod reload;
pub mod respond;
pub mod route;
pub mod server;
pub mod supervise;
pub mod upgrade;
pub mod worker;

use std::{sync::Arc, time::Duration};

use edge_core::{
    config::{Config, ConfigError, Overrides, Resolved, Workers, DEFAULT_CONFIG},
    runtime::{self, listen, Shared, Supervisor, WorkerMain},
};

/// Exit code: clean shutdown.
pub const EXIT_OK: i32 = 0;
/// Exit code: runtime failure (a worker could not start, a second signal during drain).
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code: bad configuration or arguments, or the traffic port held by another process.
pub const EXIT_CONFIG: i32 = 2;

/// Loads the file (or the embedded default), applies CLI overrides, validates and resolves.
///
/// # Errors
/// Every configuration error, each naming the file and key.
pub fn load_config(
    path: Option<&str>,
    overrides: &Overrides,
) -> Result<Resolved, Vec<ConfigError>> {
    let (text, file) = match path {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => (t, p.to_string()),
            Err(e) => {
                return Err(vec![ConfigError {
                    file: p.into(),
                    key: String::new(),
                    reason: format!("cannot read: {e}"),
                }]);
            }
        },
        None => (DEFAULT_CONFIG.to_string(), "<embedded default>".to_string()),
    };
    let mut cfg = Config::parse(&text, &file).map_err(|e| vec![e])?;
    cfg.apply(overrides);
    cfg.resolve(&file)
        .map_err(|errors| overrides.attribute(errors))
}

/// Starts edge with a resolved configuration (read from `source`, which SIGHUP reads again) and runs
/// until SIGTERM/SIGINT or until a new process took the sockets over; returns the exit code. With
/// `upgrade`, the listening sockets come from the running edge at `server.upgrade_socket`
/// ([`upgrade::take_over`]) instead of being bound.
pub fn start(resolved: Resolved, source: reload::ConfigSource, upgrade: bool) -> i32 {
    let cfg = &resolved.config;
    edge_core::log::init(cfg.log.format, &cfg.log.level);
    set_panic_hook();
    supervise::block_signals();

    let upgrade_path = cfg.server.upgrade_socket.clone();
    let mut inherited = None;
    if upgrade {
        if upgrade_path.is_empty() {
            tracing::error!(
                event = "startup.failed",
                file = source.file(),
                key = "server.upgrade_socket",
                reason = "--upgrade needs the running edge's upgrade socket; it is \"\""
            );
            return EXIT_CONFIG;
        }
        match upgrade::take_over(&upgrade_path) {
            Ok(i) => {
                tracing::info!(
                    event = "upgrade.received",
                    old_pid = i.old_pid,
                    traffic = i.traffic.len(),
                    admin = i.admin.is_some(),
                    "listening sockets received from the running edge"
                );
                inherited = Some(i);
            }
            Err(e) => {
                tracing::error!(event = "startup.failed", error = %e, "--upgrade: cannot take the listeners over");
                return EXIT_RUNTIME;
            }
        }
    }
    // Bound before anything else so a second edge on the same socket fails early (the handover's new
    // process rebinds it once it serves).
    let mut offer = None;
    if !upgrade && !upgrade_path.is_empty() {
        match upgrade::Offer::bind(&upgrade_path) {
            Ok(o) => offer = Some(o),
            Err(reason) => {
                tracing::error!(event = "startup.failed", file = source.file(), key = "server.upgrade_socket", %reason);
                return EXIT_CONFIG;
            }
        }
    }

    let fd_limit = listen::raise_fd_limit();
    let max_connections = listen::fit_max_connections(cfg.server.max_connections, fd_limit);
    if max_connections < cfg.server.max_connections {
        tracing::warn!(
            event = "startup.fd_limit",
            fd_limit,
            configured = cfg.server.max_connections,
            effective = max_connections,
            "RLIMIT_NOFILE cannot hold 2 x max_connections + 256; max_connections lowered"
        );
    }
    let (driver, fallback) = match runtime::choose_driver(cfg.server.io_driver) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(event = "startup.failed", error = %e, "io_driver = \"io_uring\" but the kernel refuses io_uring");
            return EXIT_CONFIG;
        }
    };
    if let Some(e) = fallback {
        tracing::warn!(event = "startup.io_uring_unavailable", error = %e, "io_uring cannot be set up; using epoll");
    }
    let (listeners, bound, workers, cpus) = match inherited.as_mut() {
        Some(i) => match adopt_listeners(i, &resolved, source.file()) {
            Ok(l) => l,
            Err(code) => return code,
        },
        None => {
            let (workers, cpus) = runtime::cpus::plan(cfg.server.workers, cfg.server.pin_workers);
            match listen::reuseport_listeners(resolved.listen, workers, cfg.server.backlog) {
                Ok((l, bound)) => (l, bound, workers, cpus),
                Err(e) => {
                    tracing::error!(event = "startup.failed", error = %e, "cannot bind the traffic listener");
                    return match e {
                        listen::ListenError::InUse(_) => EXIT_CONFIG,
                        listen::ListenError::Other(..) => EXIT_RUNTIME,
                    };
                }
            }
        }
    };
    let prom = match edge_core::metrics::install_recorder() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(event = "startup.failed", error = %e, "cannot install the metrics recorder");
            return EXIT_RUNTIME;
        }
    };
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

    let inherited_admin = inherited.as_mut().and_then(|i| i.admin.take());
    let admin = match resolved.admin_listen {
        Some(a) => match inherited_admin.map_or_else(|| std::net::TcpListener::bind(a), Ok) {
            Ok(l) => {
                let addr = l.local_addr().unwrap_or(a);
                // The supervisor keeps a copy of the fd to hand over at the next upgrade.
                let keep = l.try_clone().ok();
                if let Err(e) = admin::start(l, shared.clone(), prom) {
                    tracing::error!(event = "startup.failed", error = %e);
                    return EXIT_RUNTIME;
                }
                Some((addr, keep))
            }
            Err(e) => {
                tracing::error!(event = "startup.failed", error = %e, admin = %a, "cannot bind the admin listener");
                return if e.kind() == std::io::ErrorKind::AddrInUse {
                    EXIT_CONFIG
                } else {
                    EXIT_RUNTIME
                };
            }
        },
        None => None,
    };
    let (admin_addr, admin_keep) = admin.map_or((None, None), |(a, k)| (Some(a), k));

    // Workers (and restarted workers) take the configuration published in `shared`.
    let main: WorkerMain = Arc::new(|env| Box::pin(worker::run(env)));
    let mut sup = match Supervisor::start(
        shared.clone(),
        driver,
        main,
        listeners
            .iter()
            .map(|s| s.try_clone().expect("dup"))
            .collect(),
        cpus.clone(),
    ) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(event = "startup.failed", error = %e, "workers did not start");
            return EXIT_RUNTIME;
        }
    };
    let mask = runtime::cpus::affinity_cpus();
    let pinned: Vec<String> = cpus
        .iter()
        .map(|c| c.map_or("-".into(), |c| c.to_string()))
        .collect();
    let quota = runtime::cpus::cgroup_cpu_limit().map_or("none".into(), |n| n.to_string());
    tracing::info!(event = "startup.workers", workers, cpus_in_mask = mask.len(), cgroup_cpu_limit = %quota, pinned_cpus = %pinned.join(","));
    tracing::info!(event = "startup.io_driver", io_driver = driver.as_str());
    tracing::info!(event = "startup.limits", max_connections, fd_limit);
    for u in &resolved.upstreams {
        let eps: Vec<String> = u.endpoints.iter().map(ToString::to_string).collect();
        tracing::info!(event = "startup.upstream", name = %u.config.name, endpoints = %eps.join(","));
    }
    if let Some(i) = inherited {
        let old_pid = i.old_pid;
        if let Err(e) = i.confirm() {
            // The sockets are ours either way; the old process will notice and keep serving too.
            tracing::warn!(event = "upgrade.confirm_failed", old_pid, error = %e, "could not tell the old process to drain");
        }
        match upgrade::Offer::rebind(&upgrade_path) {
            Ok(o) => offer = Some(o),
            Err(e) => {
                tracing::warn!(event = "upgrade.unavailable", error = %e, "this process cannot be upgraded in turn")
            }
        }
        tracing::info!(
            event = "upgrade.done",
            old_pid,
            "serving on the inherited sockets; the old process drains"
        );
        supervise::sd_notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    } else {
        supervise::sd_notify("READY=1");
    }
    tracing::info!(
        event = "startup.ready",
        traffic = %bound,
        admin = %admin_addr.map_or("disabled".to_string(), |a| a.to_string()),
        workers,
        io_driver = driver.as_str(),
        "edge is serving"
    );

    let handover = supervise::Handover {
        offer,
        admin: admin_keep,
    };
    let code = supervise::supervise(&mut sup, &shared, &source, &listeners, &handover);
    sup.join(Duration::from_millis(200));
    code
}

/// The inherited traffic sockets as listeners: one worker per socket (the running process's count; a
/// different `server.workers` is reported and overridden, since each socket has its own accept queue
/// that needs a worker). Refuses (exit 2) a `server.listen` that names another address.
#[allow(clippy::type_complexity)]
fn adopt_listeners(
    i: &mut upgrade::Inherited,
    resolved: &Resolved,
    file: &str,
) -> Result<
    (
        Vec<socket2::Socket>,
        std::net::SocketAddr,
        usize,
        Vec<Option<usize>>,
    ),
    i32,
> {
    let cfg = &resolved.config;
    let socks = std::mem::take(&mut i.traffic);
    let Some(bound) = socks[0].local_addr().ok().and_then(|a| a.as_socket()) else {
        tracing::error!(
            event = "startup.failed",
            "--upgrade: the inherited socket has no address"
        );
        return Err(EXIT_RUNTIME);
    };
    let want = resolved.listen;
    if want.ip() != bound.ip() || (want.port() != 0 && want.port() != bound.port()) {
        tracing::error!(event = "startup.failed", file, key = "server.listen", reason = %format!("the running edge listens on {bound}, not {want}; the listener cannot change in an upgrade"));
        return Err(EXIT_CONFIG);
    }
    let (planned, _) = runtime::cpus::plan(cfg.server.workers, cfg.server.pin_workers);
    let workers = socks.len();
    if planned != workers {
        tracing::warn!(event = "upgrade.workers", configured = planned, inherited = workers, "--upgrade keeps the running process's worker count (one per inherited listener); restart to change it");
    }
    let (_, cpus) = runtime::cpus::plan(Workers::Count(workers), cfg.server.pin_workers);
    Ok((socks, bound, workers, cpus))
}

/// Panics are logged as one `panic` line (thread, location, message) instead of the default stderr
/// report. A backtrace is captured only with `EDGE_PANIC_BACKTRACE=1`: resolving one loads the binary's
/// debug info (about 100 MiB of RSS that stays), and a connection panic is caught and survived, so an
/// inherited `RUST_BACKTRACE=1` must not cost that.
fn set_panic_hook() {
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
