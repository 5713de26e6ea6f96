//! [`H2Session`]: one HTTP/2 stream as a [`Session`] (DESIGN.md "HTTP/2"). It owns only its stream:
//! the request view is the HTTP/1.1-syntax head [`super::request`] wrote; the request body is an
//! [`H2Body`] (DATA frames forwarded upstream as the upstream takes them) and the response side an
//! [`H2Reply`] (HEADERS and DATA frames within the client's window under the `send` deadline). The two
//! are apart so that a full-duplex exchange runs them together ([`Session::split`]). A session dropped
//! before its response ended resets its stream (RST_STREAM INTERNAL_ERROR, RFC 9113 §8.1); the
//! connection goes on.

use std::{rc::Rc, time::Duration};

use edge_core::{
    buf::RecvBuf,
    http::{
        framing::{Body, RequestInfo},
        head::{Field, Fields, RequestHead, ResponseHead},
        view::{RequestView, ResponseView, Version},
    },
    io::body::{BodySource, RequestSink, SendBodyError},
    pace::RelayBudget,
};
use h2::{server::SendResponse, RecvStream};
use monoio::time::Instant;

pub use super::body::H2Body;
pub use super::chunk::Chunk;
pub use super::reply::H2Reply;
use crate::{
    request::ResponseFields,
    respond::{Failure, SendFailure},
    server::{BodyFailure, RelayError, Respond, Session, Started},
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
    body: H2Body,
    reply: H2Reply<'a>,
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
        let done = req.info.body == Body::None || body.is_end_stream();
        let chunked = req.info.body == Body::Chunked;
        H2Session {
            req,
            fields,
            body: H2Body::new(body, done, chunked, max_body, deadline),
            reply: H2Reply::new(respond, send_timeout),
        }
    }

    /// The session with the fields edge adds to the forwarded response's heads, as admission decided
    /// them ([`crate::request::Admitted::response`]).
    pub fn adding(mut self, added: ResponseFields<'a>) -> Self {
        self.reply.added = added;
        self
    }

    /// The session whose relays take their chunks from `share`, the connection's relay-memory share
    /// ([`crate::server::Respond::relay_share`]).
    pub fn sharing(mut self, share: &Rc<RelayBudget>) -> Self {
        self.reply.share = Some(share.clone());
        self
    }

    /// The session of a WebSocket stream (RFC 8441) whose upgrade head carries `key` as its
    /// Sec-WebSocket-Key: its upstream's `101` is checked against the key and answered `200`.
    pub fn websocket(mut self, key: [u8; edge_core::websocket::KEY_LEN]) -> Self {
        self.reply.websocket = Some(key);
        self
    }

    /// A switched WebSocket stream's two sides, for its tunnel ([`super::tunnel`]); `None` for any
    /// other stream, or once its response ended.
    pub fn tunnel_sides(&mut self) -> Option<(&mut RecvStream, &mut h2::SendStream<Chunk>)> {
        match (
            self.reply.websocket,
            self.reply.send.as_mut(),
            self.reply.ended,
        ) {
            (Some(_), Some(send), false) => Some((&mut self.body.body, send)),
            _ => None,
        }
    }

    /// The tunnel ended the stream (END_STREAM or a reset went out).
    pub fn tunnel_ended(&mut self) {
        self.reply.ended = true;
    }

    /// Whether the response head went out (a later failure can only reset the stream).
    pub fn started(&self) -> bool {
        self.reply.started()
    }

    /// See [`H2Reply::answer`].
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
        self.reply
            .answer(status, body, retry_after, head_only, id)
            .await
    }

    /// See [`H2Reply::answer_with`].
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
        self.reply
            .answer_with(status, fields, text, head_only, lines)
            .await
    }

    /// Answers a gRPC call with edge's own trailers-only gRPC answer ([`H2Reply::answer_grpc`]).
    ///
    /// # Errors
    /// The client reset the stream.
    pub fn answer_grpc(
        &mut self,
        code: edge_core::http::grpc::Code,
        message: &[u8],
        fields: &[(&str, &[u8])],
        lines: &[u8],
    ) -> Result<(), SendFailure> {
        self.reply.answer_grpc(code, message, fields, lines)
    }
}

impl BodySource for H2Session<'_> {
    type Error = BodyFailure;

    /// See [`H2Body`].
    fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(), SendBodyError<BodyFailure>>> {
        self.body.forward_rest(sink, write_timeout)
    }
}

impl<'a> Session for H2Session<'a> {
    type Body = H2Body;
    type Reply = H2Reply<'a>;

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
        self.body.done
    }

    fn expects_continue(&self) -> bool {
        self.req.info.expect_continue && !self.body.done
    }

    fn take_fields(&mut self) -> Fields {
        std::mem::take(&mut self.fields)
    }

    fn put_fields(&mut self, fields: Fields) {
        self.fields = fields;
    }

    fn body_bytes(&self) -> (u64, u64) {
        (self.body.received, self.reply.payload())
    }

    /// The stream's `RecvStream` and its response side.
    fn split(&mut self, request: Duration) -> Option<(&mut H2Body, &mut H2Reply<'a>)> {
        self.body.idle = Some(request);
        Some((&mut self.body, &mut self.reply))
    }
}

/// Every response send goes to the stream's [`H2Reply`].
impl Respond for H2Session<'_> {
    fn send_interim(
        &mut self,
        resp: &ResponseView<'_>,
    ) -> impl std::future::Future<Output = Result<(), SendFailure>> {
        self.reply.send_interim(resp)
    }

    fn send_continue(&mut self) -> impl std::future::Future<Output = Result<(), SendFailure>> {
        self.reply.send_continue()
    }

    fn switch_accepted(&self, resp: &ResponseView<'_>) -> bool {
        self.reply.switch_accepted(resp)
    }

    fn send_switching(
        &mut self,
        resp: &ResponseView<'_>,
    ) -> impl std::future::Future<Output = Result<(), SendFailure>> {
        self.reply.send_switching(resp)
    }

    fn send_head(
        &mut self,
        head: &ResponseHead,
        fields: &[Field],
        upstream: Body,
        close: bool,
        rest: &mut RecvBuf,
    ) -> impl std::future::Future<Output = Result<Started, RelayError>> {
        self.reply.send_head(head, fields, upstream, close, rest)
    }

    fn passthrough(&self) -> bool {
        self.reply.passthrough()
    }

    fn relay_share(&self) -> Option<std::rc::Rc<edge_core::pace::RelayBudget>> {
        self.reply.relay_share()
    }

    fn client_room(&mut self) -> impl std::future::Future<Output = Result<(), SendFailure>> {
        self.reply.client_room()
    }

    fn window_paced(&self) -> bool {
        self.reply.window_paced()
    }

    fn client_gone(&mut self) -> impl std::future::Future<Output = ()> {
        self.reply.client_gone()
    }

    fn abandonment_is_certain(&self) -> bool {
        self.reply.abandonment_is_certain()
    }

    fn send_body(
        &mut self,
        rest: &mut RecvBuf,
    ) -> impl std::future::Future<Output = Result<bool, RelayError>> {
        self.reply.send_body(rest)
    }

    fn end_body(&mut self) -> impl std::future::Future<Output = Result<(), SendFailure>> {
        self.reply.end_body()
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
