//! The thread-per-core runtime (DESIGN.md "Process model"): the io driver chosen once for all workers,
//! one pinned thread per worker with its own monoio runtime and its own SO_REUSEPORT listener, the
//! process-wide [`Shared`] state (drain flag, heartbeats, connection count), and the supervisor that
//! restarts a worker thread that dies, on the same CPU with the same listener.

pub mod board;
pub mod cpus;
pub mod health;
pub mod listen;
pub mod orphans;
pub mod publish;

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering},
        mpsc, Arc,
    },
    thread,
    time::{Duration, Instant},
};

use crate::config::{IoDriverSetting, Resolved};
pub use publish::Published;

/// The io driver in use, chosen once for all workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDriver {
    /// monoio's io_uring driver.
    IoUring,
    /// monoio's epoll ("legacy") driver.
    Epoll,
}

impl IoDriver {
    /// The `io_driver` label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            IoDriver::IoUring => "io_uring",
            IoDriver::Epoll => "epoll",
        }
    }
}

/// Chooses the driver: `auto` sets up a small io_uring ring and falls back to epoll when the kernel refuses
/// it (EPERM under seccomp, ENOSYS, ENOMEM from memlock, `kernel.io_uring_disabled`).
///
/// # Errors
/// With `io_uring` forced, the kernel's reason when a ring cannot be set up.
pub fn choose_driver(setting: IoDriverSetting) -> Result<(IoDriver, Option<io::Error>), io::Error> {
    // Probed on a thread of its own: a ring's teardown queues task work that interrupts the creating
    // thread's next blocking syscall with EINTR.
    let probe = || {
        thread::spawn(|| io_uring::IoUring::new(8).map(drop))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("probe panicked")))
    };
    match setting {
        IoDriverSetting::Epoll => Ok((IoDriver::Epoll, None)),
        IoDriverSetting::IoUring => probe().map(|()| (IoDriver::IoUring, None)),
        IoDriverSetting::Auto => match probe() {
            Ok(_) => Ok((IoDriver::IoUring, None)),
            Err(e) => Ok((IoDriver::Epoll, Some(e))),
        },
    }
}

/// Builds a monoio runtime with timers on `driver` and runs `fut` to completion on the calling thread.
///
/// # Errors
/// When the runtime cannot be built (e.g. io_uring setup fails on this thread).
pub fn block_on<F: Future>(driver: IoDriver, fut: F) -> io::Result<F::Output> {
    match driver {
        IoDriver::IoUring => {
            let build = |urb: io_uring::Builder| {
                monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                    .uring_builder(urb)
                    .with_entries(4096)
                    .enable_timer()
                    .build()
            };
            // A ring setup the kernel refuses (flags newer than it) falls back to monoio's default.
            let mut rt = match ring_setup() {
                Some(urb) => build(urb).or_else(|_| build(io_uring::IoUring::builder()))?,
                None => build(io_uring::IoUring::builder())?,
            };
            Ok(rt.block_on(fut))
        }
        IoDriver::Epoll => Ok(monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .with_entries(4096)
            .enable_timer()
            .build()?
            .block_on(fut)),
    }
}

/// The io_uring setup flags of a worker's ring: IORING_SETUP_COOP_TASKRUN and SINGLE_ISSUER (a
/// worker's ring is only ever used by its own thread). Without COOP_TASKRUN every completion that
/// another CPU posts (a loopback peer's send) interrupts the worker with a reschedule IPI, which in a VM
/// is also a VM exit; with it, completions wait for the worker's next entry into the kernel, which
/// monoio makes at least once per loop turn (its park waits with GETEVENTS whenever no task is ready).
/// Measured: 8-15 % less CPU per request on small requests (bench/README.md "io_uring ring setup").
///
/// The bench knob `EDGE_IO_URING_SETUP` (read per worker thread at start) overrides it: `default` for
/// monoio's default ring (no flags), `defer` for COOP_TASKRUN + SINGLE_ISSUER + DEFER_TASKRUN
/// (completions are processed only when the worker waits for events). Kernel 6.1+ for these flags; a
/// kernel that refuses them gets monoio's default ring ([`block_on`]).
fn ring_setup() -> Option<io_uring::Builder> {
    let mode = std::env::var("EDGE_IO_URING_SETUP").unwrap_or_default();
    let mut urb = io_uring::IoUring::builder();
    match mode.as_str() {
        "default" => return None,
        "defer" => {
            urb.setup_coop_taskrun()
                .setup_single_issuer()
                .setup_defer_taskrun();
        }
        _ => {
            urb.setup_coop_taskrun().setup_single_issuer();
        }
    }
    Some(urb)
}

/// A worker's heartbeat slot, alone on its cache line so workers never share a line.
#[repr(align(64))]
#[derive(Default)]
pub struct Heartbeat(AtomicU64);

/// Process-wide state: written at startup, shutdown, per connection (the count) and by each worker's own
/// heartbeat slot; never per request.
pub struct Shared {
    /// Process start; heartbeats are milliseconds since this instant.
    pub start: Instant,
    /// Set at SIGTERM: health answers 503 and responses carry `Connection: close`.
    pub draining: AtomicBool,
    /// Set when workers must stop accepting.
    pub closing: AtomicBool,
    /// Set when workers must close their idle keep-alive connections (with `closing` at SIGTERM; about a
    /// second later after an upgrade handover, so busy keep-alive clients get `Connection: close` first).
    pub close_idle: AtomicBool,
    /// Set once the listening sockets were handed to a new process (`edge --upgrade`): the admin thread
    /// stops accepting too, so probes and scrapes reach the new process.
    pub handed_over: AtomicBool,
    heartbeats: Box<[Heartbeat]>,
    /// Open downstream connections, all workers.
    pub connections: AtomicUsize,
    /// Effective `max_connections` (after the fd-limit check).
    pub max_connections: usize,
    /// The io driver in use.
    pub io_driver: IoDriver,
    /// The configuration workers serve with; replaced by the supervisor at reload (SIGHUP).
    pub config: Published<Resolved>,
    /// Endpoint states of the active health checks, written by the health thread only.
    pub health: health::ActiveHealth,
    /// The port the TLS listener is bound to (0 without one): where `redirect_plain` sends clients.
    pub tls_port: AtomicU16,
    /// Open connections per client address (`max_connections_per_client`), sized for
    /// `max_connections` at start.
    pub clients: crate::policy::limit::conns::ClientConns,
    /// Per-worker endpoint numbers for the admin API, written at each worker's heartbeat.
    pub board: board::UpstreamBoard,
    /// The last resolution of each endpoint name, for the admin API.
    pub resolutions: board::Resolutions,
    /// The writer of access lines (`log.access`); the supervisor starts it and reopens its file.
    pub access: crate::access_log::AccessWriter,
}

/// A heartbeat older than this makes the process unready (DESIGN.md "Inbound deadlines", Health).
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(1);
/// How often each worker writes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);

impl Shared {
    /// Fresh state for `workers` workers serving `config`.
    pub fn new(
        workers: usize,
        max_connections: usize,
        io_driver: IoDriver,
        config: Resolved,
    ) -> Self {
        Shared {
            start: Instant::now(),
            draining: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            close_idle: AtomicBool::new(false),
            handed_over: AtomicBool::new(false),
            heartbeats: (0..workers).map(|_| Heartbeat::default()).collect(),
            connections: AtomicUsize::new(0),
            max_connections,
            io_driver,
            config: Published::new(config),
            health: Default::default(),
            tls_port: AtomicU16::new(0),
            clients: crate::policy::limit::conns::ClientConns::new(max_connections),
            board: board::UpstreamBoard::new(workers),
            resolutions: Default::default(),
            access: Default::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Records that worker `id` is alive (called from its own timer task only).
    pub fn beat(&self, id: usize) {
        self.heartbeats[id]
            .0
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// Readiness: not draining and every worker's heartbeat younger than [`HEARTBEAT_STALE`].
    pub fn ready(&self) -> bool {
        if self.draining.load(Ordering::Relaxed) {
            return false;
        }
        let now = self.now_ms();
        let stale = HEARTBEAT_STALE.as_millis() as u64;
        self.heartbeats
            .iter()
            .all(|h| now.saturating_sub(h.0.load(Ordering::Relaxed)) <= stale)
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.heartbeats.len()
    }
}

/// What a traffic listener speaks (DESIGN.md "TLS": the TLS listener sits beside the plain one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerKind {
    /// `server.listen`: HTTP/1.1 in plain text.
    Plain,
    /// `server.tls.listen`: TLS, then the protocol ALPN chose.
    Tls,
}

/// One worker's traffic listeners, in the order the worker serves them.
pub type WorkerListeners = Vec<(ListenerKind, socket2::Socket)>;

/// What a worker thread receives.
pub struct WorkerEnv {
    /// Worker index, 0-based (the `worker` label).
    pub id: usize,
    /// The CPU it is pinned to, if any.
    pub cpu: Option<usize>,
    /// Its own SO_REUSEPORT listening sockets (dups of the supervisor's; blocking mode off): the plain
    /// listener, the TLS listener, or both.
    pub listeners: Vec<(ListenerKind, std::net::TcpListener)>,
    /// Process-wide state.
    pub shared: Arc<Shared>,
    /// Send `Ok(())` once listening, or the startup error.
    pub ready: mpsc::Sender<Result<(), String>>,
}

/// The future a worker runs on its runtime; it returns when the worker stops.
pub type WorkerFuture = Pin<Box<dyn Future<Output = ()>>>;
/// Builds a worker's future on its own thread.
pub type WorkerMain = Arc<dyn Fn(WorkerEnv) -> WorkerFuture + Send + Sync>;

/// The supervisor's view of the workers (DESIGN.md "Process model").
pub struct Supervisor {
    shared: Arc<Shared>,
    driver: IoDriver,
    main: WorkerMain,
    slots: Vec<Slot>,
}

struct Slot {
    cpu: Option<usize>,
    listeners: WorkerListeners,
    handle: Option<thread::JoinHandle<()>>,
    backoff: Duration,
    restart_at: Option<Instant>,
}

impl Supervisor {
    /// Starts one thread per listener and waits (at most 10 s) until each reports ready.
    ///
    /// # Errors
    /// The first worker's startup error, or a timeout naming the worker.
    pub fn start(
        shared: Arc<Shared>,
        driver: IoDriver,
        main: WorkerMain,
        listeners: Vec<WorkerListeners>,
        cpus: Vec<Option<usize>>,
    ) -> Result<Supervisor, String> {
        let mut sup = Supervisor {
            shared,
            driver,
            main,
            slots: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        for (i, (listeners, cpu)) in listeners.into_iter().zip(cpus).enumerate() {
            sup.slots.push(Slot {
                cpu,
                listeners,
                handle: None,
                backoff: Duration::from_secs(1),
                restart_at: None,
            });
            sup.spawn(i, tx.clone())?;
        }
        for _ in 0..sup.slots.len() {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err("a worker did not start within 10 s".into()),
            }
        }
        Ok(sup)
    }

    fn spawn(&mut self, id: usize, ready: mpsc::Sender<Result<(), String>>) -> Result<(), String> {
        let slot = &mut self.slots[id];
        let listeners = slot
            .listeners
            .iter()
            .map(|(kind, l)| l.try_clone().map(|fd| (*kind, fd.into())))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("worker {id}: cannot dup listener: {e}"))?;
        let env = WorkerEnv {
            id,
            cpu: slot.cpu,
            listeners,
            shared: self.shared.clone(),
            ready,
        };
        let (main, driver) = (self.main.clone(), self.driver);
        let handle = thread::Builder::new()
            .name(format!("edge-worker-{id}"))
            .spawn(move || {
                if let Some(cpu) = env.cpu {
                    if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
                        tracing::warn!(
                            event = "worker.pin_failed",
                            worker = id,
                            cpu,
                            "could not pin worker to its CPU"
                        );
                    }
                }
                let ready = env.ready.clone();
                let shared = env.shared.clone();
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    block_on(driver, main(env))
                }));
                // Whatever the runtime left behind (it leaks tasks that still wait on IO) is shut down
                // here, so no client waits on a dead worker; their slots are released.
                let orphaned = orphans::shut_down_all();
                if orphaned != orphans::Orphans::default() {
                    shared
                        .connections
                        .fetch_sub(orphaned.downstream, Ordering::Relaxed);
                    tracing::warn!(
                        event = "worker.orphans_closed",
                        worker = id,
                        downstream = orphaned.downstream,
                        upstream = orphaned.upstream,
                        "closed the connections the ended worker still held"
                    );
                }
                match run {
                    Ok(Err(e)) => {
                        let _ = ready.send(Err(format!(
                            "worker {id}: cannot build the {} runtime: {e}",
                            driver.as_str()
                        )));
                    }
                    Ok(Ok(())) => {}
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            })
            .map_err(|e| format!("worker {id}: cannot start thread: {e}"))?;
        slot.handle = Some(handle);
        Ok(())
    }

    /// One supervision step: restarts dead workers (backoff 1 s doubling to 30 s). Call every ~100 ms.
    pub fn check(&mut self) {
        for id in 0..self.slots.len() {
            let slot = &mut self.slots[id];
            if slot.handle.as_ref().is_some_and(|h| h.is_finished()) {
                let result = slot.handle.take().map(|h| h.join());
                if self.shared.closing.load(Ordering::Relaxed) {
                    continue;
                }
                let delay = slot.backoff;
                slot.backoff = (slot.backoff * 2).min(Duration::from_secs(30));
                slot.restart_at = Some(Instant::now() + delay);
                let panicked = matches!(result, Some(Err(_)));
                tracing::error!(
                    event = "worker.died",
                    worker = id,
                    panicked,
                    restart_in_ms = delay.as_millis() as u64,
                    "worker thread ended; restarting"
                );
            }
            if slot.restart_at.is_some_and(|t| Instant::now() >= t) {
                slot.restart_at = None;
                crate::metrics::count_worker_restart();
                let (tx, _rx) = mpsc::channel();
                if let Err(e) = self.spawn(id, tx) {
                    tracing::error!(event = "worker.restart_failed", worker = id, error = %e);
                } else {
                    tracing::warn!(event = "worker.restarted", worker = id);
                }
            }
        }
    }

    /// Waits (at most `limit`) for every worker thread to end.
    pub fn join(mut self, limit: Duration) {
        let until = Instant::now() + limit;
        for slot in &mut self.slots {
            while slot.handle.as_ref().is_some_and(|h| !h.is_finished()) && Instant::now() < until {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Open downstream connections counted in [`Shared::connections`]; decremented on drop.
pub struct ConnectionSlot {
    shared: Arc<Shared>,
    _registration: orphans::Registration,
}

impl ConnectionSlot {
    /// Takes a slot for client socket `fd`, registering the socket with the worker thread's [`orphans`]
    /// registry. Returns it with the number of connections open before it: one atomic step, so workers
    /// accepting at once each see a different count and at most `max_connections` of them see room
    /// (DESIGN.md "Capacity"; a separate load and increment let two workers both take the last slot).
    pub fn take(shared: &Arc<Shared>, fd: std::os::fd::RawFd) -> (Self, usize) {
        let before = shared.connections.fetch_add(1, Ordering::Relaxed);
        let slot = ConnectionSlot {
            shared: shared.clone(),
            _registration: orphans::register(fd, true),
        };
        (slot, before)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.shared.connections.fetch_sub(1, Ordering::Relaxed);
    }
}
