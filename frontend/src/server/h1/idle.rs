//! A keep-alive connection between requests (DESIGN.md "Inbound deadlines", `idle`): the short read for
//! the next request on a busy connection ([`fast_wait`]), the wait that holds no buffer, slot nor timer
//! once it went idle ([`wait_idle`], ended by the worker's idle list: `crate::context::idle`), the read after
//! it ([`read_after_idle`]), and the request vectors an idle connection gives back to its worker.

use std::{cell::RefCell, time::Duration};

use edge_core::{
    clock::timeout_at, freelist::FreeList, http::head::Fields, io::Transport, metrics::InboundPhase,
};
use monoio::{io::Canceller, time::Instant};

use super::conn::Conn;
use crate::{
    context::{idle::Left, Worker},
    log::RequestFacts,
};

thread_local! {
    /// This worker's spare request vectors ([`Vectors::get`]; trimmed by [`trim_spare_vectors`]).
    static SPARE_VECTORS: RefCell<FreeList<Box<RequestVectors>>> = const { RefCell::new(FreeList::new()) };
    /// This worker's spare fast-wait cancellers ([`fast_wait`]; trimmed with the vectors).
    static SPARE_CANCELLERS: RefCell<FreeList<Canceller>> = const { RefCell::new(FreeList::new()) };
}

/// Spare request vectors (and fast-wait cancellers) a worker keeps at most; more are freed.
const SPARE_VECTORS_MAX: usize = 1024;
/// Spare request vectors (and fast-wait cancellers) a trim always keeps.
const SPARE_VECTORS_FLOOR: usize = 16;

/// Frees the spare request vectors of this thread that stayed unused since the previous call (the
/// worker's periodic trim, with `edge_core::buf::trim`), keeping at least 16.
pub(crate) fn trim_spare_vectors() {
    SPARE_VECTORS.with(|s| s.borrow_mut().trim(SPARE_VECTORS_FLOOR));
    SPARE_CANCELLERS.with(|s| s.borrow_mut().trim(SPARE_VECTORS_FLOOR));
}

/// Like [`trim_spare_vectors`], keeping none: for a worker with no connection open.
pub(crate) fn trim_spare_vectors_idle() {
    SPARE_VECTORS.with(|s| s.borrow_mut().trim(0));
    SPARE_CANCELLERS.with(|s| s.borrow_mut().trim(0));
}

/// A connection's head fields, log line, request id and normalised path storage, and its request
/// facts (`crate::log::RequestFacts`): what a request needs beyond its slot, in one box that the
/// worker's spares hand out when a request starts and take back when the connection goes idle.
#[derive(Default)]
pub(super) struct RequestVectors {
    pub(super) fields: Fields,
    /// Method and target of the current request (at most 256 bytes), for log lines.
    pub(super) log_line: Vec<u8>,
    /// Request id of the current request, for log lines.
    pub(super) log_id: Vec<u8>,
    /// The current request's normalised path when it differs from the received one
    /// ([`crate::request::route::find`]).
    pub(super) path: Vec<u8>,
    /// The current request's facts for its access line and metrics.
    pub(super) facts: Option<Box<RequestFacts>>,
}

/// A connection's [`RequestVectors`], held only while it serves requests: an idle connection holds
/// none, and its future stays within jemalloc's 512-byte class (bench/README.md "Idle connections").
#[derive(Default)]
pub(super) struct Vectors(Option<Box<RequestVectors>>);

impl Vectors {
    /// The request vectors, taken from the worker's spares first when the connection holds none (a
    /// new connection, or one back from idle; an allocation only when no spare is left).
    pub(super) fn get(&mut self) -> &mut RequestVectors {
        self.0.get_or_insert_with(|| {
            SPARE_VECTORS
                .with(|s| s.borrow_mut().pop())
                .unwrap_or_default()
        })
    }

    /// The current request's facts, if a request started.
    pub(super) fn facts(&self) -> Option<&RequestFacts> {
        self.0.as_ref().and_then(|v| v.facts.as_deref())
    }

    /// The current request's log line (empty when no request started).
    pub(super) fn log_line(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |v| &v.log_line)
    }

    /// The current request's id (empty when no request started).
    pub(super) fn log_id(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |v| &v.log_id)
    }
}

impl<T: Transport> Conn<T> {
    /// Gives the request vectors back to the worker's spares as the connection goes idle, so an idle
    /// connection holds none (bench/README.md "Idle connections").
    pub(super) fn give_vectors(&mut self) {
        let Some(mut v) = self.v.0.take() else {
            return;
        };
        v.fields.clear();
        v.log_line.clear();
        v.log_id.clear();
        v.path.clear();
        if let Some(f) = v.facts.as_mut() {
            // Releases the configuration snapshot of the last request.
            f.clear();
        }
        SPARE_VECTORS.with(|s| s.borrow_mut().push(v, SPARE_VECTORS_MAX));
    }
}

/// Counts and logs an idle timeout; `false` (close).
fn idle_timed_out<T: Transport>(w: &Worker, c: &Conn<T>) -> bool {
    w.metrics.inbound_timeout(InboundPhase::Idle).increment(1);
    tracing::debug!(event = "connection.idle_timeout", worker = w.id, peer = %c.peer);
    false
}

/// Waits for a request to start, holding no buffer, slot nor timer: the connection is on the worker's
/// idle list, which evicts it near the connection limit or ends it at the `idle` deadline
/// (`crate::context::idle`). `Some(deadline)` once readable (the `idle` deadline, for the read that follows:
/// [`read_after_idle`]); `None` = close (evicted, timed out, or the wait failed; counted and logged).
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments in its state twice"
)]
pub(super) fn wait_idle<'a, T: Transport>(
    w: &'a Worker,
    c: &'a mut Conn<T>,
) -> impl std::future::Future<Output = Option<Instant>> + 'a {
    // An async block: an `async fn` would keep its arguments beside the locals they move into, in the
    // state every idle connection holds.
    async move {
        let until = Instant::now() + w.current().cfg.config.server.timeouts.idle.0;
        // Registered as idle (evictable) only while waiting for readability: once bytes are readable
        // the connection is about to serve a request. On io_uring a read in flight would already have
        // taken the bytes out of the socket, so an eviction check could no longer see them.
        let idle = w.idle.enter_expiring(c.stream.fd());
        // Strict readiness: on epoll a relaxed check can report stale readiness, and the read that
        // follows would then wait holding a buffer.
        let readable = c.stream.readable(false);
        // Eviction and expiry first: the evicted connection's slot was already given to a new one.
        let ready = monoio::select! {
            biased;
            why = idle => Err(why),
            r = readable => Ok(r),
        };
        match ready {
            Err(Left::Evicted) => {
                w.metrics.evicted.increment(1);
                tracing::debug!(event = "connection.evicted", worker = w.id, peer = %c.peer);
                None
            }
            Err(Left::Expired) => {
                idle_timed_out(w, c);
                None
            }
            Ok(Err(e)) => {
                tracing::debug!(event = "connection.error", worker = w.id, peer = %c.peer, error = %e, "wait for readability failed");
                None
            }
            Ok(Ok(())) => Some(until),
        }
    }
}

/// Reads what made an idle connection readable, under its `idle` deadline `until` (a TLS record may
/// need more bytes than came first). `false` = close (counted and logged).
pub(super) async fn read_after_idle<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    until: Instant,
) -> bool {
    match timeout_at(until, c.rb.fill(&mut c.stream)).await {
        Err(_) => idle_timed_out(w, c),
        Ok(Ok(0)) => {
            tracing::debug!(event = "connection.closed", worker = w.id, peer = %c.peer, "client closed while idle");
            false
        }
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            tracing::debug!(event = "connection.error", worker = w.id, peer = %c.peer, error = %e, "read failed while idle");
            false
        }
    }
}

/// How long a keep-alive connection reads for its next request before it releases its buffer.
const FAST_WAIT: Duration = Duration::from_millis(5);

pub(super) enum FastWait {
    /// The next request's first bytes arrived.
    Data,
    /// The client closed or the read failed.
    Closed(&'static str),
    /// Nothing arrived within [`FAST_WAIT`]; the read was cancelled without losing bytes.
    Idle,
}

pub(super) async fn fast_wait<T: Transport>(c: &mut Conn<T>) -> FastWait {
    let handle = c
        .cancel
        .get_or_insert_with(|| {
            SPARE_CANCELLERS
                .with(|s| s.borrow_mut().pop())
                .unwrap_or_default()
        })
        .handle();
    let mut read = std::pin::pin!(c.rb.fill_cancelable(&mut c.stream, handle));
    let res = match edge_core::clock::timeout(FAST_WAIT, read.as_mut()).await {
        Ok(res) => res,
        Err(_) => {
            // A spent canceller cancels every later operation it is given. `cancel` returns a fresh
            // one that keeps the spent one's operation set (its one allocation, monoio's); it waits
            // in the worker's spares, not in the idle connection, for the next fast wait. Kept in
            // the spares, going idle costs this one allocation instead of three (bench/README.md
            // "Allocations per request").
            if let Some(spent) = c.cancel.take() {
                let fresh = spent.cancel();
                SPARE_CANCELLERS.with(|s| s.borrow_mut().push(fresh, SPARE_VECTORS_MAX));
            }
            read.await
        }
    };
    match res {
        Ok(0) => FastWait::Closed("client closed"),
        Ok(_) => FastWait::Data,
        Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => FastWait::Idle,
        Err(_) => FastWait::Closed("read failed"),
    }
}
