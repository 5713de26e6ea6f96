//! One worker: its state (config, its copy of the route table, upstream pools, metric handles; all `Rc`, nothing shared with
//! other workers on the request path), its accept loops on its own SO_REUSEPORT listeners (plain, TLS), and its timer
//! tasks (heartbeat every 250 ms, pool sweep). Each connection runs as its own task under a panic guard:
//! a panic closes only that connection.
//!
//! Config reload: the config-dependent state (config, route table, upstreams) is a [`Live`] snapshot. Each
//! request takes the current snapshot once ([`Worker::live`]) and finishes on it; before that, the worker
//! compares the supervisor's published generation with its own (a read of one atomic) and rebuilds the
//! snapshot when it moved. The heartbeat tick does the same check, so an idle worker also switches.

use std::{
    cell::{Cell, RefCell},
    future::Future,
    net::SocketAddr,
    panic::AssertUnwindSafe,
    pin::Pin,
    rc::Rc,
    sync::{atomic::Ordering, Arc},
    task::{Context, Poll},
    time::Duration,
};

use edge_core::{
    config::{Resolved, Routes},
    metrics::{ShedReason, WorkerMetrics},
    runtime::{
        health::ActiveHealth, ConnectionSlot, ListenerKind, Shared, WorkerEnv, HEARTBEAT_EVERY,
    },
};
use edge_upstream::{Upstream, UpstreamCounters};
use monoio::net::TcpListener;

use crate::respond::LogLimit;

/// The config-dependent part of a worker, replaced as a whole at a config reload. A request holds the
/// snapshot it started on until it ends.
pub struct Live {
    /// The configuration.
    pub cfg: Arc<Resolved>,
    /// Its generation ([`edge_core::runtime::Published`]).
    pub generation: u64,
    /// This worker's copy of the compiled route table (`cfg.routes`, DESIGN.md "Routing"): it shares
    /// the index and has regex match caches of its own, so matching takes no lock.
    pub routes: Routes,
    /// Upstreams in config order, each with per-endpoint pools.
    pub upstreams: Vec<Upstream>,
}

impl Live {
    /// Builds worker `id`'s state for `cfg`; with `previous`, pools of endpoints that stay are kept (see
    /// [`Upstream::rebuild`]); endpoint health flags come from `health` ([`Upstream::with_checks`]).
    fn build(
        cfg: Arc<Resolved>,
        generation: u64,
        id: usize,
        counters: &UpstreamCounters,
        previous: Option<&Live>,
        health: &ActiveHealth,
    ) -> Live {
        let upstreams = cfg
            .upstreams
            .iter()
            .map(|u| {
                let old = previous
                    .and_then(|p| p.upstreams.iter().find(|o| o.config.name == u.config.name));
                Upstream::rebuild(u, id, counters, old).with_checks(health)
            })
            .collect();
        Live {
            routes: cfg.routes.clone(),
            upstreams,
            generation,
            cfg,
        }
    }
}

/// Everything one worker's connections share (single-threaded).
pub struct Worker {
    /// Worker index (the `worker` label).
    pub id: usize,
    /// Process-wide state.
    pub shared: Arc<Shared>,
    live: RefCell<Rc<Live>>,
    upstream_counters: UpstreamCounters,
    /// Metric handles.
    pub metrics: WorkerMetrics,
    /// Warn-log rate limit.
    pub log_limit: LogLimit,
    /// Idle connections, least recently active first (DESIGN.md "Capacity").
    pub idle: crate::evict::IdleList,
    /// Open connections of this worker.
    pub open: Cell<usize>,
    /// Set when one of the worker's own tasks (heartbeat, pool sweep) panicked: the worker stops.
    fatal: std::cell::RefCell<Option<String>>,
    /// Prefix of generated request ids, drawn when this worker starts (a restarted worker draws a new
    /// one, so its counter starting again at 1 does not repeat the ids of the worker before it).
    pub id_prefix: u32,
    next_id: Cell<u64>,
}

impl Worker {
    /// Builds a worker's state on the currently published configuration.
    pub fn new(id: usize, shared: Arc<Shared>) -> Self {
        let metrics = WorkerMetrics::register(id);
        let upstream_counters = UpstreamCounters {
            ejected: metrics
                .upstream_error(edge_core::metrics::UpstreamErrorLabel::Ejected)
                .clone(),
            tls_handshakes: metrics.upstream_tls_handshakes.clone(),
        };
        let (cfg, generation) = shared.config.get();
        Worker {
            live: RefCell::new(Rc::new(Live::build(
                cfg,
                generation,
                id,
                &upstream_counters,
                None,
                &shared.health,
            ))),
            upstream_counters,
            metrics,
            log_limit: LogLimit::new(id),
            idle: Default::default(),
            open: Cell::new(0),
            fatal: std::cell::RefCell::new(None),
            id_prefix: id_prefix(),
            next_id: Cell::new(0),
            id,
            shared,
        }
    }

    /// The configuration snapshot a new request runs on: the current one, rebuilt first when the
    /// supervisor published a new configuration. No lock and no shared write unless it changed.
    pub fn live(&self) -> Rc<Live> {
        if self.shared.config.generation() != self.live.borrow().generation {
            self.refresh();
        }
        self.live.borrow().clone()
    }

    /// The snapshot in use, without checking for a newer one.
    pub fn current(&self) -> std::cell::Ref<'_, Rc<Live>> {
        self.live.borrow()
    }

    #[cold]
    fn refresh(&self) {
        let (cfg, generation) = self.shared.config.get();
        let old = self.live.borrow().clone();
        let new = Live::build(
            cfg,
            generation,
            self.id,
            &self.upstream_counters,
            Some(&old),
            &self.shared.health,
        );
        *self.live.borrow_mut() = Rc::new(new);
        tracing::debug!(
            event = "config.applied",
            worker = self.id,
            generation,
            "worker switched to the reloaded configuration"
        );
    }

    /// Whether one of the worker's own tasks panicked.
    fn is_fatal(&self) -> bool {
        self.fatal.borrow().is_some()
    }

    /// The next generated request id: (worker prefix, worker, counter).
    pub fn next_request_id(&self) -> (u32, u16, u64) {
        let n = self.next_id.get() + 1;
        self.next_id.set(n);
        (self.id_prefix, self.id as u16, n)
    }
}

fn id_prefix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    t ^ std::process::id().rotate_left(16)
}

/// The worker's main future: one accept loop per listener (plain, TLS) plus timer tasks. Reports
/// readiness on `env.ready`.
pub async fn run(env: WorkerEnv) {
    let mut listeners = Vec::new();
    for (kind, l) in env.listeners {
        match l
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(l))
        {
            Ok(l) => listeners.push((kind, l)),
            Err(e) => {
                let _ = env.ready.send(Err(format!(
                    "worker {}: cannot register listener: {e}",
                    env.id
                )));
                return;
            }
        }
    }
    let w = Rc::new(Worker::new(env.id, env.shared.clone()));
    w.shared.beat(w.id);
    monoio::spawn(critical(w.clone(), heartbeat(w.clone())));
    monoio::spawn(critical(w.clone(), sweep_pools(w.clone())));
    monoio::spawn(critical(w.clone(), expire_idle(w.clone())));
    tracing::debug!(event = "worker.started", worker = w.id, cpu = ?env.cpu);
    let _ = env.ready.send(Ok(()));
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|(kind, l)| monoio::spawn(accept_loop(w.clone(), l, kind)))
        .collect();
    for l in loops {
        l.await;
    }
    if let Some(msg) = w.fatal.take() {
        // The accepts in flight were cancelled and awaited above, so no accept is left armed in this
        // runtime (monoio leaks a dead runtime's ring with its pending operations, and an armed accept
        // would take connections from the shared listener after the restart). Ending the thread here
        // lets the supervisor restart the worker; the thread wrapper closes what its tasks still hold.
        panic!("worker {}: {msg}", w.id);
    }
    // Draining: the listeners are closed; in-flight requests finish (their responses carry
    // `Connection: close`) while the supervisor bounds the wait with `drain`.
    while w.open.get() > 0 {
        monoio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs one of the worker's own tasks; a panic in it stops the worker (see [`run`]) instead of unwinding
/// through the runtime with an accept still armed.
async fn critical(w: Rc<Worker>, task: impl Future<Output = ()>) {
    if let Err(panic) = CatchUnwind(Box::pin(task)).await {
        w.fatal.replace(Some(format!(
            "a worker task panicked: {}",
            panic_message(&*panic)
        )));
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

async fn heartbeat(w: Rc<Worker>) {
    #[cfg(feature = "count-alloc")]
    let allocations =
        metrics::counter!("edge_worker_allocations_total", "worker" => w.id.to_string());
    #[cfg(feature = "count-alloc")]
    let reallocations =
        metrics::counter!("edge_worker_reallocations_total", "worker" => w.id.to_string());
    loop {
        #[cfg(feature = "count-alloc")]
        allocations.absolute(crate::alloc_count::thread_allocations());
        #[cfg(feature = "count-alloc")]
        reallocations.absolute(crate::alloc_count::thread_reallocations());
        w.shared.beat(w.id);
        w.metrics.publish();
        drop(w.live()); // picks up a reloaded configuration while no request arrives
        w.log_limit.flush();
        crate::faults::on_tick();
        if w.shared.close_idle.load(Ordering::Relaxed) {
            // DESIGN.md "Drain and upgrade": at t0 + drain_delay idle connections close.
            while w.idle.evict_oldest() {}
        }
        monoio::time::sleep(HEARTBEAT_EVERY).await;
    }
}

/// Longest the idle sweep sleeps before it looks at the configuration again (a reload may shorten
/// `idle`).
const IDLE_SWEEP_MAX: Duration = Duration::from_secs(1);

/// Ends the HTTP/1.1 keep-alive connections idle for longer than `server.timeouts.idle`
/// (`crate::evict`): one timer for the whole worker, set to the oldest idle connection's deadline (or at
/// most [`IDLE_SWEEP_MAX`] away), and no timer while none is idle.
async fn expire_idle(w: Rc<Worker>) {
    loop {
        let idle = w.current().cfg.config.server.timeouts.idle.0;
        let now = std::time::Instant::now();
        match w.idle.expire(now, idle) {
            Some(due) => {
                let until = due.min(now + IDLE_SWEEP_MAX);
                monoio::time::sleep_until(monoio::time::Instant::from_std(until)).await;
            }
            None => w.idle.expiring_entered().await,
        }
    }
}

/// Closes expired pooled upstream connections every 500 ms, and every 5 s frees IO buffers the last
/// period did not need (`edge_core::buf::trim`), and request slots and spare request vectors likewise
/// (`edge_core::slot::trim`, `crate::server::h1::trim_spare_vectors`).
async fn sweep_pools(w: Rc<Worker>) {
    for tick in 1u64.. {
        monoio::time::sleep(Duration::from_millis(500)).await;
        let idle: usize = w.current().upstreams.iter().map(Upstream::sweep).sum();
        w.metrics.upstream_idle.set(idle as f64);
        if tick % 10 == 0 {
            edge_core::buf::trim();
            edge_core::slot::trim();
            crate::server::h1::trim_spare_vectors();
        }
    }
}

async fn accept_loop(w: Rc<Worker>, listener: TcpListener, kind: ListenerKind) {
    // Stopping must not lose a connection the kernel already handed over: on io_uring an accept in flight
    // may complete while it is dropped, and after an upgrade the listening socket lives on in the new
    // process, so the pending accept is cancelled and awaited, and a connection it still returns is
    // served.
    let mut stop = std::pin::pin!(wait_closing(w.clone()));
    loop {
        if w.shared.closing.load(Ordering::Relaxed) || w.is_fatal() {
            return;
        }
        let canceller = monoio::io::Canceller::new();
        let mut accept = std::pin::pin!(listener.cancelable_accept(canceller.handle()));
        let res = monoio::select! {
            r = &mut accept => r,
            () = &mut stop => {
                canceller.cancel();
                accept.await
            }
        };
        match res {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                tracing::trace!(event = "connection.accepted", worker = w.id, %peer);
                let (slot, open) =
                    ConnectionSlot::take(&w.shared, std::os::fd::AsRawFd::as_raw_fd(&stream));
                let over = !make_room(&w, open);
                // Counted before the task first runs: the worker ends once `open` is 0, and a connection
                // accepted just before `closing` must not be dropped unserved with its task.
                w.open.set(w.open.get() + 1);
                match kind {
                    ListenerKind::Plain => {
                        let accepted = crate::server::h1::Accepted::plain(peer, over);
                        let serve = crate::server::h1::serve(w.clone(), stream, accepted);
                        monoio::spawn(guarded(w.clone(), peer, slot, Box::pin(serve)));
                    }
                    ListenerKind::Tls => {
                        let serve = crate::tls::serve(w.clone(), stream, peer, over);
                        monoio::spawn(guarded(w.clone(), peer, slot, Box::pin(serve)));
                    }
                }
            }
            Err(_) if w.shared.closing.load(Ordering::Relaxed) => return,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                w.metrics.connection_shed(ShedReason::FdLimit).increment(1);
                if w.log_limit.allow() {
                    tracing::warn!(
                        event = "connection.shed",
                        worker = w.id,
                        reason = "fd_limit",
                        "out of file descriptors; pausing accept for 100 ms"
                    );
                }
                monoio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                tracing::debug!(event = "accept.error", worker = w.id, error = %e);
                // Transient (ECONNABORTED, ENOBUFS, ...): pause briefly instead of spinning.
                monoio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Resolves once the supervisor sets `closing` or a worker task failed (checked every 50 ms; one timer
/// per worker, not per accept).
async fn wait_closing(w: Rc<Worker>) {
    while !w.shared.closing.load(Ordering::Relaxed) && !w.is_fatal() {
        monoio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Near the limit (fewer than 1/16 free), evicts this worker's least recently active idle connection.
/// `false` when the process is at the limit and nothing here was evictable: the new connection is shed.
/// `open` is the count of open connections before this one, from the same atomic step that took its slot.
fn make_room(w: &Worker, open: usize) -> bool {
    let max = w.shared.max_connections;
    if open + max / 16 < max {
        return true;
    }
    // The evicted connection's task frees its slot as soon as it runs; the new one may briefly overshoot.
    w.idle.evict_oldest() || open < max
}

/// Runs one connection's future `serve`; a panic inside it closes only this connection and is counted.
/// `serve` comes boxed: taken by value, it would be stored in this task as well as in the box
/// [`CatchUnwind`] needs (an idle connection's memory twice over). An async block rather than an `async
/// fn`, whose arguments would stay in its state beside the locals they are moved into.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments in its state twice"
)]
fn guarded<F: Future<Output = ()>>(
    w: Rc<Worker>,
    peer: SocketAddr,
    slot: ConnectionSlot,
    serve: Pin<Box<F>>,
) -> impl Future<Output = ()> {
    async move {
        w.metrics.connections_active.increment(1.0);
        let res = CatchUnwind(serve).await;
        w.open.set(w.open.get() - 1);
        w.metrics.connections_active.decrement(1.0);
        drop(slot);
        if let Err(panic) = res {
            w.metrics.panics.increment(1);
            let msg = panic_message(&*panic);
            tracing::error!(event = "connection.panic", worker = w.id, %peer, panic = %msg, "a connection task panicked; closed that connection");
        }
    }
}

/// A future that turns a panic in the future it polls into `Err` (monoio does not catch task panics).
/// `F` is a pinned future (`Pin<Box<_>>`, or `Pin<&mut _>` pinned in place by its owner).
pub(crate) struct CatchUnwind<F>(pub(crate) F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = Pin::new(&mut self.0);
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_connection_future_is_caught_and_the_runtime_goes_on() {
        let out = edge_core::runtime::block_on(edge_core::runtime::IoDriver::Epoll, async {
            let caught = CatchUnwind(Box::pin(async { panic!("boom in one connection") })).await;
            let survivor = monoio::spawn(async { 7 }).await;
            (caught.is_err(), survivor)
        })
        .unwrap();
        assert_eq!(out, (true, 7));
    }
}
