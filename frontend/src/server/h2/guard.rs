//! [`Guarded`]: the IO handed to h2, the connection's [`PollIo`] with edge's flood defences
//! ([`super::flood`]) on its bytes. Inbound bytes are scanned as h2 reads them (one clock read per
//! read); outbound bytes as h2 writes them (DATA frames grow the WINDOW_UPDATE budget, refusing
//! RST_STREAMs count as resets, and as `edge_http2_resets_total{side="edge"}` with a rate-limited
//! `request.invalid` line, the status table's h2 stream-error row).
//!
//! A flood trips the connection's [`Alarm`]: reading stops (the flood's bytes are no longer handed to
//! h2) until the accept loop ([`super::conn`]) has answered it with GOAWAY ENHANCE_YOUR_CALM and set
//! the alarm [`calm`](Alarm::calm). With no stream open that is h2's abrupt shutdown and the
//! connection closes. With streams open it is h2's graceful shutdown, whose GOAWAYs this IO rewrites
//! from NO_ERROR to ENHANCE_YOUR_CALM (so the open streams still finish, RFC 9113 §6.8, which
//! `abrupt_shutdown` would cut); from then on the client's frames that only make work (new streams,
//! non-ACK SETTINGS and PING, PRIORITY, empty DATA: [`super::flood::keep_after_goaway`]) are dropped
//! before h2 sees them, so what the client had in flight costs a scan, not a request each. The
//! counts start over then, and the rest of that second is grace: what the client had sent before it
//! could see the GOAWAY (up to its socket buffers' worth) is not held against it. A flood that goes
//! on in a later second trips the alarm again and the connection closes at once.

use std::{
    cell::Cell,
    io,
    pin::Pin,
    rc::Rc,
    task::{ready, Context, Poll, Waker},
    time::Instant,
};

use edge_core::{io::PollIo, metrics::ResetSide};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{
    flood::{keep_after_goaway, kind, Filter, Flood, Frame, Scanner, Window},
    stream::Origin,
};
use crate::context::Worker;

/// ENHANCE_YOUR_CALM (RFC 9113 §7).
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Where a connection stands against the flood defences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No flood.
    Quiet,
    /// A flood tripped the alarm; reading waits for the accept loop.
    Tripped(Flood),
    /// GOAWAY ENHANCE_YOUR_CALM is on its way; open streams finish.
    Calm,
    /// The flood went on after GOAWAY: the connection closes.
    Again(Flood),
}

/// A connection's flood state, shared by its [`Guarded`] IO and its accept loop.
pub struct Alarm {
    phase: Cell<Phase>,
    /// The accept loop waits for a flood.
    waiter: Cell<Option<Waker>>,
    /// h2's read waits for the accept loop's answer.
    reader: Cell<Option<Waker>>,
    w: Rc<Worker>,
    from: Origin,
}

impl Alarm {
    /// The alarm of a connection from `from` on worker `w`.
    pub fn new(w: Rc<Worker>, from: Origin) -> Rc<Self> {
        Rc::new(Alarm {
            phase: Cell::new(Phase::Quiet),
            waiter: Cell::new(None),
            reader: Cell::new(None),
            w,
            from,
        })
    }

    fn trip(&self, f: Flood) {
        let next = match self.phase.get() {
            Phase::Quiet => Phase::Tripped(f),
            Phase::Calm => Phase::Again(f),
            p => p,
        };
        if next != self.phase.get() {
            self.phase.set(next);
            if let Some(w) = self.waiter.take() {
                w.wake();
            }
        }
    }

    /// Waits until a flood tripped the alarm: the flood, and whether it came after GOAWAY
    /// ENHANCE_YOUR_CALM (then the connection closes at once).
    ///
    /// # Cancel safety
    /// Cancel safe: the flood stays recorded until [`Alarm::calm`].
    pub fn tripped(&self) -> impl std::future::Future<Output = (Flood, bool)> + '_ {
        std::future::poll_fn(|cx| match self.phase.get() {
            Phase::Tripped(f) => Poll::Ready((f, false)),
            Phase::Again(f) => Poll::Ready((f, true)),
            _ => {
                self.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
    }

    /// Whether the flood GOAWAY went out (it is counted; a later h2 error must not count it again).
    pub fn answered(&self) -> bool {
        matches!(self.phase.get(), Phase::Calm | Phase::Again(_))
    }

    /// The accept loop started the shutdown: GOAWAYs now carry ENHANCE_YOUR_CALM, reading resumes.
    pub fn calm(&self) {
        self.phase.set(Phase::Calm);
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// A refusing RST_STREAM went out (status table: h2 stream error).
    fn refused(&self, f: &Frame) {
        self.w.metrics.http2_reset(ResetSide::Edge).increment(1);
        if self.w.log_limit.allow() {
            tracing::info!(event = "request.invalid", worker = self.w.id, peer = %self.from.peer, reason = "h2_stream_error", stream = f.stream, code = f.code, "h2 refused a stream");
        }
    }
}

/// The connection's IO as h2 sees it (see the module docs).
pub struct Guarded {
    io: PollIo,
    inbound: Scanner,
    outbound: Scanner,
    window: Window,
    /// `None` until the GOAWAY went out; then whether the window since is the grace second.
    grace: Option<bool>,
    /// Set when the GOAWAY went out: drops what the client sends beyond its open streams' needs;
    /// with the highest stream id h2 had seen then (later streams are dropped).
    filter: Option<(Filter, u32)>,
    /// The highest stream id of the client's HEADERS so far.
    last_stream: u32,
    alarm: Rc<Alarm>,
}

impl Guarded {
    /// `io` under the flood limits (`max_resets` is `server.http2.max_resets_per_second`), tripping
    /// `alarm`.
    pub fn new(io: PollIo, max_resets: u32, alarm: Rc<Alarm>) -> Self {
        Guarded {
            io,
            inbound: Scanner::inbound(),
            outbound: Scanner::outbound(),
            window: Window::new(Instant::now(), max_resets),
            grace: None,
            filter: None,
            last_stream: 0,
            alarm,
        }
    }
}

impl Guarded {
    /// Counts the client's new bytes `new` (read at `now`), tripping the alarm on a flood (not in the
    /// grace second after a flood GOAWAY).
    fn count(&mut self, new: &[u8], now: Instant) {
        match self.grace {
            None if self.alarm.phase.get() == Phase::Calm => {
                self.window.restart(now);
                self.grace = Some(true);
                self.filter = Some((self.inbound.filter(), self.last_stream));
            }
            Some(true) if self.window.roll(now) => self.grace = Some(false),
            _ => {
                self.window.roll(now);
            }
        }
        let (window, alarm, last) = (&mut self.window, &self.alarm, &mut self.last_stream);
        let grace = self.grace == Some(true);
        self.inbound.scan(new, |f| {
            if f.kind == kind::HEADERS {
                *last = (*last).max(f.stream);
            }
            if let (Some(flood), false) = (window.inbound(&f), grace) {
                alarm.trip(flood);
            }
        });
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.alarm.phase.get(), Phase::Tripped(_) | Phase::Again(_)) {
            this.alarm.reader.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
        loop {
            let before = out.filled().len();
            ready!(Pin::new(&mut this.io).poll_read(cx, out))?;
            let end = out.filled().len();
            if end == before {
                return Poll::Ready(Ok(()));
            }
            this.count(&out.filled()[before..], Instant::now());
            let Some((filter, last)) = this.filter.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            let last = *last;
            let kept = filter.apply(&mut out.filled_mut()[before..], |f| {
                keep_after_goaway(f, last)
            });
            out.set_filled(before + kept);
            // Everything read was dropped: read on (an empty read would be taken for EOF).
            if kept > 0 {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl Guarded {
    /// Counts the frames edge wrote (`written`, in order): refusals, and DATA frames for the
    /// WINDOW_UPDATE allowance.
    fn count_written(&mut self, written: &[u8]) {
        let (window, alarm) = (&mut self.window, &self.alarm);
        let grace = self.grace == Some(true);
        self.outbound.scan(written, |f| {
            if f.kind == super::flood::kind::RST_STREAM && super::flood::is_refusal(f.code) {
                alarm.refused(&f);
            }
            if let (Some(flood), false) = (window.outbound(&f), grace) {
                alarm.trip(flood);
            }
        });
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = match this.alarm.phase.get() {
            Phase::Quiet => ready!(Pin::new(&mut this.io).poll_write(cx, data))?,
            // Only on a flooding connection: a copy with the GOAWAY codes rewritten.
            _ => {
                let mut patched = data.to_vec();
                this.outbound.patch_goaway(&mut patched, ENHANCE_YOUR_CALM);
                ready!(Pin::new(&mut this.io).poll_write(cx, &patched))?
            }
        };
        this.count_written(&data[..n]);
        Poll::Ready(Ok(n))
    }

    /// As `poll_write`, over several slices at once; a flooding connection writes its first non-empty
    /// slice only (through the GOAWAY patch).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.alarm.phase.get() != Phase::Quiet {
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return self.poll_write(cx, first);
        }
        let this = self.get_mut();
        let mut n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let taken = n;
        for b in bufs {
            let part = b.len().min(n);
            this.count_written(&b[..part]);
            n -= part;
            if n == 0 {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
