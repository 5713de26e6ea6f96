//! The owned-buffer ("rent") traits of monoio for the TLS stream and its halves: each read, vectored
//! read, write, vectored write, flush and shutdown is the stream's plaintext operation on the caller's
//! owned buffer.

use std::{
    cell::RefCell,
    io::{self, Write},
    ops::DerefMut,
};

use monoio::{
    buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut},
    io::{AsyncReadRent, AsyncWriteRent, CancelHandle, CancelableAsyncReadRent},
    BufResult,
};
use rustls::{ConnectionCommon, SideData};

use super::{
    flush, read_plain, write_plain, State, Tls, TlsReadHalf, TlsWriteHalf, MAX_PLAINTEXT_PER_WRITE,
};

/// The caller's read buffer as a byte slice over its spare capacity.
///
/// # Safety
/// `buf` stays alive and unmoved while the slice is used; bytes written are marked initialised by the
/// caller with `set_init`.
unsafe fn spare<B: IoBufMut>(buf: &mut B) -> &mut [u8] {
    // SAFETY: write_ptr is valid for bytes_total bytes (IoBufMut's contract); u8 has no invalid values.
    unsafe { std::slice::from_raw_parts_mut(buf.write_ptr(), buf.bytes_total()) }
}

/// The first non-empty iovec of a vectored read buffer.
///
/// # Safety
/// As [`spare`].
unsafe fn first_iovec<B: IoVecBufMut>(buf: &mut B) -> &mut [u8] {
    // SAFETY: the iovec array is valid for write_iovec_len entries (IoVecBufMut's contract).
    unsafe {
        let iovs = std::slice::from_raw_parts(buf.write_iovec_ptr(), buf.write_iovec_len());
        iovs.iter()
            .find(|v| v.iov_len > 0)
            .map_or(&mut [][..], |v| {
                std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len)
            })
    }
}

/// Reads plaintext into an owned buffer (the shared body of every read method).
async fn read_into<R, C, S, B>(
    io: &mut R,
    state: &RefCell<State<C>>,
    mut buf: B,
    cancel: Option<CancelHandle>,
) -> BufResult<usize, B>
where
    R: CancelableAsyncReadRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
    B: IoBufMut,
{
    // SAFETY: `buf` is owned here and not moved until the slice is dropped.
    let dst = unsafe { spare(&mut buf) };
    let res = read_plain(io, state, dst, cancel).await;
    if let Ok(n) = res {
        // SAFETY: n bytes were written at write_ptr.
        unsafe { buf.set_init(n) };
    }
    (res, buf)
}

/// Vectored read: fills the first non-empty iovec.
async fn readv_into<R, C, S, B>(
    io: &mut R,
    state: &RefCell<State<C>>,
    mut buf: B,
    cancel: Option<CancelHandle>,
) -> BufResult<usize, B>
where
    R: CancelableAsyncReadRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
    B: IoVecBufMut,
{
    // SAFETY: as in read_into.
    let dst = unsafe { first_iovec(&mut buf) };
    let res = read_plain(io, state, dst, cancel).await;
    if let Ok(n) = res {
        // SAFETY: n bytes were written into the first non-empty iovec, which precedes the others.
        unsafe { buf.set_init(n) };
    }
    (res, buf)
}

/// Writes an owned buffer's bytes as TLS records.
async fn write_from<W, C, S, B>(
    io: &mut W,
    state: &RefCell<State<C>>,
    buf: B,
) -> BufResult<usize, B>
where
    W: AsyncWriteRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
    B: IoBuf,
{
    // SAFETY: read_ptr is valid for bytes_init bytes while `buf` is owned here.
    let data = unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) };
    let res = write_plain(io, state, data).await;
    (res, buf)
}

/// Vectored write: every iovec into rustls (up to [`MAX_PLAINTEXT_PER_WRITE`] in all), one flush.
async fn writev_from<W, C, S, B>(
    io: &mut W,
    state: &RefCell<State<C>>,
    buf: B,
) -> BufResult<usize, B>
where
    W: AsyncWriteRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
    B: IoVecBuf,
{
    let mut taken = 0;
    let res = (|| {
        let mut st = state.borrow_mut();
        // SAFETY: the iovec array and what it points to are valid while `buf` is owned here.
        let iovs =
            unsafe { std::slice::from_raw_parts(buf.read_iovec_ptr(), buf.read_iovec_len()) };
        for v in iovs {
            let room = MAX_PLAINTEXT_PER_WRITE - taken;
            // SAFETY: as above.
            let data = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) };
            let n = st.conn.writer().write(&data[..data.len().min(room)])?;
            taken += n;
            if n < data.len() || taken == MAX_PLAINTEXT_PER_WRITE {
                break;
            }
        }
        Ok::<_, io::Error>(())
    })();
    let res = match res {
        Ok(()) => flush(io, state).await.map(|()| taken),
        Err(e) => Err(e),
    };
    (res, buf)
}

/// Sends close_notify, flushes, then half-closes the socket.
async fn shutdown_tls<W, C, S>(io: &mut W, state: &RefCell<State<C>>) -> io::Result<()>
where
    W: AsyncWriteRent,
    C: DerefMut<Target = ConnectionCommon<S>>,
    S: SideData,
{
    state.borrow_mut().conn.send_close_notify();
    let flushed = flush(io, state).await;
    let closed = io.shutdown().await;
    flushed.and(closed)
}

macro_rules! read_impls {
    ($ty:ident, $io:ident) => {
        impl<R, C, S> AsyncReadRent for $ty<R, C>
        where
            R: CancelableAsyncReadRent,
            C: DerefMut<Target = ConnectionCommon<S>>,
            S: SideData,
        {
            async fn read<B: IoBufMut>(&mut self, buf: B) -> BufResult<usize, B> {
                read_into(&mut self.$io, &self.state, buf, None).await
            }

            async fn readv<B: IoVecBufMut>(&mut self, buf: B) -> BufResult<usize, B> {
                readv_into(&mut self.$io, &self.state, buf, None).await
            }
        }

        impl<R, C, S> CancelableAsyncReadRent for $ty<R, C>
        where
            R: CancelableAsyncReadRent,
            C: DerefMut<Target = ConnectionCommon<S>>,
            S: SideData,
        {
            async fn cancelable_read<B: IoBufMut>(
                &mut self,
                buf: B,
                c: CancelHandle,
            ) -> BufResult<usize, B> {
                read_into(&mut self.$io, &self.state, buf, Some(c)).await
            }

            async fn cancelable_readv<B: IoVecBufMut>(
                &mut self,
                buf: B,
                c: CancelHandle,
            ) -> BufResult<usize, B> {
                readv_into(&mut self.$io, &self.state, buf, Some(c)).await
            }
        }
    };
}

macro_rules! write_impls {
    ($ty:ident, $io:ident) => {
        impl<W, C, S> AsyncWriteRent for $ty<W, C>
        where
            W: AsyncWriteRent,
            C: DerefMut<Target = ConnectionCommon<S>>,
            S: SideData,
        {
            async fn write<B: IoBuf>(&mut self, buf: B) -> BufResult<usize, B> {
                write_from(&mut self.$io, &self.state, buf).await
            }

            async fn writev<B: IoVecBuf>(&mut self, buf: B) -> BufResult<usize, B> {
                writev_from(&mut self.$io, &self.state, buf).await
            }

            async fn flush(&mut self) -> io::Result<()> {
                flush(&mut self.$io, &self.state).await?;
                self.$io.flush().await
            }

            async fn shutdown(&mut self) -> io::Result<()> {
                shutdown_tls(&mut self.$io, &self.state).await
            }
        }
    };
}

read_impls!(Tls, io);
write_impls!(Tls, io);
read_impls!(TlsReadHalf, io);
write_impls!(TlsWriteHalf, io);
