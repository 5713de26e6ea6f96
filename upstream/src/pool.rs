//! Per-worker, per-endpoint pools of idle keep-alive connections (DESIGN.md "Upstream pools and
//! retries"): LIFO reuse (the most recently used connection is the least likely to have been closed by
//! the upstream), at most `pool_max_idle` kept, each dropped after `pool_idle_timeout` (or the upstream's
//! `Keep-Alive: timeout=N` minus one second) by the worker's own timer, and watched once idle for a
//! sweep period ([`watch`]): a close or stray bytes then remove a connection at once; a connection
//! back for less than that is checked with one `MSG_PEEK` at checkout.

mod watch;

use std::{cell::RefCell, rc::Rc, time::Duration};

use edge_core::{buf::RecvBuf, io::Transport};
use monoio::time::Instant;

use crate::connect::UpstreamStream;

/// One upstream connection, checked out for one exchange or idle in a pool. `T` is its transport
/// ([`UpstreamStream`] for every connection edge opens; tests may use another).
pub struct UpstreamConn<T: Transport = UpstreamStream> {
    /// The connection.
    pub stream: T,
    /// Bytes received and not yet consumed (empty whenever the connection is pooled).
    pub buf: RecvBuf,
    /// Index of the endpoint within its upstream.
    pub endpoint: usize,
    /// Whether it came from the pool (a failure before any response byte may then be retried).
    pub reused: bool,
    /// The endpoint's `max_active` permit, held while the connection is in use (not while pooled).
    pub permit: crate::permit::Permit,
    expires: Instant,
    /// Shut down by the worker thread's wrapper if the worker dies holding it.
    registration: edge_core::runtime::orphans::Registration,
    /// The watch while pooled (armed once it sits idle for a sweep period).
    watch: watch::Watch,
}

impl<T: Transport> UpstreamConn<T> {
    /// Wraps a freshly connected stream.
    pub fn new(stream: T, endpoint: usize) -> Self {
        let registration = edge_core::runtime::orphans::register(stream.fd(), false);
        UpstreamConn {
            registration,
            stream,
            buf: RecvBuf::new(),
            endpoint,
            reused: false,
            permit: crate::permit::Permit::unlimited(),
            expires: Instant::now(),
            watch: watch::Watch::default(),
        }
    }

    /// Takes the stream out, so a phase can read and write it at once ([`Transport::split`]); put it
    /// back with [`ConnParts::join`].
    pub fn into_parts(self) -> (T, ConnParts) {
        let UpstreamConn {
            stream,
            buf,
            endpoint,
            reused,
            permit,
            expires,
            registration,
            watch,
        } = self;
        let parts = ConnParts {
            buf,
            endpoint,
            reused,
            permit,
            expires,
            registration,
            watch,
        };
        (stream, parts)
    }
}

/// An [`UpstreamConn`] without its socket (see [`UpstreamConn::into_parts`]).
pub struct ConnParts {
    /// Bytes received and not yet consumed.
    pub buf: RecvBuf,
    endpoint: usize,
    reused: bool,
    permit: crate::permit::Permit,
    expires: Instant,
    registration: edge_core::runtime::orphans::Registration,
    watch: watch::Watch,
}

impl ConnParts {
    /// The connection again, with its stream.
    pub fn join<T: Transport>(self, stream: T) -> UpstreamConn<T> {
        UpstreamConn {
            stream,
            buf: self.buf,
            endpoint: self.endpoint,
            reused: self.reused,
            permit: self.permit,
            expires: self.expires,
            registration: self.registration,
            watch: self.watch,
        }
    }
}

/// The idle connections of one endpoint.
#[derive(Default)]
pub struct Pool {
    idle: RefCell<Vec<UpstreamConn>>,
}

impl Pool {
    /// Takes the most recently returned connection that is still within its lifetime and quiet: one
    /// whose watch is armed needs no check (a close would have removed it), a busy one that was back
    /// for less than a sweep period gets a non-blocking `MSG_PEEK` ([`Transport::is_quiet`]).
    pub fn take(&self) -> Option<UpstreamConn> {
        let now = Instant::now();
        let mut idle = self.idle.borrow_mut();
        while let Some(mut c) = idle.pop() {
            let quiet = if c.watch.is_armed() {
                !c.stream.has_buffered_input()
            } else {
                c.stream.is_quiet()
            };
            if c.expires > now && quiet {
                c.watch.check_out();
                c.reused = true;
                return Some(c);
            }
        }
        None
    }

    /// Returns a connection after a complete response; dropped when the pool is full. `lifetime` is how long
    /// it may stay idle.
    pub fn put(self: &Rc<Self>, mut c: UpstreamConn, lifetime: Duration, max_idle: usize) {
        c.buf.release();
        c.permit = crate::permit::Permit::unlimited();
        if max_idle == 0 || lifetime.is_zero() {
            return;
        }
        c.watch.check_in(self);
        c.expires = Instant::now() + lifetime;
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= max_idle {
            idle.remove(0); // the oldest goes
        }
        idle.push(c);
    }

    /// Takes out the connection whose watch is `state` (its watch saw the upstream close it).
    fn remove(&self, state: &watch::State) -> Option<UpstreamConn> {
        let mut idle = self.idle.borrow_mut();
        let i = idle
            .iter()
            .position(|c| c.watch.state().is_some_and(|s| state.is(s)))?;
        Some(idle.remove(i))
    }

    /// Closes idle connections past their lifetime, and arms the watch of those idle since the last
    /// sweep; returns how many remain.
    pub fn sweep(self: &Rc<Self>, now: Instant) -> usize {
        let mut idle = self.idle.borrow_mut();
        idle.retain_mut(|c| {
            let keep = c.expires > now;
            if keep {
                c.watch.on_sweep(c.stream.fd(), self);
            }
            keep
        });
        idle.len()
    }

    /// Idle connection count.
    pub fn len(&self) -> usize {
        self.idle.borrow().len()
    }

    /// Whether no connection is idle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
