//! The stream tasks of one HTTP/2 connection (DESIGN.md "HTTP/2": every stream is served on the worker
//! that accepted its connection). A stream's future is large (it holds the whole upstream exchange,
//! about 7 KiB), so spawning one task per stream costs a large allocation, its copy and its free for
//! every request. Instead a connection keeps the tasks it spawned and hands them its later streams:
//! a task that finished its stream takes the next queued one, or parks until one comes. The stream
//! future is pinned inside its task and built in place, so a busy connection allocates no task per
//! request.
//!
//! - A new task is spawned only when a stream arrives and no task is parked, so a connection never
//!   has more tasks than the streams it had open at once (at most SETTINGS_MAX_CONCURRENT_STREAMS).
//! - At most [`LINGER`] tasks stay parked; a task finding that many already parked ends instead, so a
//!   burst of streams does not keep its tasks alive.
//! - Parked tasks end when the connection ends ([`StreamTasks`] dropped).
//! - A panic while serving a stream is caught and counted; the task goes on with the next stream (the
//!   panicked stream's handles are dropped, and h2 resets that stream).

use std::{
    cell::{Cell, RefCell},
    collections::VecDeque,
    future::poll_fn,
    net::SocketAddr,
    pin::pin,
    rc::Rc,
    task::{Poll, Waker},
};

use edge_core::pace::RelayBudget;

use super::{conn::Accepted, stream};
use crate::{accept::CatchUnwind, context::Worker};

/// Tasks kept parked per connection once their streams ended (each holds one stream future's memory).
pub const LINGER: usize = 16;

/// What the response relays of one connection's streams hold at most together, bytes: one large
/// chunk's worth ([`edge_core::buf::LARGE_BUF_SIZE`], 64 KiB), and one full-size chunk
/// ([`edge_core::buf::RELAY_BUF_SIZE`]) alone, since a share that holds nothing lets any one chunk in
/// ([`RelayBudget::acquire`]). A connection sends at one TCP pace whatever its number of streams, so
/// its streams take turns a chunk at a time instead of each holding a chunk: at the full pace one
/// chunk at a time, while the connection proves its pace four small chunks or one large one. With a
/// full chunk's share, a new connection's streams would hold several chunks of each smaller size
/// class at once on their way up, and the worker's pools would keep them all once the connections
/// have grown (about 12 MiB more at the peak of 640 streams starting together over 64 connections,
/// bench/README.md "HTTP/2 streams that start together"). The body bytes that came with each
/// stream's response head, at most a head buffer's ([`edge_core::buf::HEAD_BUF_SIZE`]), go out
/// beside the share (DESIGN.md "Memory under slow readers and large bodies").
pub const CONN_RELAY_SHARE: usize = edge_core::buf::LARGE_BUF_SIZE;

/// One accepted stream waiting for a task, with what its task must drop when the stream ends.
struct Job<G> {
    accepted: Accepted,
    guard: G,
}

/// State shared by a connection and its stream tasks.
struct Shared<G> {
    queue: RefCell<VecDeque<Job<G>>>,
    /// Wakers of the parked tasks.
    parked: RefCell<Vec<Waker>>,
    /// The connection ended: parked tasks end.
    closed: Cell<bool>,
    /// The connection's relay-memory share ([`CONN_RELAY_SHARE`]).
    relay: Rc<RelayBudget>,
}

/// The stream tasks of one connection. `G` is dropped when its stream has been served (the
/// connection's count of open streams).
pub struct StreamTasks<G: 'static> {
    shared: Rc<Shared<G>>,
}

impl<G: 'static> Default for StreamTasks<G> {
    /// No task yet.
    fn default() -> Self {
        StreamTasks {
            shared: Rc::new(Shared {
                queue: RefCell::new(VecDeque::new()),
                parked: RefCell::new(Vec::new()),
                closed: Cell::new(false),
                relay: Rc::new(RelayBudget::new(CONN_RELAY_SHARE)),
            }),
        }
    }
}

impl<G: 'static> StreamTasks<G> {
    /// Serves `accepted` on a parked task, or on a new one when none is parked; `guard` is dropped once
    /// the stream has been served. `from`: where the connection came from.
    pub fn dispatch(&self, w: &Rc<Worker>, accepted: Accepted, guard: G, from: stream::Origin) {
        self.shared
            .queue
            .borrow_mut()
            .push_back(Job { accepted, guard });
        let parked = self.shared.parked.borrow_mut().pop();
        match parked {
            Some(waker) => waker.wake(),
            None => {
                monoio::spawn(run(w.clone(), self.shared.clone(), from));
            }
        }
    }
}

impl<G: 'static> Drop for StreamTasks<G> {
    fn drop(&mut self) {
        self.shared.closed.set(true);
        for waker in self.shared.parked.take() {
            waker.wake();
        }
    }
}

/// The next queued stream; `None` when the connection ended, or when [`LINGER`] tasks are already
/// parked (this one ends).
async fn next<G>(shared: &Shared<G>) -> Option<Job<G>> {
    poll_fn(|cx| {
        if let Some(job) = shared.queue.borrow_mut().pop_front() {
            return Poll::Ready(Some(job));
        }
        if shared.closed.get() {
            return Poll::Ready(None);
        }
        let mut parked = shared.parked.borrow_mut();
        if parked.iter().any(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        if parked.len() >= LINGER {
            return Poll::Ready(None);
        }
        parked.push(cx.waker().clone());
        Poll::Pending
    })
    .await
}

/// One stream task: serves queued streams until [`next`] says to end.
async fn run<G>(w: Rc<Worker>, shared: Rc<Shared<G>>, from: stream::Origin) {
    // Boxed once per task (a task serves many streams): inline, its vectors' headers would push the
    // task past jemalloc's 10 KiB size class.
    let mut scratch = Box::<stream::Scratch>::default();
    while let Some(job) = next(&shared).await {
        let (req, respond) = job.accepted;
        w.metrics.http2_streams_active.increment(1.0);
        let serve = pin!(stream::serve(
            &w,
            req,
            respond,
            from,
            &shared.relay,
            &mut scratch
        ));
        let res = CatchUnwind(serve).await;
        w.metrics.http2_streams_active.decrement(1.0);
        if res.is_err() {
            w.metrics.panics.increment(1);
            log_panic(&w, from.peer);
        }
        drop(job.guard);
    }
}

fn log_panic(w: &Worker, peer: SocketAddr) {
    tracing::error!(event = "connection.panic", worker = w.id, peer = %peer, "an h2 stream task panicked");
}
