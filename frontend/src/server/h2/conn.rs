//! One HTTP/2 connection from a client (DESIGN.md "HTTP/2"): the h2 server handshake with the limits of
//! `[server.http2]`, then the accept loop that drives the connection and spawns one local task per
//! stream on this worker's stream tasks ([`super::tasks`]).
//!
//! - `idle`: armed while no stream is open (from the handshake, and whenever the last stream ends);
//!   while idle the connection is evictable like an idle HTTP/1.1 one. Expiry or eviction sends GOAWAY
//!   and closes.
//! - `max_requests_per_connection` streams, or drain: GOAWAY (RFC 9113 §6.8), open streams finish
//!   (bounded by `drain`), then the connection closes.
//! - Flood defences are h2's own, sized from the config: SETTINGS_MAX_CONCURRENT_STREAMS, the header
//!   list limit (SETTINGS_MAX_HEADER_LIST_SIZE, across HEADERS and CONTINUATION), and the reset-stream
//!   limits (`max_pending_accept_reset_streams`, `max_local_error_reset_streams`, both
//!   `max_resets_per_second`), past which h2 ends the connection with GOAWAY ENHANCE_YOUR_CALM.

use std::{
    cell::Cell,
    future::poll_fn,
    rc::Rc,
    sync::atomic::Ordering,
    task::{Poll, Waker},
    time::Duration,
};

use edge_core::{
    io::{PollIo, Transport},
    metrics::GoawayReason,
};
use h2::server::{Builder, Connection};
use monoio::time::{timeout_at, Instant};

use super::{session::Chunk, stream::Origin, tasks::StreamTasks};
use crate::worker::Worker;

/// The HTTP/2 connection preface a client sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The streams of one connection that are open, with a waker for the accept loop when the count
/// drops to zero.
#[derive(Default)]
struct Open {
    count: Cell<usize>,
    waker: Cell<Option<Waker>>,
}

/// Holds one open stream's place in [`Open`].
struct OpenStream(Rc<Open>);

impl OpenStream {
    fn new(open: &Rc<Open>) -> Self {
        open.count.set(open.count.get() + 1);
        OpenStream(open.clone())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let n = self.0.count.get() - 1;
        self.0.count.set(n);
        if n == 0 {
            if let Some(w) = self.0.waker.take() {
                w.wake();
            }
        }
    }
}

/// Response bytes h2 may hold for one stream before that stream's sender waits (h2's default is
/// 400 KiB): a stream's next upstream read waits until its earlier bytes went to the socket, so 640
/// streams of 1 MiB responses hold 640 x 64 KiB at most instead of 250 MiB, and the socket's pace,
/// not only the client's window, paces the upstream reads (DESIGN.md "HTTP/2": flow control follows
/// the client's reading).
const SEND_BUFFER: usize = 64 * 1024;

/// The h2 server builder for `[server.http2]`.
fn builder(h: &edge_core::config::Http2) -> Builder {
    let mut b = Builder::new();
    b.max_concurrent_streams(h.max_concurrent_streams)
        .initial_window_size(h.initial_window.0 as u32)
        .initial_connection_window_size(h.connection_window())
        .max_frame_size(h.max_frame_size.0 as u32)
        .max_header_list_size(h.max_header_list.0 as u32)
        .max_pending_accept_reset_streams(h.max_resets_per_second as usize)
        .max_local_error_reset_streams(Some(h.max_resets_per_second as usize))
        .max_send_buffer_size(SEND_BUFFER);
    b
}

/// A stream as h2 hands it over: its request (head and body) and its response side.
pub(super) type Accepted = (
    http::Request<h2::RecvStream>,
    h2::server::SendResponse<Chunk>,
);

/// What the accept loop saw.
enum Event {
    /// h2's next stream (boxed: the other events are small), `None` once the connection ended.
    Stream(Option<Result<Box<Accepted>, h2::Error>>),
    /// The last open stream ended.
    Quiet,
    /// Idle past `idle`, or evicted while idle.
    Idle,
    /// The GOAWAY phase ran out of time.
    Overdue,
}

/// Boxes an accepted stream (one allocation per stream, beside h2's own).
fn boxed(r: Option<Result<Accepted, h2::Error>>) -> Event {
    Event::Stream(r.map(|r| r.map(Box::new)))
}

/// Serves one HTTP/2 connection until it closes. `prefix` holds bytes already read from `stream` (the
/// sniffed connection preface on the plain listener).
pub async fn serve<T: Transport>(w: Rc<Worker>, stream: T, prefix: &[u8], from: Origin) {
    let (h, idle, send, drain, max_requests) = {
        let live = w.current();
        let s = &live.cfg.config.server;
        let t = &s.timeouts;
        (
            s.http2.clone(),
            t.idle.0,
            t.send.0,
            t.drain.0,
            s.max_requests_per_connection,
        )
    };
    // Over capacity (DESIGN.md "Capacity"): one stream, which must come within 1 s.
    let (idle, max_requests) = match from.shed {
        true => (crate::server::h1::SHED_HEAD_DEADLINE, 1),
        false => (idle, max_requests),
    };
    w.metrics
        .connection_opened(edge_core::metrics::Protocol::H2);
    let fd = stream.fd();
    let io = PollIo::new(stream, prefix, send);
    let handshake = builder(&h).handshake::<_, Chunk>(io);
    let mut conn = match timeout_at(Instant::now() + idle, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(event = "connection.error", worker = w.id, peer = %from.peer, error = %e, "h2 handshake failed");
            return;
        }
        Err(_) => {
            w.metrics
                .inbound_timeout(edge_core::metrics::InboundPhase::Idle)
                .increment(1);
            return;
        }
    };
    let open = Rc::new(Open::default());
    let tasks = StreamTasks::default();
    let mut served = 0u64;
    // Set once GOAWAY went out: the connection ends when its streams have, or at this instant.
    let mut closing: Option<Instant> = None;
    loop {
        let event = next_event(&w, &mut conn, &open, fd, idle, closing).await;
        match event {
            Event::Stream(None) => break,
            Event::Stream(Some(Err(e))) => break connection_error(&w, &e, from),
            Event::Stream(Some(Ok(accepted))) => {
                let (req, respond) = *accepted;
                served += 1;
                let guard = OpenStream::new(&open);
                tasks.dispatch(&w, (req, respond), guard, from);
            }
            Event::Quiet => {}
            Event::Idle => {
                idle_expired(&w, from, served);
                closing.get_or_insert(
                    Instant::now() + send.min(drain).max(Duration::from_millis(100)),
                );
                goaway(&w, &mut conn, GoawayReason::Idle, from);
            }
            Event::Overdue => break,
        }
        let draining = w.shared.draining.load(Ordering::Relaxed);
        if closing.is_none() && (served >= max_requests || draining) {
            closing = Some(Instant::now() + drain);
            let reason = match draining {
                true => GoawayReason::Drain,
                false => GoawayReason::MaxRequests,
            };
            goaway(&w, &mut conn, reason, from);
        }
    }
}

/// Counts an idle connection's end: an idle timeout, or a connection accepted over capacity that sent
/// no stream within its second (shed, as for HTTP/1.1: DESIGN.md "Capacity").
fn idle_expired(w: &Worker, from: Origin, served: u64) {
    if from.shed && served == 0 {
        w.metrics
            .connection_shed(edge_core::metrics::ShedReason::Limit)
            .increment(1);
        if w.log_limit.allow() {
            tracing::warn!(event = "connection.shed", worker = w.id, peer = %from.peer, reason = "limit", "at max_connections with nothing evictable");
        }
        return;
    }
    w.metrics
        .inbound_timeout(edge_core::metrics::InboundPhase::Idle)
        .increment(1);
}

/// Sends GOAWAY (RFC 9113 §6.8: h2's graceful shutdown, open streams finish), counted and logged.
fn goaway(w: &Worker, conn: &mut Connection<PollIo, Chunk>, reason: GoawayReason, from: Origin) {
    w.metrics.http2_goaway(reason).increment(1);
    tracing::debug!(event = "http2.goaway", worker = w.id, peer = %from.peer, reason = reason.as_str());
    conn.graceful_shutdown();
}

/// Counts and logs the error that ended an h2 connection: a GOAWAY edge (h2) sent for a protocol
/// error or a flood (ENHANCE_YOUR_CALM) is `edge_http2_goaways_total{reason}` and `http2.goaway`; the
/// client's own errors and IO errors are logged at debug.
fn connection_error(w: &Worker, e: &h2::Error, from: Origin) {
    if e.is_go_away() && !e.is_remote() {
        let reason = match e.reason() {
            Some(h2::Reason::ENHANCE_YOUR_CALM) => GoawayReason::Flood,
            _ => GoawayReason::Protocol,
        };
        w.metrics.http2_goaway(reason).increment(1);
        if w.log_limit.allow() {
            tracing::info!(event = "http2.goaway", worker = w.id, peer = %from.peer, reason = reason.as_str(), error = %e);
        }
        return;
    }
    tracing::debug!(event = "connection.error", worker = w.id, peer = %from.peer, error = %e, "h2 connection error");
}

/// Waits for the connection's next stream, the end of its last open stream, or (with no stream open)
/// its `idle` deadline or eviction; the connection is driven meanwhile. `closing`: the GOAWAY phase's
/// end.
async fn next_event(
    w: &Worker,
    conn: &mut Connection<PollIo, Chunk>,
    open: &Open,
    fd: std::os::fd::RawFd,
    idle: Duration,
    closing: Option<Instant>,
) -> Event {
    let accept = conn.accept();
    if let Some(until) = closing {
        return match timeout_at(until, accept).await {
            Ok(r) => boxed(r),
            Err(_) => Event::Overdue,
        };
    }
    if open.count.get() == 0 {
        let evicted = w.idle.enter(fd);
        let accept = timeout_at(Instant::now() + idle, accept);
        return monoio::select! {
            biased;
            () = evicted => Event::Idle,
            r = accept => r.map_or(Event::Idle, boxed),
        };
    }
    let quiet = poll_fn(|cx| {
        if open.count.get() == 0 {
            return Poll::Ready(());
        }
        open.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    });
    monoio::select! {
        r = accept => boxed(r),
        () = quiet => Event::Quiet,
    }
}
