//! Moving a body between two plain TCP sockets through a pipe with `splice(2)`, with no copy into user
//! space (DESIGN.md "Memory under slow readers and large bodies": where both sides are plain TCP and
//! nothing inspects the body, splice may move it). The receive side hands the socket's pages to the
//! pipe and the send side hands them on to the other socket: what was two copies of every byte in
//! edge's context (the receive into a relay buffer and the send out of it) is page references.
//!
//! Both drivers use the system call, non-blocking, with the waits in between going through the
//! driver's readiness ([`super::Transport::readable`], [`super::Transport::writable`]). io_uring's own
//! `IORING_OP_SPLICE` is not used: the kernel runs it in io-wq threads, one blocked thread per splice
//! waiting for a slow socket.
//!
//! Pipes are pooled per worker ([`Pipe::take`], [`Pipe::give`]), so steady traffic opens none; a worker
//! with no connection open keeps none ([`trim_idle`]).

use std::{
    cell::RefCell,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
};

use crate::freelist::FreeList;

/// The capacity asked for a pipe (`F_SETPIPE_SZ`): one relay chunk at the full pace
/// ([`crate::buf::RELAY_BUF_SIZE`]), so a spliced body moves in steps as large as a copied one's and
/// a relay's share of the worker's budget covers what its pipe can hold.
pub const PIPE_SIZE: usize = crate::buf::RELAY_BUF_SIZE;

/// Most free pipes a worker keeps (two descriptors each).
const POOL_MAX: usize = 64;

/// Free pipes kept through a trim of a worker with connections open.
const POOL_FLOOR: usize = 4;

thread_local! {
    /// This worker's free pipes, all empty.
    static POOL: RefCell<FreeList<Pipe>> = const { RefCell::new(FreeList::new()) };
}

/// A pipe between the two sockets of a spliced body, with the count of bytes it holds.
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes the pipe can hold (its capacity, at least one page).
    capacity: usize,
    /// Bytes spliced in and not yet out.
    held: usize,
}

/// What one splice did.
#[derive(Debug, PartialEq, Eq)]
pub enum Moved {
    /// This many bytes moved (more than 0).
    Bytes(usize),
    /// Nothing could move now: no bytes to read, or no room in the socket's send buffer.
    WouldBlock,
    /// The source socket is at its end (the peer closed its side).
    Eof,
}

impl Pipe {
    /// An empty pipe from this worker's pool, or a new one (`O_NONBLOCK`, `O_CLOEXEC`, its capacity
    /// raised to [`PIPE_SIZE`] where the system allows).
    ///
    /// # Errors
    /// `pipe2(2)`'s: out of descriptors (`EMFILE`, `ENFILE`); the caller then copies instead.
    pub fn take() -> io::Result<Pipe> {
        if let Some(p) = POOL.with(|p| p.borrow_mut().pop()) {
            return Ok(p);
        }
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Best effort: an unprivileged user over `pipe-user-pages-soft` keeps the default size.
        // F_SETPIPE_SZ answers the capacity it set; after a refusal, F_GETPIPE_SZ the one there is.
        // SAFETY: fcntl on a descriptor this function owns.
        let mut size =
            unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE as i32) };
        if size <= 0 {
            // SAFETY: as above.
            size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
        }
        let capacity = usize::try_from(size).unwrap_or(0).max(4096);
        Ok(Pipe {
            read,
            write,
            capacity,
            held: 0,
        })
    }

    /// A pipe for a splice from the socket `from` to the socket `to`: both sockets made non-blocking
    /// ([`set_nonblocking`]), which every [`Pipe::fill`] and [`Pipe::drain`] needs, then
    /// [`Pipe::take`].
    ///
    /// # Errors
    /// `fcntl(2)`'s, or [`Pipe::take`]'s (out of descriptors); the caller then copies instead.
    pub fn between(from: RawFd, to: RawFd) -> io::Result<Pipe> {
        set_nonblocking(from)?;
        set_nonblocking(to)?;
        Pipe::take()
    }

    /// Bytes the pipe can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes spliced in ([`Pipe::fill`]) and not yet out ([`Pipe::drain`]).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Splices up to `max` bytes (at most the room left in the pipe) from the socket `from` into the
    /// pipe, without blocking (`from` must be non-blocking: [`set_nonblocking`]).
    ///
    /// # Errors
    /// The socket's error (reset, not connected).
    pub fn fill(&mut self, from: RawFd, max: usize) -> io::Result<Moved> {
        let len = max.min(self.capacity - self.held);
        if len == 0 {
            return Ok(Moved::WouldBlock);
        }
        match splice(from, self.write.as_raw_fd(), len)? {
            Some(0) => Ok(Moved::Eof),
            Some(n) => {
                self.held += n;
                Ok(Moved::Bytes(n))
            }
            None => Ok(Moved::WouldBlock),
        }
    }

    /// Splices what the pipe holds into the socket `to`, as much as it takes now, without blocking
    /// (`to` must be non-blocking: [`set_nonblocking`]). Each step that moves bytes counts as write
    /// progress for the `send` deadline ([`super::progress::note`]).
    ///
    /// # Errors
    /// The socket's error (`EPIPE`, `ECONNRESET`: the peer is gone).
    pub fn drain(&mut self, to: RawFd) -> io::Result<Moved> {
        if self.held == 0 {
            return Ok(Moved::WouldBlock);
        }
        match splice(self.read.as_raw_fd(), to, self.held)? {
            Some(0) => Ok(Moved::WouldBlock),
            Some(n) => {
                self.held -= n;
                super::progress::note();
                Ok(Moved::Bytes(n))
            }
            None => Ok(Moved::WouldBlock),
        }
    }

    /// Returns the pipe to this worker's pool when it is empty; closes it when it still holds bytes
    /// (a body that ended early: nothing may leak into the next one).
    pub fn give(self) {
        if self.held == 0 {
            POOL.with(|p| p.borrow_mut().push(self, POOL_MAX));
        }
    }
}

/// One non-blocking `splice(2)` of up to `len` bytes: `Some(n)` bytes moved (0: the source is at its
/// end), `None` when nothing can move now (`EAGAIN`).
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: plain system call on descriptors the caller keeps open; no offsets (both are
        // sockets or pipes).
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Makes the socket `fd` non-blocking (`O_NONBLOCK`) if it is not: a splice from or to a socket blocks
/// or not by the socket's own flag (`SPLICE_F_NONBLOCK` covers only the pipe). Both drivers leave it
/// on: epoll's sockets have it, and io_uring's socket operations do not depend on it.
///
/// # Errors
/// `fcntl(2)`'s.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller keeps open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK != 0 {
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Closes the free pipes the last period did not need, keeping a few (see [`FreeList::trim`]). Returns
/// how many remain.
pub fn trim() -> usize {
    POOL.with(|p| p.borrow_mut().trim(POOL_FLOOR))
}

/// Like [`trim`], keeping no floor: for a worker with no connection open.
pub fn trim_idle() -> usize {
    POOL.with(|p| p.borrow_mut().trim(0))
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read, Write},
        net::{TcpListener, TcpStream},
    };

    use super::*;

    /// A connected pair of non-blocking loopback sockets.
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    #[test]
    fn bytes_pass_from_one_socket_to_another_and_the_pipe_goes_back_empty() {
        let (mut origin, from) = pair();
        let (to, mut client) = pair();
        let mut pipe = Pipe::take().unwrap();
        assert!(pipe.capacity() >= 4096);
        assert_eq!(
            pipe.fill(from.as_raw_fd(), 1 << 20).unwrap(),
            Moved::WouldBlock
        );
        origin.write_all(b"hello, world\n").unwrap();
        let moved = loop {
            match pipe.fill(from.as_raw_fd(), 5).unwrap() {
                Moved::WouldBlock => std::thread::yield_now(),
                m => break m,
            }
        };
        assert_eq!(moved, Moved::Bytes(5), "no more than asked");
        assert_eq!(pipe.held(), 5);
        assert_eq!(pipe.drain(to.as_raw_fd()).unwrap(), Moved::Bytes(5));
        assert_eq!(pipe.held(), 0);
        client.set_nonblocking(false).unwrap();
        let mut got = [0u8; 5];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        drop(origin);
        // The 8 bytes still in the socket, then its end.
        let mut seen = 0;
        loop {
            match pipe.fill(from.as_raw_fd(), 1 << 20).unwrap() {
                Moved::Bytes(n) => seen += n,
                Moved::Eof => break,
                Moved::WouldBlock => std::thread::yield_now(),
            }
        }
        assert_eq!(seen, 8);
        let before = POOL.with(|p| p.borrow_mut().trim(usize::MAX));
        pipe.give();
        assert_eq!(
            POOL.with(|p| p.borrow_mut().trim(usize::MAX)),
            before,
            "a pipe holding bytes is closed"
        );
    }

    #[test]
    fn an_empty_pipe_is_pooled_and_an_idle_trim_closes_it() {
        let pipe = Pipe::take().unwrap();
        pipe.give();
        assert!(POOL.with(|p| p.borrow_mut().trim(usize::MAX)) >= 1);
        trim_idle();
        assert_eq!(trim_idle(), 0);
    }

    #[test]
    fn set_nonblocking_sets_the_flag_once() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_nonblocking(s.as_raw_fd()).unwrap();
        // SAFETY: fcntl on an open socket.
        let flags = unsafe { libc::fcntl(s.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0);
        set_nonblocking(s.as_raw_fd()).unwrap();
    }
}
