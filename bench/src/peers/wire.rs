//! Buffered reading on monoio streams for the origin and the load generator.
//!
//! [`ReadBuf`] owns one reusable `Vec<u8>` per connection. Reads append into the spare capacity
//! (`slice_mut(len..)`, because monoio's `read(Vec)` would overwrite from offset 0), consumed bytes
//! are dropped from the front, and the buffer is compacted only when it is full, so steady-state
//! keep-alive traffic allocates nothing. Bodies are skipped in place: their bytes are consumed as
//! they arrive and never accumulated, so a body of any size needs only the one buffer.
//!
//! # Cancel safety
//! [`ReadBuf::fill`] lends the buffer to the kernel. If a future that is inside `fill` is dropped
//! (a timeout), the buffer goes with it: the connection must be closed and the `ReadBuf`
//! [`reset`](ReadBuf::reset) before reuse. Both callers close the connection after a timeout.

use std::io;

use monoio::buf::IoBufMut;
use monoio::io::AsyncReadRent;

use crate::peers::chunked::ChunkedSkipper;
use crate::peers::http::BodyLen;

/// A per-connection read buffer: `buf[pos..]` holds received, unconsumed bytes.
#[derive(Debug)]
pub struct ReadBuf {
    buf: Vec<u8>,
    pos: usize,
    capacity: usize,
}

impl ReadBuf {
    /// A buffer that holds at most `capacity` unconsumed bytes (so a head must fit in it).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
            pos: 0,
            capacity,
        }
    }

    /// The received bytes not consumed yet.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Marks `n` bytes at the front of [`data`](Self::data) as consumed.
    ///
    /// # Panics
    /// When `n` exceeds the unconsumed length.
    pub fn consume(&mut self, n: usize) {
        assert!(
            n <= self.buf.len() - self.pos,
            "consume past the end of the buffer"
        );
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Drops all buffered bytes and restores the buffer after a cancelled read.
    pub fn reset(&mut self) {
        if self.buf.capacity() < self.capacity {
            self.buf = Vec::with_capacity(self.capacity);
        }
        self.buf.clear();
        self.pos = 0;
    }

    /// Reads once from `stream`, appending to the buffered bytes; returns the count, 0 at EOF.
    ///
    /// # Errors
    /// The read's error, or `InvalidData` when the buffer is full of unconsumed bytes (a head
    /// larger than the capacity).
    pub async fn fill<S: AsyncReadRent>(&mut self, stream: &mut S) -> io::Result<usize> {
        if self.buf.len() == self.buf.capacity() {
            if self.pos == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "message head too large",
                ));
            }
            self.buf.copy_within(self.pos.., 0);
            self.buf.truncate(self.buf.len() - self.pos);
            self.pos = 0;
        }
        let buf = std::mem::take(&mut self.buf);
        let len = buf.len();
        let (res, slice) = stream.read(buf.slice_mut(len..)).await;
        self.buf = slice.into_inner();
        res
    }

    /// Reads and discards one body framed as `body`; returns its payload length.
    ///
    /// For [`BodyLen::UntilClose`] this reads to EOF; the connection is finished afterwards.
    ///
    /// # Errors
    /// Read errors, `UnexpectedEof` when the peer closes inside a delimited body, and
    /// `InvalidData` on a malformed chunked body.
    pub async fn skip_body<S: AsyncReadRent>(
        &mut self,
        stream: &mut S,
        body: BodyLen,
    ) -> io::Result<u64> {
        match body {
            BodyLen::Empty => Ok(0),
            BodyLen::Length(total) => {
                let mut left = total;
                loop {
                    let take = left.min(self.data().len() as u64);
                    self.consume(take as usize);
                    left -= take;
                    if left == 0 {
                        return Ok(total);
                    }
                    self.fill_or_eof(stream).await?;
                }
            }
            BodyLen::Chunked => {
                let mut skipper = ChunkedSkipper::new();
                loop {
                    let used = skipper
                        .feed(self.data())
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    self.consume(used);
                    if skipper.is_done() {
                        return Ok(skipper.payload_bytes());
                    }
                    self.fill_or_eof(stream).await?;
                }
            }
            BodyLen::UntilClose => {
                let mut total = self.data().len() as u64;
                self.consume(self.data().len());
                loop {
                    match self.fill(stream).await? {
                        0 => return Ok(total),
                        n => {
                            total += n as u64;
                            self.consume(n);
                        }
                    }
                }
            }
        }
    }

    /// Like [`fill`](Self::fill), with EOF as an error (the peer closed inside a message).
    async fn fill_or_eof<S: AsyncReadRent>(&mut self, stream: &mut S) -> io::Result<()> {
        match self.fill(stream).await? {
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed inside a message",
            )),
            _ => Ok(()),
        }
    }
}

/// A shared, immutable byte buffer that monoio can write from without copying (`Rc` clone per
/// write, no allocation). Used for prebuilt requests and responses.
pub type SharedBytes = std::rc::Rc<Vec<u8>>;

/// Returns true for errors that mean the peer went away rather than misbehaved.
pub fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}
