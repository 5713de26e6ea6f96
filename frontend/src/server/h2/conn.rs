//! One HTTP/2 connection from a client (DESIGN.md "HTTP/2"): the h2 server handshake with the limits of
//! `[server.http2]`, then the accept loop that drives the connection and spawns one local task per
//! stream on this worker's stream tasks ([`super::tasks`]).
//!
//! - `idle`: armed while no stream is open (from the handshake, and whenever the last stream ends);
//!   while idle the connection is evictable like an idle HTTP/1.1 one. Expiry or eviction sends GOAWAY
//!   and closes.
//! - `max_requests_per_connection` streams, or drain: GOAWAY (RFC 9113 §6.8), open streams finish
//!   (bounded by `drain`), then the connection closes.
//! - Flood defences: h2's own, sized from the config: SETTINGS_MAX_CONCURRENT_STREAMS, the header
//!   list limit (SETTINGS_MAX_HEADER_LIST_SIZE, across HEADERS and CONTINUATION, and h2's bound on
//!   CONTINUATION frames), and the reset-stream limits (`max_pending_accept_reset_streams`,
//!   `max_local_error_reset_streams`, both `max_resets_per_second`), past which h2 ends the connection
//!   with GOAWAY ENHANCE_YOUR_CALM at once; and edge's per-second limits on resets, SETTINGS, PING,
//!   empty frames and WINDOW_UPDATE ([`super::flood`], run on the IO by [`super::guard`]), past which
//!   the accept loop sends GOAWAY ENHANCE_YOUR_CALM and closes: at once with no stream open, else
//!   when the open streams have finished (bounded by `drain`), or at once if the flood goes on.
//!   Either way: `edge_http2_goaways_total{reason="flood"}` and a rate-limited `http2.goaway` line.

use std::{
    cell::Cell,
    future::poll_fn,
    rc::Rc,
    sync::atomic::Ordering,
    task::{Poll, Waker},
    time::Duration,
};

use edge_core::{
    clock::timeout_at,
    io::{PollIo, Transport},
    metrics::GoawayReason,
};
use h2::server::{Builder, Connection};
use h2::Reason;
use monoio::time::Instant;

use super::{
    flood::Flood,
    guard::{Alarm, Guarded},
    session::Chunk,
    stream::Origin,
    tasks::StreamTasks,
};
use crate::context::Worker;

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
        .max_send_buffer_size(SEND_BUFFER)
        // WebSocket over HTTP/2 (RFC 8441 §3): SETTINGS_ENABLE_CONNECT_PROTOCOL = 1.
        .enable_connect_protocol();
    b
}

/// The h2 connection over edge's guarded IO.
type H2Conn = Connection<Guarded, Chunk>;

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
    /// A flood tripped the connection's alarm; `true` when it went on after GOAWAY.
    Flood(Flood, bool),
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
        Some(_) => (crate::server::h1::SHED_HEAD_DEADLINE, 1),
        None => (idle, max_requests),
    };
    w.metrics
        .connection_opened(edge_core::metrics::Protocol::H2);
    let fd = stream.fd();
    let alarm = Alarm::new(w.clone(), from);
    let io = Guarded::new(
        PollIo::new(stream, prefix, send),
        h.max_resets_per_second,
        alarm.clone(),
    );
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
    // After a flood GOAWAY with streams open: end the connection when the last one ends, without
    // waiting for h2's graceful round trip (a flooding client need not answer its PING).
    let mut end_when_quiet = false;
    loop {
        let phase = closing.map(|until| (until, end_when_quiet));
        let event = next_event(&w, &mut conn, &alarm, &open, fd, idle, phase).await;
        match event {
            Event::Stream(None) => break,
            Event::Stream(Some(Err(e))) => break connection_error(&w, &e, &alarm, from),
            Event::Flood(flood, true) => {
                tracing::debug!(event = "connection.closed", worker = w.id, peer = %from.peer, flood = flood.as_str(), "h2 flood went on after GOAWAY");
                break;
            }
            Event::Flood(flood, false) => {
                let until = Instant::now() + drain;
                closing = Some(closing.map_or(until, |c| c.min(until)));
                end_when_quiet = flood_goaway(&w, &mut conn, &alarm, flood, from, &open);
            }
            Event::Stream(Some(Ok(accepted))) => {
                let (req, respond) = *accepted;
                served += 1;
                let guard = OpenStream::new(&open);
                tasks.dispatch(&w, (req, respond), guard, from);
            }
            Event::Quiet if end_when_quiet => {
                end_when_quiet = false;
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
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
    if let (Some(reason), 0) = (from.shed, served) {
        w.metrics.connection_shed(reason).increment(1);
        crate::request::local::log_shed(w, from.peer, reason);
        return;
    }
    w.metrics
        .inbound_timeout(edge_core::metrics::InboundPhase::Idle)
        .increment(1);
}

/// Sends GOAWAY (RFC 9113 §6.8: h2's graceful shutdown, open streams finish), counted and logged.
fn goaway(w: &Worker, conn: &mut H2Conn, reason: GoawayReason, from: Origin) {
    w.metrics.http2_goaway(reason).increment(1);
    tracing::debug!(event = "http2.goaway", worker = w.id, peer = %from.peer, reason = reason.as_str());
    conn.graceful_shutdown();
}

/// Answers a flood: GOAWAY ENHANCE_YOUR_CALM, counted as `reason="flood"` and logged (rate-limited)
/// with the flood. With no stream open, h2's abrupt shutdown: the GOAWAY goes out and the connection
/// closes without reading what the client still has in flight. Otherwise h2's graceful shutdown (the
/// alarm rewrites its GOAWAYs' code) so open streams finish; returns `true` then: the connection is
/// to end when its last stream has.
fn flood_goaway(
    w: &Worker,
    conn: &mut H2Conn,
    alarm: &Alarm,
    flood: Flood,
    from: Origin,
    open: &Open,
) -> bool {
    w.metrics.http2_goaway(GoawayReason::Flood).increment(1);
    if w.log_limit.allow() {
        tracing::info!(event = "http2.goaway", worker = w.id, peer = %from.peer, reason = GoawayReason::Flood.as_str(), flood = flood.as_str(), code = %Reason::ENHANCE_YOUR_CALM);
    }
    alarm.calm();
    if open.count.get() == 0 {
        conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
        return false;
    }
    conn.graceful_shutdown();
    true
}

/// Counts and logs the error that ended an h2 connection: a GOAWAY edge (h2) sent for a protocol
/// error or a flood (ENHANCE_YOUR_CALM) is `edge_http2_goaways_total{reason}` and `http2.goaway`; the
/// client's own errors, IO errors and errors after edge's own flood GOAWAY (already counted) are
/// logged at debug.
fn connection_error(w: &Worker, e: &h2::Error, alarm: &Alarm, from: Origin) {
    if e.is_go_away() && !e.is_remote() && !alarm.answered() {
        let reason = match e.reason() {
            Some(Reason::ENHANCE_YOUR_CALM) => GoawayReason::Flood,
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
/// end, and whether to wait for the last open stream's end during it.
async fn next_event(
    w: &Worker,
    conn: &mut H2Conn,
    alarm: &Alarm,
    open: &Open,
    fd: std::os::fd::RawFd,
    idle: Duration,
    closing: Option<(Instant, bool)>,
) -> Event {
    let accept = conn.accept();
    let flood = alarm.tripped();
    if let Some((until, quiet)) = closing {
        let either = async {
            monoio::select! {
                biased;
                (f, again) = flood => Event::Flood(f, again),
                r = accept => boxed(r),
                () = last_stream_ended(quiet.then_some(open)) => Event::Quiet,
            }
        };
        return timeout_at(until, either).await.unwrap_or(Event::Overdue);
    }
    if open.count.get() == 0 {
        let evicted = w.idle.enter(fd);
        let accept = timeout_at(Instant::now() + idle, accept);
        return monoio::select! {
            biased;
            (f, again) = flood => Event::Flood(f, again),
            _ = evicted => Event::Idle,
            r = accept => r.map_or(Event::Idle, boxed),
        };
    }
    monoio::select! {
        biased;
        (f, again) = flood => Event::Flood(f, again),
        r = accept => boxed(r),
        () = last_stream_ended(Some(open)) => Event::Quiet,
    }
}

/// Resolves when no stream of `open` is open (never for `None`).
async fn last_stream_ended(open: Option<&Open>) {
    let Some(open) = open else {
        return std::future::pending().await;
    };
    poll_fn(|cx| {
        if open.count.get() == 0 {
            return Poll::Ready(());
        }
        open.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    })
    .await
}
