//! The client `send` deadline around one write, for every protocol's session and for answers written
//! before a session exists.
//!
//! # The rule
//! `send` bounds time *without progress* writing to the client, never the length of a write (DESIGN.md
//! "Inbound deadlines"; "Memory under slow readers and large bodies": a client that reads slowly but
//! steadily is never cut off, on both io drivers, whatever the concurrency). A relay chunk of 256 KiB
//! to a client that takes a few KiB a second is written in many steps; each step the socket accepts
//! (an io_uring `send` completion with a short count, or an epoll `send(2)` after a writable wakeup,
//! or a TLS record flushed) restarts the deadline ([`edge_core::io::progress`]). Only `send` with no
//! byte taken ends the write: `edge_inbound_timeouts_total{phase="send"}` and `response.truncated`
//! (DESIGN.md "Status codes": "client stopped reading the response").
//!
//! A socket does not take bytes as soon as its client reads (the kernel wakes a writer once the queue
//! has drained by a good part), so a deadline that passes without a step also asks the socket whether
//! its send queue shrank since the last step: the client reading counts as progress too
//! ([`edge_core::io::progress::stall_timeout`]).
//!
//! Every write to a client goes through [`within_send`], and every write loop under it reports its
//! steps ([`edge_core::io::progress::write_all`], [`edge_core::buf::SendBuf::flush`],
//! [`edge_core::buf::RecvBuf::write_prefix`], the TLS record flush). HTTP/2 streams follow the same rule
//! per stream in [`crate::server::h2::session`] (progress there is the stream's bytes leaving h2 as the
//! client's window moves), and the HTTP/2 connection's write pump in [`edge_core::io::poll`].

use std::{
    future::Future,
    os::fd::RawFd,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use edge_core::io::progress::{stall_timeout, Stall};

use crate::respond::SendFailure;

/// Runs one write to the client (on the socket `sock`, [`edge_core::io::Transport::fd`]) under the
/// `send` deadline, counted as time without progress (see the module doc), mapping the outcome to
/// [`SendFailure`]: `Timeout` once `send` passed with no byte
/// taken, `Closed` for a failed write. A plain future rather than an `async fn`, so that the write's
/// future is not copied into one more state machine on its way (bench/README.md "Future moves").
///
/// # Cancel safety
/// That of `write`, which is dropped at the deadline (the connection then closes).
#[inline]
pub fn within_send<T, F: Future<Output = std::io::Result<T>>>(
    send: Duration,
    sock: RawFd,
    write: F,
) -> WithinSend<F> {
    WithinSend(stall_timeout(send, Some(sock), write))
}

/// The future of [`within_send`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct WithinSend<F>(Stall<F>);

impl<T, F: Future<Output = std::io::Result<T>>> Future for WithinSend<F> {
    type Output = Result<T, SendFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of the only field, which is never moved out.
        let deadline = unsafe { self.map_unchecked_mut(|s| &mut s.0) };
        deadline.poll(cx).map(|r| match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(SendFailure::Closed),
            Err(_) => Err(SendFailure::Timeout),
        })
    }
}
