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
//! - `poll_write` copies into a pending pooled buffer (at most [`WRITE_PENDING_MAX`] bytes, then
//!   `Pending`); the write pump swaps it with a second pooled buffer and writes it whole, so the
//!   protocol can go on encoding while a write is in flight. `poll_flush` does not wait for the
//!   socket (the pump writes without being asked), so backpressure is the full pending buffer.
//!
//! Three pooled buffers per connection, reused for its whole life: no allocation per read or write in
//! steady state (one copy each way, between the library's buffers and the pooled ones).
//!
//! # Cancel safety
//! Every poll method is cancel safe: no operation is started on behalf of a poll that could be lost
//! when its caller stops polling (the pumps own the operations). When the adapter is dropped, the read
//! pump's read is cancelled and awaited (no bytes lost, nothing left in flight); the write pump finishes
//! the write in flight, bounded by the `send` deadline given to [`PollIo::new`], and stops.

use std::{
    cell::RefCell,
    future::poll_fn,
    io,
    pin::Pin,
    rc::Rc,
    task::{Context, Poll, Waker},
    time::Duration,
};

use monoio::io::{AsyncWriteRent, AsyncWriteRentExt, CancelableAsyncReadRent, Canceller};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Transport;
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
    /// Splits `stream` and spawns its two pumps on the current monoio runtime. `send` bounds each
    /// write to the peer (no progress within it fails the write and every later one with `TimedOut`).
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
        let shared = Rc::new(RefCell::new(Shared {
            rbuf,
            rpos: 0,
            read_end: None,
            reader: None,
            read_pump: None,
            canceller: Some(canceller),
            wbuf: buf::take_large(),
            writing: false,
            write_error: None,
            writer: None,
            write_pump: None,
            shutdown: (false, false),
            dropped: false,
        }));
        let (r, w) = stream.split();
        monoio::spawn(read_pump(r, shared.clone(), handle));
        monoio::spawn(write_pump(w, shared.clone(), send));
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
    Shutdown,
    Stop,
}

/// Writes what `poll_write` buffered, each write under `send`; then the half-close when asked.
async fn write_pump<W: AsyncWriteRent>(mut w: W, shared: Rc<RefCell<Shared>>, send: Duration) {
    let mut spare = buf::take_large();
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
                let (res, out) = match monoio::time::timeout(send, w.write_all(out)).await {
                    Ok((res, out)) => (res.map(|_| ()), Some(out)),
                    Err(_) => (Err(io::ErrorKind::TimedOut.into()), None),
                };
                spare = out.unwrap_or_else(buf::take_large);
                res.err()
            }
            WriteStep::Shutdown => {
                let res = monoio::time::timeout(send, w.shutdown()).await;
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

impl AsyncWrite for PollIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut s = self.shared.borrow_mut();
        if let Some(kind) = s.write_error {
            return Poll::Ready(Err(kind.into()));
        }
        if s.shutdown.0 {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = WRITE_PENDING_MAX.saturating_sub(s.wbuf.len());
        if room == 0 {
            s.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(data.len());
        s.wbuf.extend_from_slice(&data[..n]);
        wake(&mut s.write_pump);
        Poll::Ready(Ok(n))
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
mod tests {
    use std::future::poll_fn;

    use monoio::{
        io::{AsyncReadRent, AsyncWriteRentExt},
        net::{TcpListener, TcpStream},
    };

    use super::*;
    use crate::runtime::{block_on, IoDriver};

    /// Runs `f` on both io drivers (io_uring skipped where the kernel refuses it).
    fn both_drivers(f: impl Fn() -> Pin<Box<dyn std::future::Future<Output = ()>>>) {
        for driver in [IoDriver::IoUring, IoDriver::Epoll] {
            if block_on(driver, f()).is_err() {
                assert_eq!(driver, IoDriver::IoUring, "epoll runtime must build");
            }
        }
    }

    async fn write_all(io: &mut PollIo, mut data: &[u8]) {
        while !data.is_empty() {
            let n = poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, data))
                .await
                .unwrap();
            data = &data[n..];
        }
        poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx))
            .await
            .unwrap();
    }

    async fn read_to_end(io: &mut PollIo) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 7000];
        loop {
            let mut rb = ReadBuf::new(&mut chunk);
            poll_fn(|cx| Pin::new(&mut *io).poll_read(cx, &mut rb))
                .await
                .unwrap();
            if rb.filled().is_empty() {
                return out;
            }
            out.extend_from_slice(rb.filled());
        }
    }

    #[test]
    fn a_mebibyte_crosses_both_ways_with_prefix_first_and_shutdown_is_eof() {
        both_drivers(|| {
            Box::pin(async {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
                let expect = data.clone();
                let peer = monoio::spawn(async move {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let mut got = Vec::new();
                    while got.len() < expect.len() {
                        let (r, b) = s.read(Vec::with_capacity(65536)).await;
                        assert!(r.unwrap() > 0, "EOF before the whole upload");
                        got.extend_from_slice(&b);
                    }
                    assert!(got == expect, "upload differs");
                    let (r, _) = s.write_all(got).await;
                    r.unwrap();
                    let (r, _) = s.read(Vec::with_capacity(16)).await;
                    assert_eq!(r.unwrap(), 0, "shutdown reaches the peer as EOF");
                });
                let tcp = TcpStream::connect(addr).await.unwrap();
                let mut io = PollIo::new(tcp, b"pre", Duration::from_secs(5));
                let mut first = [0u8; 3];
                let mut rb = ReadBuf::new(&mut first);
                poll_fn(|cx| Pin::new(&mut io).poll_read(cx, &mut rb))
                    .await
                    .unwrap();
                assert_eq!(rb.filled(), b"pre", "the prefix is read first");
                write_all(&mut io, &data).await;
                let mut back = Vec::new();
                while back.len() < data.len() {
                    let mut chunk = [0u8; 9000];
                    let mut rb = ReadBuf::new(&mut chunk);
                    poll_fn(|cx| Pin::new(&mut io).poll_read(cx, &mut rb))
                        .await
                        .unwrap();
                    assert!(!rb.filled().is_empty(), "EOF before the whole download");
                    back.extend_from_slice(rb.filled());
                }
                assert!(back == data, "download differs");
                poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx))
                    .await
                    .unwrap();
                peer.await;
                assert!(read_to_end(&mut io).await.is_empty(), "the peer closed");
            })
        });
    }

    #[test]
    fn dropping_the_adapter_cancels_its_read_and_closes_the_socket() {
        both_drivers(|| {
            Box::pin(async {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let peer = monoio::spawn(async move {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let (r, _) = s.read(Vec::with_capacity(16)).await;
                    r.unwrap()
                });
                let tcp = TcpStream::connect(addr).await.unwrap();
                let mut io = PollIo::new(tcp, b"", Duration::from_secs(5));
                // A read is in flight (nothing arrives); dropping must end it and close the socket.
                let mut chunk = [0u8; 16];
                let mut rb = ReadBuf::new(&mut chunk);
                let pending = poll_fn(|cx| {
                    Poll::Ready(Pin::new(&mut io).poll_read(cx, &mut rb).is_pending())
                })
                .await;
                assert!(pending);
                // Let the read pump arm its read, then drop with it in flight.
                let mut yielded = false;
                poll_fn(|cx| {
                    if yielded {
                        return Poll::Ready(());
                    }
                    yielded = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                })
                .await;
                drop(io);
                let n = monoio::time::timeout(Duration::from_secs(5), peer)
                    .await
                    .expect("the socket closed after the drop");
                assert_eq!(n, 0);
            })
        });
    }
}
