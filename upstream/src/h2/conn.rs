//! The HTTP/2 connections of one endpoint on one worker (DESIGN.md "HTTP/2 and gRPC upstreams"): each
//! an `h2` client connection over [`PollIo`] driven by a task of its own on the worker's runtime, shared
//! by the worker's streams up to `max_streams_per_connection` (and the server's
//! SETTINGS_MAX_CONCURRENT_STREAMS), never by another worker.
//!
//! Liveness: every byte read from the connection marks it alive (`ConnState::last_read`); while a
//! stream is in flight and nothing arrived for `max_inactive`, the driver sends a PING, so a live
//! connection always shows life within `max_inactive` plus a round trip, however slow its answers are.
//! A stream's zombie verdict ([`super::session`]) therefore only falls on a connection that answered
//! nothing, PING ACK included, for the capped threshold; the verdict kills the connection, so its
//! other streams fail at once instead of each waiting out its own threshold.
//!
//! Idle connections (no stream in flight) are kept like pooled HTTP/1.1 ones: closed after
//! `pool_idle_timeout`, and above `pool_max_idle` by the worker's sweep ([`H2Conns::sweep`]).

use std::{
    cell::{Cell, RefCell},
    future::{poll_fn, Future},
    pin::Pin,
    rc::Rc,
    task::{Context, Poll, Waker},
    time::Duration,
};

use bytes::Bytes;
use edge_core::{clock::coarse_now, io::PollIo, metrics::PingResult};
use h2::client::SendRequest;
use monoio::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{
    session::ClientConn, stream::UpstreamStream, zombie::ActivityClock, UpstreamError,
    UpstreamErrorKind,
};

/// A stream's receive window on an upstream connection, bytes: what the upstream may send ahead of
/// edge's reading, per stream (edge releases it as the downstream session takes the bytes).
const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's receive window, bytes.
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
/// Request bytes h2 may hold for one stream before the sender waits.
const SEND_BUFFER: usize = 64 * 1024;
/// How often an idle or busy connection's driver looks at its state, at most.
const TICK: Duration = Duration::from_secs(1);

/// What a connection's driver, its IO and its streams share.
pub(crate) struct ConnState {
    /// Streams in flight.
    in_flight: Cell<u32>,
    /// Streams opened over the connection's life.
    opened: Cell<u64>,
    /// The connection ended (closed, failed, GOAWAY received, or judged a zombie): no new stream.
    dead: Cell<bool>,
    /// The driver is to drop the connection now (a zombie verdict).
    kill: Cell<bool>,
    /// The driver's waker, for [`ConnState::kill`].
    driver: Cell<Option<Waker>>,
    /// When bytes were last read from the connection (coarse clock).
    last_read: Cell<Instant>,
    /// When the last stream ended (coarse clock).
    idle_since: Cell<Instant>,
}

impl ConnState {
    fn new() -> Self {
        let now = coarse_now();
        ConnState {
            in_flight: Cell::new(0),
            opened: Cell::new(0),
            dead: Cell::new(false),
            kill: Cell::new(false),
            driver: Cell::new(None),
            last_read: Cell::new(now),
            idle_since: Cell::new(now),
        }
    }

    /// When bytes were last read from the connection.
    pub(crate) fn last_read(&self) -> Instant {
        self.last_read.get()
    }

    /// Ends the connection after a zombie verdict: no new stream, and the driver drops it (every
    /// stream on it fails).
    pub(crate) fn kill(&self) {
        self.dead.set(true);
        self.kill.set(true);
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    /// The zombie deadline of a stream's `clock` on this connection: every byte read on the
    /// connection (a PING ACK too) counts as received.
    pub(crate) fn zombie_deadline(&self, clock: &mut ActivityClock) -> Instant {
        clock.counts_received = true;
        let last = self.last_read();
        if clock.last_received.is_none_or(|r| r < last) {
            clock.last_received = Some(last);
        }
        clock.deadline()
    }

    /// The zombie verdict: the connection is killed ([`ConnState::kill`]), every stream on it fails.
    pub(crate) fn zombie(&self) -> UpstreamError {
        self.kill();
        UpstreamError::new(UpstreamErrorKind::Zombie)
    }

    /// Marks the connection unusable for new streams (a GOAWAY or a failed stream open).
    pub(crate) fn retire(&self) {
        self.dead.set(true);
    }
}

/// One HTTP/2 connection to an endpoint.
pub(crate) struct H2Conn {
    /// Opens streams (h2's handle; cloned per stream).
    pub(crate) send: SendRequest<Bytes>,
    pub(crate) state: Rc<ConnState>,
    /// `https` over TLS, else `http` (the `:scheme` of its requests).
    pub(crate) tls: bool,
    /// The client connection its PROXY protocol header described (`send_proxy_protocol`).
    proxied: Option<ClientConn>,
    max_streams: u32,
}

impl H2Conn {
    /// Whether another stream fits by edge's own counts: alive, and below `max_streams_per_connection`
    /// (cheap: no look into h2's shared state).
    fn has_room(&self) -> bool {
        !self.state.dead.get() && self.state.in_flight.get() < self.max_streams
    }

    /// Whether the server's SETTINGS_MAX_CONCURRENT_STREAMS also lets another stream open (h2 keeps it
    /// behind its lock: asked of the one connection chosen, not of every one).
    fn server_allows(&self) -> bool {
        (self.state.in_flight.get() as usize) < self.send.current_max_send_streams()
    }

    /// Takes a stream slot; the returned guard gives it back. `reused`: the connection carried
    /// streams before this one.
    pub(crate) fn begin(self: &Rc<Self>) -> (InFlight, bool) {
        let s = &self.state;
        s.in_flight.set(s.in_flight.get() + 1);
        let reused = s.opened.get() > 0;
        s.opened.set(s.opened.get() + 1);
        (InFlight(s.clone()), reused)
    }
}

/// One stream's place on its connection (released on drop).
pub(crate) struct InFlight(Rc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let n = self.0.in_flight.get() - 1;
        self.0.in_flight.set(n);
        if n == 0 {
            self.0.idle_since.set(coarse_now());
        }
    }
}

/// The HTTP/2 connections of one endpoint on one worker.
#[derive(Default)]
pub struct H2Conns {
    conns: RefCell<Vec<Rc<H2Conn>>>,
    /// Connections being opened now.
    opening: Cell<usize>,
    /// Bumped whenever an opening ends (a connection added, or the attempt failed).
    generation: Cell<u64>,
    /// Streams waiting for an opening to end.
    waiters: RefCell<Vec<Waker>>,
}

/// One connection being opened ([`H2Conns::opening`]); its end wakes the streams waiting for it.
pub(crate) struct Opening<'a>(&'a H2Conns);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let c = self.0;
        c.opening.set(c.opening.get() - 1);
        c.generation.set(c.generation.get() + 1);
        for w in c.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

impl H2Conns {
    /// A connection with room for one more stream, opened for `proxied` (the busiest such: streams
    /// gather on few connections, and idle ones can expire).
    pub(crate) fn with_room(&self, proxied: Option<ClientConn>) -> Option<Rc<H2Conn>> {
        let conns = self.conns.borrow();
        let open = |c: &&Rc<H2Conn>| c.proxied == proxied && c.has_room();
        let busiest = conns
            .iter()
            .filter(open)
            .max_by_key(|c| c.state.in_flight.get())?;
        if busiest.server_allows() {
            return Some(busiest.clone());
        }
        // The server allows fewer streams than edge's limit on that one: any other with room.
        conns
            .iter()
            .filter(|c| open(c) && c.server_allows())
            .max_by_key(|c| c.state.in_flight.get())
            .cloned()
    }

    /// Marks a connection as being opened until the guard drops: streams that find no room meanwhile
    /// wait for it ([`H2Conns::opened`]) instead of each opening a connection of its own.
    pub(crate) fn opening(&self) -> Opening<'_> {
        self.opening.set(self.opening.get() + 1);
        Opening(self)
    }

    /// Whether a connection is being opened.
    pub(crate) fn is_opening(&self) -> bool {
        self.opening.get() > 0
    }

    /// Waits until an opening in progress ends.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn opened(&self) {
        let seen = self.generation.get();
        poll_fn(|cx| {
            if self.generation.get() != seen {
                return Poll::Ready(());
            }
            self.waiters.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    fn add(&self, c: Rc<H2Conn>) {
        self.conns.borrow_mut().push(c);
    }

    /// Drops ended connections, idle ones past `idle_timeout`, and the longest idle ones above
    /// `max_idle`; returns what remains: (idle connections, connections with streams in flight,
    /// streams in flight).
    pub fn sweep(
        &self,
        now: Instant,
        idle_timeout: Duration,
        max_idle: usize,
    ) -> (usize, usize, usize) {
        let mut conns = self.conns.borrow_mut();
        conns.retain(|c| {
            let s = &c.state;
            !s.dead.get() && (s.in_flight.get() > 0 || s.idle_since.get() + idle_timeout > now)
        });
        let idle = |c: &Rc<H2Conn>| c.state.in_flight.get() == 0;
        let mut surplus = conns
            .iter()
            .filter(|c| idle(c))
            .count()
            .saturating_sub(max_idle);
        if surplus > 0 {
            conns.sort_by_key(|c| std::cmp::Reverse(c.state.idle_since.get()));
            conns.retain(|c| {
                let drop = surplus > 0 && idle(c);
                surplus -= usize::from(drop);
                !drop
            });
        }
        let idle_count = conns.iter().filter(|c| idle(c)).count();
        let streams: usize = conns.iter().map(|c| c.state.in_flight.get() as usize).sum();
        (idle_count, conns.len() - idle_count, streams)
    }

    /// Connections open, with streams in flight or not.
    pub fn len(&self) -> usize {
        self.conns.borrow().len()
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The settings one connection is opened with.
pub(crate) struct Settings {
    pub(crate) max_streams: u32,
    pub(crate) max_inactive: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) upstream: Rc<str>,
    pub(crate) endpoint: std::net::SocketAddr,
    /// `edge_upstream_h2_pings_total{worker,result}` ([`PingResult`] order).
    pub(crate) pings: std::sync::Arc<[metrics::Counter; 2]>,
}

/// Starts HTTP/2 on a connected `stream` (the preface and SETTINGS go out; the server's SETTINGS are
/// read by the driver), spawns its driver and adds it to `conns`.
///
/// # Errors
/// `Reset` when the h2 handshake fails (retry-safe: no request was sent).
pub(crate) async fn open(
    conns: &H2Conns,
    stream: UpstreamStream,
    proxied: Option<ClientConn>,
    settings: Settings,
) -> Result<Rc<H2Conn>, UpstreamError> {
    let tls = matches!(stream, UpstreamStream::Tls(_));
    let state = Rc::new(ConnState::new());
    let io = Watched {
        io: PollIo::new(stream, &[], settings.write_timeout),
        state: state.clone(),
    };
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .enable_push(false)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| {
            tracing::debug!(event = "upstream.h2_handshake", upstream = %settings.upstream, endpoint = %settings.endpoint, error = %e);
            UpstreamError::retry_safe(UpstreamErrorKind::Reset)
        })?;
    let conn = Rc::new(H2Conn {
        send,
        state: state.clone(),
        tls,
        proxied,
        max_streams: settings.max_streams,
    });
    conns.add(conn.clone());
    monoio::spawn(drive(connection, state, settings));
    Ok(conn)
}

/// Drives one connection until it ends or is killed, sending a PING whenever a stream is in flight and
/// nothing was read for `max_inactive` (one PING outstanding at a time).
async fn drive(
    mut connection: h2::client::Connection<Watched, Bytes>,
    state: Rc<ConnState>,
    settings: Settings,
) {
    let mut ping = connection.ping_pong();
    let mut pinging = false;
    let mut connection = std::pin::pin!(connection);
    let ended = loop {
        let now = coarse_now();
        let quiet_until = state.last_read() + settings.max_inactive;
        let wake = quiet_until.max(now).min(now + TICK);
        let step = poll_fn(|cx| {
            if state.kill.get() {
                return Poll::Ready(Step::Killed);
            }
            state.driver.set(Some(cx.waker().clone()));
            if let Poll::Ready(r) = connection.as_mut().poll(cx) {
                return Poll::Ready(Step::Ended(r.err()));
            }
            if let (true, Some(p)) = (pinging, ping.as_mut()) {
                if p.poll_pong(cx).is_ready() {
                    return Poll::Ready(Step::Pong);
                }
            }
            Poll::Pending
        });
        match edge_core::clock::timeout_at(wake, step).await {
            Ok(Step::Ended(e)) => break e.map(|e| e.to_string()),
            Ok(Step::Killed) => {
                if pinging {
                    settings.pings[PingResult::Unanswered as usize].increment(1);
                }
                break Some("zombie: nothing received past the threshold".into());
            }
            Ok(Step::Pong) => {
                settings.pings[PingResult::Answered as usize].increment(1);
                pinging = false;
            }
            Err(_) => {
                let silent = coarse_now().saturating_duration_since(state.last_read());
                if !pinging && state.in_flight.get() > 0 && silent >= settings.max_inactive {
                    if let Some(p) = ping.as_mut() {
                        pinging = p.send_ping(h2::Ping::opaque()).is_ok();
                    }
                }
            }
        }
    };
    state.dead.set(true);
    if let Some(reason) = ended {
        tracing::debug!(event = "upstream.h2_closed", upstream = %settings.upstream, endpoint = %settings.endpoint, reason = %reason);
    }
}

/// What woke a connection's driver.
enum Step {
    /// The connection ended (with h2's error, if any).
    Ended(Option<h2::Error>),
    /// A zombie verdict.
    Killed,
    /// The PING was answered.
    Pong,
}

/// The connection's IO, marking every read on its [`ConnState`].
struct Watched {
    io: PollIo,
    state: Rc<ConnState>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.state.last_read.set(coarse_now());
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
