//! Fault injection for the integration tests of DESIGN.md "Fault matrix" d (a panic in one connection; a
//! worker thread death). Compiled into debug builds only and active only with `EDGE_TEST_FAULTS=1` in the
//! environment; release builds contain none of it.
//!
//! - `GET /__edge_test/panic` panics inside that connection's task;
//! - `GET /__edge_test/kill-worker` makes the worker's timer task panic, outside any connection, which
//!   ends the worker thread (the supervisor restarts it).

use std::cell::Cell;

/// Whether fault injection is on for this process.
pub fn enabled() -> bool {
    cfg!(debug_assertions) && std::env::var_os("EDGE_TEST_FAULTS").is_some_and(|v| v == "1")
}

thread_local! {
    static KILL_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Acts on an injected-fault path; returns normally for any other path.
///
/// # Panics
/// On `/__edge_test/panic`, by design.
pub fn on_request(path: &[u8]) {
    if !enabled() {
        return;
    }
    match path {
        b"/__edge_test/panic" => panic!("injected panic in a connection task"),
        b"/__edge_test/kill-worker" => KILL_WORKER.with(|k| k.set(true)),
        _ => {}
    }
}

/// Called from the worker's timer task.
///
/// # Panics
/// After `/__edge_test/kill-worker` was requested on this worker, by design.
pub fn on_tick() {
    if enabled() && KILL_WORKER.with(|k| k.replace(false)) {
        panic!("injected worker thread death");
    }
}
