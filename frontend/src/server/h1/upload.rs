//! The rest of a request body between two plain TCP sockets: by splice, from the client's socket through
//! a pipe to the upstream's, with no copy into user space ([`edge_core::io::splice`]; DESIGN.md "Memory
//! under slow readers and large bodies"), the upload counterpart of the response relay's splice
//! (`proxy::splice`); or by copy with each chunk received and sent back to back ([`Direct`]).
//!
//! Only to an upstream with `splice_request_bodies = true` (off by default: the upstream then reads pages
//! nobody touched recently, which costs a co-located upstream more than edge saves; bench/README.md
//! "Request bodies by splice"). Which bodies: a body of declared length (`Content-Length`, within
//! `max_body_bytes`), which goes upstream unchanged, with both sockets plain TCP ([`Transport::raw_socket`],
//! [`RequestSink::splice_socket`]), nothing of it left in the connection's receive buffer, and at least
//! [`MIN_SPLICE`] of it still to come. Chunked bodies (their framing is checked on the way), TLS on
//! either side and HTTP/2 go by copy.
//!
//! The deadlines are the copy's: the client's `request` deadline while waiting for its bytes, and
//! `write_timeout` (time without progress) while waiting for room in the upstream's socket. The
//! upstream's early answer is watched beside this, as for the copy
//! (`edge_upstream`'s `send_body_watching_response`): when it wins, this future is dropped and the pipe,
//! still holding bytes, closes with it.

use std::{os::fd::RawFd, time::Duration};

use edge_core::{
    buf::{RecvBuf, LARGE_BUF_SIZE},
    clock::{timeout, timeout_at},
    io::{
        body::{RequestSink, SendBodyError, SinkError},
        coop::Coop,
        progress::set_unsent_bound,
        send_now,
        splice::{Moved, Pipe},
        Transport,
    },
    runtime::listen::NOTSENT_LOWAT,
};
use monoio::time::Instant;

use super::body::RequestBody;
use crate::{respond::Failure, server::BodyFailure};

/// The least of a body still to come for it to go by splice: below it the copy takes a read or two,
/// and taking a pipe would cost as much as it saves.
pub const MIN_SPLICE: u64 = LARGE_BUF_SIZE as u64;

/// Where the body comes from and the deadline of its reads.
pub(super) struct Client<'a, T: Transport> {
    /// The client's connection.
    pub stream: &'a mut T,
    /// The client's `request` deadline.
    pub deadline: Instant,
    /// The worker, for the log line of a client that leaves.
    pub worker: usize,
}

/// A request body on its way by splice: the pipe and the two sockets.
pub(super) struct Upload {
    pipe: Pipe,
    /// The client's socket.
    from: RawFd,
    /// The upstream's socket.
    to: RawFd,
}

impl Upload {
    /// The splice of the rest of `body` from `client` to `sink`, when both sides allow it (see the
    /// module doc); `None` when they do not, or no pipe could be opened (out of descriptors), and the
    /// caller copies.
    pub(super) fn start<T: Transport, W: RequestSink>(
        client: &T,
        body: &RequestBody,
        sink: &W,
    ) -> Option<Upload> {
        body.length_left().filter(|&l| l >= MIN_SPLICE)?;
        let from = client.raw_socket()?;
        let to = sink.splice_socket()?;
        let pipe = match Pipe::between(from, to) {
            Ok(pipe) => pipe,
            Err(e) => {
                tracing::debug!(event = "upload.splice_unavailable", error = %e, "copying instead");
                return None;
            }
        };
        // The upstream's socket queues at most this much unsent (as a client's does): spliced pages
        // are ahead of the upstream's window by a bounded amount, so each of its window updates moves
        // a bounded amount and edge's own loop keeps feeding it (bench/README.md "Request bodies by
        // splice").
        // Best effort: a socket without the bound still works, with a deeper unsent queue.
        let _ = set_unsent_bound(to, NOTSENT_LOWAT);
        Some(Upload { pipe, from, to })
    }

    /// Moves the rest of `body`: fills the pipe from the client with what its socket has (up to the
    /// body's end), then drains it into the upstream's socket, waiting for either side as the copy
    /// would. The pipe goes back to the worker's pool when the body is through.
    ///
    /// # Errors
    /// As [`edge_core::io::body::BodySource::forward_rest`].
    ///
    /// # Cancel safety
    /// Dropped only when the upstream answered early; the client connection then closes, and so does
    /// the pipe with what it holds.
    pub(super) async fn run<T: Transport, W: RequestSink>(
        mut self,
        client: Client<'_, T>,
        body: &mut RequestBody,
        sink: &mut W,
        write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        let end = self.relay(client, body, sink, write_timeout).await;
        // Back to the pool when empty (a body through, or a failure between two fills); closed when
        // it still holds bytes.
        self.pipe.give();
        end
    }

    /// The loop of [`Upload::run`].
    async fn relay<T: Transport, W: RequestSink>(
        &mut self,
        client: Client<'_, T>,
        body: &mut RequestBody,
        sink: &mut W,
        write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        let source = |f| SendBodyError::Source(f);
        let mut coop = Coop::default();
        loop {
            if self.pipe.held() == 0 {
                let Some(left) = body.length_left() else {
                    return Ok(());
                };
                match self
                    .pipe
                    .fill(self.from, usize::try_from(left).unwrap_or(usize::MAX))
                {
                    Ok(Moved::Bytes(n)) => {
                        body.skip(n as u64);
                    }
                    Ok(Moved::WouldBlock) => {
                        let readable = client.stream.readable(false);
                        match timeout_at(client.deadline, readable).await {
                            Err(_) => {
                                return Err(source(BodyFailure::Client(Failure::RequestTimeout)))
                            }
                            Ok(Ok(())) => continue,
                            Ok(Err(_)) => return Err(source(client_gone(client.worker))),
                        }
                    }
                    Ok(Moved::Eof) | Err(_) => return Err(source(client_gone(client.worker))),
                }
            }
            match self.pipe.drain(self.to) {
                Ok(Moved::Bytes(n)) => coop.moved(n).await,
                Ok(_) => match timeout(write_timeout, sink.socket_writable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(SendBodyError::Sink(SinkError::Io(e))),
                    Err(_) => return Err(SendBodyError::Sink(SinkError::Timeout)),
                },
                Err(e) => return Err(SendBodyError::Sink(SinkError::Io(e))),
            }
        }
    }
}

/// The body's copy between two plain TCP sockets on io_uring: each chunk is received with a
/// non-blocking `recv(2)` once the client's socket is readable and sent at once with a non-blocking
/// send. Back to back, the send copies bytes the receive has just left in the CPU's cache. Through
/// io_uring's own receive the kernel copies into the buffer as task work, often in a batch with other
/// connections' receives, and the send that follows copies from memory: about a fifth more time on
/// edge's CPU per 1 MiB upload (bench/README.md "Request bodies by copy"). On the readiness (epoll)
/// driver the driver's own read and write already are those system calls back to back, and this would
/// only add a readiness check per wait. What a send leaves (a full socket) goes the driver's way under
/// `write_timeout`, as any copy does.
pub(super) struct Direct {
    /// The client's socket.
    from: RawFd,
    /// The upstream's socket.
    to: RawFd,
}

/// Why [`Direct::fill`] stopped without bytes.
pub(super) enum Stop {
    /// The client's `request` deadline passed.
    Deadline,
    /// The client's connection failed.
    Gone,
}

impl Direct {
    /// The copy between `client` and `sink` when both are plain TCP sockets on io_uring; `None`
    /// otherwise (the epoll driver, TLS on either side, an HTTP/2 upstream stream), and the copy goes
    /// through the driver.
    pub(super) fn between<T: Transport, W: RequestSink>(client: &T, sink: &W) -> Option<Direct> {
        if monoio::utils::is_legacy() {
            return None;
        }
        Some(Direct {
            from: client.raw_socket()?,
            to: sink.write_socket()?,
        })
    }

    /// Receives what the client's socket has into `rb`, waiting for it to become readable until
    /// `deadline`: the byte count (0: the client closed).
    ///
    /// # Errors
    /// [`Stop`]: the deadline passed, or the connection failed.
    ///
    /// # Cancel safety
    /// Cancel safe: bytes are taken only by the synchronous receive.
    pub(super) async fn fill<T: Transport>(
        &self,
        client: &mut T,
        rb: &mut RecvBuf,
        deadline: Instant,
    ) -> Result<usize, Stop> {
        loop {
            match rb.fill_now(self.from) {
                Ok(Some(n)) => return Ok(n),
                Ok(None) => match timeout_at(deadline, client.readable(false)).await {
                    Err(_) => return Err(Stop::Deadline),
                    Ok(Err(_)) => return Err(Stop::Gone),
                    Ok(Ok(())) => {}
                },
                Err(_) => return Err(Stop::Gone),
            }
        }
    }

    /// Sends what the upstream's socket takes of `bytes` now: the byte count (0 when it is full).
    ///
    /// # Errors
    /// The send's error (the upstream closed or reset).
    pub(super) fn send(&self, bytes: &[u8]) -> std::io::Result<usize> {
        send_now(self.to, bytes)
    }
}

/// The client closed its connection (or it failed) before its whole body arrived: logged, and the
/// exchange ends without an answer (there is no one to send it to).
pub(super) fn client_gone(worker: usize) -> BodyFailure {
    tracing::debug!(
        event = "request.aborted",
        worker,
        cause = "client closed during the request body"
    );
    BodyFailure::ClientGone
}
