//! [`PollIo`]: tokio's poll-style `AsyncRead + AsyncWrite` over any [`Transport`], so a protocol
//! library written against those traits (the `h2` crate, DESIGN.md "HTTP/2") runs on the worker's own
//! monoio runtime, over plain TCP or edge's TLS stream, on both io drivers. Only tokio's IO traits are
//! used: no tokio runtime, reactor or timer.
//!
//! # Why an adapter and not `into_poll_io`
//! monoio's poll-io mode converts monoio's own `TcpStream` only. edge's TLS stream
//! ([`super::tls::Tls`]) is edge's own type, driven by edge's pooled buffers through the owned-buffer
//! ("rent") traits; it has no poll-mode counterpart. The adapter works on the [`Transport`] seam, so
//! plain and TLS connections share it, and the io_uring driver keeps its completion-based IO.
//!
//! # Buffering
//! The transport is split; one local task per direction owns a half and runs owned-buffer operations:
//! - the read pump reads into one pooled buffer ([`crate::buf::take`], 16 KiB) whenever the previous
//!   bytes have all been taken by `poll_read`, then wakes the reader;
//! - `poll_write` (vectored: h2 hands a DATA frame's head and payload in one call) takes the bytes
//!   without waiting, by the transport:
//!   - plain TCP: a non-blocking `sendmsg` straight from the caller's slices while nothing is pending
//!     (no copy, no io operation); when the socket is full, a copy into a pending pooled buffer;
//!   - downstream TLS: rustls seals them at once (its copy into the record is the only one) and the
//!     records go out by a non-blocking `sendmsg` from rustls' queue while no write is in flight;
//!   - anything else: the copy into the pending buffer.
//!
//!   The write pump writes what is pending (at most [`WRITE_PENDING_MAX`] bytes, or rustls' 64 KiB
//!   record queue, before `poll_write` is `Pending`), each write under the `send` deadline, so the
//!   protocol goes on encoding while a write is in flight. `poll_flush` does not wait for the socket
//!   (the pump writes without being asked), so backpressure is the full pending buffer.
//!
//! Pooled buffers per connection, reused for its whole life: no allocation per read or write in
//! steady state.
//!
//! # Cancel safety
//! Every poll method is cancel safe: no operation is started on behalf of a poll that could be lost
//! when its caller stops polling (the pumps own the operations). When the adapter is dropped, the read
//! pump's read is cancelled and awaited (no bytes lost, nothing left in flight); the write pump finishes
//! the write in flight, bounded by the `send` deadline given to [`PollIo::new`], and stops.

use std::{
    any::Any,
    cell::RefCell,
    future::poll_fn,
    io::{self, IoSlice, Write},
    os::fd::RawFd,
    pin::Pin,
    rc::Rc,
    task::{Context, Poll, Waker},
    time::Duration,
};

use monoio::{
    io::{AsyncWriteRent, CancelableAsyncReadRent, Canceller},
    net::TcpStream,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{
    is_full,
    progress::stall_timeout,
    tls::{self, ServerState, Tls},
    DontWait, Transport,
};
use crate::buf;

/// Bytes `poll_write` accepts before a write of them is done: one large pooled buffer's worth.
pub const WRITE_PENDING_MAX: usize = buf::LARGE_BUF_SIZE;

/// The state shared by the adapter and its two pumps.
struct Shared {
    /// Received bytes not yet taken: `rbuf[rpos..]`.
    rbuf: Vec<u8>,
    rpos: usize,
    /// The read side ended (EOF, or an error, kept as its kind).
    read_end: Option<Option<io::ErrorKind>>,
    /// `poll_read` is waiting for bytes.
    reader: Option<Waker>,
    /// The read pump is waiting for `rbuf` to be taken.
    read_pump: Option<Waker>,
    /// Cancels the read pump's read in flight (taken at drop).
    canceller: Option<Canceller>,
    /// Bytes written by the protocol, not yet handed to the write pump.
    wbuf: Vec<u8>,
    /// The write pump has a write in flight.
    writing: bool,
    /// A write failed (or timed out): every later write fails.
    write_error: Option<io::ErrorKind>,
    /// `poll_write` or `poll_shutdown` waits for the write pump.
    writer: Option<Waker>,
    /// The write pump waits for bytes.
    write_pump: Option<Waker>,
    /// `poll_shutdown` asked for the half-close, and whether it is done.
    shutdown: (bool, bool),
    /// The adapter was dropped: the pumps stop.
    dropped: bool,
    /// Where written bytes go.
    sink: Sink,
    /// Sealed TLS records wait in rustls for the write pump's flush (the socket was full, or a write
    /// was in flight).
    staged: bool,
}

/// Where `poll_write` puts the bytes it takes.
enum Sink {
    /// Copied into `wbuf` for the write pump.
    Copy,
    /// A plain socket: sent at once (a non-blocking `sendmsg`) while nothing is pending, no copy;
    /// copied into `wbuf` when the socket is full.
    Socket(RawFd),
    /// A downstream TLS stream: sealed by rustls at once (its copy is the only one) and sent while no
    /// write is in flight; the write pump flushes what the socket did not take.
    Tls(ServerState),
}

impl Drop for Shared {
    /// The last of the adapter and its pumps gives the buffers back to the worker's pool.
    fn drop(&mut self) {
        buf::give(std::mem::take(&mut self.rbuf));
        buf::give(std::mem::take(&mut self.wbuf));
    }
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

/// tokio's `AsyncRead + AsyncWrite` over a [`Transport`], for poll-based protocol libraries on a
/// monoio worker (see the module docs for buffering and cancel safety). Not `Send`: it lives on the
/// worker thread that accepted the connection.
pub struct PollIo {
    shared: Rc<RefCell<Shared>>,
}

impl PollIo {
    /// Splits `stream` and spawns its two pumps on the current monoio runtime. `send` bounds the time a
    /// write to the peer makes no progress (then it fails, and every later one, with `TimedOut`).
    /// `prefix` holds bytes already read from the stream (e.g. a sniffed connection preface); they are
    /// read first.
    ///
    /// # Panics
    /// Outside a monoio runtime (spawning needs one).
    pub fn new<T: Transport>(stream: T, prefix: &[u8], send: Duration) -> Self {
        let canceller = Canceller::new();
        let handle = canceller.handle();
        let mut rbuf = buf::take();
        rbuf.extend_from_slice(prefix);
        let sink = match (&stream as &dyn Any)
            .downcast_ref::<Tls<TcpStream, rustls::ServerConnection>>()
        {
            Some(tls) => Sink::Tls(tls.server_state()),
            None => stream.raw_socket().map_or(Sink::Copy, Sink::Socket),
        };
        // A TLS sink never copies: no pending buffer.
        let wbuf = match sink {
            Sink::Tls(_) => Vec::new(),
            _ => buf::take_large(),
        };
        let shared = Rc::new(RefCell::new(Shared {
            rbuf,
            rpos: 0,
            read_end: None,
            reader: None,
            read_pump: None,
            canceller: Some(canceller),
            wbuf,
            writing: false,
            write_error: None,
            writer: None,
            write_pump: None,
            shutdown: (false, false),
            dropped: false,
            sink,
            staged: false,
        }));
        let sock = Some(stream.fd());
        let (r, w) = stream.split();
        monoio::spawn(read_pump(r, shared.clone(), handle));
        monoio::spawn(write_pump(w, shared.clone(), send, sock));
        PollIo { shared }
    }
}

impl Drop for PollIo {
    fn drop(&mut self) {
        let mut s = self.shared.borrow_mut();
        s.dropped = true;
        if let Some(c) = s.canceller.take() {
            drop(c.cancel());
        }
        wake(&mut s.read_pump);
        wake(&mut s.write_pump);
    }
}

/// Reads whenever the previous bytes were all taken; stops at EOF, an error, or the adapter's drop.
async fn read_pump<R: CancelableAsyncReadRent>(
    mut r: R,
    shared: Rc<RefCell<Shared>>,
    cancel: monoio::io::CancelHandle,
) {
    loop {
        let ready = poll_fn(|cx| {
            let mut s = shared.borrow_mut();
            if s.dropped {
                return Poll::Ready(None);
            }
            if s.rpos < s.rbuf.len() {
                s.read_pump = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let mut b = std::mem::take(&mut s.rbuf);
            b.clear();
            s.rpos = 0;
            Poll::Ready(Some(b))
        })
        .await;
        let Some(b) = ready else { break };
        let (res, b) = r.cancelable_read(b, cancel.clone()).await;
        let mut s = shared.borrow_mut();
        s.rbuf = b;
        match res {
            Ok(0) => s.read_end = Some(None),
            Ok(_) => {}
            Err(e) => s.read_end = Some(Some(e.kind())),
        }
        wake(&mut s.reader);
        if s.read_end.is_some() {
            break;
        }
    }
    let mut s = shared.borrow_mut();
    if s.read_end.is_none() {
        s.read_end = Some(Some(io::ErrorKind::ConnectionAborted));
    }
}

/// What the write pump does next.
enum WriteStep {
    Write(Vec<u8>),
    /// Send the TLS records rustls holds.
    Flush,
    Shutdown,
    Stop,
}

/// Writes what `poll_write` buffered (or sealed), each write under `send`, counted as time without
/// progress ([`stall_timeout`]: a client that takes a byte within every `send` is never cut off); then
/// the half-close when asked.
async fn write_pump<W: AsyncWriteRent>(
    mut w: W,
    shared: Rc<RefCell<Shared>>,
    send: Duration,
    sock: Option<RawFd>,
) {
    let mut spare = match shared.borrow().sink {
        Sink::Tls(_) => Vec::new(),
        _ => buf::take_large(),
    };
    loop {
        let step = poll_fn(|cx| {
            let mut s = shared.borrow_mut();
            if s.write_error.is_some() || s.shutdown.1 {
                return Poll::Ready(WriteStep::Stop);
            }
            if !s.wbuf.is_empty() {
                s.writing = true;
                spare.clear();
                let out = std::mem::replace(&mut s.wbuf, std::mem::take(&mut spare));
                return Poll::Ready(WriteStep::Write(out));
            }
            if std::mem::take(&mut s.staged) {
                s.writing = true;
                return Poll::Ready(WriteStep::Flush);
            }
            if s.shutdown.0 {
                return Poll::Ready(WriteStep::Shutdown);
            }
            if s.dropped {
                return Poll::Ready(WriteStep::Stop);
            }
            s.write_pump = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        let failed = match step {
            WriteStep::Stop => break,
            WriteStep::Write(out) => {
                let write = super::progress::write_all(&mut w, out);
                let (res, out) = match stall_timeout(send, sock, write).await {
                    Ok((res, out)) => (res.map(|_| ()), Some(out)),
                    Err(_) => (Err(io::ErrorKind::TimedOut.into()), None),
                };
                spare = out.unwrap_or_else(buf::take_large);
                res.err()
            }
            WriteStep::Flush => match stall_timeout(send, sock, w.flush()).await {
                Ok(r) => r.err(),
                Err(_) => Some(io::ErrorKind::TimedOut.into()),
            },
            WriteStep::Shutdown => {
                let res = stall_timeout(send, sock, w.shutdown()).await;
                shared.borrow_mut().shutdown.1 = true;
                match res {
                    Ok(r) => r.err(),
                    Err(_) => Some(io::ErrorKind::TimedOut.into()),
                }
            }
        };
        let mut s = shared.borrow_mut();
        s.writing = false;
        if let Some(e) = failed {
            s.write_error = Some(e.kind());
        }
        wake(&mut s.writer);
    }
    buf::give(spare);
    wake(&mut shared.borrow_mut().writer);
}

impl AsyncRead for PollIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut s = self.shared.borrow_mut();
        let available = s.rbuf.len() - s.rpos;
        if available > 0 {
            let n = available.min(out.remaining());
            let start = s.rpos;
            out.put_slice(&s.rbuf[start..start + n]);
            s.rpos += n;
            if s.rpos == s.rbuf.len() {
                wake(&mut s.read_pump);
            }
            return Poll::Ready(Ok(()));
        }
        match s.read_end {
            Some(None) => Poll::Ready(Ok(())),
            Some(Some(kind)) => Poll::Ready(Err(kind.into())),
            None => {
                s.reader = Some(cx.waker().clone());
                wake(&mut s.read_pump);
                Poll::Pending
            }
        }
    }
}

impl PollIo {
    /// `poll_write` and `poll_write_vectored`: takes what it can of `bufs` without waiting (see
    /// [`Sink`]); `Pending` only when the pending buffer (or rustls' record queue) is full.
    fn write_slices(&self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let mut s = self.shared.borrow_mut();
        if let Some(kind) = s.write_error {
            return Poll::Ready(Err(kind.into()));
        }
        if s.shutdown.0 {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let direct = match &s.sink {
            Sink::Tls(state) => Some(tls::seal(state, bufs, s.writing)),
            Sink::Socket(fd) if s.wbuf.is_empty() && !s.writing => {
                match DontWait(*fd).write_vectored(bufs) {
                    Ok(0) => None,
                    Ok(n) => Some(Ok((n, false))),
                    Err(e) if is_full(&e) => None,
                    Err(e) => Some(Err(e)),
                }
            }
            _ => None,
        };
        match direct {
            Some(Err(e)) => {
                s.write_error = Some(e.kind());
                wake(&mut s.write_pump);
                return Poll::Ready(Err(e));
            }
            Some(Ok((n, staged))) => {
                if staged {
                    s.staged = true;
                    wake(&mut s.write_pump);
                }
                if n > 0 || !staged {
                    return Poll::Ready(Ok(n));
                }
                // rustls' queue is full: wait for the pump's flush.
                s.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            None => {}
        }
        let room = WRITE_PENDING_MAX.saturating_sub(s.wbuf.len());
        if room == 0 {
            s.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(room - n);
            s.wbuf.extend_from_slice(&b[..take]);
            n += take;
            if n == room {
                break;
            }
        }
        wake(&mut s.write_pump);
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for PollIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_slices(cx, &[IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_slices(cx, bufs)
    }

    /// Vectored: h2 then writes a DATA frame's head and its payload in one call (one send, or one
    /// sealing into records), and chains payloads above 256 bytes instead of copying them.
    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Ready once the bytes written are the write pump's, which writes them without further calls
    /// (an error shows at the next call). Waiting for the socket here would stop h2 after every DATA
    /// frame whose payload it chains (its encoder flushes before the next frame): one write per 16 KiB
    /// frame instead of one per [`WRITE_PENDING_MAX`] bytes. `poll_shutdown` waits for the socket.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.shared.borrow().write_error {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.shared.borrow_mut();
        if s.shutdown.1 {
            return Poll::Ready(match s.write_error {
                Some(kind) => Err(kind.into()),
                None => Ok(()),
            });
        }
        if let Some(kind) = s.write_error {
            return Poll::Ready(Err(kind.into()));
        }
        s.shutdown.0 = true;
        s.writer = Some(cx.waker().clone());
        wake(&mut s.write_pump);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
