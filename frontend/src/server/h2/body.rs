//! [`H2Body`]: the request body of one HTTP/2 stream on its way upstream (DESIGN.md "HTTP/2"): DATA
//! frames forwarded (chunked when the client sent no Content-Length), flow-control capacity released
//! only once the bytes are written upstream, so a slow upstream slows only its client's stream. It is
//! the request-body half of a split [`super::session::H2Session`] ([`crate::server::Session::split`]).

use std::{task::Poll, time::Duration};

use bytes::Bytes;

use edge_core::{
    buf,
    clock::{timeout, timeout_at},
    io::body::{BodySource, RequestSink, SendBodyError, SinkError},
    metrics::InvalidReason,
};
use h2::RecvStream;
use monoio::{
    io::{AsyncWriteRent, AsyncWriteRentExt},
    time::Instant,
};

use crate::{respond::Failure, server::BodyFailure};

/// The request body of one HTTP/2 stream.
pub struct H2Body {
    pub(super) body: RecvStream,
    /// Body bytes taken so far, against `max_body`.
    pub(super) received: u64,
    max_body: u64,
    pub(super) done: bool,
    /// The client sent no Content-Length: the body goes upstream chunked.
    chunked: bool,
    /// The stream's `request` deadline.
    deadline: Instant,
    /// Set by a split for a full-duplex exchange: the `request` timeout, counted from then on as time
    /// without body progress ([`crate::server::Session::split`]).
    pub(super) idle: Option<Duration>,
}

impl H2Body {
    /// The body of a stream read from `body`; `done` when there is none, `chunked` when it goes upstream
    /// chunked; `max_body` is `max_body_bytes` (u64::MAX for none), `deadline` the `request` deadline.
    pub(super) fn new(
        body: RecvStream,
        done: bool,
        chunked: bool,
        max_body: u64,
        deadline: Instant,
    ) -> Self {
        H2Body {
            body,
            received: 0,
            max_body,
            done,
            chunked,
            deadline,
            idle: None,
        }
    }

    /// Forwards one DATA frame's bytes to `sink` (chunk-framed when `chunked`) under `write_timeout`.
    async fn forward<W: AsyncWriteRent>(
        sink: &mut W,
        data: &Bytes,
        chunked: bool,
        write_timeout: Duration,
    ) -> Result<(), SinkError> {
        let mut out = match data.len() + 32 > buf::BUF_SIZE {
            true => buf::take_large(),
            false => buf::take(),
        };
        if chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        out.extend_from_slice(data);
        if chunked {
            out.extend_from_slice(b"\r\n");
        }
        let (res, out) = match timeout(write_timeout, sink.write_all(out)).await {
            Ok(r) => r,
            Err(_) => return Err(SinkError::Timeout),
        };
        buf::give(out);
        res.map(|_| ()).map_err(SinkError::Io)
    }
}

impl BodySource for H2Body {
    type Error = BodyFailure;

    /// DATA frames read under the stream's `request` deadline (once split for a full-duplex exchange,
    /// each wait ends at the later of that deadline and `request` after the wait began), each written
    /// upstream under `write_timeout`, then its flow-control capacity released (RFC 9113 §6.9): the
    /// client sends more only as fast as the upstream takes it.
    async fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        let source = |f| SendBodyError::Source(f);
        let chunked = self.chunked;
        while !self.done {
            // Split for a full-duplex exchange, the deadline counts time without progress.
            let until = match self.idle {
                Some(idle) => self.deadline.max(Instant::now() + idle),
                None => self.deadline,
            };
            let data = match timeout_at(until, self.body.data()).await {
                Err(_) => return Err(source(BodyFailure::Client(Failure::RequestTimeout))),
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Ok(Some(Err(_))) => return Err(source(BodyFailure::ClientGone)),
                Ok(Some(Ok(d))) => d,
            };
            self.received += data.len() as u64;
            if self.received > self.max_body {
                let f = Failure::Invalid(InvalidReason::BodyTooLarge);
                return Err(source(BodyFailure::Client(f)));
            }
            if !data.is_empty() {
                Self::forward(sink, &data, chunked, write_timeout)
                    .await
                    .map_err(SendBodyError::Sink)?;
                let _ = self.body.flow_control().release_capacity(data.len());
            }
            self.done = self.body.is_end_stream();
        }
        if chunked {
            // The client's trailing HEADERS, if any, become the last chunk's trailer section
            // (RFC 9113 §8.1, RFC 9112 §7.1.2).
            // The body ended, so h2 has them: ready at once (no timer) but for a stream that ended
            // without its trailers being read yet.
            let ready = std::future::poll_fn(|cx| Poll::Ready(self.body.poll_trailers(cx))).await;
            let trailers = match ready {
                Poll::Ready(r) => r,
                Poll::Pending => match timeout_at(self.deadline, self.body.trailers()).await {
                    Ok(r) => r,
                    Err(_) => return Err(source(BodyFailure::Client(Failure::RequestTimeout))),
                },
            };
            let Ok(trailers) = trailers else {
                return Err(source(BodyFailure::ClientGone));
            };
            let mut last = edge_core::buf::take();
            edge_core::io::h2_stream::last_chunk(&mut last, trailers.as_ref());
            let (res, last) = match timeout(write_timeout, sink.write_all(last)).await {
                Ok(r) => r,
                Err(_) => return Err(SendBodyError::Sink(SinkError::Timeout)),
            };
            edge_core::buf::give(last);
            res.map_err(|e| SendBodyError::Sink(SinkError::Io(e)))?;
        }
        Ok(())
    }
}
