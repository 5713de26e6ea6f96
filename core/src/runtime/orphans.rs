//! The sockets a worker thread holds, so that a worker that dies does not leave them hanging.
//!
//! monoio does not drop the tasks of a runtime that goes away while they wait on IO (their wakers sit in
//! the driver, which leaks them). A worker thread that dies by a panic would therefore leave every
//! connection it served open and silent, and its connection slots taken for good. So each worker
//! registers the fd of every socket it owns here (thread-local, no lock, a slab slot per socket, nothing
//! per request), and its thread wrapper, once the runtime has ended, shuts down every socket still
//! registered: peers see the connection close, and the socket is released by pointing its fd number at
//! /dev/null (the number stays with the leaked task, so nothing else can ever be closed through it); the
//! supervisor releases the downstream connection slots.

use std::{cell::RefCell, marker::PhantomData, os::fd::RawFd};

#[derive(Default)]
struct Registry {
    /// `(fd, downstream)` per slot; `None` when free.
    slots: Vec<Option<(RawFd, bool)>>,
    free: Vec<usize>,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// A registered socket of this thread; unregistered on drop. Not `Send`: it belongs to the thread's
/// registry.
#[derive(Debug)]
pub struct Registration {
    slot: usize,
    _thread_bound: PhantomData<*const ()>,
}

/// Registers socket `fd` of the calling worker thread. `downstream` marks a client connection (it holds
/// a connection slot).
pub fn register(fd: RawFd, downstream: bool) -> Registration {
    let slot = REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        match r.free.pop() {
            Some(i) => {
                r.slots[i] = Some((fd, downstream));
                i
            }
            None => {
                r.slots.push(Some((fd, downstream)));
                r.slots.len() - 1
            }
        }
    });
    Registration {
        slot,
        _thread_bound: PhantomData,
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // `try_with`: during thread exit the registry may already be gone.
        let _ = REGISTRY.try_with(|r| {
            let mut r = r.borrow_mut();
            if r.slots[self.slot].take().is_some() {
                r.free.push(self.slot);
            }
        });
    }
}

/// What [`shut_down_all`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Orphans {
    /// Client connections shut down (their connection slots are to be released).
    pub downstream: usize,
    /// Upstream connections shut down.
    pub upstream: usize,
}

/// Shuts down (both directions) every socket still registered on this thread and forgets them. Call it
/// on the worker thread after its runtime has ended.
pub fn shut_down_all() -> Orphans {
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        let mut found = Orphans::default();
        // /dev/null, dup2'd over each orphaned socket: the socket is released (its memory, its port) while
        // the fd number stays reserved, so a leaked owner that ever closed it could not close another file.
        // SAFETY: open(2) of a constant path.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        for (fd, downstream) in r.slots.drain(..).flatten() {
            // SAFETY: shutdown and dup2 on an fd this thread registered and whose owner (a leaked task)
            // never runs again; at worst the fd is already closed and they fail with EBADF.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
                if null >= 0 {
                    libc::dup3(null, fd, libc::O_CLOEXEC);
                }
            }
            if downstream {
                found.downstream += 1;
            } else {
                found.upstream += 1;
            }
        }
        r.free.clear();
        if null >= 0 {
            // SAFETY: our own descriptor from open above.
            unsafe { libc::close(null) };
        }
        found
    })
}

#[cfg(test)]
mod tests {
    use std::{
        io::Read,
        net::{TcpListener, TcpStream},
        os::fd::AsRawFd,
    };

    use super::*;

    #[test]
    fn shuts_down_what_is_still_registered() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut a_peer, _) = l.accept().unwrap();
        let b = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b_peer, _) = l.accept().unwrap();
        let kept = register(a.as_raw_fd(), true);
        drop(register(b.as_raw_fd(), false)); // closed normally: forgotten
        let leaked = register(b.as_raw_fd(), false);
        std::mem::forget(leaked); // like a task the runtime leaked
        std::mem::forget(kept);
        assert_eq!(
            shut_down_all(),
            Orphans {
                downstream: 1,
                upstream: 1
            }
        );
        let mut buf = [0u8; 1];
        assert_eq!(a_peer.read(&mut buf).unwrap(), 0, "the peer sees the close");
        assert_eq!(b_peer.read(&mut buf).unwrap(), 0);
        assert_eq!(shut_down_all(), Orphans::default());
    }
}
