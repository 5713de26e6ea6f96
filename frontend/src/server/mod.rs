//! The downstream session seam (DESIGN.md "Layout", `frontend/src/server`): one interface for one
//! downstream request, whatever protocol carried it. The orchestrator ([`crate::proxy`]) is written once
//! against [`Session`]; [`h1`] implements it for HTTP/1.1 (the keep-alive loop, inbound deadlines,
//! response framing, de- and re-chunking, `100 Continue`, lingering close). A protocol's wire bytes are
//! written only by its session.
//!
//! An HTTP/2 session implements the same trait per stream: its request view is the stream's
//! pseudo-headers and fields as an HTTP/1.1-syntax head ([`edge_core::http::view`]), its body source
//! frames DATA as the upstream request body, and its sends become HEADERS and DATA frames (many sessions
//! share one connection; each owns only its stream).

pub mod h1;
pub mod h2;
mod no_duplex;
pub mod send;

pub use no_duplex::NoDuplex;

use std::{future::Future, time::Duration};

use edge_core::{
    buf::RecvBuf,
    http::{
        framing::Body,
        head::{Field, Fields, ResponseHead},
        view::{RequestView, ResponseView},
    },
    io::body::BodySource,
};

use crate::respond::{Failure, SendFailure};

/// Why the request body could not be taken from the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFailure {
    /// Answered with an error response (400 `bad_chunk`, 413, 408): nothing of the response was sent.
    Client(Failure),
    /// The client closed or reset the connection mid-body; logged at debug.
    ClientGone,
}

/// Why relaying the response to the client stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayError {
    /// The client could not be written to (closed, or no progress within `send`).
    Client(SendFailure),
    /// The upstream's body framing is malformed (502 before the head is out, truncation after).
    BadBody,
}

/// How the response head went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Started {
    /// The whole body went with the head.
    pub complete: bool,
    /// The connection closes after this response (asked for, or the session's framing needs it).
    pub close: bool,
}

/// One downstream request, as the orchestrator sees it. Every send is bounded by the client's `send`
/// deadline inside the session.
///
/// Order of use: [`Session::request`] (to build the upstream head), [`Session::body_prefix`], then the
/// body through [`BodySource`], interim responses, the response head, body and end.
pub trait Session: BodySource<Error = BodyFailure> + Respond {
    /// The request-body half of [`Session::split`]; [`NoDuplex`] where the session cannot split.
    type Body: BodySource<Error = BodyFailure>;
    /// The response half of [`Session::split`]; [`NoDuplex`] where the session cannot split.
    type Reply: Respond;

    /// The request head. Valid until [`Session::body_prefix`].
    fn request(&self) -> RequestView<'_>;

    /// Consumes the head and moves the body bytes that came with it (at most one pooled buffer's worth)
    /// to `out`, in the framing declared upstream.
    ///
    /// # Errors
    /// As the body's framing and limit checks (400 `bad_chunk`, 413).
    fn body_prefix(&mut self, out: &mut Vec<u8>) -> Result<(), Failure>;

    /// Whether the whole request body has been taken.
    fn body_done(&self) -> bool;

    /// Whether the client asked for `100 Continue` before the rest of its body (RFC 9110 §10.1.1; never
    /// an HTTP/1.0 client). Asked after [`Session::body_prefix`]; the orchestrator waits for the go-ahead
    /// only when no body byte came with the head.
    fn expects_continue(&self) -> bool;

    /// The session's field scratch list, moved out so response heads can be parsed into it while the
    /// session is written to; give it back with [`Session::put_fields`].
    fn take_fields(&mut self) -> Fields;

    /// Gives the field list back (see [`Session::take_fields`]).
    fn put_fields(&mut self, fields: Fields);

    /// (request body payload bytes taken from the client, response body payload bytes sent to it) so
    /// far, for the access line (chunk framing not counted).
    fn body_bytes(&self) -> (u64, u64);

    /// Whether the request body went upstream by splice, from socket to socket
    /// (`edge_request_spliced_total`). `false` (the default) where the session never splices.
    fn body_spliced(&self) -> bool {
        false
    }

    /// The session's two directions as two disjoint borrows, for a full-duplex exchange
    /// ([`crate::proxy::duplex`]): the request body read from the client while the response is
    /// written to it, in one task. From the split on, the client `request` deadline of the body counts
    /// time without progress: each wait for more body bytes ends at the later of the request's
    /// deadline and `request` after it started (`request`: the route's `client_request_timeout`, else
    /// `server.timeouts.request`), so a stream whose data keeps flowing is never cut, a silent one is.
    ///
    /// `None` (the default) where the session cannot split cheaply: an HTTP/1.1 connection's transport
    /// is one `&mut` (a TLS session is one state machine for both directions), and an HTTP/1.1 client
    /// that sends a body while reading the answer is rare; such an exchange stays half duplex (an
    /// early answer ends the body and closes the connection). An HTTP/2 stream splits into its
    /// `RecvStream` and its response state.
    fn split(&mut self, request: Duration) -> Option<(&mut Self::Body, &mut Self::Reply)> {
        let _ = request;
        None
    }
}

/// The response side of one downstream request: interim responses, the final head and the body relay,
/// every send bounded by the client's `send` deadline inside the session. A [`Session`] is one; so is
/// the response half of a split session ([`Session::split`]).
pub trait Respond {
    /// Sends an interim (1xx other than 101) response, or drops it where the protocol has none (an
    /// HTTP/1.0 client).
    ///
    /// # Errors
    /// The client could not be written to.
    fn send_interim(
        &mut self,
        resp: &ResponseView<'_>,
    ) -> impl Future<Output = Result<(), SendFailure>>;

    /// Sends edge's own `100 Continue`.
    ///
    /// # Errors
    /// The client could not be written to.
    fn send_continue(&mut self) -> impl Future<Output = Result<(), SendFailure>>;

    /// Whether the session takes the upstream's `101` (`resp`) as the switch it asked for. The default
    /// takes any: an HTTP/1.1 client checks its own handshake. An HTTP/2 WebSocket stream (RFC 8441)
    /// sent a Sec-WebSocket-Key of edge's own and checks the Sec-WebSocket-Accept (RFC 6455 §4.1);
    /// a `101` refused here is 502 `bad_response`.
    fn switch_accepted(&self, resp: &ResponseView<'_>) -> bool {
        let _ = resp;
        true
    }

    /// Sends the `101 Switching Protocols` head of an upgrade (an HTTP/2 stream: its `200`, RFC 8441
    /// §5); the caller then tunnels.
    ///
    /// # Errors
    /// The client could not be written to.
    fn send_switching(
        &mut self,
        resp: &ResponseView<'_>,
    ) -> impl Future<Output = Result<(), SendFailure>>;

    /// Sends the final response head in the client's framing (chosen from `upstream`, the upstream's
    /// body framing). `rest` starts with that head (`head`, its fields in `fields`), followed by the body
    /// bytes that came with it; the head and those bytes are consumed as they go. `close` asks for the
    /// connection to close after the response.
    ///
    /// # Errors
    /// [`RelayError::BadBody`] before anything is written when the buffered body bytes are malformed;
    /// [`RelayError::Client`] when the client could not be written to.
    fn send_head(
        &mut self,
        head: &ResponseHead,
        fields: &[Field],
        upstream: Body,
        close: bool,
        rest: &mut RecvBuf,
    ) -> impl Future<Output = Result<Started, RelayError>>;

    /// Whether body bytes go out exactly as the upstream sent them (the relay may then read large).
    fn passthrough(&self) -> bool;

    /// The client's socket, where the session writes to one directly (HTTP/1.1): the relay asks it how
    /// much of a chunk the kernel still holds unsent ([`edge_core::io::progress::unsent`]) before it
    /// reads larger. `None` (the default) where writes go through a multiplexer (HTTP/2).
    fn client_socket(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Waits, holding no buffer, until the client's socket has room again
    /// ([`edge_core::io::Transport::writable`]): how a relay whose client stopped reading pauses
    /// (DESIGN.md "Memory under slow readers and large bodies"). Under the `send` deadline, counted as
    /// time without progress (the client reading counts: [`crate::server::send`]). The default returns
    /// at once: where writes go through a multiplexer (HTTP/2), the stream's flow control paces it.
    ///
    /// # Errors
    /// `Timeout` once `send` passed with the client reading nothing; `Closed` when the socket failed.
    fn client_room(&mut self) -> impl Future<Output = Result<(), SendFailure>> {
        std::future::ready(Ok(()))
    }

    /// Resolves once the client has abandoned the request while edge waits for the upstream's answer
    /// (DESIGN.md "HTTP/2 and gRPC upstreams": a client that resets its stream resets the upstream's
    /// at once): an HTTP/2 stream the client reset. The default never resolves: an HTTP/1.1
    /// connection's next bytes may be a pipelined request, and its close is seen when the response is
    /// written.
    ///
    /// # Cancel safety
    /// Cancel safe.
    fn client_gone(&mut self) -> impl Future<Output = ()> {
        std::future::pending()
    }

    /// Whether [`Respond::client_gone`] is watched while any upstream works on the request, not only
    /// an HTTP/2 upstream stream: where it resolving means the client abandoned the request beyond
    /// doubt and waiting on it costs no io operation, as an HTTP/2 stream's reset (RST_STREAM). `false`
    /// (the default) for an HTTP/1.1 client: its EOF may be a half-close after a whole request, which
    /// is still answered (DESIGN.md "Fault matrix", a.), and watching its socket costs a readiness
    /// wait per request.
    fn abandonment_is_certain(&self) -> bool {
        false
    }

    /// The pace the response's relay starts at where the client's connection has shown it already
    /// ([`edge_core::pace::RelayPace::carried`]: an HTTP/1.1 keep-alive connection whose last relay
    /// ended at the full pace). `None` (the default): the small size, or the connection's
    /// share's pace ([`Respond::relay_share`]).
    fn relay_start(&self) -> Option<edge_core::pace::RelayPace> {
        None
    }

    /// Tells the session the pace its relay ended at, after the whole body went out: the start of
    /// the connection's next relay ([`Respond::relay_start`]). The default keeps nothing.
    fn relay_ended(&mut self, _pace: edge_core::pace::RelayPace) {}

    /// The relay-memory share of the client connection the response goes out on, where several
    /// responses share one connection (HTTP/2: [`crate::server::h2`]'s streams): the relay takes its
    /// chunks from it as well as from the worker's budget. `None` (the default): the worker's budget
    /// only.
    fn relay_share(&self) -> Option<std::rc::Rc<edge_core::pace::RelayBudget>> {
        None
    }

    /// Whether the relay waits for [`Session::client_room`] after every chunk: where the chunk is handed
    /// to a multiplexer that sends it as the stream's window allows (HTTP/2), so that a stream holds
    /// about one chunk. `false` (the default): only a relay whose client fell behind waits.
    fn window_paced(&self) -> bool {
        false
    }

    /// Where the rest of the response body can go to the client by splice
    /// ([`edge_core::io::splice`]): the client's socket and the body bytes still to send, for a body of
    /// declared length going out unchanged on plain TCP with nothing of the response waiting in the
    /// session (HTTP/1.1). `None` (the default) otherwise: TLS, HTTP/2, chunked or close-delimited
    /// bodies.
    fn splice_sink(&self) -> Option<(std::os::fd::RawFd, u64)> {
        None
    }

    /// Counts `n` body bytes that went to the client by splice
    /// ([`Respond::splice_sink`]); returns whether the body is complete.
    fn spliced(&mut self, n: u64) -> bool {
        let _ = n;
        false
    }

    /// Relays the response body bytes at the start of `rest`; `Ok(true)` once the body is complete.
    ///
    /// # Errors
    /// As [`Session::send_head`].
    fn send_body(&mut self, rest: &mut RecvBuf) -> impl Future<Output = Result<bool, RelayError>>;

    /// The upstream closed a close-delimited body: the response is complete (an HTTP/1.1 client gets the
    /// last chunk).
    ///
    /// # Errors
    /// The client could not be written to.
    fn end_body(&mut self) -> impl Future<Output = Result<(), SendFailure>>;
}
