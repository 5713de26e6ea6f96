//! Listening sockets and the fd limit (DESIGN.md "Process model"): a probe bind without SO_REUSEPORT that
//! detects a port held by another program (monoio's own bind would silently share it), then one
//! SO_REUSEPORT socket per worker, each with its own accept queue.

use std::{io, net::SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

/// Why the listeners could not be created.
#[derive(Debug)]
pub enum ListenError {
    /// Another process holds the address (exit code 2).
    InUse(SocketAddr),
    /// Any other bind/listen failure.
    Other(SocketAddr, io::Error),
}

impl std::fmt::Display for ListenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenError::InUse(a) => write!(f, "{a} is already in use by another process"),
            ListenError::Other(a, e) => write!(f, "cannot listen on {a}: {e}"),
        }
    }
}

/// Most bytes a client socket queues that the kernel has not sent yet (`TCP_NOTSENT_LOWAT`, set on the
/// traffic listeners and inherited by every accepted socket): DESIGN.md "Memory under slow readers and
/// large bodies", the kernel's unsent queue is bounded too. Without it a slow reader's socket queues up
/// to its autotuned send buffer (up to `tcp_wmem`'s 4 MiB); with it the socket takes a write while
/// less than this is unsent, and reports itself writable below half of it. 128 KiB keeps a fast client's
/// queue fed across a busy worker's loop (half a millisecond of data at 2 Gbit/s) while a slow reader
/// parks at most this plus one segment in the kernel.
pub const NOTSENT_LOWAT: u32 = 128 * 1024;

/// The unsent-queue bound of a client socket whose response relay reads at the full pace
/// ([`crate::pace::RelayPace::is_full`]: the client keeps up with 256 KiB chunks), bytes. Such a
/// client drains its queue at tens of MB/s or more, so the larger bound parks nothing for long, and
/// the socket takes two full chunks' records without waiting for a drain in between. Under a CPU
/// quota, against a build with no bound, `tls-get-1m` cost 1.05-1.08x the CPU per response with
/// [`NOTSENT_LOWAT`] on every socket, 1.00x / 1.06x (io_uring / epoll) with 256 KiB here and
/// 1.00x / 1.01x with 512 KiB (bench/README.md "Large bodies under a CPU quota"). A relay sets it
/// when its pace reaches full and puts [`NOTSENT_LOWAT`] back when the pace falls
/// (`proxy/hold.rs` `RelayHold::wrote`), so a client that stops reading parks at most this in the
/// kernel, and a slow reader, whose relay never reaches the full pace, [`NOTSENT_LOWAT`].
pub const FAST_NOTSENT_LOWAT: u32 = 512 * 1024;

/// Bounds the unsent queue of the sockets `listener` accepts ([`NOTSENT_LOWAT`]); for listeners
/// inherited in an upgrade as well as new ones.
///
/// # Errors
/// The `setsockopt(2)` error.
pub fn bound_unsent(listener: &Socket) -> io::Result<()> {
    listener.set_tcp_notsent_lowat(NOTSENT_LOWAT)
}

fn socket(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(reuse_port)?;
    s.set_nonblocking(true)?;
    s.set_cloexec(true)?;
    Ok(s)
}

/// Binds `n` SO_REUSEPORT listeners on `addr` (port 0 picks one port for all), after a probe bind without
/// SO_REUSEPORT. Returns the sockets and the bound address.
///
/// # Errors
/// [`ListenError::InUse`] when another process holds the address.
pub fn reuseport_listeners(
    addr: SocketAddr,
    n: usize,
    backlog: u32,
) -> Result<(Vec<Socket>, SocketAddr), ListenError> {
    let other = |e| ListenError::Other(addr, e);
    if addr.port() != 0 {
        let probe = socket(addr, false).map_err(other)?;
        if let Err(e) = probe.bind(&addr.into()) {
            return Err(if e.kind() == io::ErrorKind::AddrInUse {
                ListenError::InUse(addr)
            } else {
                other(e)
            });
        }
    }
    let mut bound = addr;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let s = socket(bound, true).map_err(other)?;
        s.bind(&bound.into()).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                ListenError::InUse(bound)
            } else {
                other(e)
            }
        })?;
        s.listen(backlog.min(i32::MAX as u32) as i32)
            .map_err(other)?;
        bound_unsent(&s).map_err(other)?;
        bound = s
            .local_addr()
            .map_err(other)?
            .as_socket()
            .expect("inet socket");
        out.push(s);
    }
    Ok((out, bound))
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the resulting soft limit.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    }
}

/// The `max_connections` the fd limit can hold: each connection may need a client and an upstream fd,
/// plus 256 for listeners, pools and the process (DESIGN.md "Process model": 2 × max + 256).
pub fn fit_max_connections(max_connections: usize, fd_limit: u64) -> usize {
    let need = 2 * max_connections as u64 + 256;
    if fd_limit >= need {
        max_connections
    } else {
        (fd_limit.saturating_sub(256) / 2).max(1) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_zero_binds_all_on_one_port() {
        let (socks, addr) = reuseport_listeners("127.0.0.1:0".parse().unwrap(), 3, 16).unwrap();
        assert_eq!(socks.len(), 3);
        assert_ne!(addr.port(), 0);
        for s in &socks {
            assert_eq!(s.local_addr().unwrap().as_socket().unwrap(), addr);
        }
    }

    #[test]
    fn accepted_sockets_inherit_the_unsent_bound() {
        let (socks, addr) = reuseport_listeners("127.0.0.1:0".parse().unwrap(), 1, 16).unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        socks[0].set_nonblocking(false).unwrap();
        let (accepted, _) = socks[0].accept().unwrap();
        assert_eq!(accepted.tcp_notsent_lowat().unwrap(), NOTSENT_LOWAT);
    }

    #[test]
    fn port_held_by_another_socket_is_in_use() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        assert!(matches!(
            reuseport_listeners(addr, 1, 16),
            Err(ListenError::InUse(_))
        ));
    }

    #[test]
    fn fd_limit_lowers_max_connections() {
        assert_eq!(fit_max_connections(10_000, 1 << 20), 10_000);
        assert_eq!(fit_max_connections(10_000, 20_000), 9_872);
    }
}
