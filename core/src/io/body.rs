//! The request body between the two sides of an exchange: the downstream session is a [`BodySource`] (it
//! reads the rest of the body from its client under the client's `request` deadline) and writes it into
//! a sink the upstream session hands it (the upstream connection's write half). The seam lives here,
//! beside the transport, so that neither side names the other's crate: a downstream session knows
//! nothing of the upstream side, and the upstream session nothing of the client.
//!
//! The bytes are written in the framing the forwarded request head declares, HTTP/1.1 syntax (chunked
//! when the head says `Transfer-Encoding: chunked`): the protocol-neutral form every upstream session
//! takes, as the head is.

use std::{future::Future, io, time::Duration};

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
    fn forward_rest<W: AsyncWriteRent>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> impl Future<Output = Result<(), SendBodyError<Self::Error>>>;
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
