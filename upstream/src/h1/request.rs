//! Sending the request: the head (with the body bytes that came with it) under `write_timeout`, then the
//! rest of the body, streamed from a [`BodySource`] while the upstream is watched for an early answer.

use std::{future::Future, io, os::fd::RawFd, pin::pin, task::Poll, time::Duration};

use edge_core::{
    clock::timeout,
    http::head::Fields,
    io::{
        body::{BodySource, RequestSink, SendBodyError},
        Transport,
    },
};
use monoio::{
    buf::{IoBuf, IoVecBuf},
    io::{AsyncWriteRent, AsyncWriteRentExt},
    BufResult,
};

use super::H1Exchange;
use crate::{
    received::only_interim,
    session::{BodyEnd, BodyError},
    stream::{UpstreamStream, UpstreamWriteHalf},
    UpstreamConn, UpstreamError, UpstreamErrorKind,
};

/// Sends `out` (the request head and any body prefix) upstream under `write_timeout`. `out` keeps its
/// bytes so a retry can send them again.
///
/// # Errors
/// A failed write (retry-safe: on a reused connection nothing reached the application) or
/// `WriteTimeout` (not retry-safe).
pub(crate) async fn send_head<T: Transport>(
    conn: &mut UpstreamConn<T>,
    out: &mut Vec<u8>,
    write_timeout: Duration,
) -> Result<(), UpstreamError> {
    let write_failed = |e: std::io::Error| UpstreamError {
        retry_safe: true,
        ..UpstreamError::from_io(&e)
    };
    // On epoll a head that fits the socket at once goes with no io operation and no timer.
    let mut sent = 0;
    if let Some(sock) = conn.stream.raw_socket() {
        match edge_core::io::send_ahead(sock, out) {
            Ok(n) if n == out.len() => return Ok(()),
            Ok(n) => sent = n,
            Err(e) => return Err(write_failed(e)),
        }
    }
    let rest = std::mem::take(out).slice(sent..);
    match timeout(write_timeout, conn.stream.write_all(rest)).await {
        Ok((r, b)) => {
            *out = b.into_inner();
            r.map(drop).map_err(write_failed)
        }
        Err(_) => Err(UpstreamError::new(UpstreamErrorKind::WriteTimeout)),
    }
}

/// Streams the rest of the request body from `src` on the connection of `ex` while watching the
/// upstream for an early response. The stream is split for this phase; interim 1xx responses that
/// arrive meanwhile stay buffered (the response-head read hands them on once the body is sent) and
/// sending goes on.
///
/// # Errors
/// As [`BodySource::forward_rest`] (a failed write mapped to [`UpstreamError`]); `ClosedEarly` or
/// `Reset` when the upstream closes meanwhile.
///
/// # Cancel safety
/// The response watch is a cancelable read: when the body finishes first it is cancelled and awaited, so
/// response bytes that won the race stay in the buffer. When the response wins, the body future is
/// dropped: the client's connection then closes and the upstream's is not reused.
pub(super) async fn send_body_watching_response<'u, S: BodySource>(
    ex: H1Exchange<'u>,
    src: &mut S,
    fields: &mut Fields,
    write_timeout: Duration,
) -> (H1Exchange<'u>, Result<BodyEnd, BodyError<S::Error>>) {
    enum First<E> {
        Sent(Result<(), SendBodyError<E>>),
        Received(std::io::Result<usize>),
    }
    let H1Exchange { conn, up } = ex;
    let (stream, mut parts) = conn.into_parts();
    let (mut rd, wr) = stream.split();
    let mut wr = Gated {
        half: wr,
        splice: up.config.splice_request_bodies,
    };
    let end = {
        let mut send = pin!(src.forward_rest(&mut wr, write_timeout));
        loop {
            let canceller = monoio::io::Canceller::new();
            let first = {
                let mut watch = pin!(parts.buf.fill_cancelable(&mut rd, canceller.handle()));
                let first = std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = send.as_mut().poll(cx) {
                        return Poll::Ready(First::Sent(r));
                    }
                    watch.as_mut().poll(cx).map(First::Received)
                })
                .await;
                if matches!(first, First::Sent(_)) {
                    canceller.cancel();
                    // Bytes that won the race stay buffered; ECANCELED or EOF show up again on the
                    // response-head read.
                    let _ = watch.await;
                }
                first
            };
            let upstream = |e| BodyError::Upstream(e);
            match first {
                First::Sent(Ok(())) => break Ok(BodyEnd::Sent),
                First::Sent(Err(SendBodyError::Source(e))) => break Err(BodyError::Source(e)),
                First::Sent(Err(SendBodyError::Sink(e))) => break Err(upstream(e.into())),
                First::Received(Ok(0)) => {
                    break Err(upstream(UpstreamError::new(UpstreamErrorKind::ClosedEarly)))
                }
                First::Received(Err(e)) => break Err(upstream(UpstreamError::from_io(&e))),
                First::Received(Ok(_)) if only_interim(&parts.buf, fields) => continue,
                First::Received(Ok(_)) => break Ok(BodyEnd::Early),
            }
        }
    };
    let conn = parts.join(UpstreamStream::unsplit(rd, wr.half));
    (H1Exchange { conn, up }, end)
}

/// The write half as a request body's sink, offering its socket for splice only where the upstream's
/// `splice_request_bodies` allows it.
struct Gated {
    half: UpstreamWriteHalf,
    splice: bool,
}

impl RequestSink for Gated {
    fn splice_socket(&self) -> Option<RawFd> {
        self.splice.then(|| self.half.splice_socket()).flatten()
    }

    fn write_socket(&self) -> Option<RawFd> {
        self.half.write_socket()
    }

    fn socket_writable(&mut self) -> impl Future<Output = io::Result<()>> {
        self.half.socket_writable()
    }
}

impl AsyncWriteRent for Gated {
    fn write<T: IoBuf>(&mut self, buf: T) -> impl Future<Output = BufResult<usize, T>> {
        self.half.write(buf)
    }

    fn writev<T: IoVecBuf>(&mut self, buf: T) -> impl Future<Output = BufResult<usize, T>> {
        self.half.writev(buf)
    }

    fn flush(&mut self) -> impl Future<Output = io::Result<()>> {
        self.half.flush()
    }

    fn shutdown(&mut self) -> impl Future<Output = io::Result<()>> {
        self.half.shutdown()
    }
}
