//! [`H2Session`]: one HTTP/2 stream as a [`Session`] (DESIGN.md "HTTP/2"). It owns only its stream:
//! the request view is the HTTP/1.1-syntax head [`super::request`] wrote; the body source forwards
//! DATA frames upstream (chunked when the client sent no Content-Length), releasing flow-control
//! capacity only once the bytes are written upstream, so a slow upstream slows only its client's
//! stream; sends become HEADERS and DATA frames with hop-by-hop fields dropped, each DATA frame
//! waiting for the client's flow-control window under the `send` deadline (a client that stops
//! reading pauses this stream's upstream read, nothing else). A session dropped before its response
//! ended resets its stream (RST_STREAM INTERNAL_ERROR, RFC 9113 §8.1); the connection goes on.
//!
//! A WebSocket stream (RFC 8441: an extended CONNECT, sent upstream as the HTTP/1.1 opening handshake
//! with a key of edge's own) takes the upstream's `101` only with the matching Sec-WebSocket-Accept,
//! answers it with `200`, and then lends its stream's two sides to the tunnel ([`super::tunnel`]).

use std::{future::poll_fn, time::Duration};

use bytes::{Buf, Bytes};

use edge_core::{
    buf::{self, RecvBuf},
    clock::{after, coarse_now, timeout, timeout_at},
    http::{
        framing::{Body, RequestInfo},
        head::{Field, Fields, RequestHead, ResponseHead},
        view::{RequestView, ResponseView, Version},
        websocket,
    },
    io::body::{BodySource, SendBodyError, SinkError},
    metrics::InvalidReason,
};
use h2::{server::SendResponse, RecvStream, SendStream};
use monoio::{
    io::{AsyncWriteRent, AsyncWriteRentExt},
    time::Instant,
};

pub use super::chunk::Chunk;
use super::chunk::Moved;
use crate::{
    request::ResponseFields,
    respond::{Failure, SendFailure},
    server::h1::{body::ResponseBody, encode::OutFraming},
    server::{BodyFailure, RelayError, Session, Started},
};

/// The request side of one stream, as [`super::stream`] parsed it.
pub struct Request<'a> {
    /// The HTTP/1.1-syntax head's bytes.
    pub buf: &'a [u8],
    /// The head parsed from `buf`.
    pub head: &'a RequestHead,
    /// Framing and semantics of the request.
    pub info: RequestInfo,
}

/// One HTTP/2 stream, borrowed by the orchestrator for the exchange.
pub struct H2Session<'a> {
    req: Request<'a>,
    fields: Fields,
    body: RecvStream,
    /// Body bytes taken so far, against `max_body`.
    received: u64,
    max_body: u64,
    body_done: bool,
    respond: SendResponse<Chunk>,
    send: Option<SendStream<Chunk>>,
    /// The stream's END_STREAM went out: the response is complete.
    ended: bool,
    relay: ResponseBody,
    send_timeout: Duration,
    /// When this stream's body bytes last left h2 (made with the first body chunk).
    moved: Option<Moved>,
    deadline: Instant,
    /// The fields edge adds to the forwarded response's heads (phase 6 of the request pipeline).
    added: ResponseFields<'a>,
    /// A WebSocket stream's Sec-WebSocket-Key, sent upstream ([`H2Session::websocket`]).
    websocket: Option<[u8; websocket::KEY_LEN]>,
}

impl<'a> H2Session<'a> {
    /// The session of a stream whose head is `req` (its fields in `fields`). `max_body` is
    /// `max_body_bytes` (u64::MAX for none), `send_timeout` the `send` deadline, `deadline` the stream's
    /// `request` deadline.
    pub fn new(
        req: Request<'a>,
        fields: Fields,
        body: RecvStream,
        respond: SendResponse<Chunk>,
        max_body: u64,
        send_timeout: Duration,
        deadline: Instant,
    ) -> Self {
        let body_done = req.info.body == Body::None || body.is_end_stream();
        H2Session {
            req,
            fields,
            body,
            received: 0,
            max_body,
            body_done,
            respond,
            send: None,
            ended: false,
            relay: ResponseBody::new(Body::None, OutFraming::None),
            send_timeout,
            moved: None,
            deadline,
            added: ResponseFields::default(),
            websocket: None,
        }
    }

    /// The session of a WebSocket stream (RFC 8441) whose forwarded head carries `key` as its
    /// Sec-WebSocket-Key: a `101` answering it switches the stream to a tunnel.
    pub fn websocket(mut self, key: [u8; websocket::KEY_LEN]) -> Self {
        self.websocket = Some(key);
        self
    }

    /// The stream's two sides for the tunnel after the switch (RFC 8441 §5): the client's DATA and the
    /// response's DATA. `None` unless the switch's `200` went out.
    pub fn tunnel_sides(&mut self) -> Option<(&mut RecvStream, &mut SendStream<Chunk>)> {
        match (self.websocket, self.send.as_mut(), self.ended) {
            (Some(_), Some(send), false) => Some((&mut self.body, send)),
            _ => None,
        }
    }

    /// The tunnel ended the stream (END_STREAM or a reset went out): dropping the session sends
    /// nothing more.
    pub fn tunnel_ended(&mut self) {
        self.ended = true;
    }

    /// The session with the fields edge adds to the forwarded response's heads, as admission decided
    /// them ([`crate::request::Admitted::response`]).
    pub fn adding(mut self, added: ResponseFields<'a>) -> Self {
        self.added = added;
        self
    }

    /// Whether the response head went out (a later failure can only reset the stream).
    pub fn started(&self) -> bool {
        self.send.is_some()
    }

    /// Answers the stream with a complete response edge made itself (`status`, `text/plain` `body`;
    /// `retry_after` adds `Retry-After: 1`; `head_only` for HEAD) carrying the request's `X-Request-Id`
    /// (`id`; none when empty) and, for an admitted stream, its route's `response_headers`.
    ///
    /// # Errors
    /// The client reset the stream or did not take the body within `send`.
    pub async fn answer(
        &mut self,
        status: u16,
        body: &str,
        retry_after: bool,
        head_only: bool,
        id: &[u8],
    ) -> Result<(), SendFailure> {
        let fields = [("retry-after", &b"1"[..]), ("x-request-id", id)];
        let fields = match (retry_after, id.is_empty()) {
            (true, false) => &fields[..],
            (true, true) => &fields[..1],
            (false, false) => &fields[1..],
            (false, true) => &fields[..0],
        };
        let text = Text {
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes(),
        };
        let lines = self.added.rule_lines();
        self.answer_with(status, fields, text, head_only, lines)
            .await
    }

    /// [`Self::answer`] with `fields` (name, value) added to the head: `Location` of a redirect,
    /// `Allow` of an OPTIONS answer, `Retry-After`, `X-Request-Id`; then `lines`, a route's
    /// `response_headers` as `Name: value\r\n` lines.
    ///
    /// # Errors
    /// The client reset the stream or did not take the body within `send`.
    pub async fn answer_with(
        &mut self,
        status: u16,
        fields: &[(&str, &[u8])],
        text: Text<'_>,
        head_only: bool,
        lines: &[u8],
    ) -> Result<(), SendFailure> {
        let body = text.body;
        let mut resp = http::Response::builder()
            .status(status)
            .header("content-length", body.len())
            .header("cache-control", "no-store");
        if !body.is_empty() {
            resp = resp.header("content-type", text.content_type);
        }
        for (name, value) in fields {
            resp = resp.header(*name, *value);
        }
        for (name, value) in crate::request::response::field_lines(lines) {
            resp = resp.header(name, value);
        }
        let resp = resp.body(()).map_err(|_| SendFailure::Closed)?;
        let empty = head_only || body.is_empty();
        let stream = self
            .respond
            .send_response(resp, empty)
            .map_err(|_| SendFailure::Closed)?;
        self.send = Some(stream);
        self.ended = empty;
        if !empty {
            let mut out = buf::take();
            out.extend_from_slice(body);
            self.send_data(Chunk::new(out), true).await?;
        }
        Ok(())
    }

    /// Sends `chunk` as DATA (h2 cuts it into frames within the client's flow-control window, RFC 9113
    /// §6.9); `end` sets END_STREAM on the last. It first waits until the stream has send capacity: the
    /// client's window is open and h2 holds less than `SEND_BUFFER` of this stream's earlier bytes, so a
    /// stream buffers at most one chunk beyond what the client took. The wait is under the `send`
    /// deadline counted as time without progress ([`crate::server::send`]): the capacity growing, or
    /// h2 taking bytes of the chunks already handed to it (each time the client's window moves),
    /// restarts it.
    async fn send_data(&mut self, chunk: Chunk, end: bool) -> Result<(), SendFailure> {
        if self.send.is_none() {
            return Err(SendFailure::Closed);
        }
        let chunk = match chunk.remaining() {
            0 => chunk,
            _ => chunk.telling(self.moved.get_or_insert_with(Moved::now)),
        };
        if chunk.remaining() > 0 {
            self.wait_capacity(chunk.remaining()).await?;
        }
        let Some(stream) = self.send.as_mut() else {
            return Err(SendFailure::Closed);
        };
        if chunk.remaining() > 0 || end {
            stream
                .send_data(chunk, end)
                .map_err(|_| SendFailure::Closed)?;
        }
        self.ended |= end;
        Ok(())
    }

    /// Waits until the stream has send capacity for up to `want` more bytes (see
    /// [`H2Session::send_data`]), under the `send` deadline counted as time without progress.
    async fn wait_capacity(&mut self, want: usize) -> Result<(), SendFailure> {
        let send = self.send_timeout;
        let Some(stream) = self.send.as_mut() else {
            return Err(SendFailure::Closed);
        };
        stream.reserve_capacity(want);
        let mut until = after(send);
        while stream.capacity() == 0 {
            match timeout_at(until, poll_fn(|cx| stream.poll_capacity(cx))).await {
                Ok(Some(Ok(_))) => until = after(send),
                Ok(_) => return Err(SendFailure::Closed),
                // Bytes of earlier chunks that left since push the deadline to `send` after them.
                Err(_) => match self.moved.as_ref().map(|m| m.last() + send) {
                    Some(t) if t > coarse_now() => until = t,
                    _ => return Err(SendFailure::Timeout),
                },
            }
        }
        Ok(())
    }

    /// Sends the body bytes buffered in `rest` of a pass-through body; returns whether the body is
    /// complete. When every buffered byte is body (the usual case), `rest`'s storage itself becomes the
    /// DATA payload: no copy, and the buffer goes back to its pool once h2 has written it.
    async fn send_passthrough(&mut self, rest: &mut RecvBuf) -> Result<bool, RelayError> {
        let n = self
            .relay
            .scan(rest.data())
            .map_err(|_| RelayError::BadBody)?;
        let done = self.relay.done();
        let chunk = if n == rest.len() && n > 0 {
            // No storage replaces it: the relay holds none while h2 holds the chunk, and its next
            // read takes a pooled buffer of its paced size ([`RecvBuf::fill_sized`]).
            let (storage, start) = rest.swap_storage(Vec::new());
            Chunk::at(storage, start)
        } else {
            let mut out = Vec::with_capacity(n);
            out.extend_from_slice(&rest.data()[..n]);
            rest.consume(n);
            Chunk::new(out)
        };
        if chunk.remaining() > 0 || done {
            self.send_data(chunk, done)
                .await
                .map_err(RelayError::Client)?;
        }
        Ok(done)
    }

    /// Forwards one DATA frame's bytes to `sink` (chunk-framed when `chunked`) under `write_timeout`.
    async fn forward<W: AsyncWriteRent>(
        sink: &mut W,
        data: &Bytes,
        chunked: bool,
        write_timeout: Duration,
    ) -> Result<(), SinkError> {
        let mut out = match data.len() + 32 > buf::BUF_SIZE {
            true => buf::take_large(),
            false => buf::take(),
        };
        if chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        out.extend_from_slice(data);
        if chunked {
            out.extend_from_slice(b"\r\n");
        }
        let (res, out) = match timeout(write_timeout, sink.write_all(out)).await {
            Ok(r) => r,
            Err(_) => return Err(SinkError::Timeout),
        };
        buf::give(out);
        res.map(|_| ()).map_err(SinkError::Io)
    }
}

impl Drop for H2Session<'_> {
    /// A response that did not end resets its stream (RST_STREAM INTERNAL_ERROR); no response at all is
    /// up to the stream's owner (it answers or resets).
    fn drop(&mut self) {
        if let (Some(s), false) = (self.send.as_mut(), self.ended) {
            s.send_reset(h2::Reason::INTERNAL_ERROR);
        }
    }
}

impl BodySource for H2Session<'_> {
    type Error = BodyFailure;

    /// DATA frames read under the stream's `request` deadline, each written upstream under
    /// `write_timeout`, then its flow-control capacity released (RFC 9113 §6.9): the client sends more
    /// only as fast as the upstream takes it.
    async fn forward_rest<W: AsyncWriteRent>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        let source = |f| SendBodyError::Source(f);
        let chunked = self.req.info.body == Body::Chunked;
        while !self.body_done {
            let data = match timeout_at(self.deadline, self.body.data()).await {
                Err(_) => return Err(source(BodyFailure::Client(Failure::RequestTimeout))),
                Ok(None) => {
                    self.body_done = true;
                    break;
                }
                Ok(Some(Err(_))) => return Err(source(BodyFailure::ClientGone)),
                Ok(Some(Ok(d))) => d,
            };
            self.received += data.len() as u64;
            if self.received > self.max_body {
                let f = Failure::Invalid(InvalidReason::BodyTooLarge);
                return Err(source(BodyFailure::Client(f)));
            }
            if !data.is_empty() {
                Self::forward(sink, &data, chunked, write_timeout)
                    .await
                    .map_err(SendBodyError::Sink)?;
                let _ = self.body.flow_control().release_capacity(data.len());
            }
            self.body_done = self.body.is_end_stream();
        }
        if chunked {
            let last = Bytes::new();
            Self::forward(sink, &last, true, write_timeout)
                .await
                .map_err(SendBodyError::Sink)?;
        }
        Ok(())
    }
}

impl Session for H2Session<'_> {
    fn request(&self) -> RequestView<'_> {
        RequestView {
            buf: self.req.buf,
            head: self.req.head,
            fields: &self.fields,
            version: Version::H2,
        }
    }

    fn body_prefix(&mut self, _out: &mut Vec<u8>) -> Result<(), Failure> {
        // No DATA is read before the upstream head is written: the body streams in `forward_rest`.
        Ok(())
    }

    fn body_done(&self) -> bool {
        self.body_done
    }

    fn expects_continue(&self) -> bool {
        self.req.info.expect_continue && !self.body_done
    }

    fn take_fields(&mut self) -> Fields {
        std::mem::take(&mut self.fields)
    }

    fn put_fields(&mut self, fields: Fields) {
        self.fields = fields;
    }

    async fn send_interim(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        let Some(interim) =
            super::head::response(resp.buf, resp.head.status, resp.fields, &self.added, false)
        else {
            return Ok(());
        };
        self.respond
            .send_informational(interim)
            .map_err(|_| SendFailure::Closed)
    }

    async fn send_continue(&mut self) -> Result<(), SendFailure> {
        let interim = http::Response::builder()
            .status(100)
            .body(())
            .map_err(|_| SendFailure::Closed)?;
        self.respond
            .send_informational(interim)
            .map_err(|_| SendFailure::Closed)
    }

    /// A WebSocket stream's `101` is its key's (RFC 6455 §4.1: exactly one Sec-WebSocket-Accept, the
    /// key's); other streams never asked for a switch (Upgrade is refused in their requests).
    fn switch_accepted(&self, resp: &ResponseView<'_>) -> bool {
        let Some(key) = self.websocket else {
            return false;
        };
        let mut accepts = resp
            .fields
            .iter()
            .filter(|f| f.name(resp.buf).eq_ignore_ascii_case(super::head::ACCEPT));
        match (accepts.next(), accepts.next()) {
            (Some(f), None) => websocket::accepts(&key, f.value(resp.buf)),
            _ => false,
        }
    }

    /// HTTP/2 has no 101 (RFC 9113 §8.6): a WebSocket stream's switch is its `200` (RFC 8441 §5), with
    /// the 101's end-to-end fields (Sec-WebSocket-Protocol, Sec-WebSocket-Extensions, Set-Cookie...)
    /// less Sec-WebSocket-Accept, and what edge adds; the stream stays open for the tunnel.
    async fn send_switching(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        if self.websocket.is_none() {
            return Err(SendFailure::Closed);
        }
        let head = super::head::response(resp.buf, 200, resp.fields, &self.added, true)
            .ok_or(SendFailure::Closed)?;
        let stream = self
            .respond
            .send_response(head, false)
            .map_err(|_| SendFailure::Closed)?;
        self.send = Some(stream);
        self.ended = false;
        Ok(())
    }

    async fn send_head(
        &mut self,
        head: &ResponseHead,
        fields: &[Field],
        upstream: Body,
        _close: bool,
        rest: &mut RecvBuf,
    ) -> Result<Started, RelayError> {
        let framing = match upstream {
            Body::None => OutFraming::None,
            Body::Length(n) => OutFraming::Length(n),
            // DATA frames delimit the body: a chunked upstream body is de-chunked.
            Body::Chunked | Body::CloseDelimited => OutFraming::Close,
        };
        self.relay = ResponseBody::new(upstream, framing);
        let resp = super::head::response(rest.data(), head.status, fields, &self.added, false)
            .ok_or(RelayError::BadBody)?;
        rest.consume(head.len);
        let passthrough = self.relay.passthrough();
        let (complete, out) = match passthrough && !rest.is_empty() {
            // The body bytes that came with the head: the head's buffer itself becomes the first
            // DATA payload (no copy, no second buffer), as in [`H2Session::send_passthrough`].
            true => {
                let n = self
                    .relay
                    .scan(rest.data())
                    .map_err(|_| RelayError::BadBody)?;
                let complete = self.relay.done();
                let chunk = match n == rest.len() {
                    true => {
                        let (storage, start) = rest.swap_storage(Vec::new());
                        Chunk::at(storage, start)
                    }
                    false => {
                        let mut out = buf::take_sized(n);
                        out.extend_from_slice(&rest.data()[..n]);
                        rest.consume(n);
                        Chunk::new(out)
                    }
                };
                (complete, chunk)
            }
            false => {
                let mut out = buf::take_large();
                let complete = self
                    .relay
                    .take_available(rest, &mut out)
                    .map_err(|_| RelayError::BadBody)?;
                (complete, Chunk::new(out))
            }
        };
        let empty = complete && out.remaining() == 0;
        let stream = self
            .respond
            .send_response(resp, empty)
            .map_err(|_| RelayError::Client(SendFailure::Closed))?;
        self.send = Some(stream);
        self.ended = empty;
        if !empty {
            self.send_data(out, complete)
                .await
                .map_err(RelayError::Client)?;
        }
        Ok(Started {
            complete,
            close: false,
        })
    }

    fn body_bytes(&self) -> (u64, u64) {
        (self.received, self.relay.payload())
    }

    /// Pass-through bodies read in chunks that follow the stream's pace ([`Session::max_chunk`]).
    fn passthrough(&self) -> bool {
        self.relay.passthrough()
    }

    /// A stream's chunks are bounded by its window (DESIGN.md "Memory under slow readers and large
    /// bodies": HTTP/2 streams obey the same rule per stream, bounded by the stream's window): 16 KiB,
    /// one DATA frame at the default `SETTINGS_MAX_FRAME_SIZE` (RFC 9113 §4.2, §6.5.2), and h2 takes
    /// the next only once the last is gone ([`Session::client_room`]). At 640 concurrent 1 MiB
    /// streams, 64 KiB chunks held 1.4x the memory of 16 KiB ones (bench/README.md "HTTP/2").
    fn max_chunk(&self) -> usize {
        buf::BUF_SIZE
    }

    /// Waits, holding no buffer of the relay's, until h2 let go of the stream's last chunk (its bytes
    /// went to the connection's write pump as the stream's window allowed): a stream holds one chunk.
    /// Under the `send` deadline, counted from the chunk's bytes last moving.
    async fn client_room(&mut self) -> Result<(), SendFailure> {
        let Some(moved) = self.moved.clone() else {
            return Ok(());
        };
        let send = self.send_timeout;
        let mut taken = std::pin::pin!(moved.all_taken());
        loop {
            let until = moved.last() + send;
            if until <= coarse_now() {
                return Err(SendFailure::Timeout);
            }
            if timeout_at(until, taken.as_mut()).await.is_ok() {
                return Ok(());
            }
        }
    }

    fn window_paced(&self) -> bool {
        true
    }

    async fn send_body(&mut self, rest: &mut RecvBuf) -> Result<bool, RelayError> {
        if self.relay.passthrough() {
            return self.send_passthrough(rest).await;
        }
        let mut out = buf::take_large();
        let done = self
            .relay
            .take_available(rest, &mut out)
            .map_err(|_| RelayError::BadBody)?;
        if !out.is_empty() || done {
            self.send_data(Chunk::new(out), done)
                .await
                .map_err(RelayError::Client)?;
        } else {
            buf::give(out);
        }
        Ok(done)
    }

    async fn end_body(&mut self) -> Result<(), SendFailure> {
        let mut out = Vec::new();
        self.relay.finish(&mut out);
        self.send_data(Chunk::new(out), true).await
    }
}

/// A body edge answers with, and its Content-Type.
#[derive(Clone, Copy)]
pub struct Text<'a> {
    /// The Content-Type (sent only with a body).
    pub content_type: &'a str,
    /// The body.
    pub body: &'a [u8],
}
