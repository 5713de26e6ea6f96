//! The transport of the connections edge opens to upstreams: plain TCP, or TLS over it for an upstream
//! with `tls = true` (DESIGN.md "TLS", origination). One enum, so pools, the HTTP/1.1 client and tunnels
//! stay one monomorphised type; each operation is one `match`, no trait object.

use std::{
    io,
    os::fd::{AsRawFd, RawFd},
};

use edge_core::io::{
    body::RequestSink,
    tls::{Tls, TlsReadHalf, TlsWriteHalf},
    Plain, Transport,
};
use monoio::{
    buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut},
    io::{AsyncReadRent, AsyncWriteRent, CancelHandle, CancelableAsyncReadRent},
    BufResult,
};
use rustls::ClientConnection;

/// A TLS connection to an upstream.
pub type UpstreamTls = Tls<Plain, ClientConnection>;

/// A connection to an upstream endpoint.
pub enum UpstreamStream {
    /// Plain TCP.
    Plain(Plain),
    /// TLS (boxed: the TLS state is larger than a socket, and most upstreams are plain).
    Tls(Box<UpstreamTls>),
}

/// The read half of a split [`UpstreamStream`].
pub enum UpstreamReadHalf {
    /// Plain TCP.
    Plain(<Plain as Transport>::ReadHalf),
    /// TLS.
    Tls(TlsReadHalf<<Plain as Transport>::ReadHalf, ClientConnection>),
}

/// The write half of a split [`UpstreamStream`].
pub enum UpstreamWriteHalf {
    /// Plain TCP.
    Plain(<Plain as Transport>::WriteHalf),
    /// TLS.
    Tls(TlsWriteHalf<<Plain as Transport>::WriteHalf, ClientConnection>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Self::Plain($s) => $e,
            Self::Tls($s) => $e,
        }
    };
}

macro_rules! read_rent {
    ($ty:ty) => {
        impl AsyncReadRent for $ty {
            async fn read<B: IoBufMut>(&mut self, buf: B) -> BufResult<usize, B> {
                each!(self, s => s.read(buf).await)
            }

            async fn readv<B: IoVecBufMut>(&mut self, buf: B) -> BufResult<usize, B> {
                each!(self, s => s.readv(buf).await)
            }
        }

        impl CancelableAsyncReadRent for $ty {
            async fn cancelable_read<B: IoBufMut>(
                &mut self,
                buf: B,
                c: CancelHandle,
            ) -> BufResult<usize, B> {
                each!(self, s => s.cancelable_read(buf, c).await)
            }

            async fn cancelable_readv<B: IoVecBufMut>(
                &mut self,
                buf: B,
                c: CancelHandle,
            ) -> BufResult<usize, B> {
                each!(self, s => s.cancelable_readv(buf, c).await)
            }
        }
    };
}

macro_rules! write_rent {
    ($ty:ty) => {
        impl AsyncWriteRent for $ty {
            async fn write<B: IoBuf>(&mut self, buf: B) -> BufResult<usize, B> {
                each!(self, s => s.write(buf).await)
            }

            async fn writev<B: IoVecBuf>(&mut self, buf: B) -> BufResult<usize, B> {
                each!(self, s => s.writev(buf).await)
            }

            async fn flush(&mut self) -> io::Result<()> {
                each!(self, s => s.flush().await)
            }

            async fn shutdown(&mut self) -> io::Result<()> {
                each!(self, s => s.shutdown().await)
            }
        }
    };
}

/// A plain connection's write half offers its socket to a spliced request body and to the body copy's
/// non-blocking sends; a TLS one none (its bytes are encrypted on the way).
impl RequestSink for UpstreamWriteHalf {
    fn splice_socket(&self) -> Option<RawFd> {
        self.write_socket()
    }

    fn write_socket(&self) -> Option<RawFd> {
        match self {
            Self::Plain(w) => {
                // SAFETY: monoio's split halves share the stream through this cell, each borrowing it
                // for its own operations on the one thread (as `OwnedWriteHalf::write` does); the
                // descriptor is only read.
                Some(unsafe { &*w.0.get() }.as_raw_fd())
            }
            Self::Tls(_) => None,
        }
    }

    async fn socket_writable(&mut self) -> io::Result<()> {
        match self {
            // SAFETY: as above; the wait submits a readiness poll on the shared descriptor and neither
            // reads nor writes the stream's state.
            Self::Plain(w) => unsafe { &*w.0.get() }.writable(false).await,
            Self::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }
}

read_rent!(UpstreamStream);
write_rent!(UpstreamStream);
read_rent!(UpstreamReadHalf);
write_rent!(UpstreamWriteHalf);

impl Transport for UpstreamStream {
    type ReadHalf = UpstreamReadHalf;
    type WriteHalf = UpstreamWriteHalf;

    async fn readable(&mut self, relaxed: bool) -> io::Result<()> {
        each!(self, s => s.readable(relaxed).await)
    }

    async fn writable(&mut self, relaxed: bool) -> io::Result<()> {
        each!(self, s => s.writable(relaxed).await)
    }

    fn split(self) -> (Self::ReadHalf, Self::WriteHalf) {
        match self {
            Self::Plain(s) => {
                let (r, w) = s.split();
                (UpstreamReadHalf::Plain(r), UpstreamWriteHalf::Plain(w))
            }
            Self::Tls(s) => {
                let (r, w) = s.split();
                (UpstreamReadHalf::Tls(r), UpstreamWriteHalf::Tls(w))
            }
        }
    }

    fn unsplit(read: Self::ReadHalf, write: Self::WriteHalf) -> Self {
        match (read, write) {
            (UpstreamReadHalf::Plain(r), UpstreamWriteHalf::Plain(w)) => {
                Self::Plain(Plain::unsplit(r, w))
            }
            (UpstreamReadHalf::Tls(r), UpstreamWriteHalf::Tls(w)) => {
                Self::Tls(Box::new(UpstreamTls::unsplit(r, w)))
            }
            _ => panic!("Transport::unsplit: a plain half with a TLS half"),
        }
    }

    fn fd(&self) -> RawFd {
        each!(self, s => s.fd())
    }

    fn raw_socket(&self) -> Option<RawFd> {
        each!(self, s => s.raw_socket())
    }

    fn is_quiet(&self) -> bool {
        each!(self, s => s.is_quiet())
    }

    fn has_buffered_input(&self) -> bool {
        each!(self, s => s.has_buffered_input())
    }

    fn announces_close(&self) -> bool {
        matches!(self, Self::Tls(_))
    }
}
