//! The watch on an idle pooled connection (DESIGN.md "Upstream pools and retries": a read kept armed
//! while it sits in the pool, as nginx's keepalive module and Pingora's idle poll do). The upstream
//! closing the connection, or sending bytes nobody asked for, removes it from its pool at once, so
//! reusing a connection needs no liveness probe on the request path; the stale-connection retry stays
//! for the race that remains (a close still in flight at checkout).
//!
//! - One watcher task per upstream connection, spawned at its first check-in and ending with the
//!   connection. It waits on a duplicate of the socket's descriptor (`dup(2)`, taken once), so it
//!   needs no borrow of the connection, which moves between the pool and the exchanges.
//! - Per check-in it arms one readiness wait, and a wait that fires is acted on only while the
//!   connection is still pooled under that same check-in (a check-in number tells them apart).
//!   - io_uring: one `POLL_ADD`, queued on the ring with the exchange's own operations (no system
//!     call of its own). Checkout leaves it armed: it fires when the next response arrives and is
//!     re-armed at the next check-in. Dropping it at checkout instead would cost an `ASYNC_CANCEL`
//!     and an allocation per request (monoio boxes the data of an operation dropped in flight;
//!     `edge-bench alloc` measured 0.7 per request).
//!   - epoll: the driver's readiness, confirmed by `poll(2)`; checkout drops the wait (free there),
//!     so a response wakes nobody but its reader.
//! - A wait that fires while the connection is still pooled under the same check-in means EOF, a
//!   reset or stray bytes: the watcher takes the connection out of its pool and drops it (closing it)
//!   and logs `upstream.pool_closed` at debug level. The idle count
//!   (`edge_upstream_connections{state="idle"}`) follows at the worker's next pool sweep (500 ms).

use std::{
    cell::{Cell, RefCell},
    future::{poll_fn, Future},
    os::fd::{FromRawFd, RawFd},
    pin::pin,
    rc::{Rc, Weak},
    task::{Context, Poll, Waker},
};

use monoio::net::TcpStream;

use super::Pool;

/// What a connection and its watcher share.
pub(super) struct State {
    /// Check-ins so far; the watcher acts on a fired wait only under the check-in it armed for.
    checkins: Cell<u64>,
    /// In its pool now.
    pooled: Cell<bool>,
    /// The connection is gone: the watcher ends.
    closed: Cell<bool>,
    /// The watcher waits for a check-in (not on the socket), so a check-in must wake it; otherwise it
    /// waits on the socket, and a checkout must wake it.
    waiting: Cell<bool>,
    waker: RefCell<Option<Waker>>,
    /// The pool the connection was last checked into.
    pool: RefCell<Weak<Pool>>,
    /// Checkout drops the wait (epoll) rather than leaving it armed (io_uring).
    drop_at_checkout: bool,
}

impl State {
    /// Whether this state belongs to `other`'s connection.
    pub(super) fn is(&self, other: &Rc<State>) -> bool {
        std::ptr::eq(self, Rc::as_ptr(other))
    }

    fn register(&self, cx: &Context<'_>) {
        let mut w = self.waker.borrow_mut();
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
    }

    fn wake(&self) {
        if let Some(w) = self.waker.borrow().as_ref() {
            w.wake_by_ref();
        }
    }

    /// The check-in to arm for: the current one once it differs from `armed`; `None` once closed.
    fn poll_checkin(&self, armed: u64, cx: &Context<'_>) -> Poll<Option<u64>> {
        if self.closed.get() {
            return Poll::Ready(None);
        }
        let n = self.checkins.get();
        if self.pooled.get() && n != armed {
            self.waiting.set(false);
            return Poll::Ready(Some(n));
        }
        self.register(cx);
        self.waiting.set(true);
        Poll::Pending
    }
}

/// A connection's end of its watch: none until its first check-in. Dropping it (the connection
/// closing) ends the watcher.
#[derive(Default)]
pub(super) struct Watch(Option<Rc<State>>);

impl Watch {
    /// Marks a check-in into `pool`, spawning the watcher on the first one. `fd`: the connection's
    /// socket. Returns `false` when the watch cannot be set up (`dup(2)` failed: out of descriptors);
    /// the connection must then not be pooled.
    pub(super) fn check_in(&mut self, fd: RawFd, pool: &Rc<Pool>) -> bool {
        let state = match &self.0 {
            Some(s) => s.clone(),
            None => match spawn(fd) {
                Some(s) => self.0.insert(s).clone(),
                None => return false,
            },
        };
        *state.pool.borrow_mut() = Rc::downgrade(pool);
        state.checkins.set(state.checkins.get() + 1);
        state.pooled.set(true);
        if state.waiting.get() {
            state.wake();
        }
        true
    }

    /// Marks a checkout (on epoll the watcher then drops its wait).
    pub(super) fn check_out(&self) {
        if let Some(s) = &self.0 {
            s.pooled.set(false);
            if s.drop_at_checkout && !s.waiting.get() {
                s.wake();
            }
        }
    }

    /// The shared state, for [`Pool::remove`] to find this connection.
    pub(super) fn state(&self) -> Option<&Rc<State>> {
        self.0.as_ref()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.closed.set(true);
            s.wake();
        }
    }
}

/// Starts the watcher of the socket `fd` on this worker.
fn spawn(fd: RawFd) -> Option<Rc<State>> {
    // SAFETY: `dup` of a descriptor the caller owns and keeps open for the call; the duplicate is
    // owned by the std stream built from it right after.
    let dup = unsafe { libc::dup(fd) };
    if dup < 0 {
        tracing::warn!(event = "upstream.pool_watch_failed", error = %std::io::Error::last_os_error(), "cannot watch a pooled connection; closing it instead");
        return None;
    }
    // SAFETY: `dup` is a fresh descriptor of a connected socket, owned by nothing else.
    let std = unsafe { std::net::TcpStream::from_raw_fd(dup) };
    let sock = match TcpStream::from_std(std) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(event = "upstream.pool_watch_failed", error = %e, "cannot watch a pooled connection; closing it instead");
            return None;
        }
    };
    let state = Rc::new(State {
        checkins: Cell::new(0),
        pooled: Cell::new(false),
        closed: Cell::new(false),
        waiting: Cell::new(false),
        waker: RefCell::new(None),
        pool: RefCell::new(Weak::new()),
        drop_at_checkout: monoio::utils::is_legacy(),
    });
    monoio::spawn(run(state.clone(), sock));
    Some(state)
}

/// The watcher: per check-in, one readiness wait; a wait that fires while the connection is still
/// pooled under that check-in evicts it.
async fn run(state: Rc<State>, sock: TcpStream) {
    let mut armed = 0;
    loop {
        let Some(checkin) = poll_fn(|cx| state.poll_checkin(armed, cx)).await else {
            return;
        };
        armed = checkin;
        let fired = {
            let mut ready = pin!(sock.readable(false));
            poll_fn(|cx| {
                let moved = !state.pooled.get() || state.checkins.get() != checkin;
                if state.closed.get() || (state.drop_at_checkout && moved) {
                    return Poll::Ready(false);
                }
                match ready.as_mut().poll(cx) {
                    Poll::Ready(_) => Poll::Ready(true),
                    Poll::Pending => {
                        state.register(cx);
                        Poll::Pending
                    }
                }
            })
            .await
        };
        if state.closed.get() {
            return;
        }
        if fired && state.pooled.get() && state.checkins.get() == checkin {
            // Readable while idle: EOF, a reset or stray bytes.
            let pool = state.pool.borrow().upgrade();
            if let Some(pool) = pool {
                drop(pool.remove(&state));
                tracing::debug!(
                    event = "upstream.pool_closed",
                    "the upstream closed an idle pooled connection (or sent unasked bytes); removed"
                );
            }
            return;
        }
        // Checked out, or it fired for an exchange's bytes: arm again at the next check-in.
    }
}
