//! The supervisor's loop (DESIGN.md "Process model", "Drain and upgrade"): waits for signals, restarts
//! dead workers, reloads the configuration on SIGHUP, reopens the access log on SIGUSR1, hands the listening sockets to `edge --upgrade`,
//! and drains: after SIGTERM on the drain_delay/drain timeline; after a handover at once, without
//! closing the (now shared) listening sockets.

use std::{
    os::fd::AsRawFd,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use edge_core::runtime::{Shared, Supervisor};

use super::{handover as upgrade, reload};
use crate::{EXIT_OK, EXIT_RUNTIME};

/// What the supervisor can hand over to `edge --upgrade`.
pub struct Handover {
    /// The upgrade socket, when `server.upgrade_socket` is set.
    pub offer: Option<upgrade::Offer>,
    /// A copy of the admin listener's fd, when there is one.
    pub admin: Option<std::net::TcpListener>,
}

/// After a handover, idle keep-alive connections get this long to send one more request (answered with
/// `Connection: close`) before they are closed, so a busy keep-alive client never races a close.
const UPGRADE_IDLE_GRACE: Duration = Duration::from_secs(1);

/// Tells systemd (Type=notify) about a state change when `NOTIFY_SOCKET` is set; a no-op otherwise.
pub fn sd_notify(state: &str) {
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

/// Blocks SIGTERM/SIGINT/SIGHUP/SIGUSR1 in this thread (and so in the worker threads it starts) so
/// the supervisor can wait for them with `sigtimedwait`.
pub fn block_signals() {
    // SAFETY: plain signal-mask manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits up to `timeout` for SIGTERM or SIGINT, and SIGHUP and SIGUSR1 when `hup` (during a drain
/// they stay pending and are ignored).
fn wait_signal(timeout: Duration, hup: bool) -> Option<i32> {
    // SAFETY: sigtimedwait on a local set and timespec.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if hup {
            libc::sigaddset(&mut set, libc::SIGHUP);
            libc::sigaddset(&mut set, libc::SIGUSR1);
        }
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

/// Why supervision ended.
enum Stop {
    /// SIGTERM or SIGINT.
    Signal(i32),
    /// A new process serves on the sockets (its pid).
    Upgraded(u32),
}

/// The resolver thread of endpoint-name re-resolution, or `None` (logged) when it cannot start: names are
/// then resolved at load and reload only.
fn start_discovery() -> Option<crate::process::discovery::Discovery> {
    match crate::process::discovery::Discovery::start() {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::error!(event = "upstream.resolve_failed", error = %e, "cannot start the resolver thread: endpoint names are resolved at load and reload only");
            None
        }
    }
}

/// The supervisor's originals of the traffic listening sockets (workers serve dups of them).
#[derive(Clone, Copy)]
pub struct TrafficListeners<'a> {
    /// Plain listeners, one per worker (none when the plain listener is disabled).
    pub plain: &'a [socket2::Socket],
    /// TLS listeners, one per worker (none without `[server.tls]`).
    pub tls: &'a [socket2::Socket],
}

/// The file watches the supervisor polls, started before `startup.ready`.
pub struct Watches {
    /// The certificate, key and CA files (`server.tls.reload_check`).
    pub certs: super::cert_watch::CertWatch,
    /// The configuration file (`server.config_check`).
    pub config: super::config_watch::ConfigWatch,
}

/// Supervises workers until a signal or a handover, then drains; returns the exit code.
pub fn supervise(
    sup: &mut Supervisor,
    shared: &Shared,
    source: &reload::ConfigSource,
    listeners: TrafficListeners<'_>,
    handover: &Handover,
    watches: Watches,
) -> i32 {
    let Watches {
        mut certs,
        config: mut config_file,
    } = watches;
    let mut next_trim = Instant::now() + TRIM_EVERY;
    let mut discovery = start_discovery();
    let stop = loop {
        match wait_signal(Duration::from_millis(100), true) {
            Some(libc::SIGHUP) => {
                reload::reload(shared, source, "SIGHUP");
                config_file.seen();
                continue;
            }
            Some(libc::SIGUSR1) => {
                // logrotate renamed the access log: the writer opens the path again (one file
                // descriptor for every worker; see edge_core::access_log).
                let (cfg, _) = shared.config.get();
                tracing::info!(event = "access_log.reopen", path = %cfg.config.log.access_path, "SIGUSR1");
                shared.access.open(&cfg.config.log.access_path);
                continue;
            }
            Some(s) => break Stop::Signal(s),
            None => {}
        }
        if let Some(offer) = &handover.offer {
            let admin = handover.admin.as_ref().map(AsRawFd::as_raw_fd);
            if let upgrade::Handover::Done(pid) = offer.poll(listeners.plain, listeners.tls, admin)
            {
                break Stop::Upgraded(pid);
            }
        }
        sup.check();
        certs.tick(shared, source);
        config_file.tick(shared, source);
        if let Some(d) = &mut discovery {
            d.tick(shared);
        }
        if Instant::now() >= next_trim {
            next_trim = Instant::now() + TRIM_EVERY;
            // Give freed heap pages back to the kernel: after a burst, buffers freed between long-lived small
            // allocations would otherwise stay resident (glibc only trims the top of a heap on free).
            // SAFETY: malloc_trim has no preconditions.
            unsafe { libc::malloc_trim(0) };
        }
    };
    drain(shared, stop, listeners)
}

/// DESIGN.md "Drain and upgrade" after `stop`: health answers 503 and responses close their
/// connections; after a signal, listeners close at `drain_delay`; after a handover, accepting stops at
/// once; what is in flight gets `drain`. Returns the exit code.
fn drain(shared: &Shared, stop: Stop, listeners: TrafficListeners<'_>) -> i32 {
    let (current, _) = shared.config.get();
    let t = &current.config.server.timeouts;
    shared.draining.store(true, Ordering::Relaxed);
    let at_drain = shared.connections.load(Ordering::Relaxed);
    match stop {
        Stop::Signal(sig) => {
            sd_notify("STOPPING=1");
            tracing::info!(
                event = "server.draining",
                signal = sig,
                connections = at_drain,
                drain_delay_ms = t.drain_delay.0.as_millis() as u64,
                drain_ms = t.drain.0.as_millis() as u64
            );
            if !wait_or_signal(shared, Instant::now() + t.drain_delay.0) {
                return EXIT_RUNTIME;
            }
            shared.closing.store(true, Ordering::Relaxed);
            shared.close_idle.store(true, Ordering::Relaxed);
            for l in listeners.plain.iter().chain(listeners.tls) {
                // SAFETY: shutting down our own listening socket (shared with the workers' dups) wakes
                // workers blocked in accept and refuses new connections.
                unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
            }
        }
        Stop::Upgraded(new_pid) => {
            // The listening sockets now belong to the new process as well: stop accepting (workers cancel
            // their pending accepts), never shut them down. What is queued is accepted by the new process.
            shared.handed_over.store(true, Ordering::Relaxed);
            shared.closing.store(true, Ordering::Relaxed);
            tracing::info!(
                event = "server.draining",
                reason = "upgrade",
                new_pid,
                connections = at_drain,
                drain_ms = t.drain.0.as_millis() as u64,
                "a new process serves on the listening sockets; draining without drain_delay"
            );
            if !wait_or_signal(shared, Instant::now() + UPGRADE_IDLE_GRACE) {
                return EXIT_RUNTIME;
            }
            shared.close_idle.store(true, Ordering::Relaxed);
        }
    }
    let end = Instant::now() + t.drain.0;
    if !wait_or_signal_while(shared, end, || {
        shared.connections.load(Ordering::Relaxed) > 0
    }) {
        return EXIT_RUNTIME;
    }
    let left = shared.connections.load(Ordering::Relaxed);
    if left > 0 {
        tracing::warn!(
            event = "server.drain_timeout",
            connections_left = left,
            "drain time over; closing what is left"
        );
    }
    tracing::info!(
        event = "server.stopped",
        reason = "drained",
        connections_at_drain = at_drain,
        connections_left = left,
        exit_code = EXIT_OK
    );
    EXIT_OK
}

/// Waits until `until`; `false` (after logging `server.stopped`) when a second signal arrives first.
fn wait_or_signal(shared: &Shared, until: Instant) -> bool {
    wait_or_signal_while(shared, until, || true)
}

/// Waits until `until` or until `busy()` is false; `false` (after logging `server.stopped`) when a
/// second signal arrives first (DESIGN.md "Drain and upgrade": a second signal exits at once, code 1).
fn wait_or_signal_while(shared: &Shared, until: Instant, busy: impl Fn() -> bool) -> bool {
    while busy() && Instant::now() < until {
        if wait_signal(Duration::from_millis(50), false).is_some() {
            tracing::warn!(
                event = "server.stopped",
                reason = "second signal",
                connections_left = shared.connections.load(Ordering::Relaxed),
                exit_code = EXIT_RUNTIME,
                "second signal: exiting now"
            );
            return false;
        }
    }
    true
}
