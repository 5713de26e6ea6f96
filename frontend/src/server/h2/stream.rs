//! One HTTP/2 stream from its HEADERS to its end (DESIGN.md "HTTP/2"): the request view is built
//! ([`super::request`]) and checked like an HTTP/1.1 head (CONNECT refused, framing, `max_headers`,
//! `max_body_bytes`), `health_path` is answered locally, the route is found and the exchange runs through
//! the orchestrator ([`crate::proxy::run`]) as an HTTP/1.1 request from this worker's pools. Failures
//! before the response head are answered from the status table; after it the stream is reset (the
//! session does that), never the connection. The stream's `request` deadline runs from its HEADERS.
//!
//! A WebSocket stream (RFC 8441: `:method CONNECT` with `:protocol websocket`) passes the same pipeline
//! as the `GET` + `Upgrade: websocket` head it is written as ([`super::request::write_head`]), with a
//! Sec-WebSocket-Key edge makes; when the upstream switches, the stream answers `200` and becomes a
//! tunnel ([`super::tunnel`]); any other answer is relayed as the stream's response. Another
//! `:protocol`, or none, is CONNECT: 405.

use std::{net::SocketAddr, rc::Rc};

use edge_core::{
    buf::SendBuf,
    http::{
        framing::{request_info, Body, RequestInfo},
        head::{parse_request, Fields, HeadError, RequestHead},
    },
    metrics::{InvalidReason, Protocol, ResetSide, ShedReason},
    pace::RelayBudget,
};
use h2::{server::SendResponse, RecvStream};
use monoio::time::Instant;

use super::session::{Chunk, H2Session, Request};
use crate::server::Session as _;
use crate::{
    context::Worker,
    log::{RequestFacts, RequestLog},
    proxy::{self, Outcome},
    request::{Admission, Admitted, Local},
    respond::{self, Failure},
};

/// Longest request-line copy kept for log lines, bytes.
const LOG_LINE_MAX: usize = 256;

/// Where a stream came from.
#[derive(Clone, Copy, Debug)]
pub struct Origin {
    /// The client's address.
    pub peer: SocketAddr,
    /// The connection's local address, when an upstream needs it (`send_proxy_protocol`).
    pub local: Option<SocketAddr>,
    /// The connection came over TLS (`X-Forwarded-Proto: https`).
    pub https: bool,
    /// Shed at accept (DESIGN.md "Capacity": `limit`; `max_connections_per_client`: `client_limit`):
    /// its one stream is answered only if it is a health probe; anything else gets 503 (429 for
    /// `client_limit`) + Retry-After, then GOAWAY.
    pub shed: Option<ShedReason>,
}

/// A request head that failed its checks: an empty view for the session that answers it.
const NO_INFO: RequestInfo = RequestInfo {
    body: Body::None,
    host: None,
    close: false,
    expect_continue: false,
    upgrade: false,
    max_forwards: None,
};

/// Checks the HTTP/1.1-syntax head in `buf` like an HTTP/1.1 one: it parses within `max_headers`,
/// CONNECT is refused (edge is not a forward proxy; `method` is the stream's, CONNECT also for a
/// WebSocket stream's `GET` head, which passes), the framing decision (RFC 9112 §6.3) holds, and a
/// declared Content-Length over `max_body_bytes` is 413 before any DATA is read.
///
/// # Errors
/// 400 `bad_head` / `bad_framing`, 405 `method`, 413 `body_too_large`, 431 `head_too_large`.
fn check(
    buf: &[u8],
    method: &http::Method,
    websocket: bool,
    limits: &edge_core::config::Limits,
    fields: &mut Fields,
) -> Result<(RequestHead, RequestInfo), Failure> {
    let head = match parse_request(buf, limits.max_headers, fields) {
        Ok(Some(h)) => h,
        Ok(None) | Err(HeadError::Invalid) => return Err(Failure::Invalid(InvalidReason::BadHead)),
        Err(HeadError::TooManyFields) => return Err(Failure::Invalid(InvalidReason::HeadTooLarge)),
    };
    if method == http::Method::CONNECT && !websocket {
        return Err(Failure::Invalid(InvalidReason::Method));
    }
    let info = request_info(buf, &head, fields)
        .map_err(|_| Failure::Invalid(InvalidReason::BadFraming))?;
    if let (Body::Length(n), Some(max)) = (info.body, limits.max_body_bytes.0) {
        if n > max {
            return Err(Failure::Invalid(InvalidReason::BodyTooLarge));
        }
    }
    Ok((head, info))
}

/// Writes the method and target of the head in `buf` (at most [`LOG_LINE_MAX`] bytes) into `out`, for
/// log lines.
fn log_line(buf: &[u8], out: &mut Vec<u8>) {
    let line = &buf[..buf.len().min(LOG_LINE_MAX)];
    // The target holds no byte <= SP (`write_head` refuses it), so the first CR ends the request line.
    let end = line
        .iter()
        .position(|&b| b == b'\r')
        .and_then(|cr| cr.checked_sub(9))
        .filter(|&e| &line[e..e + 9] == b" HTTP/1.1");
    out.clear();
    out.extend_from_slice(&line[..end.unwrap_or(line.len())]);
}

/// What a stream task keeps from one stream to the next, so that serving a stream allocates none of
/// it again: the parsed fields, the log line, the request id, the normalised path and the request's
/// facts for its access line.
#[derive(Default)]
pub struct Scratch {
    fields: Fields,
    line: Vec<u8>,
    id: Vec<u8>,
    path: Vec<u8>,
    facts: RequestFacts,
}

/// Whether the client reset the stream already (h2 hands over streams reset before they were
/// accepted, e.g. HEADERS and RST_STREAM in one read: the rapid-reset pattern); such a stream gets no
/// work at all. Polls once, without waiting.
fn reset_already(respond: &mut SendResponse<Chunk>) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    respond.poll_reset(&mut cx).is_ready()
}

/// Serves one stream: `req` is its head (the body streams from its `RecvStream`), `respond` its
/// response side; `scratch` is the stream task's reused memory.
pub async fn serve(
    w: &Worker,
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Chunk>,
    from: Origin,
    share: &Rc<RelayBudget>,
    scratch: &mut Scratch,
) {
    if reset_already(&mut respond) {
        w.metrics.http2_reset(ResetSide::Client).increment(1);
        return;
    }
    let started = Instant::now();
    let live = w.live();
    let server = &live.cfg.config.server;
    let (parts, body) = req.into_parts();
    if super::request::malformed(&parts) {
        // RFC 9113 §8.1.1: a stream error of type PROTOCOL_ERROR, like h2's own for malformed requests.
        w.metrics.invalid(InvalidReason::BadHead).increment(1);
        w.metrics.http2_reset(ResetSide::Edge).increment(1);
        respond.send_reset(h2::Reason::PROTOCOL_ERROR);
        return;
    }
    let mut head_buf = SendBuf::take_head();
    scratch.facts.clear();
    // A gRPC call gets gRPC answers from here on, to a head that fails its checks too.
    scratch.facts.grpc = (parts.headers.get(http::header::CONTENT_TYPE))
        .is_some_and(|v| edge_core::http::grpc::is_grpc(v.as_bytes()));
    let mut fields = std::mem::take(&mut scratch.fields);
    fields.clear();
    // A WebSocket stream's key goes upstream in its head; its `101` must answer it.
    let websocket = super::request::is_websocket(&parts).then(edge_core::websocket::new_key);
    let key = websocket.as_ref().map(|k| &k[..]);
    // The head in HTTP/1.1 syntax, in a pooled buffer of the class that holds it.
    let fields_len: usize = (parts.headers.iter())
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    let uri = &parts.uri;
    let target = uri.path_and_query().map_or(1, |p| p.as_str().len());
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    head_buf.reserve_pooled(fields_len + target + 2 * authority + 64);
    let written = super::request::write_head(&mut head_buf.0, &parts, body.is_end_stream(), key);
    let mut line = std::mem::take(&mut scratch.line);
    log_line(&head_buf.0, &mut line);
    let buf = &head_buf.0;
    let checked = written.and_then(|()| {
        let limits = &server.limits;
        check(buf, &parts.method, websocket.is_some(), limits, &mut fields)
    });
    let deadline = started + server.timeouts.request.0;
    let max_body = server.limits.max_body_bytes.0.unwrap_or(u64::MAX);
    let send = server.timeouts.send.0;
    let new_session = |req, fields, deadline| {
        H2Session::new(req, fields, body, respond, max_body, send, deadline).sharing(share)
    };
    let (head, info) = match checked {
        Ok(v) => v,
        Err(f) => {
            let dummy = RequestHead::default();
            let req = Request {
                buf,
                head: &dummy,
                info: NO_INFO,
            };
            let mut s = new_session(req, fields, deadline);
            // Refused before admission: the answer still gets an id.
            w.generate_request_id(&mut scratch.id);
            let log = RequestLog::new(&line, &scratch.id);
            fail(w, &mut s, f, &log, &scratch.facts, from.peer, started).await;
            return scratch.keep(s.take_fields(), line);
        }
    };
    let request = Request {
        buf,
        head: &head,
        info,
    };
    let incoming = crate::request::Incoming {
        buf,
        head: &head,
        fields: &fields,
        info,
        peer: from.peer,
        local: from.local,
        https: from.https,
        shed: from.shed,
        close: false,
        started,
    };
    let mut id = std::mem::take(&mut scratch.id);
    let mut path = std::mem::take(&mut scratch.path);
    let facts = &mut scratch.facts;
    let admission = crate::request::admit(w, &live, &incoming, &line, &mut id, &mut path, facts);
    let is_head = parts.method == http::Method::HEAD;
    // A forwarded stream runs under its route's deadline and gets the fields admission adds to its
    // response; a stream answered here under the stream's own.
    let fields = match admission {
        Admission::Forward(adm) => {
            let mut s = new_session(request, fields, adm.client_deadline).adding(adm.response);
            if let Some(key) = websocket {
                s = s.websocket(key);
            }
            forward(w, &mut s, adm, started).await;
            s.take_fields()
        }
        Admission::Local(local) => {
            let mut s = new_session(request, fields, deadline);
            let facts = &scratch.facts;
            let log = RequestLog::new(&line, &id).traced(facts.trace_id());
            let status = answer_locally(w, &mut s, &local, is_head, &log, facts, from.peer).await;
            finish(w, &log, facts, from.peer, status, started);
            s.take_fields()
        }
        Admission::Refused(f) => {
            let mut s = new_session(request, fields, deadline);
            let facts = &scratch.facts;
            let log = RequestLog::new(&line, &id).traced(facts.trace_id());
            fail(w, &mut s, f, &log, facts, from.peer, started).await;
            s.take_fields()
        }
    };
    scratch.keep(fields, line);
    (scratch.id, scratch.path) = (id, path);
    // A parked task must not keep the configuration snapshot (and its pools) alive.
    scratch.facts.live = None;
}

impl Scratch {
    /// Keeps the memory of a served stream's fields and log line for the next stream.
    fn keep(&mut self, fields: Fields, line: Vec<u8>) {
        self.fields = fields;
        self.line = line;
    }
}

/// Runs the admitted request through the orchestrator and counts (or answers) how it ended.
async fn forward(w: &Worker, s: &mut H2Session<'_>, req: Admitted<'_>, started: Instant) {
    let log = req.log;
    let peer = req.peer;
    let facts = req.facts;
    w.metrics.in_flight.increment(1.0);
    let outcome = proxy::run(w, s, req).await;
    w.metrics.in_flight.decrement(1.0);
    match outcome {
        Outcome::Done { status, .. } => finish(w, &log, facts, peer, status, started),
        Outcome::Truncated { status } => {
            // The session resets the stream when it is dropped (RST_STREAM INTERNAL_ERROR).
            w.metrics.http2_reset(ResetSide::Edge).increment(1);
            finish(w, &log, facts, peer, status, started)
        }
        // A WebSocket stream switched: its `200` went out, the tunnel runs to the stream's end.
        Outcome::Upgraded { tunnel } => {
            finish(w, &log, facts, peer, 200, started);
            super::tunnel::run(w, s, tunnel).await;
        }
        Outcome::ClientGone { status, closed } => {
            // A stream past its `send` deadline is reset by edge when the session drops it.
            let side = match closed {
                true => ResetSide::Client,
                false => ResetSide::Edge,
            };
            w.metrics.http2_reset(side).increment(1);
            let status = crate::respond::client_left(w, status, closed);
            finish(w, &log, facts, peer, status, started)
        }
        Outcome::Failed { failure, .. } => fail(w, s, failure, &log, facts, peer, started).await,
    }
}

/// Counts and logs `f` and answers it on the stream (the connection goes on); a gRPC call gets a
/// gRPC answer ([`Failure::grpc_code`]), counted and logged with the status of `f` as on HTTP/1.1.
async fn fail(
    w: &Worker,
    s: &mut H2Session<'_>,
    f: Failure,
    log: &RequestLog<'_>,
    facts: &RequestFacts,
    peer: SocketAddr,
    started: Instant,
) {
    let log = *log;
    f.record(w, &log);
    if s.started() {
        return;
    }
    let answered = match facts.grpc {
        true => {
            let code = f.grpc_code();
            facts.grpc_status.set(Some(code.as_u16()));
            let id = [("x-request-id", log.id)];
            let id = &id[..usize::from(!log.id.is_empty())];
            s.answer_grpc(code, f.grpc_message().as_bytes(), id, b"")
        }
        false => {
            facts.response_bytes.set(f.text().len() as u64);
            s.answer(f.status(), f.text(), f.status() == 503, false, log.id)
                .await
        }
    };
    if let Err(e) = answered {
        let cause = match e {
            respond::SendFailure::Closed => "client reset the stream before the error response",
            respond::SendFailure::Timeout => "client did not read the error response within send",
        };
        respond::record_undelivered(w, &log, f.status(), cause);
    }
    finish(w, &log, facts, peer, f.status(), started);
}

/// Answers a stream of the pipeline's first phase ([`Local`], decided by [`crate::request::admit`]),
/// a gRPC call in the answer's gRPC form when it has one ([`Local::grpc_code`]); returns the status
/// and notes the body bytes (and gRPC status) in `facts`. A shed stream (its connection was accepted
/// over capacity) is counted in `edge_connections_shed_total{reason}`; the connection's GOAWAY follows
/// (it serves one stream).
async fn answer_locally(
    w: &Worker,
    s: &mut H2Session<'_>,
    local: &Local,
    is_head: bool,
    log: &RequestLog<'_>,
    facts: &RequestFacts,
    peer: SocketAddr,
) -> u16 {
    if let Local::Shed(reason) = local {
        w.metrics.connection_shed(*reason).increment(1);
        crate::request::local::log_shed(w, peer, *reason);
    }
    let status = local.status();
    let field = local.field();
    let id = ("x-request-id", log.id);
    let fields = match field {
        Some(f) => [f, id],
        None => [id, id],
    };
    let fields = &fields[..1 + usize::from(field.is_some())];
    let lines = local.route_fields();
    let answered = match local.grpc_code().filter(|_| facts.grpc) {
        Some(code) => {
            facts.grpc_status.set(Some(code.as_u16()));
            s.answer_grpc(code, local.body().trim_ascii_end(), fields, lines)
        }
        None => {
            let sent = if is_head { 0 } else { local.body().len() };
            facts.response_bytes.set(sent as u64);
            let text = super::session::Text {
                content_type: local.content_type(),
                body: local.body(),
            };
            s.answer_with(status, fields, text, is_head, lines).await
        }
    };
    if let Err(e) = answered {
        if matches!(local, Local::Shed(_)) {
            let cause = match e {
                respond::SendFailure::Closed => "client reset the stream before the error response",
                respond::SendFailure::Timeout => {
                    "client did not read the error response within send"
                }
            };
            respond::record_undelivered(w, log, status, cause);
        }
    }
    status
}

/// Counts a finished stream and logs it as HTTP/1.1 requests are ([`crate::log::finish_request`]).
fn finish(
    w: &Worker,
    log: &RequestLog<'_>,
    facts: &RequestFacts,
    peer: SocketAddr,
    status: u16,
    started: Instant,
) {
    crate::log::finish_request(w, Protocol::H2, log, facts, peer, status, started);
}

#[cfg(test)]
mod tests {
    use super::{log_line, LOG_LINE_MAX};

    #[test]
    fn the_log_line_is_method_and_target() {
        let mut out = Vec::new();
        log_line(b"GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\n", &mut out);
        assert_eq!(out, b"GET /a?b=c");
        // A head that stopped being written before its request line ended: kept whole.
        log_line(b"GET /a", &mut out);
        assert_eq!(out, b"GET /a");
        // A target longer than the cap: cut at LOG_LINE_MAX bytes.
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "x".repeat(400));
        log_line(long.as_bytes(), &mut out);
        assert_eq!(out, &long.as_bytes()[..LOG_LINE_MAX]);
    }
}
