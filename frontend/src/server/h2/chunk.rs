//! [`Chunk`]: a DATA frame's payload in a pooled buffer, and [`Moved`]: when a stream's payload last
//! left h2, the progress that the stream's `send` deadline counts (DESIGN.md "Memory under slow readers
//! and large bodies": HTTP/2 streams obey the `send` rule per stream, bounded by the stream's window).

use std::{
    cell::{Cell, RefCell},
    future::poll_fn,
    rc::Rc,
    task::{Poll, Waker},
};

use bytes::Buf;
use edge_core::{buf, clock::coarse_now};
use monoio::time::Instant;

/// When bytes of one stream's DATA payloads last left h2 for the connection's write pump: h2 takes a
/// payload's bytes only as the client's flow-control window for the stream and the socket let it, so
/// each step is the client taking part of the response. Shared by the stream's session and the
/// payloads it handed to h2; one per stream that sends a body. It also counts the payloads h2 still
/// holds, so the relay can read the next chunk only once h2 let go of the last
/// ([`Moved::all_taken`]): a stream holds one chunk.
#[derive(Clone)]
pub struct Moved(Rc<MovedState>);

struct MovedState {
    last: Cell<Instant>,
    /// Payloads of the stream h2 holds.
    held: Cell<usize>,
    /// The session waiting in [`Moved::all_taken`].
    waiter: RefCell<Option<Waker>>,
}

impl Moved {
    /// A stream whose bytes moved just now (the start of its first wait).
    pub fn now() -> Self {
        Moved(Rc::new(MovedState {
            last: Cell::new(coarse_now()),
            held: Cell::new(0),
            waiter: RefCell::new(None),
        }))
    }

    /// When the stream's bytes last moved (on the coarse clock).
    pub fn last(&self) -> Instant {
        self.0.last.get()
    }

    /// Resolves once h2 holds none of the stream's payloads (every byte went to the connection's
    /// write pump, or the stream ended).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn all_taken(&self) {
        poll_fn(|cx| match self.0.held.get() {
            0 => Poll::Ready(()),
            _ => {
                *self.0.waiter.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// A DATA frame's payload in a pooled buffer ([`edge_core::buf`]), given back to the worker's pool once
/// h2 has written it.
pub struct Chunk {
    data: Vec<u8>,
    pos: usize,
    /// Told each time h2 takes bytes of this payload.
    moved: Option<Moved>,
}

impl Chunk {
    /// The bytes of `data` (a pooled buffer).
    pub fn new(data: Vec<u8>) -> Self {
        Chunk {
            data,
            pos: 0,
            moved: None,
        }
    }

    /// The bytes of `data[start..]` (a pooled buffer taken whole from a receive buffer).
    pub fn at(data: Vec<u8>, start: usize) -> Self {
        Chunk {
            data,
            pos: start,
            moved: None,
        }
    }

    /// An empty payload (the END_STREAM frame of a body that already went out).
    pub fn empty() -> Self {
        Chunk::new(Vec::new())
    }

    /// The payload, telling `moved` whenever h2 takes some of its bytes.
    pub fn telling(mut self, moved: &Moved) -> Self {
        moved.0.held.set(moved.0.held.get() + 1);
        self.moved = Some(moved.clone());
        self
    }
}

impl Buf for Chunk {
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn chunk(&self) -> &[u8] {
        &self.data[self.pos..]
    }

    fn advance(&mut self, n: usize) {
        self.pos += n;
        if let (Some(m), true) = (&self.moved, n > 0) {
            m.0.last.set(coarse_now());
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        buf::give(std::mem::take(&mut self.data));
        if let Some(m) = self.moved.take() {
            m.0.held.set(m.0.held.get() - 1);
            if m.0.held.get() == 0 {
                if let Some(w) = m.0.waiter.borrow_mut().take() {
                    w.wake();
                }
            }
        }
    }
}

impl From<Vec<u8>> for Chunk {
    /// [`Chunk::new`]: the pooled buffer goes back to its pool once h2 has written it.
    fn from(data: Vec<u8>) -> Self {
        Chunk::new(data)
    }
}
