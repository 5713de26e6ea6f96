//! Active health checks (DESIGN.md "Upstream health, discovery and balancing", "Process model"): one
//! health thread for the whole process probes every endpoint of every upstream with a
//! `[upstreams.health_check]` ([`checker`]; [`probe`] over HTTP/1.1, or [`grpc`] with `grpc_service`;
//! thresholds in [`tracker`]) and publishes each endpoint's state in
//! [`edge_core::runtime::health::ActiveHealth`]; each worker reads those flags without a lock and fails
//! open when none of an upstream's endpoints is healthy ([`view`]).
//!
//! The thread is unpinned and runs its own monoio runtime on the workers' io driver, with one task per
//! endpoint: a probe that hangs until its `timeout` delays no other endpoint's probes, and probe load
//! depends on the number of endpoints, not of cores.

mod checker;
pub mod grpc;
pub mod probe;
pub mod tracker;
pub mod view;

use std::{
    sync::{atomic::Ordering, Arc},
    thread,
    time::Duration,
};

use edge_core::runtime::{block_on, Shared};

pub use view::Checks;

/// After a panic on the health thread, its runtime is started again this much later (with every
/// endpoint healthy again, as at start).
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// Starts the health thread (`edge-health`), which runs until `shared.closing` is set.
///
/// # Errors
/// When the thread cannot be spawned. A runtime that cannot be built is logged (`health.failed`) and
/// leaves every endpoint healthy: active checks are off, passive ejection still applies.
pub fn start(shared: Arc<Shared>) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new()
        .name("edge-health".into())
        .spawn(move || loop {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                block_on(shared.io_driver, checker::run(shared.clone()))
            }));
            match run {
                Ok(Ok(())) => return,
                Ok(Err(e)) => {
                    tracing::error!(event = "health.failed", error = %e, "cannot build the health thread's runtime; active health checks are off");
                    return;
                }
                Err(_) if shared.closing.load(Ordering::Relaxed) => return,
                // The panic itself was logged by the panic hook.
                Err(_) => {
                    tracing::error!(
                        event = "health.restarted",
                        restart_in_ms = RESTART_AFTER.as_millis() as u64,
                        "the health thread panicked; restarting it"
                    );
                    thread::sleep(RESTART_AFTER);
                }
            }
        })
}
