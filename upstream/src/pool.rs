//! Per-worker, per-endpoint pools of idle keep-alive connections (DESIGN.md "Upstream pools and
//! retries"): LIFO reuse (the most recently used connection is the least likely to have been closed by
//! the upstream), each dropped after `pool_idle_timeout` (or the upstream's `Keep-Alive: timeout=N`
//! minus one second) by the worker's own timer, and watched once idle for a sweep period ([`watch`]): a
//! close or stray bytes then remove a connection at once. A checkout checks the connection it takes
//! with one `MSG_PEEK`, unless the request is retry-safe and the connection is watched or came back
//! within the last tick of the coarse clock ([`Reuse`]).
//!
//! `pool_max_idle` is applied by the worker's sweep (every 500 ms), not at check-in: a sweep closes the
//! oldest connections that sat idle through the whole period before it until at most `pool_max_idle`
//! remain, so a connection above the cap lives 0.5 to 1 s after its check-in. Closing it at check-in
//! (what nginx's `keepalive` and HAProxy's `pool-max-conn` do) makes a load whose concurrency swings
//! around the cap close connections and open new ones on every swing: at 256 client connections and
//! the default 64, 12 % of requests on io_uring and 7 % on epoll opened a new upstream connection, and
//! the handshakes set p99.9 (bench/README.md "Upstream pool cap").

mod watch;

use std::{cell::RefCell, rc::Rc, time::Duration};

use edge_core::{buf::RecvBuf, io::Transport};
use monoio::time::Instant;

use crate::{connect::UpstreamStream, session::ClientConn};

/// One upstream connection, checked out for one exchange or idle in a pool. `T` is its transport
/// ([`UpstreamStream`] for every connection edge opens; tests may use another). Its fields
/// ([`Connection`]) live in one box, allocated when the connection is opened: the handle moves out of
/// the pool, through the checkout and back on every request, and a pointer moves in a register where
/// the 208 bytes of the fields took a `memmove` each time (ten a request: bench/README.md "Future
/// moves").
pub struct UpstreamConn<T: Transport = UpstreamStream>(Box<Connection<T>>);

impl<T: Transport> std::ops::Deref for UpstreamConn<T> {
    type Target = Connection<T>;

    fn deref(&self) -> &Connection<T> {
        &self.0
    }
}

impl<T: Transport> std::ops::DerefMut for UpstreamConn<T> {
    fn deref_mut(&mut self) -> &mut Connection<T> {
        &mut self.0
    }
}

/// The fields of an [`UpstreamConn`], reached through it.
pub struct Connection<T: Transport = UpstreamStream> {
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
    /// When it was last checked in (coarse clock).
    returned: Instant,
    /// Shut down by the worker thread's wrapper if the worker dies holding it.
    registration: edge_core::runtime::orphans::Registration,
    /// The watch while pooled (armed once it sits idle for a sweep period).
    watch: watch::Watch,
    /// The client connection its PROXY protocol header described (`send_proxy_protocol`); it is
    /// reused only for requests of that client connection ([`Pool::take`]).
    pub proxied: Option<ClientConn>,
}

impl<T: Transport> UpstreamConn<T> {
    /// Wraps a freshly connected stream.
    pub fn new(stream: T, endpoint: usize) -> Self {
        let registration = edge_core::runtime::orphans::register(stream.fd(), false);
        let now = edge_core::clock::coarse_now();
        UpstreamConn(Box::new(Connection {
            registration,
            stream,
            buf: RecvBuf::new(),
            endpoint,
            reused: false,
            permit: crate::permit::Permit::unlimited(),
            expires: now,
            returned: now,
            watch: watch::Watch::default(),
            proxied: None,
        }))
    }

    /// The receive buffer and the stream at once, for a read into the one from the other (two borrows
    /// through [`std::ops::DerefMut`] would each borrow the whole connection).
    pub fn buf_and_stream(&mut self) -> (&mut RecvBuf, &mut T) {
        let c = &mut *self.0;
        (&mut c.buf, &mut c.stream)
    }

    /// Takes the stream out, so a phase can read and write it at once ([`Transport::split`]); put it
    /// back with [`ConnParts::join`], which boxes the fields again: one allocation per streamed
    /// request body, beside the one of the split itself (monoio's halves share an `Rc`).
    pub fn into_parts(self) -> (T, ConnParts) {
        let Connection {
            stream,
            buf,
            endpoint,
            reused,
            permit,
            expires,
            returned,
            registration,
            watch,
            proxied,
        } = *self.0;
        let parts = ConnParts {
            buf,
            endpoint,
            reused,
            permit,
            expires,
            returned,
            registration,
            watch,
            proxied,
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
    returned: Instant,
    registration: edge_core::runtime::orphans::Registration,
    watch: watch::Watch,
    proxied: Option<ClientConn>,
}

impl ConnParts {
    /// The connection again, with its stream.
    pub fn join<T: Transport>(self, stream: T) -> UpstreamConn<T> {
        UpstreamConn(Box::new(Connection {
            stream,
            buf: self.buf,
            endpoint: self.endpoint,
            reused: self.reused,
            permit: self.permit,
            expires: self.expires,
            returned: self.returned,
            registration: self.registration,
            watch: self.watch,
            proxied: self.proxied,
        }))
    }
}

/// What a checkout may take from the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// Nothing: a new connection (the retry after a reused connection failed).
    Fresh,
    /// A pooled connection found quiet by a `MSG_PEEK` at checkout, watched or not: a watch armed an
    /// instant ago has not yet had its first readiness report (that comes with the driver's next
    /// turn), so a close that already arrived may not have removed the connection yet, and a request
    /// that is not retried must not be sent on it.
    Checked,
    /// As [`Reuse::Checked`], except that a watched connection, or one checked in at the current or
    /// the previous reading of the coarse clock (`edge_core::clock`: under two 4 ms ticks ago here),
    /// is taken without the `MSG_PEEK`. For requests that are retried on a fresh connection when a
    /// reused one fails before any response byte (an idempotent method, the body replayable:
    /// DESIGN.md "Upstream pools and retries"): for them the probe would buy nothing the retry does
    /// not, and a keep-alive upstream closes a connection it does not announce closing (`Connection:
    /// close`) only at its idle timeout, seconds later. The two ticks bound the window in which stray
    /// bytes (an unasked `408`) could be read as the response. Saves a system call per request on a
    /// busy pool (bench/README.md "Per-request user time"). Two readings, not one: with the current
    /// tick alone a connection returned just before the tick turns is probed, 0.1 to 0.2 probes per
    /// request at 40-50k requests/s.
    RetrySafe,
}

/// The idle connections of one endpoint.
#[derive(Default)]
pub struct Pool {
    idle: RefCell<Vec<UpstreamConn>>,
    /// The upstream's name and the endpoint's address, for the pool's own log lines (empty and `None`
    /// for a pool made by [`Default`], in tests).
    upstream: Rc<str>,
    endpoint: Option<std::net::SocketAddr>,
}

impl Pool {
    /// An empty pool of endpoint `endpoint` of `upstream` (named in its log lines).
    pub fn for_endpoint(upstream: &str, endpoint: std::net::SocketAddr) -> Self {
        Pool {
            idle: RefCell::default(),
            upstream: upstream.into(),
            endpoint: Some(endpoint),
        }
    }

    /// (upstream, endpoint) for the `upstream` and `endpoint` fields of the pool's log lines.
    pub(crate) fn names(&self) -> (&str, String) {
        let endpoint = self
            .endpoint
            .map_or_else(|| "-".to_string(), |a| a.to_string());
        (&self.upstream, endpoint)
    }

    /// Takes the most recently returned connection that is still within its lifetime and quiet: it gets
    /// a non-blocking `MSG_PEEK` ([`Transport::is_quiet`]) unless `reuse` is [`Reuse::RetrySafe`] and
    /// it is watched or came back within the last clock tick. Only a connection opened for `proxied`
    /// qualifies: one whose PROXY protocol header described another client connection (or that had
    /// none, when `proxied` is set) stays in the pool. `None` when `reuse` is [`Reuse::Fresh`].
    pub fn take(&self, reuse: Reuse, proxied: Option<ClientConn>) -> Option<UpstreamConn> {
        if reuse == Reuse::Fresh {
            return None;
        }
        let now = edge_core::clock::coarse_now();
        // Checked in at this reading of the coarse clock or the one before.
        let recent = now.checked_sub(edge_core::clock::tick()).unwrap_or(now);
        let mut idle = self.idle.borrow_mut();
        // Checked where it lies and moved out once, into the caller's hands (bench/README.md "Future
        // moves"); one that fails the check is dropped. Without PROXY headers every connection
        // qualifies and the last one is the candidate at once.
        while let Some(i) = idle.iter().rposition(|c| c.proxied == proxied) {
            let c = &mut idle[i];
            // For a retry-safe request, watched or back within the last tick: the retry covers a close
            // (`Reuse::RetrySafe`). Otherwise probed (`Reuse::Checked`).
            let unprobed =
                reuse == Reuse::RetrySafe && (c.watch.is_armed() || c.returned >= recent);
            let quiet = if unprobed {
                !c.stream.has_buffered_input()
            } else {
                c.stream.is_quiet()
            };
            if c.expires > now && quiet {
                c.watch.check_out();
                c.reused = true;
                return Some(idle.remove(i));
            }
            idle.remove(i);
        }
        None
    }

    /// Returns a connection after a complete response; dropped at once when `max_idle` is 0 (no pooling)
    /// or `lifetime` (how long it may stay idle) is zero. Above `max_idle` it is kept until a sweep
    /// (module doc).
    pub fn put(self: &Rc<Self>, mut c: UpstreamConn, lifetime: Duration, max_idle: usize) {
        c.buf.release();
        c.permit = crate::permit::Permit::unlimited();
        if max_idle == 0 || lifetime.is_zero() {
            return;
        }
        c.watch.check_in(self);
        c.returned = edge_core::clock::coarse_now();
        c.expires = c.returned + lifetime;
        self.idle.borrow_mut().push(c);
    }

    /// Takes out the connection whose watch is `state` (its watch saw the upstream close it).
    fn remove(&self, state: &watch::State) -> Option<UpstreamConn> {
        let mut idle = self.idle.borrow_mut();
        let i = idle
            .iter()
            .position(|c| c.watch.state().is_some_and(|s| state.is(s)))?;
        Some(idle.remove(i))
    }

    /// Closes idle connections past their lifetime, then the oldest of those idle since the last sweep
    /// while more than `max_idle` remain, and arms the watch of the others idle since the last sweep;
    /// returns how many remain.
    pub fn sweep(self: &Rc<Self>, now: Instant, max_idle: usize) -> usize {
        let mut idle = self.idle.borrow_mut();
        let expired = idle.iter().filter(|c| c.expires <= now).count();
        let mut surplus = (idle.len() - expired).saturating_sub(max_idle);
        // Oldest first: the vector is in check-in order.
        idle.retain_mut(|c| {
            if c.expires <= now {
                return false;
            }
            if surplus > 0 && c.watch.idle_for_a_period() {
                surplus -= 1;
                return false;
            }
            let fd = c.stream.fd();
            c.watch.on_sweep(fd, self);
            true
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
