//! [`H2Exchange`]: one request as a stream on a shared HTTP/2 connection, as an
//! [`UpstreamSession`] (DESIGN.md "HTTP/2 and gRPC upstreams").
//!
//! The seam's HTTP/1.1 syntax both ways (`super::head`): the request head becomes HEADERS, its body
//! DATA within the stream's send capacity (`super::body`); the response HEADERS become an HTTP/1.1
//! head in the receive buffer, each DATA frame one chunk (or raw bytes under a Content-Length), and the
//! trailing HEADERS the last chunk's trailer section, so the downstream sessions relay a response from
//! an HTTP/2 upstream as they relay one from HTTP/1.1, trailers included. Flow control is end to end: a
//! DATA frame's capacity is released when its bytes are copied into the receive buffer, which the
//! downstream session empties before the next read, so a stream holds at most one window.
//!
//! Deadlines: the head under `request_timeout` and the zombie clock, the body under the zombie clock,
//! where "received" is any byte read on the connection (`super::conn`: PINGs keep a live connection
//! showing life), so a slow answer on a live connection is never a zombie. A zombie verdict kills the
//! connection. Dropping the session before its stream ended resets the stream (RST_STREAM CANCEL, h2
//! does it when the last handle goes).

use std::{cell::RefCell, net::SocketAddr, rc::Rc, time::Duration};

use edge_core::{
    buf::RecvBuf,
    clock::{coarse_now, timeout_at},
    http::head::{parse_response, Fields, ResponseHead},
    io::body::{BodySource, SendBodyError, SinkError},
};
use h2::{client::ResponseFuture, Reason, RecvStream};
use monoio::time::Instant;

use super::{
    body::{DataSink, H2BodySink, ReqSide, Watch},
    conn::{H2Conn, InFlight},
    head::{self, BodyFraming, Framing},
};
use edge_core::io::h2_stream::{StreamRead, StreamWrite};

use crate::{
    permit::Permit,
    session::{
        BodyEnd, BodyError, BodyRead, Finish, HeadBuffer, TunnelHalves, UpstreamSession,
        UpstreamTunnel, Waited,
    },
    zombie::ActivityClock,
    Upstream, UpstreamError, UpstreamErrorKind,
};

thread_local! {
    /// Scratch fields for parsing the forwarded request head (one per worker thread).
    static SCRATCH: RefCell<Fields> = const { RefCell::new(Fields::new()) };
}

/// One request as a stream on a shared HTTP/2 connection of `up`.
pub struct H2Exchange<'u> {
    up: &'u Upstream,
    conn: Rc<H2Conn>,
    endpoint: usize,
    reused: bool,
    buf: RecvBuf,
    /// The request side, once HEADERS went out (taken by a full-duplex exchange's body sink).
    req: Option<ReqSide>,
    /// The response head, until it arrives.
    response: Option<ResponseFuture>,
    /// A response head that arrived while the body was being sent or during a `100-continue` wait.
    early: Option<Result<http::Response<RecvStream>, h2::Error>>,
    /// The response body, after the head.
    recv: Option<RecvStream>,
    framing: BodyFraming,
    head_method: bool,
    write_timeout: Duration,
    /// The response ended (END_STREAM received).
    ended: bool,
    /// The trailing HEADERS, once received.
    trailers: Option<http::HeaderMap>,
    /// A WebSocket sent as an extended CONNECT: the key its `101` is written for.
    websocket: Option<Vec<u8>>,
    _slot: InFlight,
    _permit: Permit,
}

impl<'u> H2Exchange<'u> {
    pub(crate) fn new(up: &'u Upstream, conn: Rc<H2Conn>, endpoint: usize, permit: Permit) -> Self {
        let (slot, reused) = conn.begin();
        H2Exchange {
            up,
            conn,
            endpoint,
            reused,
            buf: RecvBuf::new(),
            req: None,
            response: None,
            early: None,
            recv: None,
            framing: BodyFraming::None,
            head_method: false,
            write_timeout: Duration::ZERO,
            ended: false,
            trailers: None,
            websocket: None,
            _slot: slot,
            _permit: permit,
        }
    }

    /// Sends the request body bytes in `body` (seam framing) as DATA.
    async fn send_prefix(
        &mut self,
        body: &[u8],
        write_timeout: Duration,
    ) -> Result<(), UpstreamError> {
        let Some(side) = self.req.as_mut() else {
            return Ok(());
        };
        let watch = Watch {
            response: &mut self.response,
            early: &mut self.early,
        };
        let mut sink = DataSink::new(side, Some(watch), write_timeout);
        sink.put(body).await.map_err(|e| sink_error(&e))?;
        Ok(())
    }

    /// Writes the response head into the receive buffer (a WebSocket's 2xx as the `101` of its
    /// switch).
    fn take_head(&mut self, resp: http::Response<RecvStream>) {
        let (parts, recv) = resp.into_parts();
        if let (Some(key), true) = (self.websocket.as_deref(), parts.status.is_success()) {
            self.buf
                .append_with(|out| head::switch_head(&parts, key, out));
            self.recv = Some(recv);
            return;
        }
        let ended = recv.is_end_stream();
        let head_method = self.head_method;
        self.framing = self
            .buf
            .append_with(|out| head::response(&parts, ended, head_method, out));
        if self.framing == BodyFraming::None {
            self.ended = ended;
        }
        self.recv = Some(recv);
    }
}

/// An h2 error before the response head, as the seam's error: a refused or unprocessed stream is
/// retry-safe whatever the method; any other failure is retry-safe as on HTTP/1.1 (no response byte
/// arrived; the retry policy asks for a reused connection and an idempotent method).
pub(crate) fn before_head(e: &h2::Error) -> UpstreamError {
    if e.reason() == Some(Reason::REFUSED_STREAM) {
        return UpstreamError::retry_safe(UpstreamErrorKind::RefusedStream);
    }
    if e.is_go_away() && e.is_remote() && e.reason() == Some(Reason::NO_ERROR) {
        return UpstreamError::retry_safe(UpstreamErrorKind::GoAway);
    }
    UpstreamError::retry_safe(UpstreamErrorKind::Reset)
}

/// A failed DATA write as the seam's error.
fn sink_error(e: &SinkError) -> UpstreamError {
    match e {
        SinkError::Timeout => UpstreamError::new(UpstreamErrorKind::WriteTimeout),
        SinkError::Io(_) => UpstreamError::new(UpstreamErrorKind::Reset),
    }
}

impl UpstreamSession for H2Exchange<'_> {
    type Tunnel = H2Tunnel;
    type BodySink = H2BodySink;

    /// An HTTP/2 stream keeps taking request DATA after its response head.
    fn duplex(&self) -> bool {
        true
    }

    fn take_body_sink(&mut self) -> Option<H2BodySink> {
        let side = self.req.take()?;
        Some(H2BodySink::new(side, self.write_timeout))
    }

    fn reused(&self) -> bool {
        self.reused
    }

    fn endpoint(&self) -> SocketAddr {
        self.up.endpoints[self.endpoint].addr
    }

    fn endpoint_metrics(&self) -> &edge_core::metrics::EndpointMetrics {
        &self.up.endpoints[self.endpoint].metrics
    }

    fn received(&self) -> &RecvBuf {
        &self.buf
    }

    fn received_mut(&mut self) -> &mut RecvBuf {
        &mut self.buf
    }

    async fn send_head(
        &mut self,
        out: &mut Vec<u8>,
        write_timeout: Duration,
    ) -> Result<(), UpstreamError> {
        let Some(req) = SCRATCH.with(|f| head::request(out, &mut f.borrow_mut(), self.conn.tls))
        else {
            return Err(UpstreamError::new(UpstreamErrorKind::BadResponse));
        };
        self.head_method = req.head_method;
        self.write_timeout = write_timeout;
        let framing = req.framing;
        self.websocket = req.websocket;
        let body = &out[req.head_len..];
        // A WebSocket's stream stays open for the tunnel after its HEADERS.
        let no_body = self.websocket.is_none()
            && match req.framing {
                Framing::None => true,
                Framing::Length(n) => n == 0,
                Framing::Chunked => false,
            };
        let mut sender = self.conn.send.clone();
        let ready = std::future::poll_fn(|cx| sender.poll_ready(cx));
        match timeout_at(Instant::now() + write_timeout, ready).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.conn.state.retire();
                return Err(match before_head(&e).kind {
                    UpstreamErrorKind::Reset => {
                        UpstreamError::retry_safe(UpstreamErrorKind::GoAway)
                    }
                    _ => before_head(&e),
                });
            }
            Err(_) => return Err(UpstreamError::new(UpstreamErrorKind::WriteTimeout)),
        }
        if self.websocket.is_some() && !connect_allowed(&sender, write_timeout).await {
            // RFC 8441 §3: the server did not offer SETTINGS_ENABLE_CONNECT_PROTOCOL.
            return Err(UpstreamError::new(UpstreamErrorKind::BadResponse));
        }
        let (response, stream) = match sender.send_request(req.request, no_body) {
            Ok(r) => r,
            Err(e) => {
                self.conn.state.retire();
                let mut err = before_head(&e);
                if err.kind == UpstreamErrorKind::Reset {
                    // The connection could not take the stream: nothing of it was sent.
                    err = UpstreamError::retry_safe(UpstreamErrorKind::GoAway);
                }
                return Err(err);
            }
        };
        self.response = Some(response);
        self.req = Some(ReqSide::new(stream, framing, no_body));
        if !no_body && !body.is_empty() {
            let body = body.to_vec();
            self.send_prefix(&body, write_timeout).await?;
        }
        Ok(())
    }

    async fn wait_more(
        &mut self,
        until: Instant,
        _received_before: bool,
    ) -> Result<Waited, UpstreamError> {
        // h2 surfaces no 1xx: the wait ends at the final head or at `until`.
        if self.early.is_none() {
            let Some(response) = self.response.as_mut() else {
                return Ok(Waited::Deadline);
            };
            match timeout_at(until, response).await {
                Ok(r) => {
                    self.response = None;
                    self.early = Some(r);
                }
                Err(_) => return Ok(Waited::Deadline),
            }
        }
        match self.early.take() {
            Some(Ok(resp)) => {
                self.take_head(resp);
                Ok(Waited::Bytes)
            }
            Some(Err(e)) => Err(before_head(&e)),
            None => Ok(Waited::Deadline),
        }
    }

    async fn send_body<B: BodySource>(
        mut self,
        body: &mut B,
        _fields: &mut Fields,
        write_timeout: Duration,
    ) -> (Self, Result<BodyEnd, BodyError<B::Error>>) {
        let Some(side) = self.req.as_mut() else {
            return (self, Ok(BodyEnd::Sent));
        };
        let watch = Watch {
            response: &mut self.response,
            early: &mut self.early,
        };
        let mut sink = DataSink::new(side, Some(watch), write_timeout);
        let r = body.forward_rest(&mut sink, write_timeout).await;
        let r = match r {
            Ok(()) => sink
                .end()
                .await
                .map_err(|e| BodyError::Upstream(sink_error(&e))),
            Err(SendBodyError::Source(e)) => Err(BodyError::Source(e)),
            Err(SendBodyError::Sink(e)) => Err(BodyError::Upstream(sink_error(&e))),
        };
        let early = self.early.is_some();
        let r = match r {
            Ok(()) => Ok(BodyEnd::Sent),
            // The upstream answered (and may have reset the stream's request side): the answer counts.
            Err(BodyError::Upstream(_)) if early => Ok(BodyEnd::Early),
            Err(e) => Err(e),
        };
        if early {
            if let Some(Ok(resp)) = self.early.take() {
                self.take_head(resp);
            }
        }
        (self, r)
    }

    async fn read_head(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
        head_deadline: Option<Instant>,
        _buffer: HeadBuffer,
    ) -> Result<ResponseHead, UpstreamError> {
        if self.buf.is_empty() {
            match self.early.take() {
                Some(Ok(resp)) => self.take_head(resp),
                Some(Err(e)) => return Err(before_head(&e)),
                None => {
                    let resp = self.await_head(clock, head_deadline).await?;
                    self.take_head(resp);
                }
            }
            clock.received();
        }
        match parse_response(self.buf.data(), fields) {
            // HTTP/2 has no `101` (RFC 9113 §8.6): only a WebSocket's accepted extended CONNECT
            // reads as one (`take_head`).
            Ok(Some(h)) if h.status == 101 && self.websocket.is_none() => {
                Err(UpstreamError::new(UpstreamErrorKind::BadResponse))
            }
            Ok(Some(h)) => Ok(h),
            _ => Err(UpstreamError::new(UpstreamErrorKind::BadResponse)),
        }
    }

    async fn read_body(
        &mut self,
        clock: &mut ActivityClock,
        _size: usize,
    ) -> Result<BodyRead, UpstreamError> {
        if self.ended || self.framing == BodyFraming::None {
            return Ok(BodyRead::Eof);
        }
        let Some(recv) = self.recv.as_mut() else {
            return Ok(BodyRead::Eof);
        };
        loop {
            let until = self.conn.state.zombie_deadline(clock);
            match timeout_at(until, recv.data()).await {
                Ok(Some(Ok(data))) => {
                    if data.is_empty() {
                        continue;
                    }
                    let n = data.len();
                    let chunked = self.framing == BodyFraming::Chunked;
                    self.buf.append_with(|out| match chunked {
                        true => head::chunk(out, &data),
                        false => out.extend_from_slice(&data),
                    });
                    let _ = recv.flow_control().release_capacity(n);
                    clock.received();
                    return Ok(BodyRead::Data);
                }
                Ok(Some(Err(_))) => return Err(UpstreamError::new(UpstreamErrorKind::Reset)),
                Ok(None) => {
                    if self.framing == BodyFraming::Length {
                        self.ended = true;
                        return Ok(BodyRead::Eof);
                    }
                    let trailers = match timeout_at(until, recv.trailers()).await {
                        Ok(Ok(t)) => t,
                        Ok(Err(_)) => return Err(UpstreamError::new(UpstreamErrorKind::Reset)),
                        Err(_) => return Err(self.conn.state.zombie()),
                    };
                    self.buf
                        .append_with(|out| head::last_chunk(out, trailers.as_ref()));
                    self.trailers = trailers;
                    self.ended = true;
                    return Ok(BodyRead::Data);
                }
                Err(_) if coarse_now() >= until => return Err(self.conn.state.zombie()),
                Err(_) => {}
            }
        }
    }

    fn received_trailers(&self) -> Option<&http::HeaderMap> {
        self.trailers.as_ref()
    }

    /// Ends the stream: one that did not end both ways is reset (RST_STREAM CANCEL); the connection
    /// stays for other streams either way.
    fn finish(mut self, _end: Finish) {
        // A sink taken by a full-duplex exchange resets the stream as it drops, if unfinished.
        if let Some(side) = self.req.as_mut() {
            if !(self.ended && side.sent) {
                side.stream.send_reset(Reason::CANCEL);
            }
        }
    }

    /// A WebSocket's stream after its extended CONNECT was accepted: its two sides (RFC 8441 §5).
    fn into_tunnel(self) -> H2Tunnel {
        H2Tunnel {
            recv: self.recv,
            send: self.req.map(|side| side.stream),
            held: (self._slot, self._permit, self.conn),
        }
    }
}

impl H2Exchange<'_> {
    /// Waits for the response head under `head_deadline` and the zombie clock.
    async fn await_head(
        &mut self,
        clock: &mut ActivityClock,
        head_deadline: Option<Instant>,
    ) -> Result<http::Response<RecvStream>, UpstreamError> {
        loop {
            let zombie_at = self.conn.state.zombie_deadline(clock);
            let until = head_deadline.map_or(zombie_at, |d| d.min(zombie_at));
            let Some(response) = self.response.as_mut() else {
                return Err(UpstreamError::new(UpstreamErrorKind::Reset));
            };
            match timeout_at(until, response).await {
                Ok(Ok(resp)) => {
                    self.response = None;
                    return Ok(resp);
                }
                Ok(Err(e)) => return Err(before_head(&e)),
                Err(_) => {
                    let now = coarse_now();
                    if head_deadline.is_some_and(|d| d <= now.max(Instant::now())) {
                        return Err(UpstreamError::new(UpstreamErrorKind::RequestTimeout));
                    }
                    if self.conn.state.zombie_deadline(clock) <= now {
                        return Err(self.conn.state.zombie());
                    }
                }
            }
        }
    }
}

/// An HTTP/2 upstream's WebSocket stream after the switch: its DATA both ways as the tunnel's reader
/// and writer ([`edge_core::io::h2_stream`]); its `shutdown` sends END_STREAM, and dropping it
/// unfinished resets the stream (RST_STREAM CANCEL).
pub struct H2Tunnel {
    recv: Option<RecvStream>,
    send: Option<h2::SendStream<bytes::Bytes>>,
    held: (InFlight, Permit, Rc<H2Conn>),
}

/// What an [`H2Tunnel`] keeps until it ends: its stream's place on its connection, its `max_active`
/// permit and the connection.
pub struct H2Held(#[allow(dead_code)] (InFlight, Permit, Rc<H2Conn>));

impl UpstreamTunnel for H2Tunnel {
    type Read = StreamRead<RecvStream>;
    type Write = StreamWrite<h2::SendStream<bytes::Bytes>, bytes::Bytes>;
    type Held = H2Held;

    fn into_halves(self) -> TunnelHalves<Self::Read, Self::Write, H2Held> {
        // A WebSocket's stream has both sides until the switch: `into_tunnel` follows `read_head`.
        let (Some(recv), Some(send)) = (self.recv, self.send) else {
            unreachable!("a switched HTTP/2 stream has both sides");
        };
        TunnelHalves {
            read: StreamRead::new(recv),
            write: StreamWrite::new(send),
            received: RecvBuf::new(),
            held: H2Held(self.held),
        }
    }
}

/// Whether the connection of `sender` allows extended CONNECT (RFC 8441 §3). The server's SETTINGS may
/// not have been read yet on a connection just opened: waited for, a millisecond at a time, at most
/// `limit`.
async fn connect_allowed(sender: &h2::client::SendRequest<bytes::Bytes>, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while !sender.is_extended_connect_protocol_enabled() {
        if Instant::now() >= until {
            return false;
        }
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}
