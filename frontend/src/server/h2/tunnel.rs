//! The tunnel of a WebSocket stream (RFC 8441 §5, DESIGN.md "HTTP/2 and gRPC upstreams"): once the
//! upstream switched and the stream's `200` went out, the stream's DATA and the upstream connection
//! are one byte tunnel both ways, run by the same loop as an HTTP/1.1 upgrade
//! ([`crate::proxy::tunnel::relay`]: half-close, `idle`, the `tunnel.closed` line) over the stream's two
//! sides as owned-buffer reader and writer ([`StreamRead`], [`StreamWrite`]).
//!
//! - Flow control (RFC 9113 §5.2): the client's DATA is taken only as the upstream write of the bytes
//!   before it completed, and its window released as consumed, so a slow upstream slows only this
//!   stream; bytes to the client wait for the stream's send capacity (its window, and h2 holding at
//!   most the connection's per-stream send buffer), so a client that stops reading pauses the
//!   upstream reads until `idle` (no byte moved either way) ends the tunnel.
//! - Ends: the client's END_STREAM half-closes the upstream's write side; the upstream's EOF ends the
//!   stream with END_STREAM. Both done: the stream is complete. The upstream failing (RFC 9113 §8.5: a
//!   TCP error) resets the stream with CONNECT_ERROR, `idle` with CANCEL, both counted in
//!   `edge_http2_resets_total{side="edge"}`; the client resetting the stream (or its connection
//!   ending) closes the upstream connection, counted as `side="client"`.

use std::{future::poll_fn, io};

use bytes::{Buf, Bytes};
use edge_core::{buf, buf::RecvBuf, metrics::ResetSide};
use h2::{Reason, RecvStream, SendStream};
use monoio::{
    buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut},
    io::{AsyncReadRent, AsyncWriteRent},
    BufResult,
};

use super::session::{Chunk, H2Session};
use crate::{
    context::Worker,
    proxy::{
        tunnel::{relay, End},
        Tunnel,
    },
};

/// Runs the tunnel between the switched WebSocket stream of `s` and the upstream side `up` until it
/// ends, then ends the stream as the module's text says. A session whose switch did not go out has
/// nothing to tunnel: `up` is closed.
pub async fn run(w: &Worker, s: &mut H2Session<'_>, up: Tunnel) {
    let Some((recv, send)) = s.tunnel_sides() else {
        return;
    };
    let read = StreamRead {
        recv,
        pending: Bytes::new(),
        consumed: 0,
    };
    let write = StreamWrite { send };
    // Both sides are handed to the relay and dropped with it: the stream is reached again through `s`.
    let end = relay(w, read, write, RecvBuf::new(), up).await;
    let reset = match end {
        End::Closed => None,
        End::Idle => Some(Reason::CANCEL),
        End::Upstream => Some(Reason::CONNECT_ERROR),
        // The client reset the stream, or its connection ended: nothing more goes to it.
        End::Client => {
            w.metrics.http2_reset(ResetSide::Client).increment(1);
            None
        }
    };
    if let (Some(reason), Some((_, send))) = (reset, s.tunnel_sides()) {
        send.send_reset(reason);
        w.metrics.http2_reset(ResetSide::Edge).increment(1);
    }
    s.tunnel_ended();
}

/// The client's DATA of a stream as an owned-buffer reader: one frame's bytes at a time, EOF at
/// END_STREAM. A frame's flow-control capacity is released once its bytes were handed on and the next
/// read asks for more, which the tunnel does only after writing them upstream.
pub struct StreamRead<'a> {
    recv: &'a mut RecvStream,
    /// The rest of the last DATA frame, not yet read.
    pending: Bytes,
    /// Bytes read and not yet released to the client's window.
    consumed: usize,
}

impl StreamRead<'_> {
    /// Copies up to `room` bytes of the next DATA frame to `dst`; 0 at END_STREAM.
    async fn next(&mut self, dst: *mut u8, room: usize) -> io::Result<usize> {
        if self.consumed > 0 {
            let _ = self
                .recv
                .flow_control()
                .release_capacity(std::mem::take(&mut self.consumed));
        }
        while self.pending.is_empty() {
            match self.recv.data().await {
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

impl AsyncReadRent for StreamRead<'_> {
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

    /// Into the first buffer of the vector (the tunnel reads into one buffer).
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

/// The stream's response DATA as an owned-buffer writer: a write waits for send capacity (the
/// client's window) and hands h2 at most that much, copied into a pooled buffer; `shutdown` sends
/// END_STREAM.
pub struct StreamWrite<'a> {
    send: &'a mut SendStream<Chunk>,
}

impl StreamWrite<'_> {
    /// Sends up to `len` bytes at `src` once the stream has capacity for some; returns how many.
    async fn send(&mut self, src: *const u8, len: usize) -> io::Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        self.send.reserve_capacity(len);
        while self.send.capacity() == 0 {
            match poll_fn(|cx| self.send.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(stream_error(e)),
                None => return Err(io::ErrorKind::BrokenPipe.into()),
            }
        }
        let n = len.min(self.send.capacity());
        let mut out = buf::take_sized(n);
        // SAFETY: the caller's `len` bytes at `src` are initialised and `n <= len`.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(src, n) });
        self.send
            .send_data(Chunk::new(out), false)
            .map_err(stream_error)?;
        Ok(n)
    }
}

impl AsyncWriteRent for StreamWrite<'_> {
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

    /// END_STREAM: the upstream's EOF passed on (RFC 8441 §5, as a TCP FIN for CONNECT, RFC 9113 §8.5).
    async fn shutdown(&mut self) -> io::Result<()> {
        self.send
            .send_data(Chunk::empty(), true)
            .map_err(stream_error)
    }
}

/// An h2 stream error as the tunnel's IO error: the stream is gone (reset by the client, or its
/// connection ended).
fn stream_error(e: h2::Error) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, e)
}
