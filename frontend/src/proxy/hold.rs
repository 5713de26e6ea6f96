//! [`RelayHold`]: what one response relay holds of its worker's relay-memory budget, sized by the
//! client's pace (DESIGN.md "Memory under slow readers and large bodies"; [`edge_core::pace`]).

use std::{
    os::fd::RawFd,
    rc::Rc,
    time::{Duration, Instant},
};

use edge_core::{
    buf::{RecvBuf, BUF_SIZE},
    io::progress::{set_unsent_bound, unsent, writable_now},
    pace::{drains_fast, RelayBudget, RelayPace},
    runtime::listen::{FAST_NOTSENT_LOWAT, NOTSENT_LOWAT},
};

use crate::context::Worker;

/// One relay's share of [`Worker::relay`], returned to it when dropped (the relay ended, whichever
/// way). Sizes the relay's upstream reads: a pass-through relay reads chunks of [`RelayHold::size`],
/// which follows the client's pace within the budget; any other relay reads into the buffer it has.
///
/// A response on a multiplexed connection (HTTP/2) also holds the same bytes of its connection's
/// share ([`crate::server::Respond::relay_share`]), one chunk at a time
/// ([`RelayHold::next_turn`]): the streams of one connection together hold about what one HTTP/1.1
/// relay at the connection's pace holds, however many streams it carries.
pub(crate) struct RelayHold<'w> {
    w: &'w Worker,
    pace: RelayPace,
    /// Bytes taken from the budget (and from `conn`'s, when there is one).
    held: usize,
    passthrough: bool,
    /// The client connection's share, for a multiplexed connection.
    conn: Option<Rc<RelayBudget>>,
    /// Bytes taken from `conn`'s share: `held` during the relay's turn, 0 outside it.
    conn_held: usize,
    /// When the last chunk was out and what the client's socket then held unsent, while the relay
    /// may still grow: the start of the next chunk's drain ([`drains_fast`]).
    last: Option<(Instant, usize)>,
    /// The client's socket has the full pace's unsent-queue bound ([`FAST_NOTSENT_LOWAT`]) rather
    /// than [`NOTSENT_LOWAT`]: set while the relay is at the full pace, and kept from one relay to the
    /// next on a keep-alive connection whose last relay ended at it (a carried pace).
    fast_bound: bool,
}

/// How long a multiplexed stream's chunk may wait for its client before the stream gives its
/// connection's share back ([`RelayHold::leave_turn`]): a chunk the client keeps up with leaves in
/// well under this ([`edge_core::pace::SLOW`]: the pace of a slow reader).
pub(crate) const SLOW_TURN: Duration = edge_core::pace::SLOW;

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
        (conn, carried): (Option<Rc<RelayBudget>>, Option<RelayPace>),
        rest: &mut RecvBuf,
    ) -> Self {
        if passthrough {
            rest.release();
        }
        // A stream of a multiplexed connection starts at its connection's pace (RelayBudget::pace); a
        // keep-alive connection's next response where its session says (RelayPace::carried after a
        // relay that ended at the full pace).
        let fast_bound = conn.is_none() && carried.is_some();
        let pace = match (passthrough, &conn, carried) {
            (true, Some(c), _) => c.pace(),
            (true, None, Some(p)) => p,
            _ => RelayPace::new(),
        };
        let mut hold = RelayHold {
            w,
            pace,
            held: 0,
            passthrough,
            conn,
            conn_held: 0,
            last: None,
            fast_bound,
        };
        hold.resume().await;
        hold
    }

    /// The pace the relay is at.
    pub(crate) fn pace(&self) -> RelayPace {
        self.pace
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
    /// relay checks that the chunk left it rather than sitting unsent, and, while the relay may
    /// grow, how fast the socket sends on from one chunk to the next ([`drains_fast`]; one
    /// `SIOCOUTQNSD` query per chunk below the relay size). The socket's unsent-queue bound follows
    /// the pace: [`FAST_NOTSENT_LOWAT`] at the full pace, [`NOTSENT_LOWAT`] below it (one
    /// `setsockopt` when the pace crosses that line).
    pub(crate) fn wrote(&mut self, len: usize, took: Duration, sock: Option<RawFd>) {
        if !self.passthrough {
            return;
        }
        let unsent = match (sock, !self.pace.is_full()) {
            (Some(s), true) => unsent(s).map(|n| n as usize),
            _ => None,
        };
        let now = Instant::now();
        let fast = match (self.last, unsent) {
            (Some((at, before)), Some(after)) => drains_fast(len, before, after, now - at),
            _ => false,
        };
        self.last = unsent.map(|n| (now, n));
        self.pace.wrote(len, took, unsent.unwrap_or(0), fast);
        if let Some(c) = &self.conn {
            // Taken at the relay's next turn ([`RelayHold::next_turn`]); the connection's next
            // streams start at it.
            c.set_pace(self.pace);
            return;
        }
        self.held = self.w.relay.resize(self.held, self.pace.size());
        self.pace = RelayPace::with_size(self.held);
        if let (Some(s), true) = (sock, self.pace.is_full() != self.fast_bound) {
            self.fast_bound = self.pace.is_full();
            let bound = match self.fast_bound {
                true => FAST_NOTSENT_LOWAT,
                false => NOTSENT_LOWAT,
            };
            // A socket that refuses keeps the bound it has; the relay goes on either way.
            let _ = set_unsent_bound(s, bound);
        }
    }

    /// On a multiplexed connection, after a chunk the multiplexer has let go of: gives the relay's
    /// share back and takes the size of its next chunk again, in line behind the connection's other
    /// streams waiting for theirs, so they take turns a chunk at a time. Nothing on a connection of
    /// its own.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait takes nothing.
    pub(crate) async fn next_turn(&mut self, rest: &mut RecvBuf) {
        if self.conn.is_some() {
            self.pause(rest);
            self.resume().await;
        }
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
        self.release();
    }

    /// Takes the relay's share of the budget again after [`RelayHold::pause`], waiting while it is
    /// spent (counted in `edge_relay_buffer_waits_total`).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait takes nothing.
    pub(crate) async fn resume(&mut self) {
        let n = self.pace.size();
        // The connection's share first: a stream waiting for its turn holds none of the worker's.
        // Waits for a turn are the multiplexing, not a spent budget: not counted.
        let mut taken = ConnTaken(None, n);
        if let Some(c) = &self.conn {
            c.acquire(n).await;
            taken.0 = Some(c);
        }
        if self.w.relay.acquire(n).await {
            self.w.metrics.relay_waits.increment(1);
        }
        std::mem::forget(taken);
        self.held = n;
        self.conn_held = if self.conn.is_some() { n } else { 0 };
    }

    /// Gives the connection's share back early, while the multiplexer still holds the chunk: for a
    /// stream whose client is slow to take it ([`SLOW_TURN`]), so that the connection's other streams
    /// go on (no head-of-line blocking behind a stream whose client stopped reading it); the chunk
    /// stays counted in the worker's budget.
    pub(crate) fn leave_turn(&mut self) {
        if let Some(c) = &self.conn {
            c.release(self.conn_held);
        }
        self.conn_held = 0;
    }

    /// Whether the relay holds a share of its connection's.
    pub(crate) fn in_turn(&self) -> bool {
        self.conn_held > 0
    }

    fn release(&mut self) {
        self.w.relay.release(self.held);
        self.held = 0;
        self.leave_turn();
    }
}

/// The connection's share taken while the worker's is still awaited: given back if that wait is
/// dropped.
struct ConnTaken<'a>(Option<&'a RelayBudget>, usize);

impl Drop for ConnTaken<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.release(self.1);
        }
    }
}

impl Drop for RelayHold<'_> {
    fn drop(&mut self) {
        self.release();
    }
}
