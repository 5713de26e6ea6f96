//! The upstream-session seam (DESIGN.md "Layout", STYLE.md "Seams"): the upstream side of one request's
//! exchange, as the orchestrator (`frontend/src/proxy`) is written against it. An [`Open`] (an
//! [`Upstream`]) opens an [`UpstreamSession`] for a request, hiding how: an HTTP/1.1 exchange checks a
//! connection out of its endpoint's pool and back in ([`crate::h1`]); an HTTP/2 one would open a stream on
//! a shared connection and end it. The session then sends the head, waits for `100 Continue` where asked,
//! streams the rest of the body while watching for an early answer, reads interim and final response
//! heads under `request_timeout` and the zombie [`ActivityClock`], reads the body, and finishes, or turns
//! into a tunnel after a `101`.
//!
//! Both directions use HTTP/1.1 syntax as the protocol-neutral form: the forwarded request head
//! ([`crate::head::request_head`]) and body bytes in the framing it declares go in; response heads and
//! body bytes in the framing the final head declares come out in [`UpstreamSession::received`], which the
//! downstream session consumes ([`crate::received`] classifies them). Generic and monomorphised: no trait
//! object, no allocation per request; the concrete session is chosen in one place, the [`Open`]
//! implementation for [`Upstream`] at the end of this file.
//!
//! # HTTP/2
//!
//! [`crate::h2`] implements the same trait on the `h2` crate's client, driven on the worker's runtime
//! through [`edge_core::io::PollIo`] as the downstream HTTP/2 server is (DESIGN.md "HTTP/2 and gRPC
//! upstreams"); [`Open`] for [`Upstream`] returns [`AnyExchange`], an enum over the two sessions, by the
//! upstream's `protocol`:
//! - connections per worker and endpoint, shared by its streams up to `max_streams_per_connection`
//!   (and the server's SETTINGS_MAX_CONCURRENT_STREAMS), idle ones kept like pooled HTTP/1.1 ones
//!   (`crate::h2::conn`);
//! - the head and body in this seam's HTTP/1.1 syntax both ways (`crate::h2::head`, `crate::h2::body`),
//!   trailers in the last chunk;
//! - [`UpstreamSession::duplex`] true: an HTTP/2 client's exchange is full duplex through
//!   [`UpstreamSession::take_body_sink`] (`frontend/src/proxy/duplex.rs`); an HTTP/1.1 client's goes
//!   through [`UpstreamSession::send_body`], watching the response for an early answer;
//! - a stream the upstream never processed (REFUSED_STREAM, above a graceful GOAWAY) is
//!   [`UpstreamErrorKind::unprocessed`](crate::UpstreamErrorKind::unprocessed): sent again whatever the
//!   method;
//! - PING liveness feeds the zombie clock: only a connection that answers nothing is a zombie;
//! - a WebSocket upgrade goes as an extended CONNECT (RFC 8441), its tunnel the stream's DATA.

use std::{future::Future, net::SocketAddr, time::Duration};

use edge_core::{
    buf::RecvBuf,
    http::head::{Fields, ResponseHead},
    io::body::{BodySource, RequestSink},
};
use monoio::{
    buf::{IoBuf, IoVecBuf},
    io::{AsyncReadRent, AsyncWriteRent},
    time::Instant,
    BufResult,
};

pub use crate::pool::Reuse;
use crate::{
    any::{AnyExchange, AnyTunnel},
    h1::H1Exchange,
    zombie::ActivityClock,
    Upstream, UpstreamError, UpstreamErrorKind,
};

/// What opens an upstream session for one request: an [`Upstream`] (its endpoints and their pools or
/// shared connections), or an in-memory script in the orchestrator's tests.
pub trait Open {
    /// The upstream side of a tunnel after a `101`.
    type Tunnel: UpstreamTunnel;
    /// The session of one request, borrowing the opener.
    type Session<'a>: UpstreamSession<Tunnel = Self::Tunnel>
    where
        Self: 'a;

    /// Opens a session on the endpoint the balancing policy picks, reusing a connection as `reuse`
    /// allows ([`Reuse::Fresh`] for the retry after a reused connection failed), or connecting
    /// (retrying once on another endpoint when the connect is refused or times out). `client` is the
    /// request's client connection, for an upstream that sends the PROXY protocol: a new connection
    /// starts with its header, and only a connection opened for the same client connection is reused.
    ///
    /// `key` is the request's hash for `balance = "hash"` (`None`: not hashed; the policy picks as
    /// round robin).
    ///
    /// # Errors
    /// The connect error of the last attempt, or `QueueTimeout` (retry-safe: nothing was sent).
    ///
    /// # Cancel safety
    /// Cancel safe: a connection being opened is closed.
    fn open(
        &self,
        reuse: Reuse,
        client: ClientConn,
        key: Option<u64>,
    ) -> impl Future<Output = Result<Opened<Self::Session<'_>>, UpstreamError>>;
}

/// The client connection a request came on, as an upstream PROXY protocol header describes it
/// (`send_proxy_protocol`, DESIGN.md "Observability").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientConn {
    /// The client's address edge uses (the inbound PROXY header's source when there was one).
    pub source: SocketAddr,
    /// The address the client reached edge on (edge's local address of that connection).
    pub destination: SocketAddr,
}

/// An opened session.
pub struct Opened<E> {
    /// The session.
    pub session: E,
    /// The first connect attempt failed and a second endpoint (or attempt) succeeded: counted as a retry.
    pub retried: bool,
}

/// The upstream side of one request's exchange. Order of use: [`UpstreamSession::send_head`], then
/// [`UpstreamSession::wait_more`] while waiting for `100 Continue`, [`UpstreamSession::send_body`] for a
/// body that did not come whole with the head, [`UpstreamSession::read_head`] until a final head,
/// [`UpstreamSession::read_body`] until the downstream session has the whole body, and
/// [`UpstreamSession::finish`] (or [`UpstreamSession::into_tunnel`] after a `101`). Dropping a session
/// closes it as [`Finish::Close`] does.
pub trait UpstreamSession: Sized {
    /// The upstream side of a tunnel after a `101`.
    type Tunnel: UpstreamTunnel;

    /// The request-body side of a full-duplex session, taken apart from it
    /// ([`UpstreamSession::take_body_sink`]); [`NoSink`] for a half-duplex one.
    type BodySink: RequestSink;

    /// Whether the exchange is full duplex: the upstream keeps taking request body bytes after its
    /// response head, and both directions go on together until each ends (gRPC client and
    /// bidirectional streaming, DESIGN.md "HTTP/2 and gRPC upstreams"). An HTTP/2 stream keeps
    /// accepting request DATA after its response head; an HTTP/1.1 exchange is half duplex (the
    /// default): an answer that starts before the whole body was sent ends the body
    /// ([`BodyEnd::Early`]) and the client connection closes afterwards.
    fn duplex(&self) -> bool {
        false
    }

    /// Takes the request-body side out of a duplex session ([`UpstreamSession::duplex`]), once, right
    /// after [`UpstreamSession::send_head`] (and the `100 Continue` wait) instead of
    /// [`UpstreamSession::send_body`]: the orchestrator then writes the rest of the body into it
    /// ([`BodySource::forward_rest`], bytes in the framing the forwarded head declares, as for
    /// `send_body`) while it reads the response through the session ([`UpstreamSession::read_head`],
    /// [`UpstreamSession::read_body`]) in the same task. `None` (the default) for a half-duplex session.
    ///
    /// What the sink must do:
    /// - end the request by itself once the declared framing is complete (HTTP/2: END_STREAM with the
    ///   last DATA, after a chunked body's last chunk or the Content-Length's last byte); `flush` and
    ///   `shutdown` are not called;
    /// - bound each write by the stream's flow control under the `write_timeout` the orchestrator
    ///   applies around it (HTTP/2: `reserve_capacity` / `poll_capacity`), failing with an
    ///   [`std::io::Error`] once the upstream no longer takes the body (a reset stream);
    /// - count its writes as activity for the zombie deadline of the session's reads (a request that
    ///   keeps streaming while the response is silent is not a zombie; an HTTP/2 connection answering
    ///   PINGs never is).
    ///
    /// Dropping the sink before the body ended leaves the request unfinished: [`Finish::Close`] (or
    /// dropping the session) then cancels it (HTTP/2: RST_STREAM CANCEL, RFC 9113 §8.1); the session's
    /// reads go on after the sink is dropped.
    ///
    /// In the duplex phase a session's reads may be dropped while pending (the other direction
    /// failed; the session is then finished with [`Finish::Close`]), and `read_head` is called with no
    /// `head_deadline`: the orchestrator runs `request_timeout` itself, from the end of the request
    /// body to the response head.
    fn take_body_sink(&mut self) -> Option<Self::BodySink> {
        None
    }

    /// Whether the session runs on a connection that served earlier requests (a pooled HTTP/1.1
    /// connection): a failure before any response byte may then be the upstream closing it as it was
    /// reused, which the retry policy ([`crate::retry`]) retries.
    fn reused(&self) -> bool;

    /// The endpoint's address, for log lines.
    fn endpoint(&self) -> SocketAddr;

    /// The endpoint's counters on this worker
    /// (`edge_upstream_endpoint_requests_total{worker,upstream,endpoint,status_class}`), for the
    /// orchestrator to count the attempt's outcome.
    fn endpoint_metrics(&self) -> &edge_core::metrics::EndpointMetrics;

    /// The response bytes received and not yet consumed, in HTTP/1.1 syntax ([`crate::received`]): the
    /// heads, then the body in the framing the final head declares.
    fn received(&self) -> &RecvBuf;

    /// [`UpstreamSession::received`], for the downstream session to consume.
    fn received_mut(&mut self) -> &mut RecvBuf;

    /// Sends the request head in HTTP/1.1 syntax ([`crate::head::request_head`]) with the body bytes
    /// that came with it, `out`, under `write_timeout`. `out` keeps its bytes so that a retry can send
    /// them again.
    ///
    /// # Errors
    /// A failed write (retry-safe: on a reused connection nothing reached the application) or
    /// `WriteTimeout` (not retry-safe).
    fn send_head(
        &mut self,
        out: &mut Vec<u8>,
        write_timeout: Duration,
    ) -> impl Future<Output = Result<(), UpstreamError>>;

    /// Waits until `until` for more response bytes (the wait for `100 Continue`), appended to
    /// [`UpstreamSession::received`].
    ///
    /// # Errors
    /// A close (`ClosedEarly`) or reset; retry-safe when `received_before` is false (no response byte
    /// arrived in this attempt).
    ///
    /// # Cancel safety
    /// The read is cancelled at the deadline and awaited, so bytes that won the race stay buffered.
    fn wait_more(
        &mut self,
        until: Instant,
        received_before: bool,
    ) -> impl Future<Output = Result<Waited, UpstreamError>>;

    /// Streams the rest of the request body from `body` while watching the upstream for an early
    /// response; interim responses that arrive meanwhile stay buffered (the response-head read hands
    /// them on) and sending goes on. `fields` is scratch for parsing them. The one phase that takes the
    /// session by value (HTTP/1.1 splits its connection to read and write at once) and gives it back,
    /// and only for a body that did not come with the head.
    ///
    /// # Errors
    /// [`BodyError::Source`] for the client's side; [`BodyError::Upstream`] for a failed or timed out
    /// write, or the upstream closing meanwhile (`ClosedEarly`, `Reset`).
    ///
    /// # Cancel safety
    /// When the response wins the race, the body future is dropped: the client's connection then closes
    /// and the upstream's is not reused. Response bytes that won the race stay buffered.
    fn send_body<B: BodySource>(
        self,
        body: &mut B,
        fields: &mut Fields,
        write_timeout: Duration,
    ) -> impl Future<Output = (Self, Result<BodyEnd, BodyError<B::Error>>)>;

    /// Reads until a complete response head (interim or final) is at the start of
    /// [`UpstreamSession::received`], with its fields in `fields`. The read stops at `head_deadline`
    /// (`request_timeout`, 504 `RequestTimeout`) or at the zombie deadline of `clock` (504 `Zombie`),
    /// whichever is first; bytes received mark `clock`.
    ///
    /// # Errors
    /// `BadResponse` for a malformed head or one over [`crate::received::MAX_RESPONSE_HEAD`]; the
    /// deadlines' kinds; a close or reset, retry-safe only while no response byte arrived in this
    /// attempt (`clock.last_received`).
    ///
    /// `buffer` sizes an HTTP/1.1 connection's head read ([`HeadBuffer`]); an HTTP/2 stream's head
    /// is written by the session, not read into a buffer of this size.
    ///
    /// # Cancel safety
    /// Not cancel safe; after any error the session is dropped.
    fn read_head(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
        head_deadline: Option<Instant>,
        buffer: HeadBuffer,
    ) -> impl Future<Output = Result<ResponseHead, UpstreamError>>;

    /// Reads more of the response body into [`UpstreamSession::received`] under the zombie deadline of
    /// `clock`. A `size` above 0 reads into a pooled buffer of that size class (pass-through relays,
    /// sized by the client's pace: [`edge_core::pace::RelayPace`]); 0 reads into the buffer as it is.
    ///
    /// # Errors
    /// `Zombie` when the clock's deadline passes, `Reset` for a failed read.
    ///
    /// # Cancel safety
    /// Not cancel safe; after any error the session is dropped.
    fn read_body(
        &mut self,
        clock: &mut ActivityClock,
        size: usize,
    ) -> impl Future<Output = Result<BodyRead, UpstreamError>>;

    /// The upstream's socket, when the response body can be spliced from it ([`edge_core::io::splice`]):
    /// plain TCP with nothing of the response buffered in [`UpstreamSession::received`], so the next
    /// body byte is the socket's next. `None` (the default) otherwise: TLS, HTTP/2, a buffer holding
    /// bytes.
    fn splice_source(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Waits until the socket of [`UpstreamSession::splice_source`] has bytes or its end to read,
    /// under the zombie `clock`, holding no buffer.
    ///
    /// # Errors
    /// `Zombie` when the clock's deadline passes, `Reset` when the wait fails.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is read.
    fn body_readable(
        &mut self,
        clock: &ActivityClock,
    ) -> impl Future<Output = Result<(), UpstreamError>> {
        let _ = clock;
        std::future::ready(Err(UpstreamError::new(UpstreamErrorKind::Reset)))
    }

    /// The response's trailer fields, once the body is complete, where the protocol carries them apart
    /// from the body bytes. HTTP/1.1 carries them inside its chunked body, relayed with it: the default
    /// answers [`Trailers::InBody`] at once.
    ///
    /// # Errors
    /// As [`UpstreamSession::read_body`].
    fn read_trailers(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
    ) -> impl Future<Output = Result<Trailers, UpstreamError>> {
        let _ = (fields, clock);
        std::future::ready(Ok(Trailers::InBody))
    }

    /// The trailer section received apart from the body bytes, once the body is complete (HTTP/2
    /// trailing HEADERS; they are also in the body's last chunk, [`Trailers::InBody`]): for the access
    /// line's `grpc_status`. `None` where trailers travel only inside the body (HTTP/1.1).
    fn received_trailers(&self) -> Option<&http::HeaderMap> {
        None
    }

    /// Ends the session after its response: see [`Finish`].
    fn finish(self, end: Finish);

    /// The session as a tunnel after a `101` (its head consumed from [`UpstreamSession::received`];
    /// the bytes after it go to the client first). Never reused afterwards.
    fn into_tunnel(self) -> Self::Tunnel;
}

/// How a `100 Continue` wait for more response bytes ended ([`UpstreamSession::wait_more`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// Bytes arrived (in [`UpstreamSession::received`]).
    Bytes,
    /// `until` passed first; the read was cancelled without losing a byte.
    Deadline,
}

/// How the request-body phase ended ([`UpstreamSession::send_body`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyEnd {
    /// The whole body was sent.
    Sent,
    /// The upstream started its response before the whole body was sent (e.g. a 413 or 401 without
    /// reading the upload): sending stops, the response bytes are in [`UpstreamSession::received`].
    Early,
}

/// Why streaming the request body stopped ([`UpstreamSession::send_body`]).
#[derive(Debug)]
pub enum BodyError<E> {
    /// The client side failed ([`BodySource::Error`]).
    Source(E),
    /// The upstream failed (write error or timeout, or it closed or reset while the body was sent).
    Upstream(UpstreamError),
}

/// What one response-body read gave ([`UpstreamSession::read_body`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRead {
    /// More bytes are in [`UpstreamSession::received`].
    Data,
    /// The upstream closed its side (the end of a close-delimited body, else a body cut short).
    Eof,
}

/// Where a response's trailer fields are ([`UpstreamSession::read_trailers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trailers {
    /// Inside the body bytes (HTTP/1.1 chunked trailers), relayed with them; or none.
    InBody,
    /// A trailer section received apart from the body (HTTP/2 trailing HEADERS): `len` bytes of
    /// HTTP/1.1 field lines at the start of [`UpstreamSession::received`], its fields in `fields`.
    Section {
        /// Length of the section, bytes.
        len: usize,
    },
}

/// How a session ends after its response ([`UpstreamSession::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The response ended clean, well framed after a complete request, and both sides keep the
    /// connection alive: an HTTP/1.1 connection goes back to its pool (DESIGN.md "Upstream pools and
    /// retries"), idle at most the upstream's `Keep-Alive: timeout` minus one second
    /// (`keep_alive_secs`) and `pool_idle_timeout`.
    Reuse {
        /// The upstream's `Keep-Alive: timeout=N`.
        keep_alive_secs: Option<u64>,
    },
    /// Closed: the connection (HTTP/1.1), or the stream when it did not end (HTTP/2).
    Close,
}

/// The [`UpstreamSession::BodySink`] of a half-duplex session: there is none (uninhabited).
#[derive(Debug)]
pub enum NoSink {}

impl RequestSink for NoSink {}

impl AsyncWriteRent for NoSink {
    async fn write<T: IoBuf>(&mut self, _: T) -> BufResult<usize, T> {
        match *self {}
    }

    async fn writev<T: IoVecBuf>(&mut self, _: T) -> BufResult<usize, T> {
        match *self {}
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        match *self {}
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        match *self {}
    }
}

/// The upstream side of a tunnel after a `101` ([`UpstreamSession::into_tunnel`]).
pub trait UpstreamTunnel {
    /// Bytes from the upstream.
    type Read: AsyncReadRent;
    /// Bytes to the upstream; its `shutdown` is the half-close.
    type Write: AsyncWriteRent;
    /// What stays held, unused, until the tunnel ends (the connection's `max_active` permit).
    type Held;

    /// The halves, for the two directions at once, and the bytes the upstream sent after its `101`.
    fn into_halves(self) -> TunnelHalves<Self::Read, Self::Write, Self::Held>;
}

/// An [`UpstreamTunnel`] taken apart.
pub struct TunnelHalves<R, W, H> {
    /// Bytes from the upstream.
    pub read: R,
    /// Bytes to the upstream.
    pub write: W,
    /// Bytes the upstream sent after its `101` head: they go to the client first.
    pub received: RecvBuf,
    /// Kept until the tunnel ends.
    pub held: H,
}

/// The one place the concrete upstream session is chosen: HTTP/1.1 (pooled exclusive connections),
/// or HTTP/2 (streams on shared connections) for `protocol = "h2"` and for `"auto"` over TLS
/// ([`crate::h2`]). The HTTP/1.1 checkout's future is handed back as it is, in a two-way future
/// ([`OpenFuture`]): one more `async fn` around it would copy it once more per request.
impl Open for Upstream {
    type Tunnel = AnyTunnel;
    type Session<'a> = AnyExchange<'a>;

    fn open(
        &self,
        reuse: Reuse,
        client: ClientConn,
        key: Option<u64>,
    ) -> impl Future<Output = Result<Opened<AnyExchange<'_>>, UpstreamError>> {
        match self.config.protocol.may_speak_h2(self.config.tls) {
            false => OpenFuture::H1(self.checkout(reuse, client, key)),
            true => OpenFuture::H2(self.open_stream(reuse, client, key)),
        }
    }
}

/// [`Open::open`]'s future for either protocol.
enum OpenFuture<A, B> {
    H1(A),
    H2(B),
}

impl<'u, A, B> Future for OpenFuture<A, B>
where
    A: Future<Output = Result<Opened<H1Exchange<'u>>, UpstreamError>>,
    B: Future<Output = Result<Opened<AnyExchange<'u>>, UpstreamError>>,
{
    type Output = Result<Opened<AnyExchange<'u>>, UpstreamError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // SAFETY: the variant's future is never moved out of `self` (structural pinning).
        unsafe {
            match self.get_unchecked_mut() {
                OpenFuture::H1(a) => std::pin::Pin::new_unchecked(a).poll(cx).map(|r| {
                    r.map(|o| Opened {
                        session: AnyExchange::H1(o.session),
                        retried: o.retried,
                    })
                }),
                OpenFuture::H2(b) => std::pin::Pin::new_unchecked(b).poll(cx),
            }
        }
    }
}

/// What a response head is read into ([`UpstreamSession::read_head`]); the body bytes that come with
/// the head stay in the same buffer until the client took them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadBuffer {
    /// A large buffer ([`edge_core::buf::LARGE_BUF_SIZE`]), so the body bytes behind the head come in
    /// the same read; under a burst of head reads, a small one once the socket is readable. For a
    /// client connection of its own, which takes those bytes first.
    Large,
    /// A head buffer ([`edge_core::buf::HEAD_BUF_SIZE`]): for a stream of a multiplexed client
    /// connection, where the bytes that come with the head wait for the connection's other streams
    /// (DESIGN.md "Memory under slow readers and large bodies": the streams of one connection take
    /// turns within one relay's worth, and the bytes of a head are outside those turns).
    Head,
}
