//! One worker thread's life: it registers its listeners, builds its [`Worker`] context, starts one
//! accept loop per listener ([`crate::accept`]) and its timer tasks (heartbeat every 250 ms, the idle
//! sweep, the pool sweep), and on drain waits for its connections to end. A panic in one of its own
//! tasks ends the thread, which the supervisor restarts ([`super::supervise`]).

use std::{future::Future, rc::Rc, sync::atomic::Ordering, time::Duration};

use edge_core::runtime::{WorkerEnv, HEARTBEAT_EVERY};
use edge_upstream::Upstream;
use monoio::net::TcpListener;

use crate::{
    accept::{accept_loop, panic_message, CatchUnwind},
    context::Worker,
};

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
    w.access.borrow_mut().flush();
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

async fn heartbeat(w: Rc<Worker>) {
    #[cfg(feature = "count-alloc")]
    let allocations =
        metrics::counter!("edge_worker_allocations_total", "worker" => w.id.to_string());
    #[cfg(feature = "count-alloc")]
    let reallocations =
        metrics::counter!("edge_worker_reallocations_total", "worker" => w.id.to_string());
    loop {
        #[cfg(feature = "count-alloc")]
        allocations.absolute(crate::process::alloc_count::thread_allocations());
        #[cfg(feature = "count-alloc")]
        reallocations.absolute(crate::process::alloc_count::thread_reallocations());
        w.shared.beat(w.id);
        w.metrics.relay_bytes.set(w.relay.held() as f64);
        w.metrics.publish();
        drop(w.live()); // picks up a reloaded configuration while no request arrives
        let now = edge_core::clock::coarse_now();
        for u in &w.current().upstreams {
            u.publish(now); // the admin API's `GET /upstreams`
        }
        w.log_limit.flush();
        // Access lines of the last quarter second go to the writer (edge_core::access_log).
        w.access.borrow_mut().flush();
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
/// (`crate::context::idle`): one timer for the whole worker, set to the oldest idle connection's deadline (or at
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
/// (`edge_core::slot::trim`, `crate::server::h1::trim_spare_vectors`), and pipes of spliced bodies
/// (`edge_core::io::splice::trim`). A worker with no request in
/// flight at two ticks in a row trims at each such tick, so what a burst took (a thousand slow
/// readers, say) goes back to the allocator within about a second of the burst's end rather than
/// ten (DESIGN.md "Memory under slow readers and large bodies", "Fault matrix": VmRSS settles): a
/// quiet worker needs no more than the pools' floors, and one with no connection open not even those.
async fn sweep_pools(w: Rc<Worker>) {
    let mut was_quiet = false;
    for tick in 1u64.. {
        monoio::time::sleep(Duration::from_millis(500)).await;
        let swept = (w.current().upstreams.iter().map(Upstream::sweep))
            .fold(edge_upstream::Swept::default(), |a, b| a + b);
        w.metrics.upstream_idle.set(swept.idle as f64);
        w.metrics.upstream_h2_idle.set(swept.h2_idle as f64);
        w.metrics.upstream_h2_active.set(swept.h2_active as f64);
        w.metrics.upstream_h2_streams.set(swept.h2_streams as f64);
        let quiet = w.metrics.in_flight.value() <= 0.0 && w.relay.held() == 0;
        let settle = std::mem::replace(&mut was_quiet, quiet) && quiet;
        if settle && w.open.get() == 0 {
            edge_core::buf::trim_idle();
            edge_core::slot::trim_idle();
            edge_core::io::splice::trim_idle();
            crate::server::h1::trim_spare_vectors_idle();
            super::allocator::release_cached();
        } else if tick % 10 == 0 || settle {
            edge_core::buf::trim();
            edge_core::slot::trim();
            edge_core::io::splice::trim();
            crate::server::h1::trim_spare_vectors();
        }
    }
}
