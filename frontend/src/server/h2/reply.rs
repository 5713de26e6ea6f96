//! [`H2Reply`]: the response side of one HTTP/2 stream (DESIGN.md "HTTP/2"): HEADERS and DATA frames
//! with hop-by-hop fields dropped, each DATA frame waiting for the client's flow-control window under
//! the `send` deadline (a client that stops reading pauses this stream's upstream read, nothing else).
//! A reply dropped before its response ended resets its stream (RST_STREAM INTERNAL_ERROR, RFC 9113
//! §8.1); the connection goes on. It is the response half of a split [`super::session::H2Session`]
//! ([`crate::server::Session::split`]), so it runs beside the stream's request body.

use std::{future::poll_fn, rc::Rc, time::Duration};

use bytes::Buf;

use edge_core::{
    buf::{self, RecvBuf},
    clock::{after, coarse_now, timeout_at},
    http::grpc::{push_message, Code},
    http::{
        framing::Body,
        head::{Field, ResponseHead},
        view::ResponseView,
    },
    pace::RelayBudget,
    websocket,
};
use h2::{server::SendResponse, SendStream};

use super::chunk::{Chunk, Moved};
use super::session::Text;
use crate::{
    request::ResponseFields,
    respond::SendFailure,
    server::h1::{body::ResponseBody, encode::OutFraming},
    server::{RelayError, Respond, Started},
};

/// The response side of one HTTP/2 stream.
pub struct H2Reply<'a> {
    respond: SendResponse<Chunk>,
    pub(super) send: Option<SendStream<Chunk>>,
    /// The stream's END_STREAM went out: the response is complete.
    pub(super) ended: bool,
    relay: ResponseBody,
    send_timeout: Duration,
    /// When this stream's body bytes last left h2 (made with the first body chunk).
    moved: Option<Moved>,
    /// The fields edge adds to the forwarded response's heads (phase 6 of the request pipeline).
    pub(super) added: ResponseFields<'a>,
    /// A WebSocket stream (RFC 8441): the Sec-WebSocket-Key edge sent upstream for it.
    pub(super) websocket: Option<[u8; websocket::KEY_LEN]>,
    /// The connection's relay-memory share ([`Respond::relay_share`]).
    pub(super) share: Option<Rc<RelayBudget>>,
}

impl<'a> H2Reply<'a> {
    /// The response side of a stream answered through `respond`; `send_timeout` is the `send` deadline.
    pub(super) fn new(respond: SendResponse<Chunk>, send_timeout: Duration) -> Self {
        H2Reply {
            respond,
            send: None,
            ended: false,
            relay: ResponseBody::new(Body::None, OutFraming::None),
            send_timeout,
            moved: None,
            added: ResponseFields::default(),
            websocket: None,
            share: None,
        }
    }

    /// Whether the response head went out (a later failure can only reset the stream).
    pub fn started(&self) -> bool {
        self.send.is_some()
    }

    /// Response body payload bytes sent so far.
    pub(super) fn payload(&self) -> u64 {
        self.relay.payload()
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

    /// Answers a gRPC call with edge's own gRPC answer (DESIGN.md "Status codes", its gRPC paragraph):
    /// trailers-only, one HEADERS frame with END_STREAM carrying `:status 200`, `content-type:
    /// application/grpc`, `grpc-status: code`, `grpc-message` (`message` percent-encoded), `fields`
    /// (`retry-after`, `x-request-id`) and `lines`, a route's `response_headers` (those of an admitted
    /// stream when empty).
    ///
    /// # Errors
    /// The client reset the stream.
    pub fn answer_grpc(
        &mut self,
        code: Code,
        message: &[u8],
        fields: &[(&str, &[u8])],
        lines: &[u8],
    ) -> Result<(), SendFailure> {
        let mut encoded = buf::take();
        push_message(&mut encoded, message);
        let resp = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .header("grpc-status", code.as_str())
            .header("grpc-message", &encoded[..]);
        buf::give(encoded);
        let lines = match lines {
            b"" => self.added.rule_lines(),
            lines => lines,
        };
        let resp = fields
            .iter()
            .map(|&(name, value)| (name.as_bytes(), value))
            .chain(crate::request::response::field_lines(lines))
            .fold(resp, |resp, (name, value)| resp.header(name, value));
        let resp = resp.body(()).map_err(|_| SendFailure::Closed)?;
        let stream = self
            .respond
            .send_response(resp, true)
            .map_err(|_| SendFailure::Closed)?;
        self.send = Some(stream);
        self.ended = true;
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
        // A de-chunked body's trailer section ends the stream as trailing HEADERS (RFC 9113 §8.1).
        let trailers = match end {
            true => self
                .relay
                .trailers()
                .and_then(edge_core::io::h2_stream::trailer_map),
            false => None,
        };
        if chunk.remaining() > 0 || (end && trailers.is_none()) {
            stream
                .send_data(chunk, end && trailers.is_none())
                .map_err(|_| SendFailure::Closed)?;
        }
        if let Some(t) = trailers {
            stream.send_trailers(t).map_err(|_| SendFailure::Closed)?;
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
}

impl Drop for H2Reply<'_> {
    /// A response that did not end resets its stream (RST_STREAM INTERNAL_ERROR); no response at all is
    /// up to the stream's owner (it answers or resets).
    fn drop(&mut self) {
        if let (Some(s), false) = (self.send.as_mut(), self.ended) {
            s.send_reset(h2::Reason::INTERNAL_ERROR);
        }
    }
}

impl Respond for H2Reply<'_> {
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

    /// A WebSocket stream (RFC 8441) takes the `101` whose Sec-WebSocket-Accept answers the key edge
    /// sent (RFC 6455 §4.1); no other stream asks for a switch.
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

    /// A WebSocket stream's `200` for the upstream's `101` (RFC 8441 §5); HTTP/2 has no `101`
    /// (RFC 9113 §8.6), so any other stream refuses.
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
        // Trailers need a stream left open after the head.
        let empty = complete && out.remaining() == 0 && self.relay.trailers().is_none();
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

    /// Pass-through bodies read in chunks that follow the stream's pace, as HTTP/1.1 relays do.
    fn passthrough(&self) -> bool {
        self.relay.passthrough()
    }

    /// The connection's share ([`super::tasks::CONN_RELAY_SHARE`]): a stream's chunk grows with its
    /// pace like an HTTP/1.1 relay's, and the connection's streams take turns a chunk at a time
    /// (DESIGN.md "Memory under slow readers and large bodies": HTTP/2 streams obey the same rule per
    /// stream; h2 takes a stream's next chunk only once the last is gone,
    /// [`Respond::client_room`], so a stream whose window is shut holds one chunk).
    fn relay_share(&self) -> Option<Rc<RelayBudget>> {
        self.share.clone()
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

    /// The client reset the stream (RST_STREAM), or the connection ended.
    async fn client_gone(&mut self) {
        let _ = poll_fn(|cx| self.respond.poll_reset(cx)).await;
    }

    /// A stream's reset is the client's unambiguous word, and waiting for it is a poll of the stream
    /// state.
    fn abandonment_is_certain(&self) -> bool {
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
