//! rustls driven directly over a monoio TCP stream, for the bench's own TLS peers (the origin in
//! TLS mode and the handshake loader): a simple adapter, not a tuned one.
//!
//! Ciphertext read from the socket goes into one `Vec` (`read_tls`, `process_new_packets`),
//! plaintext comes out of `reader()`; plaintext written goes into `writer()` and the records
//! rustls produces are collected with `write_tls` into a second `Vec`, written with one
//! `write_all`. [`TlsStream`] implements monoio's [`AsyncReadRent`] and [`AsyncWriteRent`], so
//! the origin's HTTP/1.1 code runs on it unchanged.
//!
//! # Cancel safety
//! None: dropping a future of this stream mid-operation (a timeout) leaves the TLS state
//! undefined; close the connection afterwards.

use std::io::{self, Read, Write};
use std::ops::DerefMut;

use monoio::buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::BufResult;
use rustls::{ConnectionCommon, SideData};

/// Bytes read from the socket per read.
const CIPHER_READ: usize = 64 * 1024;

/// A TLS connection over a monoio TCP stream (`C` is `rustls::ServerConnection` or
/// `rustls::ClientConnection`).
pub struct TlsStream<C> {
    io: TcpStream,
    conn: C,
    /// Ciphertext read but not given to rustls yet: `rbuf[rpos..]`.
    rbuf: Vec<u8>,
    rpos: usize,
    /// Ciphertext to write (reused).
    wbuf: Vec<u8>,
    /// Plaintext staging for reads into the caller's buffer (reused).
    plain: Vec<u8>,
}

impl<C, D> TlsStream<C>
where
    C: DerefMut<Target = ConnectionCommon<D>>,
    D: SideData,
{
    /// Wraps `io` and `conn`; nothing is sent until [`handshake`](Self::handshake) or the first
    /// read or write.
    pub fn new(io: TcpStream, conn: C) -> Self {
        Self {
            io,
            conn,
            rbuf: Vec::with_capacity(CIPHER_READ),
            rpos: 0,
            wbuf: Vec::new(),
            plain: vec![0; CIPHER_READ],
        }
    }

    /// The rustls connection (negotiated version, suite, peer certificates, resumption).
    pub fn conn(&self) -> &C {
        &self.conn
    }

    /// Drives the handshake to its end.
    ///
    /// # Errors
    /// Socket errors, `UnexpectedEof` when the peer closes during it, and `InvalidData` for a TLS
    /// error (the alert rustls prepared is sent first).
    pub async fn handshake(&mut self) -> io::Result<()> {
        while self.conn.is_handshaking() {
            self.flush_tls().await?;
            if !self.conn.is_handshaking() {
                break;
            }
            if self.conn.wants_read() && self.feed().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed during the TLS handshake",
                ));
            }
        }
        self.flush_tls().await
    }

    /// Writes every record rustls has ready.
    async fn flush_tls(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            let mut out = std::mem::take(&mut self.wbuf);
            out.clear();
            while self.conn.wants_write() {
                self.conn.write_tls(&mut out)?;
            }
            let (res, buf) = self.io.write_all(out).await;
            self.wbuf = buf;
            res?;
        }
        Ok(())
    }

    /// Gives rustls more ciphertext (buffered, else one socket read) and processes it; returns
    /// the bytes given, 0 at EOF from the socket.
    async fn feed(&mut self) -> io::Result<usize> {
        if self.rpos == self.rbuf.len() {
            let mut buf = std::mem::take(&mut self.rbuf);
            buf.clear();
            let (res, buf) = self.io.read(buf).await;
            self.rbuf = buf;
            self.rpos = 0;
            if res? == 0 {
                return Ok(0);
            }
        }
        let mut pending = &self.rbuf[self.rpos..];
        let n = self.conn.read_tls(&mut pending)?;
        self.rpos += n;
        if let Err(e) = self.conn.process_new_packets() {
            let _ = self.flush_tls().await;
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        Ok(n.max(1))
    }

    /// Plaintext into `self.plain`: the count, 0 at the end of the stream (close_notify or EOF).
    async fn read_plain(&mut self) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(&mut self.plain) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            // Tickets, key updates and alerts rustls queued go out before we wait.
            self.flush_tls().await?;
            if self.feed().await? == 0 {
                return Ok(0);
            }
        }
    }

    /// Sends close_notify and shuts the socket's write side.
    ///
    /// # Errors
    /// Socket errors.
    pub async fn close(&mut self) -> io::Result<()> {
        self.conn.send_close_notify();
        self.flush_tls().await?;
        self.io.shutdown().await
    }
}

impl<C, D> AsyncReadRent for TlsStream<C>
where
    C: DerefMut<Target = ConnectionCommon<D>>,
    D: SideData,
{
    async fn read<T: IoBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        if buf.bytes_total() == 0 {
            return (Ok(0), buf);
        }
        if self.conn.is_handshaking() {
            if let Err(e) = self.handshake().await {
                return (Err(e), buf);
            }
        }
        let want = buf.bytes_total().min(self.plain.len());
        let saved = self.plain.len();
        self.plain.truncate(want);
        let res = self.read_plain().await;
        self.plain.resize(saved, 0);
        match res {
            Ok(n) => {
                // SAFETY: `n <= want <= bytes_total`, and `plain` holds `n` initialised bytes.
                unsafe {
                    buf.write_ptr()
                        .copy_from_nonoverlapping(self.plain.as_ptr(), n);
                    buf.set_init(n);
                }
                (Ok(n), buf)
            }
            Err(e) => (Err(e), buf),
        }
    }

    async fn readv<T: IoVecBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        (
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "readv on a bench TLS stream",
            )),
            buf,
        )
    }
}

impl<C, D> AsyncWriteRent for TlsStream<C>
where
    C: DerefMut<Target = ConnectionCommon<D>>,
    D: SideData,
{
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        if self.conn.is_handshaking() {
            if let Err(e) = self.handshake().await {
                return (Err(e), buf);
            }
        }
        // SAFETY: `read_ptr` points at `bytes_init` initialised bytes owned by `buf`.
        let data = unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) };
        let res = self.conn.writer().write(data);
        let res = match res {
            Ok(n) => self.flush_tls().await.map(|()| n),
            Err(e) => Err(e),
        };
        (res, buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        (
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "writev on a bench TLS stream",
            )),
            buf,
        )
    }

    async fn flush(&mut self) -> io::Result<()> {
        self.flush_tls().await
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        self.close().await
    }
}
