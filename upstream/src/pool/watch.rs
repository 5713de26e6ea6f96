//! The watch on an idle pooled connection (DESIGN.md "Upstream pools and retries": a read kept armed
//! while it sits in the pool, as nginx's keepalive module and Pingora's idle poll do). The upstream
//! closing an idle connection, or sending bytes nobody asked for, removes it from its pool at once,
//! and its socket is closed (no CLOSE_WAIT socket left until the pool lifetime runs out).
//!
//! - Armed lazily: a connection is watched once it has sat idle through a whole pool sweep period
//!   (500 ms, the worker's sweep; so from 0.5 to 1 s after its check-in). Until then a checkout
//!   checks it with one non-blocking `MSG_PEEK`, so a busy pool pays nothing for the watch
//!   (and a request that is not retry-safe gets that check even once it is watched:
//!   `super::Reuse::Checked`).
//!   Measured (bench/README.md "Watched upstream pools"): arming at every check-in cost HTTP/2 small
//!   GETs 11 % more CPU per request, because on io_uring each armed `POLL_ADD` is completed by the
//!   response arriving from the other CPU (task work plus a reschedule IPI, 0.1 to 0.5 per request),
//!   and dropping it at checkout instead costs an `ASYNC_CANCEL` and an allocation (monoio boxes the
//!   data of an operation dropped in flight: 0.7 allocations per request in `edge-bench alloc`).
//! - One watcher task per watched connection, spawned the first time it is armed and ending with the
//!   connection. It waits on a duplicate of the socket's descriptor (`dup(2)`, taken once), so it
//!   needs no borrow of the connection, which moves between the pool and the exchanges.
//! - The wait: io_uring, one `POLL_ADD`, left armed at checkout (it fires at the next response and is
//!   re-armed at the next idle period); epoll, the driver's readiness confirmed by `poll(2)`, dropped
//!   at checkout (free there). A wait that fires is acted on only while the connection is still pooled
//!   under the check-in it was armed for (a check-in number tells them apart).
//! - A wait that fires while idle means EOF, a reset or stray bytes: the watcher takes the connection
//!   out of its pool and drops it (closing it), and logs `upstream.pool_closed` at debug level. The
//!   idle count (`edge_upstream_connections{state="idle"}`) follows at the next sweep.

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
#[derive(Default)]
pub(super) struct State {
    /// Check-ins so far; the watcher acts on a fired wait only under the check-in it armed for.
    checkins: Cell<u64>,
    /// The check-in the pool's sweep asked the watcher to arm for.
    wanted: Cell<u64>,
    /// The check-in the watcher armed for.
    armed: Cell<u64>,
    /// In its pool now.
    pooled: Cell<bool>,
    /// The connection is gone: the watcher ends.
    closed: Cell<bool>,
    /// The watcher waits to be asked to arm (not on the socket), so asking must wake it; otherwise
    /// it waits on the socket, and a checkout must wake it on epoll.
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

    /// Mirrors the connection's check-in number `n` into `pool`.
    fn checked_in(&self, n: u64, pool: &Rc<Pool>) {
        *self.pool.borrow_mut() = Rc::downgrade(pool);
        self.checkins.set(n);
        self.pooled.set(true);
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

    /// The check-in to arm for, once the sweep asked for the current one; `None` once closed.
    fn poll_arm(&self, cx: &Context<'_>) -> Poll<Option<u64>> {
        if self.closed.get() {
            return Poll::Ready(None);
        }
        let n = self.checkins.get();
        if self.pooled.get() && self.wanted.get() == n && self.armed.get() != n {
            self.waiting.set(false);
            self.armed.set(n);
            return Poll::Ready(Some(n));
        }
        self.register(cx);
        self.waiting.set(true);
        Poll::Pending
    }
}

/// A connection's end of its watch. The watcher is spawned the first time the connection sits idle
/// for a whole sweep period; dropping the watch (the connection closing) ends it.
#[derive(Default)]
pub(super) struct Watch {
    /// Check-ins so far.
    checkins: u64,
    /// `checkins` at the pool's last sweep: unchanged at the next one means idle for a whole period.
    swept: u64,
    state: Option<Rc<State>>,
    /// Spawning the watcher failed once (out of descriptors): the connection stays probed at
    /// checkout, and no further attempt is made for it.
    unwatchable: bool,
}

impl Watch {
    /// Marks a check-in into `pool`.
    pub(super) fn check_in(&mut self, pool: &Rc<Pool>) {
        self.checkins += 1;
        if let Some(s) = &self.state {
            s.checked_in(self.checkins, pool);
        }
    }

    /// Marks a checkout (on epoll the watcher then drops its wait).
    pub(super) fn check_out(&self) {
        if let Some(s) = &self.state {
            s.pooled.set(false);
            if s.drop_at_checkout && !s.waiting.get() {
                s.wake();
            }
        }
    }

    /// Whether the watch is armed for the current check-in (then a retry-safe checkout needs no probe).
    pub(super) fn is_armed(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| s.armed.get() == self.checkins)
    }

    /// Whether the connection has sat in its pool since the previous sweep (no check-in since): true
    /// from 0.5 to 1 s after its check-in. Read before [`Watch::on_sweep`], which starts a new period.
    pub(super) fn idle_for_a_period(&self) -> bool {
        self.swept == self.checkins
    }

    /// The pool's sweep, for a connection it keeps: one idle since the previous sweep gets its wait
    /// armed (the watcher spawned on the first such sweep). `fd`: the connection's socket.
    pub(super) fn on_sweep(&mut self, fd: RawFd, pool: &Rc<Pool>) {
        let idle_for_a_period = self.idle_for_a_period();
        self.swept = self.checkins;
        if !idle_for_a_period || self.unwatchable || self.is_armed() {
            return;
        }
        if self.state.is_none() {
            let Some(s) = spawn(fd, pool) else {
                self.unwatchable = true;
                return;
            };
            s.checked_in(self.checkins, pool);
            self.state = Some(s);
        }
        if let Some(s) = &self.state {
            s.wanted.set(self.checkins);
            if s.waiting.get() {
                s.wake();
            }
        }
    }

    /// The shared state, for [`Pool::remove`] to find this connection.
    pub(super) fn state(&self) -> Option<&Rc<State>> {
        self.state.as_ref()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(s) = &self.state {
            s.closed.set(true);
            s.wake();
        }
    }
}

/// Starts the watcher of the socket `fd` on this worker; `None` (logged) when its descriptor cannot
/// be duplicated.
fn spawn(fd: RawFd, pool: &Pool) -> Option<Rc<State>> {
    let sock = match duplicate(fd) {
        Ok(s) => s,
        Err(e) => {
            let (upstream, endpoint) = pool.names();
            tracing::warn!(event = "upstream.pool_watch_failed", upstream, endpoint, error = %e, "cannot watch an idle pooled connection; it is probed at checkout instead");
            return None;
        }
    };
    let state = Rc::new(State {
        drop_at_checkout: monoio::utils::is_legacy(),
        ..State::default()
    });
    monoio::spawn(run(state.clone(), sock));
    Some(state)
}

/// A second handle on the socket `fd` (`dup(2)`), for the watcher to wait on.
fn duplicate(fd: RawFd) -> std::io::Result<TcpStream> {
    // SAFETY: `dup` of a descriptor the caller owns and keeps open for the call; the duplicate is
    // owned by the std stream built from it right after.
    let dup = unsafe { libc::dup(fd) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor of a connected socket, owned by nothing else.
    TcpStream::from_std(unsafe { std::net::TcpStream::from_raw_fd(dup) })
}

/// The watcher: one readiness wait per idle period the sweep asks for; a wait that fires while the
/// connection is still pooled under that check-in evicts it.
async fn run(state: Rc<State>, sock: TcpStream) {
    loop {
        let Some(checkin) = poll_fn(|cx| state.poll_arm(cx)).await else {
            return;
        };
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
                if tracing::enabled!(tracing::Level::DEBUG) {
                    let (upstream, endpoint) = pool.names();
                    tracing::debug!(
                        event = "upstream.pool_closed",
                        upstream,
                        endpoint,
                        "the upstream closed an idle pooled connection (or sent unasked bytes); removed"
                    );
                }
            }
            return;
        }
        // Checked out, or it fired for an exchange's bytes: arm again when the sweep next asks.
    }
}
