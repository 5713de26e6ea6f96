//! The request body of an HTTP/2 upstream stream: [`DataSink`] takes the body in the seam's HTTP/1.1
//! framing (what [`BodySource::forward_rest`](edge_core::io::body::BodySource::forward_rest) writes),
//! drops the framing (the chunked coding's size lines and trailers; a Content-Length body as it is) and
//! sends the data as DATA frames, each within the stream's send capacity (RFC 9113 §5.2): a stream
//! whose upstream stops taking its body waits, under `write_timeout` of no progress, while the
//! response is watched for an early answer.
//!
//! A chunked body's trailer section (an HTTP/1.1 client's, or an HTTP/2 client's trailing HEADERS
//! the downstream session wrote there) ends the stream as trailing HEADERS.

use std::{
    future::{poll_fn, Future},
    io,
    task::Poll,
    time::Duration,
};

use bytes::Bytes;
use edge_core::{
    clock::timeout_at,
    http::chunked::ChunkedDecoder,
    io::body::{RequestSink, SinkError},
};
use h2::{client::ResponseFuture, RecvStream, SendStream};
use monoio::{
    buf::{IoBuf, IoVecBuf},
    io::AsyncWriteRent,
    time::Instant,
    BufResult,
};

use super::head::Framing;

/// The request side of one stream: its send half and where its body's framing stands.
pub(crate) struct ReqSide {
    pub(crate) stream: SendStream<Bytes>,
    pub(crate) framing: Framing,
    decoder: ChunkedDecoder,
    /// Bytes left under a Content-Length.
    left: u64,
    /// END_STREAM went out.
    pub(crate) sent: bool,
    /// A chunked body's bytes since its last data byte (a pooled buffer, taken at the first): the last
    /// chunk and its trailer section once the body is done.
    tail: Vec<u8>,
}

impl ReqSide {
    /// The request side of a stream opened with `framing`; `sent` when HEADERS ended the stream.
    pub(crate) fn new(stream: SendStream<Bytes>, framing: Framing, sent: bool) -> Self {
        let left = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        ReqSide {
            stream,
            framing,
            decoder: ChunkedDecoder::new(),
            left,
            sent,
            tail: Vec::new(),
        }
    }
}

/// The response future of a stream and where an answer that arrives early is kept, watched while
/// the body waits for send capacity (half duplex).
pub(crate) struct Watch<'a> {
    pub(crate) response: &'a mut Option<ResponseFuture>,
    pub(crate) early: &'a mut Option<Result<http::Response<RecvStream>, h2::Error>>,
}

/// The request side of one stream while its body is sent.
pub(crate) struct DataSink<'a> {
    side: &'a mut ReqSide,
    watch: Option<Watch<'a>>,
    write_timeout: Duration,
}

impl<'a> DataSink<'a> {
    pub(crate) fn new(
        side: &'a mut ReqSide,
        watch: Option<Watch<'a>>,
        write_timeout: Duration,
    ) -> Self {
        DataSink {
            side,
            watch,
            write_timeout,
        }
    }

    /// Sends the data of `input` (seam framing); END_STREAM with the body's last byte.
    pub(crate) async fn put(&mut self, input: &[u8]) -> Result<usize, SinkError> {
        if self.side.sent {
            return Ok(input.len());
        }
        match self.side.framing {
            Framing::None => Ok(input.len()),
            Framing::Length(_) => {
                let n = self.side.left.min(input.len() as u64) as usize;
                self.side.left -= n as u64;
                let end = self.side.left == 0;
                self.data(&input[..n], end).await?;
                Ok(input.len())
            }
            Framing::Chunked => {
                let mut ranges = Vec::new();
                let progress = self
                    .side
                    .decoder
                    .feed(input, |r| ranges.push(r))
                    .map_err(|_| SinkError::Io(io::Error::other("malformed chunked body")))?;
                // What follows the last data byte is kept: at the end it holds the trailer section.
                let last_data = ranges.last().map_or(0, |r| r.end);
                if last_data > 0 {
                    self.side.tail.clear();
                }
                if progress.consumed > last_data {
                    if self.side.tail.capacity() == 0 {
                        self.side.tail = edge_core::buf::take();
                    }
                    self.side
                        .tail
                        .extend_from_slice(&input[last_data..progress.consumed]);
                }
                // A body without trailers ends with its last DATA frame; with them, with HEADERS.
                let trailers = match progress.done {
                    true => edge_core::http::chunked::trailer_lines(&self.side.tail)
                        .and_then(edge_core::io::h2_stream::trailer_map),
                    false => None,
                };
                let last = ranges.len();
                for (k, r) in ranges.iter().enumerate() {
                    let end = progress.done && trailers.is_none() && k + 1 == last;
                    self.data(&input[r.clone()], end).await?;
                }
                if progress.done {
                    self.finish_chunked(trailers).await?;
                }
                Ok(input.len())
            }
        }
    }

    /// Ends a chunked body: its trailer section as trailing HEADERS (RFC 9113 §8.1), else END_STREAM
    /// (on an empty DATA frame when the last data did not carry it).
    async fn finish_chunked(&mut self, trailers: Option<http::HeaderMap>) -> Result<(), SinkError> {
        match trailers {
            Some(t) => {
                let side = &mut *self.side;
                side.stream
                    .send_trailers(t)
                    .map_err(|e| SinkError::Io(io::Error::other(e)))?;
                side.sent = true;
            }
            None => self.data(&[], true).await?,
        }
        edge_core::buf::give(std::mem::take(&mut self.side.tail));
        Ok(())
    }

    /// Sends END_STREAM if the body's framing did not (a body that ended at the source's end).
    pub(crate) async fn end(&mut self) -> Result<(), SinkError> {
        match self.side.sent {
            true => Ok(()),
            false => self.data(&[], true).await,
        }
    }

    /// Sends `data` as DATA frames within the stream's capacity, `end` setting END_STREAM on the last.
    async fn data(&mut self, mut data: &[u8], end: bool) -> Result<(), SinkError> {
        while !data.is_empty() {
            let n = self.capacity(data.len()).await?;
            let (now, rest) = data.split_at(n.min(data.len()));
            let last = end && rest.is_empty();
            self.side
                .stream
                .send_data(Bytes::copy_from_slice(now), last)
                .map_err(|e| SinkError::Io(io::Error::other(e)))?;
            self.side.sent |= last;
            data = rest;
        }
        if end && !self.side.sent {
            self.side
                .stream
                .send_data(Bytes::new(), true)
                .map_err(|e| SinkError::Io(io::Error::other(e)))?;
            self.side.sent = true;
        }
        Ok(())
    }

    /// Waits for send capacity for up to `want` bytes under `write_timeout` of no progress, watching
    /// the response: an answer that arrives meanwhile is kept and ends the wait with an error (the
    /// session then reports an early answer).
    async fn capacity(&mut self, want: usize) -> Result<usize, SinkError> {
        self.side.stream.reserve_capacity(want);
        let stream = &mut self.side.stream;
        let mut watch = self.watch.as_mut();
        let wait = poll_fn(|cx| {
            if let Some(w) = watch.as_mut() {
                if let Some(r) = w.response.as_mut().and_then(|f| ready_now(f, cx)) {
                    *w.response = None;
                    *w.early = Some(r);
                    return Poll::Ready(Err(SinkError::Io(io::Error::other("answered early"))));
                }
            }
            if stream.capacity() > 0 {
                return Poll::Ready(Ok(stream.capacity()));
            }
            match stream.poll_capacity(cx) {
                Poll::Ready(Some(Ok(n))) if n > 0 => Poll::Ready(Ok(n)),
                Poll::Ready(Some(Ok(_))) => Poll::Pending,
                Poll::Ready(Some(Err(e))) => Poll::Ready(Err(SinkError::Io(io::Error::other(e)))),
                Poll::Ready(None) => {
                    Poll::Ready(Err(SinkError::Io(io::ErrorKind::BrokenPipe.into())))
                }
                Poll::Pending => Poll::Pending,
            }
        });
        match timeout_at(Instant::now() + self.write_timeout, wait).await {
            Ok(r) => r,
            Err(_) => Err(SinkError::Timeout),
        }
    }
}

/// The request side of a full-duplex stream, owned by the orchestrator while the response is read
/// through the session ([`crate::session::UpstreamSession::take_body_sink`]): it sends END_STREAM
/// itself when the body's framing is complete. Dropping it unfinished (with the session) resets the
/// stream (RST_STREAM CANCEL).
pub struct H2BodySink {
    side: ReqSide,
    write_timeout: Duration,
}

impl H2BodySink {
    pub(crate) fn new(side: ReqSide, write_timeout: Duration) -> Self {
        H2BodySink {
            side,
            write_timeout,
        }
    }
}

/// HTTP/2 DATA frames: never spliced.
impl RequestSink for H2BodySink {}

impl AsyncWriteRent for H2BodySink {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        DataSink::new(&mut self.side, None, self.write_timeout)
            .write(buf)
            .await
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        DataSink::new(&mut self.side, None, self.write_timeout)
            .writev(buf)
            .await
    }

    async fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// HTTP/2 DATA frames: never spliced.
impl RequestSink for DataSink<'_> {}

impl AsyncWriteRent for DataSink<'_> {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let input =
            unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) }.to_vec();
        let r = self.put(&input).await.map_err(|e| match e {
            SinkError::Io(e) => e,
            SinkError::Timeout => io::ErrorKind::TimedOut.into(),
        });
        (r, buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let mut input = Vec::new();
        let iovs =
            unsafe { std::slice::from_raw_parts(buf.read_iovec_ptr(), buf.read_iovec_len()) };
        for v in iovs {
            input.extend_from_slice(unsafe {
                std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
            });
        }
        let r = self.put(&input).await.map_err(|e| match e {
            SinkError::Io(e) => e,
            SinkError::Timeout => io::ErrorKind::TimedOut.into(),
        });
        (r, buf)
    }

    async fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Polls `f` once: whether it is ready now (for an early response while the body is sent).
fn ready_now<F: Future + Unpin>(f: &mut F, cx: &mut std::task::Context<'_>) -> Option<F::Output> {
    match std::pin::Pin::new(f).poll(cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}
