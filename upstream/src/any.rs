//! The session an [`Upstream`](crate::Upstream) opens ([`crate::session::Open`]): an HTTP/1.1 exchange
//! on a pooled exclusive connection, or an HTTP/2 stream on a shared one, by the upstream's `protocol`
//! (and, for `auto` over TLS, the server's ALPN choice). One enum, so the orchestrator stays one
//! monomorphised function; each method is one `match`.

use std::{future::Future, net::SocketAddr, time::Duration};

use bytes::Bytes;
use edge_core::io::h2_stream::{StreamRead, StreamWrite};
use edge_core::{
    buf::RecvBuf,
    http::head::{Fields, ResponseHead},
    io::body::BodySource,
};
use h2::{RecvStream, SendStream};
use monoio::{
    buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut},
    io::{AsyncReadRent, AsyncWriteRent},
    time::Instant,
    BufResult,
};

use crate::{
    h1::{H1Exchange, H1Tunnel},
    h2::{session::H2Held, H2BodySink, H2Exchange, H2Tunnel},
    pool::ConnParts,
    session::{
        BodyEnd, BodyError, BodyRead, Finish, HeadBuffer, Trailers, TunnelHalves, UpstreamSession,
        UpstreamTunnel, Waited,
    },
    stream::{UpstreamReadHalf, UpstreamWriteHalf},
    zombie::ActivityClock,
    UpstreamError,
};

/// An upstream session of either protocol.
pub enum AnyExchange<'u> {
    /// HTTP/1.1.
    H1(H1Exchange<'u>),
    /// HTTP/2 (boxed: its stream state is many times an HTTP/1.1 exchange's pointer, and the session
    /// lives in the orchestrator's future, which an HTTP/1.1 request would otherwise carry and move
    /// at that size; an HTTP/2 stream allocates in `h2` anyway).
    H2(Box<H2Exchange<'u>>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            AnyExchange::H1($s) => $e,
            AnyExchange::H2($s) => $e,
        }
    };
}

impl UpstreamSession for AnyExchange<'_> {
    type Tunnel = AnyTunnel;
    /// Only an HTTP/2 stream is full duplex.
    type BodySink = H2BodySink;

    fn duplex(&self) -> bool {
        each!(self, s => s.duplex())
    }

    fn take_body_sink(&mut self) -> Option<H2BodySink> {
        match self {
            AnyExchange::H1(_) => None,
            AnyExchange::H2(s) => s.take_body_sink(),
        }
    }

    fn reused(&self) -> bool {
        each!(self, s => s.reused())
    }

    fn endpoint(&self) -> SocketAddr {
        each!(self, s => s.endpoint())
    }

    fn endpoint_metrics(&self) -> &edge_core::metrics::EndpointMetrics {
        each!(self, s => s.endpoint_metrics())
    }

    fn received(&self) -> &RecvBuf {
        each!(self, s => s.received())
    }

    fn received_mut(&mut self) -> &mut RecvBuf {
        each!(self, s => s.received_mut())
    }

    async fn send_head(
        &mut self,
        out: &mut Vec<u8>,
        write_timeout: Duration,
    ) -> Result<(), UpstreamError> {
        each!(self, s => s.send_head(out, write_timeout).await)
    }

    async fn wait_more(
        &mut self,
        until: Instant,
        received_before: bool,
    ) -> Result<Waited, UpstreamError> {
        each!(self, s => s.wait_more(until, received_before).await)
    }

    async fn send_body<B: BodySource>(
        self,
        body: &mut B,
        fields: &mut Fields,
        write_timeout: Duration,
    ) -> (Self, Result<BodyEnd, BodyError<B::Error>>) {
        match self {
            AnyExchange::H1(s) => {
                let (s, r) = s.send_body(body, fields, write_timeout).await;
                (AnyExchange::H1(s), r)
            }
            AnyExchange::H2(s) => {
                let (s, r) = (*s).send_body(body, fields, write_timeout).await;
                (AnyExchange::H2(Box::new(s)), r)
            }
        }
    }

    async fn read_head(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
        head_deadline: Option<Instant>,
        buffer: HeadBuffer,
    ) -> Result<ResponseHead, UpstreamError> {
        each!(self, s => s.read_head(fields, clock, head_deadline, buffer).await)
    }

    async fn read_body(
        &mut self,
        clock: &mut ActivityClock,
        size: usize,
    ) -> Result<BodyRead, UpstreamError> {
        each!(self, s => s.read_body(clock, size).await)
    }

    fn splice_source(&self) -> Option<std::os::fd::RawFd> {
        each!(self, s => s.splice_source())
    }

    async fn body_readable(&mut self, clock: &ActivityClock) -> Result<(), UpstreamError> {
        each!(self, s => s.body_readable(clock).await)
    }

    fn read_trailers(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
    ) -> impl Future<Output = Result<Trailers, UpstreamError>> {
        let _ = (fields, clock);
        std::future::ready(Ok(Trailers::InBody))
    }

    fn received_trailers(&self) -> Option<&http::HeaderMap> {
        each!(self, s => s.received_trailers())
    }

    fn finish(self, end: Finish) {
        match self {
            AnyExchange::H1(s) => s.finish(end),
            AnyExchange::H2(s) => (*s).finish(end),
        }
    }

    fn into_tunnel(self) -> AnyTunnel {
        match self {
            AnyExchange::H1(s) => AnyTunnel::H1(s.into_tunnel()),
            AnyExchange::H2(s) => AnyTunnel::H2((*s).into_tunnel()),
        }
    }
}

/// The upstream side of a tunnel after a `101`: an HTTP/1.1 connection, or an HTTP/2 upstream's
/// WebSocket stream (an accepted extended CONNECT, RFC 8441).
pub enum AnyTunnel {
    /// An HTTP/1.1 connection.
    H1(H1Tunnel),
    /// An HTTP/2 stream.
    H2(H2Tunnel),
}

impl UpstreamTunnel for AnyTunnel {
    type Read = Either<UpstreamReadHalf, StreamRead<RecvStream>>;
    type Write = Either<UpstreamWriteHalf, StreamWrite<SendStream<Bytes>, Bytes>>;
    type Held = Either<ConnParts, H2Held>;

    fn into_halves(self) -> TunnelHalves<Self::Read, Self::Write, Self::Held> {
        match self {
            AnyTunnel::H1(t) => {
                let h = t.into_halves();
                TunnelHalves {
                    read: Either::A(h.read),
                    write: Either::A(h.write),
                    received: h.received,
                    held: Either::A(h.held),
                }
            }
            AnyTunnel::H2(t) => {
                let h = t.into_halves();
                TunnelHalves {
                    read: Either::B(h.read),
                    write: Either::B(h.write),
                    received: h.received,
                    held: Either::B(h.held),
                }
            }
        }
    }
}

/// One of two tunnel sides ([`AnyTunnel`]), each operation one `match`.
pub enum Either<A, B> {
    /// The HTTP/1.1 side.
    A(A),
    /// The HTTP/2 side.
    B(B),
}

impl<A: AsyncReadRent, B: AsyncReadRent> AsyncReadRent for Either<A, B> {
    async fn read<T: IoBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            Either::A(a) => a.read(buf).await,
            Either::B(b) => b.read(buf).await,
        }
    }

    async fn readv<T: IoVecBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            Either::A(a) => a.readv(buf).await,
            Either::B(b) => b.readv(buf).await,
        }
    }
}

impl<A: AsyncWriteRent, B: AsyncWriteRent> AsyncWriteRent for Either<A, B> {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            Either::A(a) => a.write(buf).await,
            Either::B(b) => b.write(buf).await,
        }
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            Either::A(a) => a.writev(buf).await,
            Either::B(b) => b.writev(buf).await,
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Either::A(a) => a.flush().await,
            Either::B(b) => b.flush().await,
        }
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            Either::A(a) => a.shutdown().await,
            Either::B(b) => b.shutdown().await,
        }
    }
}
