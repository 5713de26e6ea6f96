//! The transport seam (DESIGN.md "Layout", `core/src/io`): the one stream abstraction the request path
//! reads and writes, downstream and upstream. Everything above it (the HTTP/1.1 sessions, the
//! orchestrator, the upstream client, tunnels, lingering close) is generic over [`Transport`] and never
//! names a socket type; the code that accepts or connects picks the concrete one ([`Plain`] today; a
//! TLS stream driven by edge's own pooled buffers implements the same trait).
//!
//! The reads and writes are monoio's owned-buffer ("rent") traits: a buffer moves into the operation and
//! comes back with its result, so [`crate::buf::RecvBuf`] and [`crate::buf::SendBuf`] drive any transport
//! without a second buffering layer. Generic, monomorphised code: no trait objects on the hot path.
//!
//! # Cancel safety
//! A plain read dropped mid-flight can lose bytes on io_uring (the kernel may have taken them); a read
//! that must be stopped without loss goes through `CancelableAsyncReadRent` (cancel, then await it to its
//! end). Implementations keep that contract.

mod plain;
pub mod poll;
pub mod tls;

use std::{future::Future, io, os::fd::RawFd};

use monoio::io::{AsyncReadRent, AsyncWriteRent, CancelableAsyncReadRent};

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
