//! Owned IO buffers for monoio and the per-worker free list they come from.
//!
//! A [`RecvBuf`] holds storage only while it has work: a connection waiting for its next request returns
//! its storage to the worker's pool, so an idle keep-alive connection holds no read buffer (the idle-memory
//! target of bench/README.md). Steady-state traffic recycles the same few buffers: no allocation per request.

use std::{cell::RefCell, io};

use crate::freelist::FreeList;

use monoio::{
    buf::{IoBuf, IoBufMut},
    io::{AsyncReadRent, AsyncWriteRent},
};

/// Size of a pooled head buffer, bytes: what a request head written for the upstream (or an HTTP/2
/// request's head in HTTP/1.1 syntax) is built in ([`SendBuf::take_head`]), and what an HTTP/2 stream's
/// upstream response head is read into ([`RecvBuf::fill_head`]). Heads are usually well under 1 KiB and
/// such a buffer lives as long as its request does, so the three of an HTTP/2 stream hold 6 KiB rather
/// than 48 KiB of [`BUF_SIZE`] ones (bench/README.md "Large bodies after the slow-reader work"). A larger
/// head moves to the next class.
pub const HEAD_BUF_SIZE: usize = 2 * 1024;
/// Size of a pooled buffer, bytes.
pub const BUF_SIZE: usize = 16 * 1024;
/// Size of a pooled large buffer, bytes: what an upstream response head is read into, so the body
/// bytes behind it come in the same read ([`RecvBuf::fill_large`]), and what one TLS write seals. Body
/// relays read larger still ([`RELAY_BUF_SIZE`]).
pub const LARGE_BUF_SIZE: usize = 64 * 1024;
/// Size of a pooled relay buffer, bytes: what a pass-through body relay reads into
/// ([`RecvBuf::fill_relay`]). Four times a large buffer because every read that drains an upstream socket
/// lets the kernel send a window update: with 64 KiB reads edge on io_uring sent the origin about four
/// ACKs per 1 MiB response where epoll sent one, and paid for the origin's extra transmits on its own CPU
/// (loopback); 256 KiB reads cut CPU per 1 MiB response by about a fifth on both drivers (bench/README.md
/// "Large bodies"). The largest size a relay's reads take while its client keeps up
/// ([`crate::pace::RelayPace`]: a slow reader's relay reads [`BUF_SIZE`]). Held only while a body
/// relays; an idle connection holds none.
pub const RELAY_BUF_SIZE: usize = 4 * LARGE_BUF_SIZE;
/// Size of a pooled record buffer, bytes: what one TLS write seals [`LARGE_BUF_SIZE`] of plaintext into
/// (four full 16 KiB records, each with at most 29 bytes of header, type and tag; RFC 8446 §5.2, RFC 5288
/// §3), with room to spare for a session ticket or key update queued beside them. A pool of its own, so
/// read buffers stay exactly [`LARGE_BUF_SIZE`] and a 64 KiB relay chunk is sealed in one write.
pub const RECORD_BUF_SIZE: usize = LARGE_BUF_SIZE + 1024;
/// Head buffers a worker's free list always keeps.
const HEAD_POOL_FLOOR: usize = 64;
/// Head buffers a worker's free list keeps at most (8 MiB); more are freed.
const HEAD_POOL_MAX: usize = 4096;
/// Buffers a worker's free list always keeps.
const POOL_FLOOR: usize = 64;
/// Buffers a worker's free list keeps at most (64 MiB of small ones); more are freed.
const POOL_MAX: usize = 4096;
/// Large buffers a worker's free list always keeps.
const LARGE_POOL_FLOOR: usize = 16;
/// Large buffers a worker's free list keeps at most (64 MiB); more are freed.
const LARGE_POOL_MAX: usize = 1024;
/// Relay buffers a worker's free list always keeps.
const RELAY_POOL_FLOOR: usize = 4;
/// Relay buffers a worker's free list keeps at most (64 MiB); more are freed.
const RELAY_POOL_MAX: usize = 256;
/// Record buffers a worker's free list always keeps.
const RECORD_POOL_FLOOR: usize = 4;
/// Record buffers a worker's free list keeps at most (65 MiB); more are freed.
const RECORD_POOL_MAX: usize = 1024;

thread_local! {
    /// This worker's head buffers.
    static HEAD_POOL: RefCell<FreeList<Vec<u8>>> = const { RefCell::new(FreeList::new()) };
    /// This worker's small buffers.
    static POOL: RefCell<FreeList<Vec<u8>>> = const { RefCell::new(FreeList::new()) };
    /// This worker's large buffers.
    static LARGE_POOL: RefCell<FreeList<Vec<u8>>> = const { RefCell::new(FreeList::new()) };
    /// This worker's relay buffers.
    static RELAY_POOL: RefCell<FreeList<Vec<u8>>> = const { RefCell::new(FreeList::new()) };
    /// This worker's record buffers.
    static RECORD_POOL: RefCell<FreeList<Vec<u8>>> = const { RefCell::new(FreeList::new()) };
}

/// Takes an empty buffer of at least [`HEAD_BUF_SIZE`] capacity from this thread's pool.
pub fn take_head() -> Vec<u8> {
    HEAD_POOL
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(HEAD_BUF_SIZE))
}

/// Takes an empty buffer of at least [`BUF_SIZE`] capacity from this thread's pool.
pub fn take() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(BUF_SIZE))
}

/// Takes an empty buffer of at least [`LARGE_BUF_SIZE`] capacity from this thread's pool.
pub fn take_large() -> Vec<u8> {
    LARGE_POOL
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(LARGE_BUF_SIZE))
}

/// Takes an empty buffer of exactly [`RELAY_BUF_SIZE`] capacity from this thread's pool.
pub fn take_relay() -> Vec<u8> {
    RELAY_POOL
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(RELAY_BUF_SIZE))
}

/// Takes an empty buffer of exactly [`RECORD_BUF_SIZE`] capacity from this thread's pool.
pub fn take_record() -> Vec<u8> {
    RECORD_POOL
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(RECORD_BUF_SIZE))
}

/// The pool size class of a buffer of `cap` bytes: [`BUF_SIZE`], [`LARGE_BUF_SIZE`] or
/// [`RELAY_BUF_SIZE`].
pub fn size_class(cap: usize) -> usize {
    match cap {
        c if c >= RELAY_BUF_SIZE => RELAY_BUF_SIZE,
        c if c >= LARGE_BUF_SIZE => LARGE_BUF_SIZE,
        _ => BUF_SIZE,
    }
}

/// Takes an empty buffer of the size class of `size` ([`size_class`]) from this thread's pool.
pub fn take_sized(size: usize) -> Vec<u8> {
    match size_class(size) {
        RELAY_BUF_SIZE => take_relay(),
        LARGE_BUF_SIZE => take_large(),
        _ => take(),
    }
}

/// Returns a buffer to this thread's pool for its size (cleared; odd-sized or surplus buffers are
/// freed).
///
/// The pools stay balanced only while a buffer goes back to the class it was taken from: a buffer
/// taken from one class and grown as a `Vec` into the next moves one buffer per request from one pool
/// to the other, and the receiving pool swells towards its maximum (64 MiB) until it is trimmed. Grow
/// a pooled buffer with [`reserve_pooled`], which swaps it for one of the larger class and gives the
/// old one back. (A 4 KiB head buffer grown to 16.3 KiB by a request's body prefix raised `post-1m`'s
/// peak RSS from 35 to 115 MiB: 4096 such buffers in the small pool.)
pub fn give(mut b: Vec<u8>) {
    let (pool, max) = match b.capacity() {
        RECORD_BUF_SIZE => (&RECORD_POOL, RECORD_POOL_MAX),
        RELAY_BUF_SIZE => (&RELAY_POOL, RELAY_POOL_MAX),
        c if (LARGE_BUF_SIZE..RELAY_BUF_SIZE).contains(&c) => (&LARGE_POOL, LARGE_POOL_MAX),
        c if (BUF_SIZE..LARGE_BUF_SIZE).contains(&c) => (&POOL, POOL_MAX),
        c if (HEAD_BUF_SIZE..BUF_SIZE).contains(&c) => (&HEAD_POOL, HEAD_POOL_MAX),
        _ => return,
    };
    b.clear();
    pool.with(|p| p.borrow_mut().push(b, max));
}

/// Frees the buffers of this thread's pools that stayed unused since the previous call, keeping at
/// least 64 small, 16 large and 4 each of relay and record buffers. A worker calls it every few
/// seconds, so memory taken by a burst of concurrency returns within two periods after the burst.
/// Returns how many (small, large) buffers remain.
pub fn trim() -> (usize, usize) {
    HEAD_POOL.with(|p| p.borrow_mut().trim(HEAD_POOL_FLOOR));
    RELAY_POOL.with(|p| p.borrow_mut().trim(RELAY_POOL_FLOOR));
    RECORD_POOL.with(|p| p.borrow_mut().trim(RECORD_POOL_FLOOR));
    (
        POOL.with(|p| p.borrow_mut().trim(POOL_FLOOR)),
        LARGE_POOL.with(|p| p.borrow_mut().trim(LARGE_POOL_FLOOR)),
    )
}

/// Like [`trim`], keeping no floor: for a worker with no connection open, which needs no buffer until
/// the next one arrives (its first requests then take fresh buffers). Returns how many (small, large)
/// buffers remain.
pub fn trim_idle() -> (usize, usize) {
    HEAD_POOL.with(|p| p.borrow_mut().trim(0));
    RELAY_POOL.with(|p| p.borrow_mut().trim(0));
    RECORD_POOL.with(|p| p.borrow_mut().trim(0));
    (
        POOL.with(|p| p.borrow_mut().trim(0)),
        LARGE_POOL.with(|p| p.borrow_mut().trim(0)),
    )
}

/// Makes room in `buf` for `additional` more bytes without growing it past its pool's size class: when
/// they do not fit and the total stays within [`LARGE_BUF_SIZE`], the bytes move to the smallest pooled
/// buffer ([`BUF_SIZE`] or [`LARGE_BUF_SIZE`]) that holds them (the old one goes back to its pool).
/// Beyond that the buffer grows as a `Vec` does.
pub fn reserve_pooled(buf: &mut Vec<u8>, additional: usize) {
    let need = buf.len() + additional;
    if buf.capacity() >= need || need > LARGE_BUF_SIZE {
        return;
    }
    let to = match need <= BUF_SIZE {
        true => take(),
        false => take_large(),
    };
    move_to(buf, 0, to);
}

/// Replaces `buf` with a pooled large buffer holding `buf[from..]`; the old storage goes back to its pool.
fn move_to_large(buf: &mut Vec<u8>, from: usize) {
    move_to(buf, from, take_large());
}

/// Replaces `buf` with `to` holding `buf[from..]`; the old storage goes back to its pool.
fn move_to(buf: &mut Vec<u8>, from: usize, mut to: Vec<u8>) {
    to.extend_from_slice(&buf[from..]);
    give(std::mem::replace(buf, to));
}

/// Received bytes not yet consumed: `data()` is `storage[pos..]`.
#[derive(Debug, Default)]
pub struct RecvBuf {
    storage: Vec<u8>,
    pos: usize,
}

impl RecvBuf {
    /// A buffer with no storage yet.
    pub const fn new() -> Self {
        RecvBuf {
            storage: Vec::new(),
            pos: 0,
        }
    }

    /// Unconsumed bytes.
    pub fn data(&self) -> &[u8] {
        &self.storage[self.pos..]
    }

    /// Unconsumed byte count.
    pub fn len(&self) -> usize {
        self.storage.len() - self.pos
    }

    /// Whether there are no unconsumed bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks `n` bytes consumed.
    ///
    /// # Panics
    /// When `n` exceeds [`RecvBuf::len`].
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.len());
        self.pos += n;
        if self.pos == self.storage.len() {
            self.pos = 0;
            self.storage.clear();
        }
    }

    /// Takes the storage whole, as `(storage, start)`: `storage[start..]` are the bytes [`RecvBuf::data`]
    /// returned; `with` (an empty pooled buffer, whose capacity sizes the next reads) replaces it. A relay
    /// hands received bytes on this way without copying them; the taker gives the storage back with
    /// [`give`].
    pub fn swap_storage(&mut self, mut with: Vec<u8>) -> (Vec<u8>, usize) {
        with.clear();
        let start = std::mem::replace(&mut self.pos, 0);
        (std::mem::replace(&mut self.storage, with), start)
    }

    /// Appends bytes through `f`, which extends the storage (an HTTP/2 upstream session writes its
    /// response here in HTTP/1.1 syntax). Storage comes from the pool (a large buffer when there is
    /// none); consumed bytes are dropped first so the storage does not grow with the whole body.
    pub fn append_with<R>(&mut self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        if self.storage.capacity() == 0 {
            self.storage = take_large();
        } else if self.pos > 0 {
            self.storage.drain(..self.pos);
            self.pos = 0;
        }
        f(&mut self.storage)
    }

    /// Capacity of the storage held, bytes (0 when none).
    pub fn capacity(&self) -> usize {
        self.storage.capacity()
    }

    /// Returns the storage to the pool when nothing is buffered.
    pub fn release(&mut self) {
        if self.is_empty() && self.storage.capacity() > 0 {
            give(std::mem::take(&mut self.storage));
            self.pos = 0;
        }
    }

    /// Reads once from `io`, appending. Returns the byte count; 0 means EOF.
    ///
    /// # Errors
    /// The read's error.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future loses buffered bytes (and, on io_uring, bytes the kernel took
    /// in the race). After a timeout the caller closes the connection.
    pub async fn fill<R: AsyncReadRent>(&mut self, io: &mut R) -> io::Result<usize> {
        self.prepare();
        let storage = std::mem::take(&mut self.storage);
        let (len, cap) = (storage.len(), storage.capacity());
        let (res, slice) = io.read(storage.slice_mut(len..cap)).await;
        self.storage = slice.into_inner();
        res
    }

    /// Like [`RecvBuf::fill`], into a pooled head buffer ([`HEAD_BUF_SIZE`]) when there is no storage:
    /// for upstream response heads whose body bytes wait in the buffer (an HTTP/2 stream's, behind the
    /// connection's other streams), so that few of them do. A head that does not fit moves on to a
    /// small buffer.
    ///
    /// # Errors
    /// The read's error.
    ///
    /// # Cancel safety
    /// As [`RecvBuf::fill`].
    pub async fn fill_head<R: AsyncReadRent>(&mut self, io: &mut R) -> io::Result<usize> {
        if self.storage.capacity() == 0 {
            self.storage = take_head();
        }
        self.fill(io).await
    }

    /// Like [`RecvBuf::fill`], with room for at least [`LARGE_BUF_SIZE`] bytes: for upstream response
    /// heads (so the body bytes behind a head come in the same read) and for body relays. The storage is
    /// swapped for a pooled large buffer (unconsumed bytes are carried over), so steady traffic
    /// allocates nothing.
    ///
    /// # Errors
    /// The read's error.
    ///
    /// # Cancel safety
    /// As [`RecvBuf::fill`].
    pub async fn fill_large<R: AsyncReadRent>(&mut self, io: &mut R) -> io::Result<usize> {
        if self.storage.capacity() < LARGE_BUF_SIZE {
            move_to_large(&mut self.storage, self.pos);
            self.pos = 0;
        }
        self.fill(io).await
    }

    /// Like [`RecvBuf::fill`], with room for at least [`RELAY_BUF_SIZE`] bytes: for pass-through body
    /// relays, where fewer, larger reads mean fewer window updates to the sender. The storage is swapped
    /// for a pooled relay buffer (unconsumed bytes are carried over).
    ///
    /// # Errors
    /// The read's error.
    ///
    /// # Cancel safety
    /// As [`RecvBuf::fill`].
    pub async fn fill_relay<R: AsyncReadRent>(&mut self, io: &mut R) -> io::Result<usize> {
        if self.storage.capacity() < RELAY_BUF_SIZE {
            move_to(&mut self.storage, self.pos, take_relay());
            self.pos = 0;
        }
        self.fill(io).await
    }

    /// Receives once from the socket `sock` without waiting, into a pooled relay-sized buffer as
    /// [`RecvBuf::fill_relay`] does: `Some(n)` bytes appended (0: the peer closed), `None` when nothing
    /// is there yet (wait for readiness, then call again). With [`crate::io::send_now`] right after, a
    /// chunk is received and sent back to back while it is in the CPU's cache, as a readiness driver
    /// does; through io_uring's receive the copy into the buffer runs as task work, often a batch of
    /// other connections' receives before the send (bench/README.md "Request bodies by copy").
    ///
    /// # Errors
    /// The receive's error.
    pub fn fill_now(&mut self, sock: std::os::fd::RawFd) -> io::Result<Option<usize>> {
        if self.storage.capacity() < RELAY_BUF_SIZE {
            move_to(&mut self.storage, self.pos, take_relay());
            self.pos = 0;
        }
        self.prepare();
        let got = crate::io::recv_now(sock, self.storage.spare_capacity_mut())?;
        if let Some(n) = got {
            // SAFETY: recv initialised `n` bytes of the spare capacity.
            unsafe { self.storage.set_len(self.storage.len() + n) };
        }
        Ok(got)
    }

    /// Like [`RecvBuf::fill`], into a pooled buffer of the size class of `size` ([`size_class`]): the
    /// response relay's reads, sized by the client's pace ([`crate::pace::RelayPace`]). Storage of
    /// another class is swapped for one of this class (its unconsumed bytes carried over, when they
    /// fit; otherwise it is kept), the old storage going back to its pool.
    ///
    /// # Errors
    /// The read's error.
    ///
    /// # Cancel safety
    /// As [`RecvBuf::fill`].
    pub async fn fill_sized<R: AsyncReadRent>(
        &mut self,
        io: &mut R,
        size: usize,
    ) -> io::Result<usize> {
        let class = size_class(size);
        let cap = self.storage.capacity();
        if cap == 0 {
            self.storage = take_sized(class);
        } else if size_class(cap) != class && self.len() <= class {
            move_to(&mut self.storage, self.pos, take_sized(class));
            self.pos = 0;
        }
        self.fill(io).await
    }

    /// Like [`RecvBuf::fill`], but the read can be cancelled through `cancel`.
    ///
    /// # Errors
    /// The read's error; `ECANCELED` when it was cancelled before any byte arrived.
    ///
    /// # Cancel safety
    /// Cancel through the handle's [`monoio::io::Canceller`] and await the future to its end: it then
    /// returns either the bytes that won the race or `ECANCELED`, and nothing is lost. Dropping it instead
    /// loses buffered bytes like [`RecvBuf::fill`].
    pub async fn fill_cancelable<R: monoio::io::CancelableAsyncReadRent>(
        &mut self,
        io: &mut R,
        cancel: monoio::io::CancelHandle,
    ) -> io::Result<usize> {
        self.prepare();
        let storage = std::mem::take(&mut self.storage);
        let (len, cap) = (storage.len(), storage.capacity());
        let (res, slice) = io
            .cancelable_read(storage.slice_mut(len..cap), cancel)
            .await;
        self.storage = slice.into_inner();
        res
    }

    /// Makes room for a read: takes pooled storage, compacts, grows when full.
    fn prepare(&mut self) {
        if self.storage.capacity() == 0 {
            self.storage = take();
        }
        if self.pos > 0 && self.storage.capacity() - self.storage.len() < BUF_SIZE / 4 {
            self.storage.copy_within(self.pos.., 0);
            self.storage.truncate(self.storage.len() - self.pos);
            self.pos = 0;
        }
        if self.storage.len() == self.storage.capacity() {
            match self.storage.capacity() < BUF_SIZE {
                // A full head buffer moves to a pooled small one rather than growing out of its
                // class ([`give`]).
                true => {
                    move_to(&mut self.storage, self.pos, take());
                    self.pos = 0;
                }
                false => self.storage.reserve(BUF_SIZE),
            }
        }
    }

    /// Writes `data()[..n]` to `io` and consumes it, each step of the write visible to
    /// [`crate::io::progress::stall_timeout`].
    ///
    /// # Errors
    /// The write's error; the bytes count as consumed either way.
    pub async fn write_prefix<W: AsyncWriteRent>(
        &mut self,
        io: &mut W,
        n: usize,
    ) -> io::Result<()> {
        assert!(n <= self.len());
        let storage = std::mem::take(&mut self.storage);
        let (res, slice) =
            crate::io::progress::write_all(io, storage.slice(self.pos..self.pos + n)).await;
        self.storage = slice.into_inner();
        self.consume(n);
        res.map(|_| ())
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        if self.storage.capacity() > 0 {
            give(std::mem::take(&mut self.storage));
        }
    }
}

/// An output buffer from the pool for building heads; returned to the pool on drop.
#[derive(Debug)]
pub struct SendBuf(pub Vec<u8>);

impl SendBuf {
    /// Takes a cleared buffer from the pool.
    pub fn take() -> Self {
        SendBuf(take())
    }

    /// Takes a cleared head buffer ([`HEAD_BUF_SIZE`]) from the pool.
    pub fn take_head() -> Self {
        SendBuf(take_head())
    }

    /// [`reserve_pooled`] on the buffer.
    pub fn reserve_pooled(&mut self, additional: usize) {
        reserve_pooled(&mut self.0, additional);
    }

    /// Sends what the transport's socket takes of the buffer now ([`crate::io::send_ahead`]: on the
    /// epoll driver only; nothing for a transport without a raw socket, e.g. TLS): `Some(Ok(()))` when
    /// all of it went (the buffer is then cleared), `None` when bytes remain (what went is removed;
    /// finish with [`SendBuf::flush`] under a deadline).
    ///
    /// # Errors
    /// `Some(Err)`: the send failed (the peer reset or closed).
    pub fn flush_now<T: crate::io::Transport>(&mut self, io: &T) -> Option<io::Result<()>> {
        let sock = io.raw_socket()?;
        match crate::io::send_ahead(sock, &self.0) {
            Ok(n) if n == self.0.len() => {
                self.0.clear();
                Some(Ok(()))
            }
            Ok(n) => {
                self.0.drain(..n);
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Writes the whole buffer to `io` and clears it, each step of the write visible to
    /// [`crate::io::progress::stall_timeout`].
    ///
    /// # Errors
    /// The write's error.
    pub async fn flush<W: AsyncWriteRent>(&mut self, io: &mut W) -> io::Result<()> {
        let b = std::mem::take(&mut self.0);
        let (res, mut b) = crate::io::progress::write_all(io, b).await;
        b.clear();
        self.0 = b;
        res.map(|_| ())
    }
}

impl Drop for SendBuf {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use monoio::io::AsyncWriteRentExt;

    #[test]
    fn pool_keeps_peak_concurrency_then_trims_what_a_period_did_not_use() {
        // Runs on its own test thread: the pool is thread-local.
        let held: Vec<_> = (0..200).map(|_| take()).collect();
        held.into_iter().for_each(give);
        assert_eq!(trim().0, 200, "nothing was free for a whole period yet");
        // A period in which at most 100 were in use at once: the other 100 stayed free and go.
        let held: Vec<_> = (0..100).map(|_| take()).collect();
        held.into_iter().for_each(give);
        assert_eq!(trim().0, 100, "kept what the period used");
        // An idle period frees down to the floor.
        assert_eq!(trim().0, POOL_FLOOR);
        assert_eq!(trim().0, POOL_FLOOR);
    }

    #[test]
    fn an_idle_trim_keeps_no_floor() {
        // Runs on its own test thread: the pool is thread-local.
        let held: Vec<_> = (0..10).map(|_| take_large()).collect();
        held.into_iter().for_each(give);
        assert_eq!(trim_idle().1, 10, "nothing was free for a whole period yet");
        assert_eq!(trim_idle().1, 0, "an idle worker keeps none");
        assert_eq!(
            take_large().capacity(),
            LARGE_BUF_SIZE,
            "and allocates again"
        );
    }

    #[test]
    fn reserve_pooled_moves_to_a_large_buffer_only_when_needed() {
        let mut out = SendBuf::take();
        out.0.extend_from_slice(b"head");
        let small = out.0.as_ptr();
        out.reserve_pooled(100);
        assert_eq!(out.0.as_ptr(), small, "fits: unchanged");
        out.reserve_pooled(BUF_SIZE);
        assert!(out.0.capacity() >= LARGE_BUF_SIZE);
        assert_eq!(out.0, b"head", "bytes carried over");
        let cap = out.0.capacity();
        out.reserve_pooled(LARGE_BUF_SIZE);
        assert_eq!(
            out.0.capacity(),
            cap,
            "over the large size: left to Vec growth"
        );
    }

    #[test]
    fn large_buffers_have_their_own_pool() {
        let small = take();
        let large = take_large();
        assert!(small.capacity() >= BUF_SIZE && small.capacity() < LARGE_BUF_SIZE);
        assert!(large.capacity() >= LARGE_BUF_SIZE);
        let (small_ptr, large_ptr) = (small.as_ptr(), large.as_ptr());
        give(large);
        give(small);
        let (small, large) = (take(), take_large());
        assert_eq!(small.as_ptr(), small_ptr);
        assert_eq!(large.as_ptr(), large_ptr);
    }

    /// Both ends of a loopback TCP connection: (client, server).
    async fn connected_pair() -> (monoio::net::TcpStream, monoio::net::TcpStream) {
        let listener = monoio::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = monoio::net::TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[test]
    fn fill_large_carries_unconsumed_bytes_into_a_large_buffer() {
        monoio::start::<monoio::LegacyDriver, _>(async {
            let (mut client, mut server) = connected_pair().await;
            let (r, _) = client.write_all(b"abcdef".to_vec()).await;
            r.unwrap();
            let mut rb = RecvBuf::new();
            let mut got = 0;
            while got < 6 {
                got += rb.fill(&mut server).await.unwrap();
            }
            rb.consume(2);
            let (r, _) = client.write_all(b"gh".to_vec()).await;
            r.unwrap();
            while rb.len() < 6 {
                rb.fill_large(&mut server).await.unwrap();
            }
            assert_eq!(rb.data(), b"cdefgh");
            assert!(rb.storage.capacity() >= LARGE_BUF_SIZE);
            let (r, _) = client.write_all(b"ij".to_vec()).await;
            r.unwrap();
            while rb.len() < 8 {
                rb.fill_relay(&mut server).await.unwrap();
            }
            assert_eq!(rb.data(), b"cdefghij");
            assert_eq!(rb.storage.capacity(), RELAY_BUF_SIZE);
        });
    }

    /// A head read takes a head buffer; a head that fills it moves on to a pooled small buffer (its
    /// bytes carried over) rather than growing out of the head class.
    #[test]
    fn fill_head_reads_into_a_head_buffer_and_moves_on_when_full() {
        monoio::start::<monoio::LegacyDriver, _>(async {
            let (mut client, mut server) = connected_pair().await;
            let sent: Vec<u8> = (0..HEAD_BUF_SIZE + 100).map(|i| (i % 251) as u8).collect();
            let (r, _) = client.write_all(sent.clone()).await;
            r.unwrap();
            let mut rb = RecvBuf::new();
            rb.fill_head(&mut server).await.unwrap();
            assert_eq!(rb.storage.capacity(), HEAD_BUF_SIZE);
            while rb.len() < sent.len() {
                rb.fill_head(&mut server).await.unwrap();
            }
            assert_eq!(rb.data(), &sent[..]);
            assert_eq!(rb.storage.capacity(), BUF_SIZE);
        });
    }

    #[test]
    fn relay_and_record_buffers_keep_their_sizes_and_pools() {
        let (relay, record) = (take_relay(), take_record());
        assert_eq!(relay.capacity(), RELAY_BUF_SIZE);
        assert_eq!(record.capacity(), RECORD_BUF_SIZE);
        let (relay_ptr, record_ptr) = (relay.as_ptr(), record.as_ptr());
        give(relay);
        give(record);
        // A large buffer is never one of them: reads into it stay at LARGE_BUF_SIZE.
        let large = take_large();
        assert!(large.as_ptr() != relay_ptr && large.as_ptr() != record_ptr);
        assert!(large.capacity() < RELAY_BUF_SIZE);
        let (relay, record) = (take_relay(), take_record());
        assert_eq!(relay.as_ptr(), relay_ptr);
        assert_eq!(record.as_ptr(), record_ptr);
    }
}
