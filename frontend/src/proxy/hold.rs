//! [`RelayHold`]: what one response relay holds of its worker's relay-memory budget, sized by the
//! client's pace (DESIGN.md "Memory under slow readers and large bodies"; [`edge_core::pace`]).

use std::{os::fd::RawFd, time::Duration};

use edge_core::{
    buf::{RecvBuf, BUF_SIZE},
    io::progress::{unsent, writable_now},
    pace::RelayPace,
};

use crate::context::Worker;

/// One relay's share of [`Worker::relay`], returned to it when dropped (the relay ended, whichever
/// way). Sizes the relay's upstream reads: a pass-through relay reads chunks of [`RelayHold::size`],
/// which follows the client's pace within the budget; any other relay reads into the buffer it has.
pub(crate) struct RelayHold<'w> {
    w: &'w Worker,
    pace: RelayPace,
    /// Bytes taken from the budget.
    held: usize,
    passthrough: bool,
    /// The largest chunk the session takes ([`crate::server::Session::max_chunk`]).
    max_chunk: usize,
}

impl<'w> RelayHold<'w> {
    /// Takes the relay's first buffer from the budget, waiting while it is spent (a pause, never a
    /// failure; counted in `edge_relay_buffer_waits_total`). The bytes that came with the head are out
    /// by now: an empty receive buffer goes back to the pool first, so a waiting relay holds none.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait takes nothing.
    pub(crate) async fn start(
        w: &'w Worker,
        passthrough: bool,
        max_chunk: usize,
        rest: &mut RecvBuf,
    ) -> Self {
        let pace = RelayPace::new();
        if passthrough {
            rest.release();
        }
        if w.relay.acquire(pace.size()).await {
            w.metrics.relay_waits.increment(1);
        }
        RelayHold {
            w,
            pace,
            held: pace.size(),
            passthrough,
            max_chunk,
        }
    }

    /// The size of the next upstream read ([`edge_upstream::session::UpstreamSession::read_body`]): the
    /// paced size, or 0 (the buffer as it is) for a relay that re-frames the body.
    pub(crate) fn size(&self) -> usize {
        match self.passthrough {
            true => self.held,
            false => 0,
        }
    }

    /// Records that a chunk of `len` bytes took `took` to reach the client: the next read grows while
    /// the client keeps up and the budget has room, and shrinks for a slow client.
    /// `sock` is the client's socket where the session writes to it directly: before growing, the
    /// relay checks that the chunk left it rather than sitting unsent.
    pub(crate) fn wrote(&mut self, len: usize, took: Duration, sock: Option<RawFd>) {
        if !self.passthrough {
            return;
        }
        let unsent = match self.pace.would_grow(len, took) {
            true => sock.and_then(unsent).map_or(0, |n| n as usize),
            false => 0,
        };
        self.pace.wrote(len, took, unsent);
        let size = self.pace.size().min(self.max_chunk);
        self.held = self.w.relay.resize(self.held, size);
        self.pace = RelayPace::with_size(self.held);
    }

    /// Whether the relay pauses before its next read: a pass-through relay at the small size whose
    /// client's socket (`sock`) would not take a write now ([`writable_now`]: its send buffer is
    /// nearly full, or half of `TCP_NOTSENT_LOWAT` is unsent), so the next chunk would wait in a
    /// blocked write. Asks the socket only at the small size (one `poll(2)`); a relay that grew has a
    /// client that keeps up.
    pub(crate) fn client_behind(&self, sock: Option<RawFd>) -> bool {
        self.passthrough && self.pace.size() == BUF_SIZE && sock.is_some_and(|s| !writable_now(s))
    }

    /// Gives the relay's buffer (`rest`, empty: everything was written) back to the worker's pool
    /// and its share of the budget back, while it waits for its client ([`RelayHold::resume`]).
    pub(crate) fn pause(&mut self, rest: &mut RecvBuf) {
        rest.release();
        self.w.relay.release(self.held);
        self.held = 0;
    }

    /// Takes the relay's share of the budget again after [`RelayHold::pause`], waiting while it is
    /// spent (counted in `edge_relay_buffer_waits_total`).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait takes nothing.
    pub(crate) async fn resume(&mut self) {
        let n = self.pace.size();
        if self.w.relay.acquire(n).await {
            self.w.metrics.relay_waits.increment(1);
        }
        self.held = n;
    }
}

impl Drop for RelayHold<'_> {
    fn drop(&mut self) {
        self.w.relay.release(self.held);
    }
}
