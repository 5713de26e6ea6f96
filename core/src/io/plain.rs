//! The plain TCP transport: monoio's `TcpStream` on whichever driver the worker runs (io_uring or
//! epoll).

use std::{
    io,
    os::fd::{AsRawFd, RawFd},
};

use monoio::{
    io::{OwnedReadHalf, OwnedWriteHalf, Splitable},
    net::TcpStream,
};

use super::Transport;

/// A plain TCP connection.
pub type Plain = TcpStream;

impl Transport for TcpStream {
    type ReadHalf = OwnedReadHalf<TcpStream>;
    type WriteHalf = OwnedWriteHalf<TcpStream>;

    async fn readable(&mut self, relaxed: bool) -> io::Result<()> {
        TcpStream::readable(self, relaxed).await
    }

    async fn writable(&mut self, relaxed: bool) -> io::Result<()> {
        TcpStream::writable(self, relaxed).await
    }

    fn split(self) -> (Self::ReadHalf, Self::WriteHalf) {
        Splitable::into_split(self)
    }

    fn unsplit(read: Self::ReadHalf, write: Self::WriteHalf) -> Self {
        read.reunite(write)
            .unwrap_or_else(|_| panic!("Transport::unsplit: halves of different streams"))
    }

    fn fd(&self) -> RawFd {
        self.as_raw_fd()
    }

    fn raw_socket(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }

    fn is_quiet(&self) -> bool {
        super::peek(self.as_raw_fd()) == super::Peek::Empty
    }
}
