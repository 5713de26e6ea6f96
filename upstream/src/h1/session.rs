//! [`H1Exchange`]: one request's exchange on an exclusive HTTP/1.1 connection checked out of its
//! endpoint's pool, as an [`UpstreamSession`]; [`H1Tunnel`]: that connection after a `101`.
//!
//! The connection is a pointer ([`UpstreamConn`] keeps its fields in one box), held in the session and
//! borrowed by each phase: the orchestrator keeps the session in its own frame from the checkout to the
//! response phase, and only the streamed-body phase moves it (bench/README.md "Future moves"). The
//! methods hand back the phase's future itself rather than wrapping it in one more `async fn`, which
//! would copy it once more when awaited.

use std::{future::Future, net::SocketAddr, time::Duration};

use edge_core::{
    buf::RecvBuf,
    http::head::{Fields, ResponseHead},
    io::{body::BodySource, Transport},
};
use monoio::time::Instant;

use super::{request, response};
use crate::{
    pool::ConnParts,
    session::{
        BodyEnd, BodyError, BodyRead, Finish, HeadBuffer, NoSink, TunnelHalves, UpstreamSession,
        UpstreamTunnel, Waited,
    },
    stream::{UpstreamReadHalf, UpstreamWriteHalf},
    zombie::ActivityClock,
    Upstream, UpstreamConn, UpstreamError,
};

/// One request on a checked-out HTTP/1.1 connection of `up`.
pub struct H1Exchange<'u> {
    pub(super) conn: UpstreamConn,
    pub(super) up: &'u Upstream,
}

impl<'u> H1Exchange<'u> {
    /// The exchange on `conn`, checked out of `up`'s pools (it goes back with [`Finish::Reuse`]).
    pub(crate) fn new(up: &'u Upstream, conn: UpstreamConn) -> Self {
        H1Exchange { conn, up }
    }
}

impl UpstreamSession for H1Exchange<'_> {
    type Tunnel = H1Tunnel;
    /// Half duplex (see [`UpstreamSession::duplex`]).
    type BodySink = NoSink;

    fn reused(&self) -> bool {
        self.conn.reused
    }

    fn endpoint(&self) -> SocketAddr {
        self.up.endpoints[self.conn.endpoint].addr
    }

    fn endpoint_metrics(&self) -> &edge_core::metrics::EndpointMetrics {
        &self.up.endpoints[self.conn.endpoint].metrics
    }

    fn received(&self) -> &RecvBuf {
        &self.conn.buf
    }

    fn received_mut(&mut self) -> &mut RecvBuf {
        &mut self.conn.buf
    }

    fn send_head(
        &mut self,
        out: &mut Vec<u8>,
        write_timeout: Duration,
    ) -> impl Future<Output = Result<(), UpstreamError>> {
        request::send_head(&mut self.conn, out, write_timeout)
    }

    fn wait_more(
        &mut self,
        until: Instant,
        received_before: bool,
    ) -> impl Future<Output = Result<Waited, UpstreamError>> {
        response::wait_more(&mut self.conn, until, received_before)
    }

    fn send_body<B: BodySource>(
        self,
        body: &mut B,
        fields: &mut Fields,
        write_timeout: Duration,
    ) -> impl Future<Output = (Self, Result<BodyEnd, BodyError<B::Error>>)> {
        request::send_body_watching_response(self, body, fields, write_timeout)
    }

    fn read_head(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
        head_deadline: Option<Instant>,
        buffer: HeadBuffer,
    ) -> impl Future<Output = Result<ResponseHead, UpstreamError>> {
        response::read_head(&mut self.conn, fields, clock, head_deadline, buffer)
    }

    fn read_body(
        &mut self,
        clock: &mut ActivityClock,
        size: usize,
    ) -> impl Future<Output = Result<BodyRead, UpstreamError>> {
        response::read_body(&mut self.conn, clock, size)
    }

    fn splice_source(&self) -> Option<std::os::fd::RawFd> {
        match self.conn.buf.is_empty() {
            true => self.conn.stream.raw_socket(),
            false => None,
        }
    }

    fn body_readable(
        &mut self,
        clock: &ActivityClock,
    ) -> impl Future<Output = Result<(), UpstreamError>> {
        response::body_readable(&mut self.conn, clock)
    }

    /// [`Finish::Reuse`] checks the connection back into its pool; [`Finish::Close`] closes it.
    fn finish(self, end: Finish) {
        if let Finish::Reuse { keep_alive_secs } = end {
            self.up.checkin(self.conn, keep_alive_secs);
        }
    }

    fn into_tunnel(self) -> H1Tunnel {
        H1Tunnel(self.conn)
    }
}

/// An HTTP/1.1 connection after a `101`: never pooled again. A pointer, so the outcome that carries it
/// to the downstream connection stays small.
pub struct H1Tunnel(UpstreamConn);

impl UpstreamTunnel for H1Tunnel {
    type Read = UpstreamReadHalf;
    type Write = UpstreamWriteHalf;
    type Held = ConnParts;

    fn into_halves(self) -> TunnelHalves<UpstreamReadHalf, UpstreamWriteHalf, ConnParts> {
        let (stream, mut parts) = self.0.into_parts();
        let received = std::mem::take(&mut parts.buf);
        let (read, write) = stream.split();
        TunnelHalves {
            read,
            write,
            received,
            held: parts,
        }
    }
}
