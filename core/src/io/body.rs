//! The request body between the two sides of an exchange: the downstream session is a [`BodySource`] (it
//! reads the rest of the body from its client under the client's `request` deadline) and writes it into
//! a sink the upstream session hands it (the upstream connection's write half). The seam lives here,
//! beside the transport, so that neither side names the other's crate: a downstream session knows
//! nothing of the upstream side, and the upstream session nothing of the client.
//!
//! The bytes are written in the framing the forwarded request head declares, HTTP/1.1 syntax (chunked
//! when the head says `Transfer-Encoding: chunked`): the protocol-neutral form every upstream session
//! takes, as the head is.

use std::{future::Future, io, os::fd::RawFd, time::Duration};

use monoio::io::AsyncWriteRent;

/// Where the rest of a request body comes from: the downstream session, which reads it from the client
/// under its own deadline and writes it to the upstream's sink.
pub trait BodySource {
    /// Why the body could not be read from the client.
    type Error;

    /// Reads the rest of the body from the client and writes it to `sink` in the framing declared
    /// upstream, each write under `write_timeout`, until the body is complete.
    ///
    /// # Errors
    /// [`SendBodyError::Source`] for the client's side, [`SendBodyError::Sink`] for a failed or timed out
    /// write.
    ///
    /// # Cancel safety
    /// Dropped only when the upstream answered early; the client connection then closes.
    fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> impl Future<Output = Result<(), SendBodyError<Self::Error>>>;
}

/// Where a request body goes: the upstream connection's write half, or an HTTP/2 upstream stream's DATA
/// sink. Besides its writes, a sink on a plain TCP socket offers that socket, so a body of declared
/// length can go from the client's socket to it by splice ([`super::splice`]; DESIGN.md "Memory under
/// slow readers and large bodies").
pub trait RequestSink: AsyncWriteRent {
    /// The plain TCP socket under the sink, when bytes may be spliced into it: nothing buffered in the
    /// sink, no framing or encryption added on the way. `None` (the default) for any other sink.
    fn splice_socket(&self) -> Option<RawFd> {
        None
    }

    /// The plain TCP socket under the sink, when bytes written straight to it with a non-blocking send
    /// ([`super::send_now`]) reach the upstream as written: nothing buffered in the sink, no framing
    /// or encryption added on the way. Unlike [`RequestSink::splice_socket`], offered whatever the
    /// upstream's `splice_request_bodies`. `None` (the default) for any other sink.
    fn write_socket(&self) -> Option<RawFd> {
        None
    }

    /// Waits until [`RequestSink::splice_socket`] has room for more bytes, holding no buffer
    /// ([`super::Transport::writable`]). Called only on a sink that offers its socket; the default, for
    /// sinks that offer none, answers `Unsupported`.
    ///
    /// # Errors
    /// The wait's error (the connection is unusable).
    ///
    /// # Cancel safety
    /// Cancel safe: no byte is written.
    fn socket_writable(&mut self) -> impl Future<Output = io::Result<()>> {
        std::future::ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

/// Why forwarding the request body stopped.
#[derive(Debug)]
pub enum SendBodyError<E> {
    /// The client side failed ([`BodySource::Error`]).
    Source(E),
    /// Writing to the sink failed.
    Sink(SinkError),
}

/// Why a write of request body bytes to the sink failed (the upstream side maps it to its own error).
#[derive(Debug)]
pub enum SinkError {
    /// The write failed (the upstream closed or reset, or a TLS error).
    Io(io::Error),
    /// No progress within `write_timeout`.
    Timeout,
}
