//! The transport seam (DESIGN.md "Layout", `core/src/io`): the one stream abstraction the request path
//! reads and writes, downstream and upstream. Everything above it (the HTTP/1.1 sessions, the
//! orchestrator, the upstream client, tunnels, lingering close) is generic over [`Transport`] and never
//! names a socket type; the code that accepts or connects picks the concrete one: [`Plain`] TCP, or a
//! TLS stream driven by edge's own pooled buffers, which implements the same trait.
//!
//! The reads and writes are monoio's owned-buffer ("rent") traits: a buffer moves into the operation and
//! comes back with its result, so [`crate::buf::RecvBuf`] and [`crate::buf::SendBuf`] drive any transport
//! without a second buffering layer. Generic, monomorphised code: no trait objects on the hot path.
//!
//! [`progress`] makes write progress visible to the client `send` deadline, which counts only time in
//! which no byte moved.
//!
//! [`body`] is the request body's seam between the two sides of an exchange: the downstream session
//! reads it from its client and writes it into the upstream session's sink.
//!
//! # Cancel safety
//! A plain read dropped mid-flight can lose bytes on io_uring (the kernel may have taken them); a read
//! that must be stopped without loss goes through `CancelableAsyncReadRent` (cancel, then await it to its
//! end). Implementations keep that contract.

pub mod body;
pub mod coop;
mod dont_wait;
pub mod h2_stream;
mod plain;
pub mod poll;
pub mod progress;
pub mod splice;
pub mod tls;

use std::{future::Future, io, os::fd::RawFd};

use monoio::io::{AsyncReadRent, AsyncWriteRent, CancelableAsyncReadRent};

pub(crate) use dont_wait::{is_full, DontWait};
pub use plain::Plain;
pub use poll::PollIo;

/// A connected byte stream (downstream or upstream): reads, writes, vectored writes and half-close
/// through the monoio rent traits, plus what the proxy path needs besides.
pub trait Transport:
    AsyncReadRent + AsyncWriteRent + CancelableAsyncReadRent + Sized + 'static
{
    /// The read half of [`Transport::split`].
    type ReadHalf: AsyncReadRent + CancelableAsyncReadRent;
    /// The write half of [`Transport::split`]; its `shutdown` is the half-close.
    type WriteHalf: AsyncWriteRent;

    /// Waits until a read would not block (bytes or EOF are there), holding no buffer: how an idle
    /// keep-alive connection waits. `relaxed` accepts the driver's cached readiness (cheaper; on epoll it
    /// can report stale readiness), `false` asks the kernel.
    ///
    /// # Errors
    /// The wait's error (the connection is unusable).
    ///
    /// # Cancel safety
    /// Cancel safe: no byte is read.
    fn readable(&mut self, relaxed: bool) -> impl Future<Output = io::Result<()>>;

    /// Waits until the socket has room for a write again, holding no buffer: how a response relay
    /// whose client stopped reading waits (DESIGN.md "Memory under slow readers and large bodies").
    /// With `TCP_NOTSENT_LOWAT` set ([`crate::runtime::listen::NOTSENT_LOWAT`]), the socket is writable
    /// once its unsent queue is under half of it. `relaxed` as for [`Transport::readable`].
    ///
    /// # Errors
    /// The wait's error (the connection is unusable).
    ///
    /// # Cancel safety
    /// Cancel safe: no byte is written.
    fn writable(&mut self, relaxed: bool) -> impl Future<Output = io::Result<()>>;

    /// Splits into halves that can be used at once (a body streamed one way while the other way is
    /// watched, a tunnel). Put them back with [`Transport::unsplit`].
    fn split(self) -> (Self::ReadHalf, Self::WriteHalf);

    /// Joins the halves of one [`Transport::split`] again.
    ///
    /// # Panics
    /// When the halves come from different streams (a programming error).
    fn unsplit(read: Self::ReadHalf, write: Self::WriteHalf) -> Self;

    /// The socket's file descriptor: for the eviction registry and the orphan registry, never for IO.
    fn fd(&self) -> RawFd;

    /// Whether the stream is open with nothing to read, checked without blocking or consuming anything
    /// (an idle pooled connection must be quiet: EOF means the peer closed it, bytes mean it sent
    /// something unasked).
    fn is_quiet(&self) -> bool;

    /// Whether the transport holds bytes it received and nobody read yet, checked without a system
    /// call (TLS: decrypted or undecrypted input in rustls' buffers). A pooled connection must hold
    /// none; its socket is watched separately. Plain TCP: `false`.
    fn has_buffered_input(&self) -> bool {
        false
    }

    /// Whether closing must first tell the peer (TLS: close_notify, RFC 8446 §6.1, so a client can tell a
    /// complete close-delimited response from a truncated one); then the closer calls `shutdown` first.
    /// Plain TCP: `false` (the FIN says it).
    fn announces_close(&self) -> bool {
        false
    }

    /// The socket that bytes written to this transport reach unchanged, for a synchronous
    /// non-blocking `sendmsg(2)` (`MSG_DONTWAIT`) ahead of an asynchronous write: how the TLS transport
    /// sends sealed records straight from rustls' queue, with no copy into a pooled buffer and no io
    /// operation while the socket has room. `None` (the default) where writes are transformed (TLS
    /// itself) or there is no socket. Plain TCP: its descriptor.
    fn raw_socket(&self) -> Option<RawFd> {
        None
    }
}

/// On the readiness (epoll) driver, sends what `sock` takes of `bytes` now, with one non-blocking
/// `sendmsg(2)` ([`DontWait`]: `MSG_DONTWAIT`, `MSG_NOSIGNAL`): the byte count, 0 when the socket has
/// no room (`EAGAIN`). A small write to a socket with room (a response head, a request head) then completes with no io
/// operation and no timer; only the rest waits for the driver under its deadline. On io_uring it sends
/// nothing and returns 0: there a system call per write measured 4-5 % more CPU per request than an
/// operation submitted with the ring's next enter (bench/README.md "Per-request user time").
///
/// # Errors
/// The send's error other than `EAGAIN`/`EINTR` (the peer reset or closed: `EPIPE`, `ECONNRESET`).
pub fn send_ahead(sock: RawFd, bytes: &[u8]) -> io::Result<usize> {
    if !monoio::utils::is_legacy() {
        return Ok(0);
    }
    send_now(sock, bytes)
}

/// Sends what `sock` takes of `bytes` now, on either driver, with one non-blocking `sendmsg(2)`
/// ([`DontWait`]): the byte count, 0 when the socket has no room (`EAGAIN`) or `bytes` is empty. For a
/// copy that should leave while it is still in the CPU's cache: the request body's copy sends each
/// chunk right after receiving it ([`crate::buf::RecvBuf::fill_now`]).
///
/// # Errors
/// The send's error other than `EAGAIN`/`EINTR` (the peer reset or closed: `EPIPE`, `ECONNRESET`).
pub fn send_now(sock: RawFd, bytes: &[u8]) -> io::Result<usize> {
    if bytes.is_empty() {
        return Ok(0);
    }
    match std::io::Write::write(&mut DontWait(sock), bytes) {
        Err(e) if is_full(&e) => Ok(0),
        sent => sent,
    }
}

/// Receives into `spare` with one non-blocking `recv(2)` (`MSG_DONTWAIT`): `Some(n)` bytes (0: the peer
/// closed), `None` when nothing is there yet (`EAGAIN`, `EINTR`).
///
/// # Errors
/// The receive's error (the connection failed).
pub(crate) fn recv_now(
    sock: RawFd,
    spare: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<Option<usize>> {
    // SAFETY: `spare` is writable for its length for the call; recv writes at most that many bytes.
    let n = unsafe {
        libc::recv(
            sock,
            spare.as_mut_ptr().cast(),
            spare.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match is_full(&e) {
            true => Ok(None),
            false => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// What a one-byte non-blocking peek at a socket shows ([`peek`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// Bytes are waiting.
    Bytes,
    /// The peer closed (EOF), or the socket failed.
    Closed,
    /// Nothing yet (the read would block).
    Empty,
}

/// A one-byte `MSG_PEEK | MSG_DONTWAIT` receive on `fd`: consumes nothing, never blocks.
pub fn peek(fd: RawFd) -> Peek {
    let mut b = 0u8;
    // SAFETY: a one-byte peek into a local; MSG_DONTWAIT never blocks; a bad fd is an error result.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        1.. => Peek::Bytes,
        0 => Peek::Closed,
        _ if io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock => Peek::Empty,
        _ => Peek::Closed,
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::Read,
        net::{TcpListener, TcpStream},
        os::fd::AsRawFd,
    };

    use super::send_ahead;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (a, l.accept().unwrap().0)
    }

    #[test]
    fn sends_ahead_on_epoll_and_reports_a_closed_peer() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, mut b) = pair();
            assert_eq!(send_ahead(a.as_raw_fd(), b"hello").unwrap(), 5);
            let mut got = [0u8; 5];
            b.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"hello");
            // The peer is gone (its close answered by a reset): an error, never a SIGPIPE.
            drop(b);
            let err = (0..100)
                .find_map(|_| send_ahead(a.as_raw_fd(), b"x").err())
                .expect("a send to a closed peer fails");
            assert!(
                matches!(
                    err.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ),
                "{err}"
            );
        });
    }

    #[test]
    fn sends_nothing_ahead_on_io_uring() {
        let mut rt = match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("SKIP io_uring case: the kernel refuses io_uring here ({e})");
                return;
            }
        };
        rt.block_on(async {
            let (a, _b) = pair();
            assert_eq!(send_ahead(a.as_raw_fd(), b"hello").unwrap(), 0);
        });
    }
}
