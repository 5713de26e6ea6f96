//! Per-worker, per-endpoint pools of idle keep-alive connections (DESIGN.md "Upstream pools and
//! retries"): LIFO reuse (the most recently used connection is the least likely to have been closed by
//! the upstream), at most `pool_max_idle` kept, each dropped after `pool_idle_timeout` (or the upstream's
//! `Keep-Alive: timeout=N` minus one second) by the worker's own timer, and checked for a close or stray
//! bytes before reuse.

use std::{cell::RefCell, os::fd::AsRawFd, time::Duration};

use edge_core::buf::RecvBuf;
use monoio::{net::TcpStream, time::Instant};

/// One upstream connection, checked out for one exchange or idle in a pool.
pub struct UpstreamConn {
    /// The socket.
    pub stream: TcpStream,
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
}

impl UpstreamConn {
    /// Wraps a freshly connected socket.
    pub fn new(stream: TcpStream, endpoint: usize) -> Self {
        let registration = edge_core::runtime::orphans::register(stream.as_raw_fd(), false);
        UpstreamConn {
            registration,
            stream,
            buf: RecvBuf::new(),
            endpoint,
            reused: false,
            permit: crate::permit::Permit::unlimited(),
            expires: Instant::now(),
        }
    }

    /// Takes the socket out, so a phase can read and write it at once (monoio's `into_split`); put it
    /// back with [`ConnParts::join`].
    pub fn into_parts(self) -> (TcpStream, ConnParts) {
        let UpstreamConn {
            stream,
            buf,
            endpoint,
            reused,
            permit,
            expires,
            registration,
        } = self;
        let parts = ConnParts {
            buf,
            endpoint,
            reused,
            permit,
            expires,
            registration,
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
}

impl ConnParts {
    /// The connection again, with its socket.
    pub fn join(self, stream: TcpStream) -> UpstreamConn {
        UpstreamConn {
            stream,
            buf: self.buf,
            endpoint: self.endpoint,
            reused: self.reused,
            permit: self.permit,
            expires: self.expires,
            registration: self.registration,
        }
    }
}

/// The idle connections of one endpoint.
#[derive(Default)]
pub struct Pool {
    idle: RefCell<Vec<UpstreamConn>>,
}

impl Pool {
    /// Takes the most recently returned connection that is still open and quiet.
    pub fn take(&self) -> Option<UpstreamConn> {
        let now = Instant::now();
        let mut idle = self.idle.borrow_mut();
        while let Some(mut c) = idle.pop() {
            if c.expires > now && is_quiet(&c.stream) {
                c.reused = true;
                return Some(c);
            }
        }
        None
    }

    /// Returns a connection after a complete response; dropped when the pool is full. `lifetime` is how long
    /// it may stay idle.
    pub fn put(&self, mut c: UpstreamConn, lifetime: Duration, max_idle: usize) {
        c.buf.release();
        c.permit = crate::permit::Permit::unlimited();
        if max_idle == 0 || lifetime.is_zero() {
            return;
        }
        c.expires = Instant::now() + lifetime;
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= max_idle {
            idle.remove(0); // the oldest goes
        }
        idle.push(c);
    }

    /// Closes idle connections past their lifetime; returns how many remain.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut idle = self.idle.borrow_mut();
        idle.retain(|c| c.expires > now);
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

/// Whether an idle socket is still open with nothing to read (a pooled connection must be quiet: EOF means
/// the upstream closed it, bytes mean it sent something unasked).
fn is_quiet(s: &TcpStream) -> bool {
    let mut b = 0u8;
    // SAFETY: a one-byte peek into a local on a socket we own; MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock
}
