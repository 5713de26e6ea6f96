//! The request body of an HTTP/2 upstream stream: [`DataSink`] takes the body in the seam's HTTP/1.1
//! framing (what [`BodySource::forward_rest`](edge_core::io::body::BodySource::forward_rest) writes),
//! drops the framing (the chunked coding's size lines and trailers; a Content-Length body as it is) and
//! sends the data as DATA frames, each within the stream's send capacity (RFC 9113 §5.2): a stream
//! whose upstream stops taking its body waits, under `write_timeout` of no progress, while the
//! response is watched for an early answer.
//!
//! Request trailers (a chunked body's trailer section) are not forwarded upstream: the decoder reads
//! past them.

use std::{future::poll_fn, io, task::Poll, time::Duration};

use bytes::Bytes;
use edge_core::{clock::timeout_at, http::chunked::ChunkedDecoder, io::body::SinkError};
use h2::{client::ResponseFuture, RecvStream, SendStream};
use monoio::{
    buf::{IoBuf, IoVecBuf},
    io::AsyncWriteRent,
    time::Instant,
    BufResult,
};

use super::{head::Framing, session::ready_now};

/// The request side of one stream while its body is sent (borrows of the session's fields).
pub(crate) struct DataSink<'a> {
    stream: &'a mut SendStream<Bytes>,
    framing: Framing,
    decoder: &'a mut ChunkedDecoder,
    /// Bytes left under a Content-Length.
    left: &'a mut u64,
    /// END_STREAM went out.
    sent: &'a mut bool,
    response: &'a mut Option<ResponseFuture>,
    early: &'a mut Option<Result<http::Response<RecvStream>, h2::Error>>,
    write_timeout: Duration,
}

impl<'a> DataSink<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        stream: &'a mut SendStream<Bytes>,
        framing: Framing,
        decoder: &'a mut ChunkedDecoder,
        left: &'a mut u64,
        sent: &'a mut bool,
        response: &'a mut Option<ResponseFuture>,
        early: &'a mut Option<Result<http::Response<RecvStream>, h2::Error>>,
        write_timeout: Duration,
    ) -> Self {
        DataSink {
            stream,
            framing,
            decoder,
            left,
            sent,
            response,
            early,
            write_timeout,
        }
    }

    /// Sends the data of `input` (seam framing); END_STREAM with the body's last byte.
    pub(crate) async fn put(&mut self, input: &[u8]) -> Result<usize, SinkError> {
        if *self.sent {
            return Ok(input.len());
        }
        match self.framing {
            Framing::None => Ok(input.len()),
            Framing::Length(_) => {
                let n = (*self.left).min(input.len() as u64) as usize;
                *self.left -= n as u64;
                let end = *self.left == 0;
                self.data(&input[..n], end).await?;
                Ok(input.len())
            }
            Framing::Chunked => {
                let mut ranges = Vec::new();
                let progress = self
                    .decoder
                    .feed(input, |r| ranges.push(r))
                    .map_err(|_| SinkError::Io(io::Error::other("malformed chunked body")))?;
                for (k, r) in ranges.iter().enumerate() {
                    let last = progress.done && k + 1 == ranges.len();
                    self.data(&input[r.clone()], last).await?;
                }
                if progress.done {
                    self.data(&[], true).await?;
                }
                Ok(input.len())
            }
        }
    }

    /// Sends END_STREAM if the body's framing did not (a body that ended at the source's end).
    pub(crate) async fn end(&mut self) -> Result<(), SinkError> {
        match *self.sent {
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
            self.stream
                .send_data(Bytes::copy_from_slice(now), last)
                .map_err(|e| SinkError::Io(io::Error::other(e)))?;
            *self.sent |= last;
            data = rest;
        }
        if end && !*self.sent {
            self.stream
                .send_data(Bytes::new(), true)
                .map_err(|e| SinkError::Io(io::Error::other(e)))?;
            *self.sent = true;
        }
        Ok(())
    }

    /// Waits for send capacity for up to `want` bytes under `write_timeout` of no progress, watching
    /// the response: an answer that arrives meanwhile is kept and ends the wait with an error (the
    /// session then reports an early answer).
    async fn capacity(&mut self, want: usize) -> Result<usize, SinkError> {
        self.stream.reserve_capacity(want);
        let stream = &mut *self.stream;
        let response = &mut *self.response;
        let early = &mut *self.early;
        let wait = poll_fn(|cx| {
            if let Some(f) = response.as_mut() {
                if let Some(r) = ready_now(f, cx) {
                    *response = None;
                    *early = Some(r);
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
