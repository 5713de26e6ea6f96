//! Non-blocking sends outside the driver: a socket written with `MSG_DONTWAIT`, for bytes that should
//! leave now when the socket has room (sealed TLS records, the h2 write pump, heads sent ahead on epoll)
//! and otherwise go the driver's asynchronous way.

use std::{io, io::Write, os::fd::RawFd};

/// Whether a [`DontWait`] send failed only because the socket is full (or a signal came): the bytes
/// go the asynchronous way.
pub(crate) fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// A socket written with `sendmsg(2)` and `MSG_DONTWAIT | MSG_NOSIGNAL`: never blocks (a full socket is
/// `WouldBlock`), never raises SIGPIPE.
pub(crate) struct DontWait(pub(crate) RawFd);

impl Write for DontWait {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(data)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // `IoSlice` is ABI-compatible with `iovec` on Unix (std's documented guarantee); sendmsg only
        // reads the slices.
        msg.msg_iov = bufs.as_ptr().cast_mut().cast();
        msg.msg_iovlen = bufs.len().min(1024) as _;
        // SAFETY: `msg` points at `bufs`, alive for the call; the fd is the stream's own socket.
        let n = unsafe { libc::sendmsg(self.0, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
