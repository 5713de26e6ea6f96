//! The origin's h2c mode (`edge-bench origin --h2c`, or [`OriginOptions::h2c`](super::OriginOptions)):
//! HTTP/2 with prior knowledge on the same thread-per-core monoio workers as the HTTP/1.1 origin,
//! with hyperium's `h2` server over edge's own poll adapter (`edge_core::io::PollIo`, as edge's
//! downstream HTTP/2 runs: DESIGN.md "HTTP/2"). It is the h2 upstream of the tests, the fault
//! matrix (group g) and the fallback origin of the `grpc-*` and `h1-to-h2` workloads of
//! `edge-bench compare` (DESIGN.md "HTTP/2 and gRPC upstreams").
//!
//! Paths (see [`stream`] for the answers):
//! - the HTTP/1.1 origin's: `/fast…`, `/size/16k`, `/size/1m`, `/app`, `/slow…` (waits `delay`, else
//!   3 s; `/slowping` is one of them: the connection keeps being served meanwhile, so PINGs are
//!   ACKed), any other path (waits `delay` when set);
//! - `/echo`: 200 at once, then the request body echoed back chunk by chunk as it arrives (flow
//!   control end to end: a chunk's window is given back only once its echo is queued), and the
//!   request's trailers as response trailers (a gRPC request without trailers gets `grpc-status: 0`);
//! - `/trailers`: a small body ([`TRAILERS_BODY`]) then trailing HEADERS `x-checksum` (FNV-1a 32 of
//!   the body, hex) and `grpc-status: 0`;
//! - `/freeze`: the connection stops being read and written at once, its streams and PINGs
//!   unanswered (a zombie), until the origin stops;
//! - any path with content-type `application/grpc…`: a gRPC answer (200, content-type
//!   `application/grpc`, then trailers `grpc-status: 0`) with one message echoing the request's first
//!   message (unary), or, when the path's last segment is `Stream` or `StreamN`, N messages (default
//!   [`H2cOptions::stream_messages`]) each echoing it (server streaming); the delay rules of the path
//!   apply before the answer (a path starting with `/slow` waits).
//!
//! Fault knobs ([`H2cOptions`]): GOAWAY after N streams on a connection (graceful: h2's two-step
//! GOAWAY, the last one naming the last stream processed; in-flight streams finish, then the
//! connection closes), REFUSED_STREAM on every Nth stream (counted over the whole origin), and
//! SETTINGS_MAX_CONCURRENT_STREAMS.
//!
//! [`H2cRecords`] keeps what a test or the matrix checks afterwards: streams, streams reset by the
//! peer (by reason, with their paths), refusals and GOAWAYs sent, frozen connections, the most
//! concurrent streams seen on one connection and the most concurrent connections. Shared by the
//! origin's workers (relaxed atomics, a mutex only for the rare reset record).

mod stream;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use edge_core::io::PollIo;
use monoio::net::TcpStream;

pub use stream::{fnv1a32, stream_body, TRAILERS_BODY};

/// Path whose stream freezes its connection (see the module docs).
pub const FREEZE_PATH: &str = "/freeze";

/// Path answered with the request body and trailers echoed.
pub const ECHO_PATH: &str = "/echo";

/// Path answered with a small body and trailers.
pub const TRAILERS_PATH: &str = "/trailers";

/// Path of the slow answer on a live connection (a `/slow` path: see [`super::delay_for`]).
pub const SLOWPING_PATH: &str = "/slowping";

/// Messages of a server-streaming gRPC call whose path ends in `Stream` without a count.
pub const DEFAULT_STREAM_MESSAGES: usize = 100;

/// Longest a response write may make no progress (the poll adapter's `send` bound).
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The h2c mode's settings and fault knobs.
#[derive(Debug, Clone)]
pub struct H2cOptions {
    /// Send GOAWAY (graceful) once this many streams arrived on a connection.
    pub goaway_after: Option<u32>,
    /// Reset every Nth stream of the origin (1st, 2nd … counted over all connections and workers)
    /// with REFUSED_STREAM before reading it; N ≥ 1 (1 refuses every stream).
    pub refuse_every: Option<u32>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS; `None` leaves h2's default (no limit announced).
    pub max_concurrent_streams: Option<u32>,
    /// Messages of a server-streaming call whose path names no count.
    pub stream_messages: usize,
}

impl Default for H2cOptions {
    fn default() -> Self {
        Self {
            goaway_after: None,
            refuse_every: None,
            max_concurrent_streams: None,
            stream_messages: DEFAULT_STREAM_MESSAGES,
        }
    }
}

/// What the h2c origin saw, shared by its workers (see [`H2cRecords::snapshot`]).
#[derive(Debug, Default)]
pub struct H2cRecords {
    connections: AtomicU64,
    open_connections: AtomicU64,
    max_connections: AtomicU64,
    streams: AtomicU64,
    max_streams_per_connection: AtomicU64,
    resets: AtomicU64,
    cancels: AtomicU64,
    refused: AtomicU64,
    goaways: AtomicU64,
    frozen: AtomicU64,
    completed: AtomicU64,
    reset_streams: Mutex<Vec<ResetStream>>,
}

/// A stream the peer reset (RST_STREAM, or the connection ending under it with an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetStream {
    /// The request's path.
    pub path: String,
    /// The reset's error code (RFC 9113 §7: 0x8 is CANCEL).
    pub reason: u32,
}

/// A copy of [`H2cRecords`] at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct H2cSnapshot {
    /// Connections accepted (whose h2 handshake completed).
    pub connections: u64,
    /// Connections open now.
    pub open_connections: u64,
    /// Most connections open at once.
    pub max_connections: u64,
    /// Streams accepted, refused ones included.
    pub streams: u64,
    /// Most streams open at once on one connection.
    pub max_streams_per_connection: u64,
    /// Streams the peer reset, any reason.
    pub resets: u64,
    /// Of those, resets with CANCEL.
    pub cancels: u64,
    /// Streams refused with REFUSED_STREAM ([`H2cOptions::refuse_every`]).
    pub refused: u64,
    /// GOAWAYs started ([`H2cOptions::goaway_after`]).
    pub goaways: u64,
    /// Connections frozen by [`FREEZE_PATH`].
    pub frozen: u64,
    /// Streams answered to their end (END_STREAM or trailers sent).
    pub completed: u64,
    /// The streams reset by the peer, in order.
    pub reset_streams: Vec<ResetStream>,
}

impl H2cRecords {
    /// The records now.
    pub fn snapshot(&self) -> H2cSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        H2cSnapshot {
            connections: get(&self.connections),
            open_connections: get(&self.open_connections),
            max_connections: get(&self.max_connections),
            streams: get(&self.streams),
            max_streams_per_connection: get(&self.max_streams_per_connection),
            resets: get(&self.resets),
            cancels: get(&self.cancels),
            refused: get(&self.refused),
            goaways: get(&self.goaways),
            frozen: get(&self.frozen),
            completed: get(&self.completed),
            reset_streams: self
                .reset_streams
                .lock()
                .map(|v| v.clone())
                .unwrap_or_default(),
        }
    }

    /// Polls (every 5 ms) until `pred` holds on a snapshot or `limit` passes; the last snapshot and
    /// whether `pred` held. How a test waits for an event at the origin without sleeping blind.
    pub fn wait_until(
        &self,
        limit: Duration,
        pred: impl Fn(&H2cSnapshot) -> bool,
    ) -> (H2cSnapshot, bool) {
        let until = Instant::now() + limit;
        loop {
            let s = self.snapshot();
            if pred(&s) {
                return (s, true);
            }
            if Instant::now() >= until {
                return (s, false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// [`wait_until`](Self::wait_until) for a task on a monoio runtime (with its timer on): waits by
    /// the runtime's timer, so the runtime's other tasks (a client's connection) go on meanwhile.
    pub async fn until(
        &self,
        limit: Duration,
        pred: impl Fn(&H2cSnapshot) -> bool,
    ) -> (H2cSnapshot, bool) {
        let until = Instant::now() + limit;
        loop {
            let s = self.snapshot();
            if pred(&s) {
                return (s, true);
            }
            if Instant::now() >= until {
                return (s, false);
            }
            monoio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Records a reset by the peer of the stream for `path`.
    fn reset_by_peer(&self, path: &str, reason: h2::Reason) {
        self.resets.fetch_add(1, Ordering::Relaxed);
        if reason == h2::Reason::CANCEL {
            self.cancels.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut v) = self.reset_streams.lock() {
            v.push(ResetStream {
                path: path.to_string(),
                reason: reason.into(),
            });
        }
    }
}

/// Per-worker state of the h2c mode: the options, the answers built once, the shared records.
pub(super) struct H2cWorker {
    pub(super) opts: H2cOptions,
    pub(super) records: Arc<H2cRecords>,
    /// The default body (`--body-bytes`).
    pub(super) body: Bytes,
    /// The bodies of [`super::SIZED_PATHS`].
    pub(super) sized: Vec<Bytes>,
    pub(super) delay: Option<Duration>,
}

impl H2cWorker {
    pub(super) fn new(
        opts: H2cOptions,
        records: Arc<H2cRecords>,
        body_bytes: usize,
        delay: Option<Duration>,
    ) -> Self {
        let body_of = |n: usize| -> Bytes {
            super::DEFAULT_BODY
                .iter()
                .copied()
                .cycle()
                .take(n)
                .collect::<Vec<u8>>()
                .into()
        };
        H2cWorker {
            opts,
            records,
            body: body_of(body_bytes),
            sized: super::SIZED_PATHS
                .iter()
                .map(|&(_, n)| body_of(n))
                .collect(),
            delay,
        }
    }
}

/// Counts a connection or a stream open, and its peak, while alive.
struct Gauge<'a> {
    open: &'a AtomicU64,
}

impl<'a> Gauge<'a> {
    fn enter(open: &'a AtomicU64, max: &AtomicU64) -> Self {
        let now = open.fetch_add(1, Ordering::Relaxed) + 1;
        max.fetch_max(now, Ordering::Relaxed);
        Gauge { open }
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Streams open on one connection (per worker, no atomics), with the peak kept in the records.
struct OpenStreams {
    now: Cell<u64>,
}

/// Holds one stream's place in [`OpenStreams`].
struct StreamSlot(Rc<OpenStreams>);

impl StreamSlot {
    fn enter(open: &Rc<OpenStreams>, records: &H2cRecords) -> Self {
        let now = open.now.get() + 1;
        open.now.set(now);
        records
            .max_streams_per_connection
            .fetch_max(now, Ordering::Relaxed);
        StreamSlot(open.clone())
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.now.set(self.0.now.get() - 1);
    }
}

/// Serves one h2c connection: the handshake, then the accept loop with the fault knobs; each stream
/// runs in its own local task.
pub(super) async fn serve_h2c(stream: TcpStream, w: Rc<H2cWorker>) {
    let io = PollIo::new(stream, &[], SEND_TIMEOUT);
    let mut b = h2::server::Builder::new();
    b.initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20);
    if let Some(n) = w.opts.max_concurrent_streams {
        b.max_concurrent_streams(n);
    }
    let Ok(mut conn) = b.handshake::<_, Bytes>(io).await else {
        return;
    };
    let records = &w.records;
    records.connections.fetch_add(1, Ordering::Relaxed);
    let _conn_gauge = Gauge::enter(&records.open_connections, &records.max_connections);
    let open = Rc::new(OpenStreams { now: Cell::new(0) });
    let mut on_this = 0u32;
    while let Some(next) = conn.accept().await {
        let Ok((req, mut respond)) = next else {
            break;
        };
        on_this += 1;
        let n = records.streams.fetch_add(1, Ordering::Relaxed) + 1;
        if w.opts.goaway_after == Some(on_this) {
            records.goaways.fetch_add(1, Ordering::Relaxed);
            conn.graceful_shutdown();
        }
        if w.opts
            .refuse_every
            .is_some_and(|every| n.is_multiple_of(u64::from(every.max(1))))
        {
            records.refused.fetch_add(1, Ordering::Relaxed);
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            continue;
        }
        if req.uri().path() == FREEZE_PATH {
            records.frozen.fetch_add(1, Ordering::Relaxed);
            // Neither the connection nor this stream is polled again: frames queue unread in the
            // socket, PINGs go unanswered. The origin's stop drops this future.
            let _hold = (conn, req, respond);
            std::future::pending::<()>().await;
            return;
        }
        let slot = StreamSlot::enter(&open, records);
        let w = w.clone();
        monoio::spawn(async move {
            stream::serve_stream(req, respond, &w).await;
            drop(slot);
        });
    }
}
