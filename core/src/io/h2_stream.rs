//! One HTTP/2 stream's two sides as owned-buffer IO (monoio's `AsyncReadRent` / `AsyncWriteRent`), for
//! byte tunnels over a stream: a WebSocket over HTTP/2 (RFC 8441 §5), on the client's side of edge and
//! on an HTTP/2 upstream's alike (DESIGN.md "HTTP/2 and gRPC upstreams").
//!
//! - [`StreamRead`]: the peer's DATA one frame at a time, EOF at END_STREAM; a frame's flow-control
//!   capacity is released once its bytes were handed on and the next read asks for more, so the peer
//!   sends only as fast as the other side of the tunnel takes the bytes (RFC 9113 §5.2).
//! - [`StreamWrite`]: a write waits for send capacity (the peer's window) and hands h2 at most that
//!   much, copied into a pooled buffer; `shutdown` sends END_STREAM.
//!
//! Generic over how the stream is held (owned or borrowed, [`BorrowMut`]) and over the DATA buffer
//! type `B` (`From<Vec<u8>>`: a pooled buffer goes in).

use std::{borrow::BorrowMut, future::poll_fn, io, marker::PhantomData};

use bytes::{Buf, Bytes};
use h2::{RecvStream, SendStream};
use monoio::{
    buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut},
    io::{AsyncReadRent, AsyncWriteRent},
    BufResult,
};

use crate::buf;

/// The peer's DATA of a stream as an owned-buffer reader (module docs).
pub struct StreamRead<R> {
    recv: R,
    /// The rest of the last DATA frame, not yet read.
    pending: Bytes,
    /// Bytes read and not yet released to the peer's window.
    consumed: usize,
}

impl<R: BorrowMut<RecvStream>> StreamRead<R> {
    /// The reader of `recv`.
    pub fn new(recv: R) -> Self {
        StreamRead {
            recv,
            pending: Bytes::new(),
            consumed: 0,
        }
    }

    /// Copies up to `room` bytes of the next DATA frame to `dst`; 0 at END_STREAM.
    async fn next(&mut self, dst: *mut u8, room: usize) -> io::Result<usize> {
        let recv = self.recv.borrow_mut();
        if self.consumed > 0 {
            let _ = recv
                .flow_control()
                .release_capacity(std::mem::take(&mut self.consumed));
        }
        while self.pending.is_empty() {
            match recv.data().await {
                None => return Ok(0),
                Some(Ok(data)) => self.pending = data,
                Some(Err(e)) => return Err(stream_error(e)),
            }
        }
        let n = room.min(self.pending.len());
        // SAFETY: the caller's buffer has `room` writable bytes at `dst`; `pending` holds `n` bytes and
        // does not overlap it (it is h2's buffer).
        unsafe { std::ptr::copy_nonoverlapping(self.pending.as_ptr(), dst, n) };
        self.pending.advance(n);
        self.consumed += n;
        Ok(n)
    }
}

impl<R: BorrowMut<RecvStream>> AsyncReadRent for StreamRead<R> {
    async fn read<T: IoBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        // As the kernel's read: into the buffer from its start, `bytes_total` bytes at most.
        let room = buf.bytes_total();
        let dst = buf.write_ptr();
        let r = self.next(dst, room).await;
        if let Ok(n) = r {
            // SAFETY: the first `n` bytes were written just now.
            unsafe { buf.set_init(n) };
        }
        (r, buf)
    }

    /// Into the first buffer of the vector (a tunnel reads into one buffer).
    async fn readv<T: IoVecBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        let (dst, room) = match buf.write_iovec_len() {
            0 => (std::ptr::null_mut(), 0),
            // SAFETY: `write_iovec_len` iovecs are valid at `write_iovec_ptr`.
            _ => unsafe {
                let v = &*buf.write_iovec_ptr();
                (v.iov_base.cast::<u8>(), v.iov_len)
            },
        };
        let r = self.next(dst, room).await;
        if let Ok(n) = r {
            // SAFETY: `n` bytes were written at the start of the first iovec.
            unsafe { buf.set_init(n) };
        }
        (r, buf)
    }
}

/// A stream's DATA to the peer as an owned-buffer writer (module docs).
pub struct StreamWrite<S, B> {
    send: S,
    _buf: PhantomData<B>,
}

impl<B: Buf + From<Vec<u8>>, S: BorrowMut<SendStream<B>>> StreamWrite<S, B> {
    /// The writer of `send`.
    pub fn new(send: S) -> Self {
        StreamWrite {
            send,
            _buf: PhantomData,
        }
    }

    /// Sends up to `len` bytes at `src` once the stream has capacity for some; returns how many.
    async fn send(&mut self, src: *const u8, len: usize) -> io::Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        let send = self.send.borrow_mut();
        send.reserve_capacity(len);
        while send.capacity() == 0 {
            match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(stream_error(e)),
                None => return Err(io::ErrorKind::BrokenPipe.into()),
            }
        }
        let n = len.min(send.capacity());
        let mut out = buf::take_sized(n);
        // SAFETY: the caller's `len` bytes at `src` are initialised and `n <= len`.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(src, n) });
        send.send_data(B::from(out), false).map_err(stream_error)?;
        Ok(n)
    }
}

impl<B: Buf + From<Vec<u8>>, S: BorrowMut<SendStream<B>>> AsyncWriteRent for StreamWrite<S, B> {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let r = self.send(buf.read_ptr(), buf.bytes_init()).await;
        (r, buf)
    }

    /// From the first non-empty buffer of the vector.
    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        // SAFETY: `read_iovec_len` iovecs are valid at `read_iovec_ptr`.
        let first =
            unsafe { std::slice::from_raw_parts(buf.read_iovec_ptr(), buf.read_iovec_len()) }
                .iter()
                .find(|v| v.iov_len > 0)
                .map(|v| (v.iov_base as *const u8, v.iov_len));
        let r = match first {
            Some((src, len)) => self.send(src, len).await,
            None => Ok(0),
        };
        (r, buf)
    }

    /// h2 writes what it was handed without being asked.
    async fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// END_STREAM: the other side's EOF passed on (RFC 8441 §5, as a TCP FIN for CONNECT, RFC 9113
    /// §8.5).
    async fn shutdown(&mut self) -> io::Result<()> {
        self.send
            .borrow_mut()
            .send_data(B::from(Vec::new()), true)
            .map_err(stream_error)
    }
}

/// An h2 stream error as the tunnel's IO error: the stream is gone (reset by the peer, or its
/// connection ended).
fn stream_error(e: h2::Error) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, e)
}

/// Fields HTTP/2 forbids in a trailer section (connection-specific ones, RFC 9113 §8.2.2, and the
/// framing and routing fields, RFC 9110 §6.5.1).
const NOT_IN_TRAILERS: [&str; 9] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "content-length",
    "host",
];

/// A chunked body's trailer field lines ([`crate::http::chunked::trailer_lines`]) as an HTTP/2 trailer
/// section, without the fields that may not be there or that are not valid; `None` when none is left.
pub fn trailer_map(lines: &[u8]) -> Option<http::HeaderMap> {
    let mut storage = [httparse::EMPTY_HEADER; 64];
    let mut whole = Vec::with_capacity(lines.len() + 2);
    whole.extend_from_slice(lines);
    whole.extend_from_slice(b"\r\n");
    let httparse::Status::Complete((_, fields)) =
        httparse::parse_headers(&whole, &mut storage).ok()?
    else {
        return None;
    };
    let mut map = http::HeaderMap::new();
    for f in fields.iter() {
        if NOT_IN_TRAILERS
            .iter()
            .any(|n| f.name.eq_ignore_ascii_case(n))
        {
            continue;
        }
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(f.name.as_bytes()),
            http::HeaderValue::from_bytes(f.value),
        ) else {
            continue;
        };
        map.append(name, value);
    }
    (!map.is_empty()).then_some(map)
}

/// Appends the last chunk of a chunked body with `trailers` as its trailer section.
pub fn last_chunk(out: &mut Vec<u8>, trailers: Option<&http::HeaderMap>) {
    out.extend_from_slice(b"0\r\n");
    if let Some(t) = trailers {
        write_fields(out, t);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `fields` as HTTP/1.1 field lines, `name: value` and CRLF each (HTTP/2 names are lowercase).
pub fn write_fields(out: &mut Vec<u8>, fields: &http::HeaderMap) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}
