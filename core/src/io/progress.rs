//! Write progress and the deadline that counts only time without it: the rule behind the client `send`
//! deadline (DESIGN.md "Inbound deadlines" and "Memory under slow readers and large bodies": a client
//! that reads slowly but steadily is never cut off, on either io driver, at any concurrency).
//!
//! One asynchronous write of a large buffer completes in many steps: a socket takes what fits its send
//! buffer and the rest waits for the client to read. On io_uring each step is a completion of a `send`
//! operation that reports the bytes the socket took (a short count: no `MSG_WAITALL`); on epoll each is
//! a `send(2)` after a writable wakeup. A deadline armed once around the whole write would cut off a
//! client that reads all along but more slowly than the buffer's size per deadline. So every write loop
//! of edge's own ([`write_all`], the TLS record flush, the HTTP/2 write pump) calls [`note`] whenever the
//! socket takes bytes, and [`stall_timeout`] pushes its deadline back to `d` after the latest such step.
//!
//! [`note`] bumps a counter of this thread; [`Stall`] compares it before and after each poll of its
//! future. A worker polls one future at a time, so a change seen across that poll was made by that
//! future's own writes, on its own connection: no handle has to reach through the transport traits (a
//! TLS write completes its records inside `AsyncWriteRent::write`).

use std::{
    cell::Cell,
    future::Future,
    io,
    os::fd::RawFd,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use monoio::{
    buf::IoBuf,
    io::AsyncWriteRent,
    time::{sleep_until, Instant, Sleep},
    BufResult,
};

use crate::clock::{after, coarse_now, Elapsed};

thread_local! {
    /// Write steps that moved bytes on this thread (wrapping).
    static STEPS: Cell<u64> = const { Cell::new(0) };
}

/// Records that a socket took bytes of a write in progress (see the module doc). Costs a thread-local
/// increment.
#[inline]
pub fn note() {
    STEPS.with(|s| s.set(s.get().wrapping_add(1)));
}

fn steps() -> u64 {
    STEPS.with(Cell::get)
}

/// Writes all of `buf` to `io`, one write after another, calling [`note`] after each that moves bytes:
/// `AsyncWriteRentExt::write_all` with its progress visible to [`stall_timeout`].
///
/// # Errors
/// The first failed write's error (`Interrupted` is retried); `WriteZero` when a write takes nothing.
///
/// # Cancel safety
/// Not cancel safe: when dropped part of `buf` may have been written (and on io_uring the write in
/// flight still completes). After a timeout the caller closes the connection.
pub async fn write_all<W: AsyncWriteRent, T: IoBuf + 'static>(
    io: &mut W,
    mut buf: T,
) -> BufResult<usize, T> {
    let len = buf.bytes_init();
    let mut written = 0;
    while written < len {
        let (res, slice) = io.write(buf.slice(written..len)).await;
        buf = slice.into_inner();
        match res {
            Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), buf),
            Ok(n) => {
                written += n;
                note();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (Err(e), buf),
        }
    }
    (Ok(written), buf)
}

/// `fut`, failing with [`Elapsed`] once `d` passes without write progress: the deadline is armed at the
/// first poll that finds `fut` pending and moves to `d` after each [`note`] made while `fut` is polled
/// (on the coarse clock: at most two ticks late, never early). A client that takes bytes within every
/// `d / 2` is never cut off; one that takes nothing for `d` is, within `d` and `1.5 d`.
///
/// A socket does not take bytes as soon as its client reads: the kernel wakes a writer only once the
/// send queue has drained by a good part (half of what is queued, or below half of `TCP_NOTSENT_LOWAT`),
/// so a slow client that reads all along can leave a write without a step for longer than `d`. With
/// `sock` (the socket under the write), the timer also looks at the socket's send queue every `d / 2`
/// while the write waits (`SIOCOUTQ`: bytes the client has not acknowledged): a queue shorter than at
/// the previous look is the client reading, and counts as progress. The first look after a step only
/// takes the measure (right after a step the kernel is still sending into the client's open window,
/// which shrinks the queue whether the client reads or not). The queue is read on the slow path only,
/// at those timer ticks, never for a write that completes at once.
///
/// # Cancel safety
/// That of `fut` (dropped when the deadline passes).
#[inline(always)]
pub fn stall_timeout<F: Future>(d: Duration, sock: Option<RawFd>, fut: F) -> Stall<F> {
    Stall {
        fut,
        d,
        sock,
        queued: None,
        moved: None,
        last: None,
        sleep: None,
    }
}

/// Bytes in `sock`'s send queue that the peer has not acknowledged (`SIOCOUTQ`); `None` when the
/// query fails.
fn send_queue(sock: RawFd) -> Option<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ on a TCP socket) writes one int into `n`; the fd is the caller's open
    // socket.
    let r = unsafe { libc::ioctl(sock, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(n.max(0) as u32)
}

/// Bytes in `sock`'s send queue that the kernel has not sent yet (`SIOCOUTQNSD`); `None` when the
/// query fails. Right after a write, most of it still unsent means the client's window is closed: it
/// is not keeping up, however fast the socket took the bytes.
pub fn unsent(sock: RawFd) -> Option<u32> {
    /// `SIOCOUTQNSD` (linux/sockios.h).
    const SIOCOUTQNSD: libc::c_ulong = 0x894B;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one int into `n`; the fd is the caller's open socket.
    let r = unsafe { libc::ioctl(sock, SIOCOUTQNSD, &mut n) };
    (r == 0).then_some(n.max(0) as u32)
}

/// Sets `sock`'s unsent-queue bound (`TCP_NOTSENT_LOWAT`) to `bytes`
/// ([`crate::runtime::listen::NOTSENT_LOWAT`], [`crate::runtime::listen::FAST_NOTSENT_LOWAT`]);
/// `sock` must be an open descriptor, which the caller keeps open for the call.
///
/// # Errors
/// The `setsockopt(2)` error (a descriptor that is not a TCP socket).
pub fn set_unsent_bound(sock: RawFd, bytes: u32) -> io::Result<()> {
    // SAFETY: the caller keeps the descriptor open for the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(sock) };
    socket2::SockRef::from(&fd).set_tcp_notsent_lowat(bytes)
}

/// Whether `sock` would take a write now, asked without waiting (`poll(2)` for `POLLOUT`, timeout 0):
/// room in its send buffer, and with `TCP_NOTSENT_LOWAT` set, less than half of it unsent
/// ([`crate::runtime::listen::NOTSENT_LOWAT`]). `true` when the query fails (the write then tells).
/// A relay whose client's socket is not writable waits for it holding no buffer
/// ([`crate::io::Transport::writable`]; DESIGN.md "Memory under slow readers and large bodies").
pub fn writable_now(sock: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd: sock,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack for a socket the caller owns; timeout 0 never blocks.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r != 0
}

/// The future of [`stall_timeout`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Stall<F> {
    fut: F,
    d: Duration,
    /// The socket whose send queue tells a reading client from a stalled one.
    sock: Option<RawFd>,
    /// The send queue at the previous timer tick.
    queued: Option<u32>,
    /// When `fut` last moved bytes since the previous timer tick.
    moved: Option<Instant>,
    /// The last progress seen (a step or a shorter queue); the deadline is `d` after it.
    last: Option<Instant>,
    /// The timer entry, made at the first poll that finds `fut` pending.
    sleep: Option<Sleep>,
}

impl<F> Stall<F> {
    /// The timer's first tick: `d` from now, or `d / 2` when there is a queue to look at.
    fn first_tick(&mut self) -> Instant {
        let now = coarse_now();
        self.last = Some(now);
        match self.sock {
            Some(_) => now + self.d / 2,
            None => after(self.d),
        }
    }

    /// A timer tick: takes in the progress since the previous one; returns the next tick, or `None`
    /// when `d` passed without progress.
    fn tick(&mut self) -> Option<Instant> {
        let now = coarse_now();
        let sample = self.sock.and_then(send_queue);
        if let Some(t) = self.moved.take() {
            self.last = Some(t);
        } else if let (Some(q), Some(before)) = (sample, self.queued) {
            if q < before {
                self.last = Some(now);
            }
        }
        self.queued = sample;
        let end = self.last.unwrap_or(now).checked_add(self.d)?;
        match (end > now, self.sock) {
            (false, _) => None,
            (true, Some(_)) => Some(end.min(now + self.d / 2)),
            (true, None) => Some(end),
        }
    }
}

impl<F: Future> Future for Stall<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of `fut` and of the `Sleep` inside `sleep`: neither is moved out of
        // `self` or replaced while it lives (`sleep` goes from `None` to `Some` once, which moves no
        // pinned value), and both are dropped in place with `self`.
        let this = unsafe { self.get_unchecked_mut() };
        let fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        let before = steps();
        if let Poll::Ready(v) = fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if this.sleep.is_none() {
            // The first wait arms the timer: the deadline counts from now, whatever moved before.
            let first = this.first_tick();
            this.sleep = Some(sleep_until(first));
        } else if steps() != before {
            // Reading the clock only when bytes moved: a write that waits reads it once per step.
            this.moved = Some(coarse_now());
        }
        while let Some(sleep) = this.sleep.as_mut() {
            // SAFETY: as above.
            if unsafe { Pin::new_unchecked(sleep) }.poll(cx).is_pending() {
                return Poll::Pending;
            }
            let next = this.tick().ok_or(Elapsed);
            match (next, this.sleep.as_mut()) {
                // SAFETY: as above.
                (Ok(next), Some(sleep)) => unsafe { Pin::new_unchecked(sleep) }.reset(next),
                (Ok(_), None) => {}
                (Err(e), _) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::Read,
        net::{TcpListener, TcpStream},
        sync::mpsc,
        thread,
    };

    use super::*;

    const STEP: usize = 16 * 1024;
    const TOTAL: usize = 1 << 20;
    const PAUSE: Duration = Duration::from_millis(20);
    const SEND: Duration = Duration::from_millis(500);

    /// A loopback pair with small socket buffers on both ends (a write of [`TOTAL`] completes in many
    /// steps); the reading end is a std socket for a reader thread.
    fn pair() -> (monoio::net::TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        c.set_recv_buffer_size(4096).unwrap();
        c.connect(&l.local_addr().unwrap().into()).unwrap();
        let (server, _) = l.accept().unwrap();
        let server = socket2::Socket::from(server);
        server.set_send_buffer_size(STEP).unwrap();
        server.set_nonblocking(true).unwrap();
        let server = monoio::net::TcpStream::from_std(server.into()).unwrap();
        (server, c.into())
    }

    /// Reads [`STEP`] bytes at a time, one read every [`PAUSE`], until it has [`TOTAL`] (or EOF); sends
    /// how many it read.
    fn paced_reader(mut c: TcpStream) -> mpsc::Receiver<usize> {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let (mut got, mut buf) = (0, vec![0u8; STEP]);
            while got < TOTAL {
                thread::sleep(PAUSE);
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            let _ = tx.send(got);
        });
        rx
    }

    /// A write of 1 MiB to a reader taking 16 KiB every 20 ms lasts about 1.3 s: far past `SEND` in
    /// all, never `SEND` without progress. Then a reader that takes nothing: cut off after `SEND`.
    async fn steady_then_stalled() {
        let (mut server, client) = pair();
        let read = paced_reader(client);
        let (t, before) = (std::time::Instant::now(), steps());
        let (res, _) = stall_timeout(SEND, None, write_all(&mut server, vec![7u8; TOTAL]))
            .await
            .expect("a steady reader was cut off");
        assert_eq!(res.unwrap(), TOTAL);
        assert!(
            t.elapsed() > 2 * SEND,
            "the write took only {:?}",
            t.elapsed()
        );
        // Each driver reports the write's progress step by step (short counts), not once at its end.
        let steps = steps().wrapping_sub(before);
        assert!(steps >= 8, "1 MiB written in {steps} steps");
        assert_eq!(read.recv().unwrap(), TOTAL);

        let (mut server, _client) = pair();
        let t = std::time::Instant::now();
        let r = stall_timeout(SEND, None, write_all(&mut server, vec![7u8; TOTAL])).await;
        assert!(r.is_err(), "a reader that takes nothing was not cut off");
        let took = t.elapsed();
        assert!(
            took >= SEND && took < SEND + Duration::from_secs(1),
            "{took:?}"
        );
    }

    #[test]
    fn a_steady_reader_outlasts_send_and_a_stalled_one_does_not_on_epoll() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(steady_then_stalled());
    }

    #[test]
    fn a_steady_reader_outlasts_send_and_a_stalled_one_does_not_on_io_uring() {
        match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .enable_timer()
            .build()
        {
            Ok(mut rt) => rt.block_on(steady_then_stalled()),
            Err(e) => eprintln!("SKIP io_uring case: the kernel refuses io_uring here ({e})"),
        }
    }

    #[test]
    fn the_unsent_bound_is_set_on_the_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&server);
        let sock = socket2::SockRef::from(&server);
        for bytes in [
            crate::runtime::listen::FAST_NOTSENT_LOWAT,
            crate::runtime::listen::NOTSENT_LOWAT,
        ] {
            set_unsent_bound(fd, bytes).unwrap();
            assert_eq!(sock.tcp_notsent_lowat().unwrap(), bytes);
        }
        let not_a_socket = std::fs::File::open("/dev/null").unwrap();
        assert!(
            set_unsent_bound(std::os::fd::AsRawFd::as_raw_fd(&not_a_socket), 1).is_err(),
            "an error is returned, not swallowed"
        );
    }
}
