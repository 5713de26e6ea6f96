//! The TLS transport (DESIGN.md "TLS"): rustls driven over any [`Transport`] with edge's pooled buffers,
//! on the worker's own runtime (no second runtime, no monoio-rustls). Downstream it wraps accepted
//! connections ([`rustls::ServerConnection`]), upstream the connections to `tls = true` upstreams
//! ([`rustls::ClientConnection`]).
//!
//! Buffers: ciphertext is read into a pooled buffer ([`crate::buf::take`]) that goes back to the pool as
//! soon as rustls has taken every byte of it. Encrypted output goes to the socket straight from
//! rustls' queue by a non-blocking `sendmsg` while the socket has room, and only the
//! rest from a pooled buffer by an asynchronous write; so an idle TLS connection holds no edge buffer.
//!
//! rustls API: the buffered one ([`rustls::ConnectionCommon`]: `read_tls`, `process_new_packets`,
//! `reader`, `writer`, `write_tls`). Its unbuffered API (`rustls::unbuffered`) is no cheaper in
//! rustls 0.23: both allocate one `Vec` per record encrypted (the provider's `MessageEncrypter`
//! returns each sealed record as an owned buffer, which `WriteTraffic::encrypt` then copies out) and
//! one per record decrypted (the plaintext is copied out of the record into an owned `Vec` before
//! `reader` or `ReadTraffic::next_record` hands it over), so a small keep-alive request costs two
//! allocations either way; the unbuffered API would save only the copy of ciphertext into rustls'
//! deframing buffer, and its server connection has no `server_name`.
//!
//! # Cancel safety
//! As the inner transport: a plain read dropped mid-flight can lose bytes (the connection is closed
//! after it anyway); [`CancelableAsyncReadRent`] cancels the ciphertext read and keeps whatever it
//! returned, so nothing is lost. A write dropped mid-flight leaves the TLS stream unusable (records are
//! sequenced), as a plain write dropped mid-flight leaves the HTTP stream unusable.

use std::{
    cell::RefCell,
    io::{self, Read, Write},
    ops::DerefMut,
    os::fd::RawFd,
    rc::Rc,
};

use monoio::io::{AsyncWriteRent, CancelHandle, CancelableAsyncReadRent};
use rustls::{ConnectionCommon, SideData};

use super::{is_full, DontWait, Transport};
use crate::buf;

/// First byte of a TLS record carrying a handshake message (RFC 8446 §5.1, ContentType handshake).
const HANDSHAKE_RECORD: u8 = 0x16;

/// Most plaintext encrypted per write, bytes: one relay chunk ([`buf::LARGE_BUF_SIZE`], four full
/// 16 KiB records), whose records fit one pooled record buffer ([`buf::RECORD_BUF_SIZE`]), so a 64 KiB
/// chunk goes out as one send of four records.
const MAX_PLAINTEXT_PER_WRITE: usize = buf::LARGE_BUF_SIZE;

/// A TLS stream over the transport `T`; `C` is [`rustls::ServerConnection`] or
/// [`rustls::ClientConnection`].
pub struct Tls<T, C> {
    io: T,
    state: Rc<RefCell<State<C>>>,
}

/// The read half of a split [`Tls`] stream. Alerts or handshake answers that reading produces wait for
/// the write half's next write.
pub struct TlsReadHalf<R, C> {
    io: R,
    state: Rc<RefCell<State<C>>>,
}

/// The write half of a split [`Tls`] stream; its `shutdown` sends close_notify, then half-closes.
pub struct TlsWriteHalf<W, C> {
    io: W,
    state: Rc<RefCell<State<C>>>,
}

/// The rustls connection and the ciphertext it has not taken yet.
pub(crate) struct State<C> {
    conn: C,
    /// Ciphertext read from the socket and not yet given to rustls (its plaintext buffer was full), and
    /// how far rustls took it.
    pending: Option<(Vec<u8>, usize)>,
    /// Decrypted bytes not yet read by the caller.
    plaintext: usize,
    /// The socket reached EOF.
    eof: bool,
    /// The socket under the TLS stream, when records can be sent to it directly
    /// ([`Transport::raw_socket`]).
    socket: Option<RawFd>,
}

/// Why a handshake did not finish.
#[derive(Debug)]
pub enum HandshakeError {
    /// The peer's first bytes are not a TLS handshake record but look like a plain HTTP request (an
    /// ASCII letter): DESIGN.md "Status codes", `plain_http_on_tls`.
    PlainHttp,
    /// The peer closed before the handshake finished; `started`: after sending something (a client
    /// that connects and closes without a byte, like a TCP health check, is no failed handshake).
    Closed {
        /// Bytes had arrived.
        started: bool,
    },
    /// rustls refused the handshake (the alert it chose was sent).
    Tls(rustls::Error),
    /// The socket failed.
    Io(io::Error),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::PlainHttp => f.write_str("plain HTTP sent to the TLS port"),
            HandshakeError::Closed { .. } => f.write_str("peer closed during the handshake"),
            HandshakeError::Tls(e) => write!(f, "{e}"),
            HandshakeError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl<T, C, S> Tls<T, C>
where
    T: Transport,
    C: DerefMut<Target = ConnectionCommon<S>> + 'static,
    S: SideData,
{
    /// Runs the handshake of `conn` over `io` to its end (the caller bounds it with a deadline:
    /// `handshake_timeout` downstream, `connect_timeout` upstream).
    ///
    /// # Errors
    /// [`HandshakeError`]; `PlainHttp` is reported only for a server connection whose peer's first byte
    /// is an ASCII letter. On a TLS error the alert is sent before returning.
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped handshake leaves a connection to close.
    pub async fn handshake(io: T, conn: C) -> Result<Self, (HandshakeError, T)> {
        Self::handshake_after(io, conn, Vec::new()).await
    }

    /// Like [`Tls::handshake`], when the first `received` bytes of the connection were already read
    /// (behind a PROXY protocol header); `received` is a buffer from [`crate::buf`] (it goes back there).
    ///
    /// # Errors
    /// As [`Tls::handshake`].
    pub async fn handshake_after(
        io: T,
        conn: C,
        received: Vec<u8>,
    ) -> Result<Self, (HandshakeError, T)> {
        let pending = if received.is_empty() {
            buf::give(received);
            None
        } else {
            Some((received, 0))
        };
        let socket = io.raw_socket();
        let mut tls = Tls {
            io,
            state: Rc::new(RefCell::new(State {
                conn,
                pending,
                plaintext: 0,
                eof: false,
                socket,
            })),
        };
        let mut first = true;
        loop {
            let (handshaking, wants_write) = {
                let st = tls.state.borrow();
                (st.conn.is_handshaking(), st.conn.wants_write())
            };
            if wants_write {
                if let Err(e) = flush(&mut tls.io, &tls.state).await {
                    return Err((HandshakeError::Io(e), tls.io));
                }
                continue;
            }
            if !handshaking {
                return Ok(tls);
            }
            match fill(&mut tls.io, &tls.state, None).await {
                Ok(0) => return Err((HandshakeError::Closed { started: !first }, tls.io)),
                Ok(_) => {}
                Err(e) => return Err((HandshakeError::Io(e), tls.io)),
            }
            if std::mem::take(&mut first) && is_plain_text(&tls.state.borrow()) {
                return Err((HandshakeError::PlainHttp, tls.io));
            }
            let fed = tls.state.borrow_mut().feed();
            if let Err(e) = fed {
                // The alert rustls queued for the error goes out before the close.
                let _ = flush(&mut tls.io, &tls.state).await;
                return Err((HandshakeError::Tls(e), tls.io));
            }
        }
    }

    /// The rustls connection (negotiated ALPN protocol, SNI, version, resumption).
    pub fn with_conn<R>(&self, f: impl FnOnce(&C) -> R) -> R {
        f(&self.state.borrow().conn)
    }

    /// How the finished handshake went, as `edge_tls_handshakes_total` and
    /// `edge_upstream_tls_handshakes_total` count it: `Resumed` or `Full`.
    pub fn handshake_result(&self) -> crate::metrics::TlsResult {
        match self.state.borrow().conn.handshake_kind() {
            Some(rustls::HandshakeKind::Resumed) => crate::metrics::TlsResult::Resumed,
            _ => crate::metrics::TlsResult::Full,
        }
    }
}

/// Whether the first ciphertext read is not a TLS handshake record but starts like an HTTP method.
fn is_plain_text<C>(st: &State<C>) -> bool {
    st.pending
        .as_ref()
        .and_then(|(b, pos)| b.get(*pos))
        .is_some_and(|&b| b != HANDSHAKE_RECORD && b.is_ascii_alphabetic())
}

impl<C, S> State<C>
where
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
{
    /// Gives pending ciphertext to rustls and processes it; the pooled buffer goes back once rustls took
    /// all of it.
    ///
    /// # Errors
    /// The TLS error (an alert is queued for sending).
    fn feed(&mut self) -> Result<(), rustls::Error> {
        while let Some((b, pos)) = self.pending.as_mut() {
            let mut rest = &b[*pos..];
            // An error means rustls' plaintext buffer is full: the caller reads plaintext first.
            let took = self.conn.read_tls(&mut rest).unwrap_or_default();
            *pos += took;
            if *pos == b.len() {
                if let Some((b, _)) = self.pending.take() {
                    buf::give(b);
                }
            }
            let state = self.conn.process_new_packets()?;
            self.plaintext = state.plaintext_bytes_to_read();
            if took == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Copies decrypted bytes into `dst`. `None`: nothing decrypted yet.
    fn take_plaintext(&mut self, dst: &mut [u8]) -> Option<io::Result<usize>> {
        match self.conn.reader().read(dst) {
            Ok(n) => {
                self.plaintext = self.plaintext.saturating_sub(n);
                Some(Ok(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            // EOF without close_notify: the framing above decides whether bytes are missing.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Some(Ok(0)),
            Err(e) => Some(Err(e)),
        }
    }

    /// Whether a read would return at once (plaintext, ciphertext to process, EOF).
    fn has_input(&self) -> bool {
        self.plaintext > 0 || self.pending.is_some() || self.eof
    }
}

/// Reads ciphertext from `io` into a pooled buffer kept as `pending` (unless ciphertext is pending
/// already). Returns the byte count, 0 at EOF.
async fn fill<R, C>(
    io: &mut R,
    state: &RefCell<State<C>>,
    cancel: Option<CancelHandle>,
) -> io::Result<usize>
where
    R: CancelableAsyncReadRent,
{
    if let Some((b, pos)) = &state.borrow().pending {
        return Ok(b.len() - pos);
    }
    if state.borrow().eof {
        return Ok(0);
    }
    let b = buf::take();
    let (res, b) = match cancel {
        Some(c) => io.cancelable_read(b, c).await,
        None => io.read(b).await,
    };
    let mut st = state.borrow_mut();
    match res {
        Ok(0) => {
            st.eof = true;
            buf::give(b);
            Ok(0)
        }
        Ok(n) => {
            st.pending = Some((b, 0));
            Ok(n)
        }
        Err(e) => {
            buf::give(b);
            Err(e)
        }
    }
}

/// Reads plaintext into `dst` (at most its length): decrypted bytes first, then the ciphertext already
/// read, and only when neither gave anything, more from the socket; so one call fills `dst` from every
/// record at hand (rustls holds at most 16 KiB of plaintext at a time). Returns 0 at EOF (close_notify
/// or the socket's EOF).
async fn read_plain<R, C, S>(
    io: &mut R,
    state: &RefCell<State<C>>,
    dst: &mut [u8],
    cancel: Option<CancelHandle>,
) -> io::Result<usize>
where
    R: CancelableAsyncReadRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
{
    let mut got = 0;
    loop {
        {
            let mut st = state.borrow_mut();
            if got < dst.len() {
                match st.take_plaintext(&mut dst[got..]) {
                    Some(Ok(0)) => return Ok(got),
                    Some(Ok(n)) => {
                        got += n;
                        continue;
                    }
                    Some(Err(e)) if got == 0 => return Err(e),
                    Some(Err(_)) => return Ok(got),
                    None => {}
                }
            }
            if got == dst.len() {
                return Ok(got);
            }
            if st.pending.is_some() {
                let before = st.pending.as_ref().map(|(_, pos)| *pos);
                match st.feed() {
                    Ok(()) => {}
                    Err(_) if got > 0 => return Ok(got),
                    Err(e) => return Err(tls_error(e)),
                }
                let stuck = st.plaintext == 0
                    && st.pending.is_some()
                    && st.pending.as_ref().map(|(_, pos)| *pos) == before;
                if stuck {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "TLS input that rustls does not take",
                    ));
                }
                continue;
            }
            if got > 0 {
                return Ok(got);
            }
            if st.eof {
                return Ok(0);
            }
        }
        fill(io, state, cancel.clone()).await?;
    }
}

/// Writes every encrypted byte rustls has queued to `io`. While the socket has room, the records go
/// from rustls' queue straight to it ([`send_now`]); the rest from a pooled record buffer (one send
/// when they fit it, as a write of [`MAX_PLAINTEXT_PER_WRITE`] does).
async fn flush<W, C, S>(io: &mut W, state: &RefCell<State<C>>) -> io::Result<()>
where
    W: AsyncWriteRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
{
    loop {
        send_now(&mut state.borrow_mut())?;
        let mut out = buf::take_record();
        {
            let mut st = state.borrow_mut();
            while st.conn.wants_write() && out.len() < out.capacity() {
                st.conn.write_tls(&mut Room(&mut out))?;
            }
        }
        if out.is_empty() {
            buf::give(out);
            return Ok(());
        }
        // Step by step, so that a `send` deadline around this write sees each step's progress.
        let (res, out) = super::progress::write_all(io, out).await;
        buf::give(out);
        res?;
    }
}

/// Sends queued records straight from rustls' buffers with a non-blocking `sendmsg(2)` until the socket
/// is full (or rustls' queue empty): no copy and no io operation. Only between asynchronous writes (the
/// write half's one writer is here), so bytes never overtake a write in flight.
///
/// # Errors
/// A send failure other than a full socket.
fn send_now<C, S>(st: &mut State<C>) -> io::Result<()>
where
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
{
    let Some(fd) = st.socket else {
        return Ok(());
    };
    while st.conn.wants_write() {
        match st.conn.write_tls(&mut DontWait(fd)) {
            Ok(0) => return Ok(()),
            Ok(_) => super::progress::note(),
            Err(e) if is_full(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A downstream TLS stream's rustls state, shared with [`super::PollIo`], which seals the bytes a
/// protocol writes at once ([`seal`]) instead of copying them for its write pump.
pub(crate) type ServerState = Rc<RefCell<State<rustls::ServerConnection>>>;

impl<T> Tls<T, rustls::ServerConnection> {
    /// The stream's shared rustls state (see [`ServerState`]).
    pub(crate) fn server_state(&self) -> ServerState {
        self.state.clone()
    }
}

/// Seals `bufs` into records now, as far as rustls' buffer limit lets (64 KiB of queued records);
/// then, unless a write is `in_flight` on the socket, sends them at once ([`send_now`]). Returns the
/// plaintext bytes taken (0: the queue is full) and whether records wait for a flush.
///
/// # Errors
/// The connection's TLS error, or the send's failure.
pub(crate) fn seal(
    state: &ServerState,
    bufs: &[io::IoSlice<'_>],
    in_flight: bool,
) -> io::Result<(usize, bool)> {
    let mut st = state.borrow_mut();
    let n = st.conn.writer().write_vectored(bufs)?;
    if !in_flight {
        send_now(&mut st)?;
    }
    Ok((n, st.conn.wants_write()))
}

/// Encrypts up to [`MAX_PLAINTEXT_PER_WRITE`] bytes of `data` and writes the records. Returns how many
/// plaintext bytes were taken.
async fn write_plain<W, C, S>(
    io: &mut W,
    state: &RefCell<State<C>>,
    data: &[u8],
) -> io::Result<usize>
where
    W: AsyncWriteRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
{
    let n = {
        let mut st = state.borrow_mut();
        st.conn
            .writer()
            .write(&data[..data.len().min(MAX_PLAINTEXT_PER_WRITE)])?
    };
    flush(io, state).await?;
    Ok(n)
}

/// Appends to a buffer up to its capacity, never beyond: the pooled buffer keeps its size (and its pool).
struct Room<'a>(&'a mut Vec<u8>);

impl Write for Room<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(self.0.capacity() - self.0.len());
        self.0.extend_from_slice(&data[..n]);
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            let took = self.write(b)?;
            n += took;
            if took < b.len() {
                break;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

mod rent;

impl<T, C, S> Transport for Tls<T, C>
where
    T: Transport,
    C: DerefMut<Target = ConnectionCommon<S>> + 'static,
    S: SideData + 'static,
{
    type ReadHalf = TlsReadHalf<T::ReadHalf, C>;
    type WriteHalf = TlsWriteHalf<T::WriteHalf, C>;

    async fn readable(&mut self, relaxed: bool) -> io::Result<()> {
        if self.state.borrow().has_input() {
            return Ok(());
        }
        self.io.readable(relaxed).await
    }

    /// The socket's room: records rustls still holds go out with the next write.
    async fn writable(&mut self, relaxed: bool) -> io::Result<()> {
        self.io.writable(relaxed).await
    }

    fn split(self) -> (Self::ReadHalf, Self::WriteHalf) {
        let (r, w) = self.io.split();
        let read = TlsReadHalf {
            io: r,
            state: self.state.clone(),
        };
        (
            read,
            TlsWriteHalf {
                io: w,
                state: self.state,
            },
        )
    }

    fn unsplit(read: Self::ReadHalf, write: Self::WriteHalf) -> Self {
        assert!(
            Rc::ptr_eq(&read.state, &write.state),
            "Transport::unsplit: halves of different TLS streams"
        );
        Tls {
            io: T::unsplit(read.io, write.io),
            state: write.state,
        }
    }

    fn fd(&self) -> RawFd {
        self.io.fd()
    }

    fn is_quiet(&self) -> bool {
        !self.has_buffered_input() && self.io.is_quiet()
    }

    fn has_buffered_input(&self) -> bool {
        self.state.borrow().has_input()
    }

    fn announces_close(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
