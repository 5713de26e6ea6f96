//! An upstream in memory for the orchestrator's unit tests: [`MemUpstream`] opens one scripted session
//! per attempt ([`Script`]), and every call the orchestrator makes on the upstream seam is recorded as
//! an event, so a test checks both what the client was sent and what the upstream saw (opens, heads,
//! bodies, how each session finished), without sockets or timing races.

use std::{
    cell::RefCell,
    collections::VecDeque,
    net::SocketAddr,
    rc::Rc,
    task::{Poll, Waker},
    time::Duration,
};

use edge_core::{
    buf::RecvBuf,
    http::head::{parse_response, Fields, ResponseHead},
    io::body::{BodySource, RequestSink, SendBodyError},
};
use edge_upstream::{
    received::MAX_RESPONSE_HEAD,
    session::{
        BodyEnd, BodyError, BodyRead, Finish, HeadBuffer, Open, Opened, Reuse, TunnelHalves,
        UpstreamSession, UpstreamTunnel, Waited,
    },
    zombie::ActivityClock,
    UpstreamError, UpstreamErrorKind,
};
use monoio::{
    buf::{IoBuf, IoVecBuf},
    io::AsyncWriteRent,
    time::{sleep_until, Instant},
    BufResult,
};

/// What the upstream does at its next read, in order.
#[derive(Clone, Copy, Debug)]
pub(super) enum Reply {
    /// These response bytes arrive.
    Bytes(&'static str),
    /// The upstream closes its side.
    Close,
    /// The upstream resets the connection.
    Reset,
    /// Nothing arrives: the read waits for its deadline.
    Silent,
    /// No bytes: the read waits until the upstream got these request body bytes (one write of a
    /// duplex session's body sink, [`Trace`] event `upstream got ..`), then goes on with the next reply.
    AfterBody(&'static str),
}

/// One attempt's session.
#[derive(Clone, Debug)]
pub(super) struct Script {
    /// It runs on a connection that served earlier requests.
    pub(super) reused: bool,
    /// Sending the head fails with this kind (retry-safe, as a write on a closed connection is).
    pub(super) head_fails: Option<UpstreamErrorKind>,
    /// The response starts while the body is streamed: the first reply arrives before the client sends
    /// the rest of its body.
    pub(super) answers_early: bool,
    /// The reads, in order; none left reads as a close.
    pub(super) replies: Vec<Reply>,
    /// Full duplex ([`UpstreamSession::duplex`]): the body goes into a [`MemSink`] taken from the
    /// session while the response is read.
    pub(super) duplex: bool,
    /// The body sink fails every write (the upstream reset its stream).
    pub(super) sink_fails: bool,
}

impl Script {
    /// A session on a fresh connection that reads `replies`.
    pub(super) fn fresh(replies: &[Reply]) -> Self {
        Script {
            reused: false,
            head_fails: None,
            answers_early: false,
            replies: replies.to_vec(),
            duplex: false,
            sink_fails: false,
        }
    }

    /// As [`Script::fresh`], full duplex.
    pub(super) fn duplex(replies: &[Reply]) -> Self {
        Script {
            duplex: true,
            ..Script::fresh(replies)
        }
    }

    /// As [`Script::fresh`], on a reused connection.
    pub(super) fn reused(replies: &[Reply]) -> Self {
        Script {
            reused: true,
            ..Script::fresh(replies)
        }
    }
}

/// The upstream: one [`Script`] per session opened (an open beyond them is refused), and the events.
#[derive(Default)]
pub(super) struct MemUpstream {
    scripts: RefCell<VecDeque<Script>>,
    events: RefCell<Vec<String>>,
    trace: Rc<Trace>,
}

impl MemUpstream {
    pub(super) fn new(scripts: Vec<Script>) -> Self {
        Self::traced(scripts, Rc::default())
    }

    /// As [`MemUpstream::new`], recording what a duplex session's body sink got in `trace` (shared
    /// with the client's side, so that a test sees both directions in one order).
    pub(super) fn traced(scripts: Vec<Script>, trace: Rc<Trace>) -> Self {
        MemUpstream {
            scripts: RefCell::new(scripts.into()),
            events: RefCell::default(),
            trace,
        }
    }

    /// What the upstream saw so far.
    pub(super) fn events(&self) -> Vec<String> {
        self.events.borrow().clone()
    }

    fn record(&self, event: String) {
        self.events.borrow_mut().push(event);
    }
}

impl Open for MemUpstream {
    type Tunnel = MemTunnel;
    type Session<'a> = MemExchange<'a>;

    async fn open(
        &self,
        reuse: Reuse,
        _client: edge_upstream::session::ClientConn,
        _key: Option<u64>,
    ) -> Result<Opened<MemExchange<'_>>, UpstreamError> {
        self.record(format!("open {reuse:?}"));
        let script = self.scripts.borrow_mut().pop_front();
        let script = script.ok_or(UpstreamError::new(UpstreamErrorKind::Refused))?;
        Ok(Opened {
            session: MemExchange {
                up: self,
                replies: script.replies.iter().copied().collect(),
                script,
                buf: RecvBuf::new(),
                sink_taken: false,
                endpoint_metrics: edge_core::metrics::EndpointMetrics::noop(),
            },
            retried: false,
        })
    }
}

/// One scripted session.
pub(super) struct MemExchange<'a> {
    up: &'a MemUpstream,
    script: Script,
    replies: VecDeque<Reply>,
    buf: RecvBuf,
    sink_taken: bool,
    endpoint_metrics: edge_core::metrics::EndpointMetrics,
}

impl MemExchange<'_> {
    /// Appends the next reply's bytes: `Ok(true)` when bytes arrived, `Ok(false)` for silence, the
    /// close or reset as an error (retry-safe while no response byte arrived, `received_before`).
    async fn next(&mut self, received_before: bool) -> Result<bool, UpstreamError> {
        let failed = |kind| UpstreamError {
            retry_safe: !received_before,
            ..UpstreamError::new(kind)
        };
        let mut reply = self.replies.pop_front().unwrap_or(Reply::Close);
        while let Reply::AfterBody(text) = reply {
            self.up.trace.until(&format!("upstream got {text}")).await;
            reply = self.replies.pop_front().unwrap_or(Reply::Close);
        }
        match reply {
            Reply::AfterBody(_) => unreachable!("skipped above"),
            Reply::Bytes(b) => {
                // One read of a slice takes it whole (replies are shorter than a buffer).
                let n = self.buf.fill_large(&mut b.as_bytes()).await;
                assert_eq!(n.ok(), Some(b.len()));
                Ok(true)
            }
            Reply::Close => Err(failed(UpstreamErrorKind::ClosedEarly)),
            Reply::Reset => Err(failed(UpstreamErrorKind::Reset)),
            Reply::Silent => Ok(false),
        }
    }
}

impl<'a> UpstreamSession for MemExchange<'a> {
    type Tunnel = MemTunnel;
    type BodySink = MemSink<'a>;

    fn duplex(&self) -> bool {
        self.script.duplex
    }

    fn take_body_sink(&mut self) -> Option<MemSink<'a>> {
        if !self.script.duplex || self.sink_taken {
            return None;
        }
        self.sink_taken = true;
        self.up.record("sink taken".into());
        Some(MemSink {
            up: self.up,
            fails: self.script.sink_fails,
        })
    }

    fn reused(&self) -> bool {
        self.script.reused
    }

    fn endpoint(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 1))
    }

    fn endpoint_metrics(&self) -> &edge_core::metrics::EndpointMetrics {
        &self.endpoint_metrics
    }

    fn received(&self) -> &RecvBuf {
        &self.buf
    }

    fn received_mut(&mut self) -> &mut RecvBuf {
        &mut self.buf
    }

    async fn send_head(&mut self, out: &mut Vec<u8>, _: Duration) -> Result<(), UpstreamError> {
        let text = String::from_utf8_lossy(out).into_owned();
        self.up.record(format!("head {text}"));
        match self.script.head_fails {
            Some(kind) => Err(UpstreamError {
                retry_safe: kind != UpstreamErrorKind::WriteTimeout,
                ..UpstreamError::new(kind)
            }),
            None => Ok(()),
        }
    }

    async fn wait_more(&mut self, until: Instant, before: bool) -> Result<Waited, UpstreamError> {
        match self.next(before).await? {
            true => Ok(Waited::Bytes),
            false => {
                sleep_until(until).await;
                Ok(Waited::Deadline)
            }
        }
    }

    async fn send_body<B: BodySource>(
        mut self,
        body: &mut B,
        _: &mut Fields,
        write_timeout: Duration,
    ) -> (Self, Result<BodyEnd, BodyError<B::Error>>) {
        if self.script.answers_early {
            let r = match self.next(false).await {
                Ok(_) => Ok(BodyEnd::Early),
                Err(e) => Err(BodyError::Upstream(e)),
            };
            return (self, r);
        }
        let mut sink = Sink(Vec::new());
        let r = body.forward_rest(&mut sink, write_timeout).await;
        let text = String::from_utf8_lossy(&sink.0).into_owned();
        self.up.record(format!("body {text}"));
        let r = match r {
            Ok(()) => Ok(BodyEnd::Sent),
            Err(SendBodyError::Source(e)) => Err(BodyError::Source(e)),
            Err(SendBodyError::Sink(e)) => Err(BodyError::Upstream(e.into())),
        };
        (self, r)
    }

    async fn read_head(
        &mut self,
        fields: &mut Fields,
        clock: &mut ActivityClock,
        head_deadline: Option<Instant>,
        _buffer: HeadBuffer,
    ) -> Result<ResponseHead, UpstreamError> {
        loop {
            match parse_response(self.buf.data(), fields) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) if self.buf.len() < MAX_RESPONSE_HEAD => {}
                _ => return Err(UpstreamError::new(UpstreamErrorKind::BadResponse)),
            }
            if self.next(clock.last_received.is_some()).await? {
                clock.received();
                continue;
            }
            let zombie_at = clock.deadline();
            return Err(match head_deadline {
                Some(d) if d <= zombie_at => {
                    sleep_until(d).await;
                    UpstreamError::new(UpstreamErrorKind::RequestTimeout)
                }
                _ => {
                    sleep_until(zombie_at).await;
                    UpstreamError::new(UpstreamErrorKind::Zombie)
                }
            });
        }
    }

    async fn read_body(
        &mut self,
        clock: &mut ActivityClock,
        size: usize,
    ) -> Result<BodyRead, UpstreamError> {
        self.up.record(format!("read {size}"));
        match self.next(true).await {
            Ok(true) => {
                clock.received();
                Ok(BodyRead::Data)
            }
            Ok(false) => {
                sleep_until(clock.deadline()).await;
                Err(UpstreamError::new(UpstreamErrorKind::Zombie))
            }
            Err(e) if e.kind == UpstreamErrorKind::ClosedEarly => Ok(BodyRead::Eof),
            Err(e) => Err(e),
        }
    }

    fn finish(self, end: Finish) {
        self.up.record(format!("finish {end:?}"));
    }

    fn into_tunnel(self) -> MemTunnel {
        self.up.record("tunnel".into());
        MemTunnel(self.buf)
    }
}

/// Both directions of a duplex exchange in one order: what each side did, as `client sent ..`,
/// `upstream got ..`, `client got ..` events; a side waits for an event of the other ([`Trace::until`]).
#[derive(Default)]
pub(super) struct Trace {
    events: RefCell<Vec<String>>,
    waiting: RefCell<Vec<Waker>>,
}

impl Trace {
    /// Records `event` and wakes the waiters.
    pub(super) fn push(&self, event: String) {
        self.events.borrow_mut().push(event);
        for w in self.waiting.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// The events so far.
    pub(super) fn events(&self) -> Vec<String> {
        self.events.borrow().clone()
    }

    /// Waits until `event` was recorded.
    pub(super) async fn until(&self, event: &str) {
        std::future::poll_fn(|cx| {
            if self.events.borrow().iter().any(|e| e == event) {
                return Poll::Ready(());
            }
            self.waiting.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// A duplex session's body sink: each write is one `upstream got ..` [`Trace`] event (and a `body ..`
/// event of the upstream), or fails as a reset stream.
pub(super) struct MemSink<'a> {
    up: &'a MemUpstream,
    fails: bool,
}

impl RequestSink for MemSink<'_> {}

impl AsyncWriteRent for MemSink<'_> {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        if self.fails {
            return (Err(std::io::ErrorKind::ConnectionReset.into()), buf);
        }
        // SAFETY: an `IoBuf` has `bytes_init` initialized bytes at `read_ptr`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) };
        let text = String::from_utf8_lossy(bytes).into_owned();
        self.up.record(format!("body {text}"));
        self.up.trace.push(format!("upstream got {text}"));
        (Ok(bytes.len()), buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        (Err(std::io::ErrorKind::Unsupported.into()), buf)
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A tunnel's upstream side: the bytes after the `101` head; it reads nothing more.
pub(super) struct MemTunnel(pub(super) RecvBuf);

impl UpstreamTunnel for MemTunnel {
    type Read = &'static [u8];
    type Write = Sink;
    type Held = ();

    fn into_halves(self) -> TunnelHalves<&'static [u8], Sink, ()> {
        TunnelHalves {
            read: &[],
            write: Sink(Vec::new()),
            received: self.0,
            held: (),
        }
    }
}

/// Bytes written, kept.
pub(super) struct Sink(pub(super) Vec<u8>);

impl RequestSink for Sink {}

impl AsyncWriteRent for Sink {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        // SAFETY: an `IoBuf` has `bytes_init` initialized bytes at `read_ptr`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) };
        self.0.extend_from_slice(bytes);
        (Ok(bytes.len()), buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let mut n = 0;
        for i in 0..buf.read_iovec_len() {
            // SAFETY: an `IoVecBuf` has `read_iovec_len` initialized iovecs at `read_iovec_ptr`, each
            // describing initialized bytes.
            let bytes = unsafe {
                let v = &*buf.read_iovec_ptr().add(i);
                std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
            };
            self.0.extend_from_slice(bytes);
            n += bytes.len();
        }
        (Ok(n), buf)
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
