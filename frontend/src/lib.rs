//! edge-frontend: the downstream side of edge and the `edge` binary's startup. [`cli`] parses arguments;
//! [`start`] loads the configuration, raises the fd limit, chooses the io driver, binds the listeners,
//! starts the admin thread and one pinned worker per core, then supervises them until a signal.
//!
//! Per request: [`conn`] (keep-alive loop, inbound deadlines) → [`route`] → [`proxy`] (the upstream
//! exchange) with heads rewritten by [`forward`]; every failure is answered through [`respond`].

pub mod admin;
#[cfg(feature = "count-alloc")]
pub mod alloc_count;
pub mod cli;
pub mod conn;
pub mod evict;
pub mod faults;
pub mod forward;
pub mod proxy;
pub mod relay;
pub mod respond;
pub mod route;
pub mod tunnel;
pub mod worker;

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use edge_core::{
    config::{Config, ConfigError, Overrides, Resolved, DEFAULT_CONFIG},
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
}

/// Starts edge with a resolved configuration and runs until SIGTERM/SIGINT; returns the exit code.
pub fn start(resolved: Resolved) -> i32 {
    let cfg = &resolved.config;
    edge_core::log::init(cfg.log.format, &cfg.log.level);
    block_signals();

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
    let (workers, cpus) = runtime::cpus::plan(cfg.server.workers, cfg.server.pin_workers);
    let (listeners, bound) = match listen::reuseport_listeners(
        resolved.listen,
        workers,
        cfg.server.backlog,
    ) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(event = "startup.failed", error = %e, "cannot bind the traffic listener");
            return match e {
                listen::ListenError::InUse(_) => EXIT_CONFIG,
                listen::ListenError::Other(..) => EXIT_RUNTIME,
            };
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
    let shared = Arc::new(Shared::new(workers, max_connections, driver));

    let admin_addr = match resolved.admin_listen {
        Some(a) => match std::net::TcpListener::bind(a) {
            Ok(l) => {
                let addr = l.local_addr().unwrap_or(a);
                if let Err(e) = admin::start(l, shared.clone(), prom) {
                    tracing::error!(event = "startup.failed", error = %e);
                    return EXIT_RUNTIME;
                }
                Some(addr)
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

    let cfg_arc = Arc::new(resolved.clone());
    let main: WorkerMain = Arc::new(move |env| {
        let cfg = cfg_arc.clone();
        Box::pin(worker::run(env, cfg))
    });
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
    tracing::info!(
        event = "startup.ready",
        traffic = %bound,
        admin = %admin_addr.map_or("disabled".to_string(), |a| a.to_string()),
        workers,
        io_driver = driver.as_str(),
        "edge is serving"
    );

    sd_notify("READY=1");
    let code = supervise(&mut sup, &shared, &resolved, &listeners);
    sup.join(Duration::from_millis(200));
    code
}

/// Tells systemd (Type=notify) about a state change when `NOTIFY_SOCKET` is set; a no-op otherwise.
fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(_) => return,
    };
    let bytes = path.as_encoded_bytes();
    let res = if let Some(name) = bytes.strip_prefix(b"@") {
        // Abstract socket namespace.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = res {
        tracing::warn!(event = "startup.sd_notify_failed", error = %e);
    }
}

/// Blocks SIGTERM/SIGINT in this thread (and so in the worker threads it starts) so the supervisor can
/// wait for them with `sigtimedwait`.
fn block_signals() {
    // SAFETY: plain signal-mask manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn wait_signal(timeout: Duration) -> Option<i32> {
    // SAFETY: sigtimedwait on a local set and timespec.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let s = libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
        (s > 0).then_some(s)
    }
}

/// How often the supervisor returns free heap memory to the kernel.
const TRIM_EVERY: Duration = Duration::from_secs(2);

/// Supervises workers until a signal, then drains (DESIGN.md "Drain and upgrade").
fn supervise(
    sup: &mut Supervisor,
    shared: &Shared,
    resolved: &Resolved,
    listeners: &[socket2::Socket],
) -> i32 {
    let mut next_trim = Instant::now() + TRIM_EVERY;
    let sig = loop {
        if let Some(s) = wait_signal(Duration::from_millis(100)) {
            break s;
        }
        sup.check();
        if Instant::now() >= next_trim {
            next_trim = Instant::now() + TRIM_EVERY;
            // Give freed heap pages back to the kernel: after a burst, buffers freed between long-lived small
            // allocations would otherwise stay resident (glibc only trims the top of a heap on free).
            // SAFETY: malloc_trim has no preconditions.
            unsafe { libc::malloc_trim(0) };
        }
    };
    let t = &resolved.config.server.timeouts;
    shared.draining.store(true, Ordering::Relaxed);
    sd_notify("STOPPING=1");
    tracing::info!(
        event = "server.draining",
        signal = sig,
        drain_delay_ms = t.drain_delay.0.as_millis() as u64,
        drain_ms = t.drain.0.as_millis() as u64
    );
    let close_at = Instant::now() + t.drain_delay.0;
    while Instant::now() < close_at {
        if wait_signal(Duration::from_millis(100)).is_some() {
            tracing::warn!(event = "server.exit", "second signal: exiting now");
            return EXIT_RUNTIME;
        }
    }
    shared.closing.store(true, Ordering::Relaxed);
    for l in listeners {
        // SAFETY: shutting down our own listening socket (shared with the workers' dups) wakes workers
        // blocked in accept; they see `closing` and stop.
        unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(l), libc::SHUT_RDWR) };
    }
    let end = Instant::now() + t.drain.0;
    while shared.connections.load(Ordering::Relaxed) > 0 && Instant::now() < end {
        if wait_signal(Duration::from_millis(50)).is_some() {
            tracing::warn!(event = "server.exit", "second signal: exiting now");
            return EXIT_RUNTIME;
        }
    }
    let left = shared.connections.load(Ordering::Relaxed);
    if left > 0 {
        tracing::warn!(
            event = "server.drain_timeout",
            connections_left = left,
            "drain time over; closing what is left"
        );
    }
    tracing::info!(event = "server.exit", "drained");
    EXIT_OK
}
