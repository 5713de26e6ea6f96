//! One HTTP/2 stream from its HEADERS to its end (DESIGN.md "HTTP/2"): the request view is built
//! ([`super::request`]) and checked like an HTTP/1.1 head (CONNECT refused, framing, `max_headers`,
//! `max_body_bytes`), `health_path` is answered locally, the path is normalised and the route found
//! ([`crate::route`]; 400 `bad_path`), and the exchange runs through the orchestrator
//! ([`crate::proxy::run`]) as an HTTP/1.1 request from this worker's pools. Failures
//! before the response head are answered from the status table; after it the stream is reset (the
//! session does that), never the connection. The stream's `request` deadline runs from its HEADERS.

use std::net::SocketAddr;

use edge_core::{
    buf::SendBuf,
    http::{
        framing::{request_info, Body, RequestInfo},
        head::{parse_request, Fields, HeadError, RequestHead},
    },
    metrics::{InvalidReason, Protocol, ResetSide, ShedReason},
};
use h2::{server::SendResponse, RecvStream};
use monoio::time::Instant;

use super::session::{Chunk, H2Session, Request};
use crate::server::Session as _;
use crate::{
    proxy::{self, Outcome},
    respond::{self, Failure, RequestLog},
    server::h1::Redirect,
    worker::Worker,
};

/// Longest request-line copy kept for log lines, bytes.
const LOG_LINE_MAX: usize = 256;

/// Where a stream came from.
#[derive(Clone, Copy, Debug)]
pub struct Origin {
    /// The client's address.
    pub peer: SocketAddr,
    /// The connection came over TLS (`X-Forwarded-Proto: https`).
    pub https: bool,
    /// Accepted at `max_connections` with nothing evictable (DESIGN.md "Capacity"): its one stream is
    /// answered only if it is a health probe; anything else gets 503 + Retry-After.
    pub shed: bool,
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
/// CONNECT is refused (edge is not a forward proxy), the framing decision (RFC 9112 §6.3) holds, and a
/// declared Content-Length over `max_body_bytes` is 413 before any DATA is read.
///
/// # Errors
/// 400 `bad_head` / `bad_framing`, 405 `method`, 413 `body_too_large`, 431 `head_too_large`.
fn check(
    buf: &[u8],
    method: &http::Method,
    limits: &edge_core::config::Limits,
    fields: &mut Fields,
) -> Result<(RequestHead, RequestInfo), Failure> {
    let head = match parse_request(buf, limits.max_headers, fields) {
        Ok(Some(h)) => h,
        Ok(None) | Err(HeadError::Invalid) => return Err(Failure::Invalid(InvalidReason::BadHead)),
        Err(HeadError::TooManyFields) => return Err(Failure::Invalid(InvalidReason::HeadTooLarge)),
    };
    if method == http::Method::CONNECT {
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
/// it again: the parsed fields, the log line, the request id and the normalised path.
#[derive(Default)]
pub struct Scratch {
    fields: Fields,
    line: Vec<u8>,
    id: Vec<u8>,
    path: Vec<u8>,
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
    let mut head_buf = SendBuf::take();
    let mut fields = std::mem::take(&mut scratch.fields);
    fields.clear();
    let written = super::request::write_head(&mut head_buf.0, &parts, body.is_end_stream());
    let mut line = std::mem::take(&mut scratch.line);
    log_line(&head_buf.0, &mut line);
    let buf = &head_buf.0;
    let checked = written.and_then(|()| check(buf, &parts.method, &server.limits, &mut fields));
    let deadline = started + server.timeouts.request.0;
    let max_body = server.limits.max_body_bytes.0.unwrap_or(u64::MAX);
    let send = server.timeouts.send.0;
    let new_session = |req, fields, deadline| {
        H2Session::new(req, fields, body, respond, max_body, send, deadline)
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
            fail(w, &mut s, f, &line, b"-", from.peer, started).await;
            return scratch.keep(s.take_fields(), line);
        }
    };
    let request = Request {
        buf,
        head: &head,
        info,
    };
    let path = &buf[head.path.clone()];
    let is_head = parts.method == http::Method::HEAD;
    let host = head
        .authority
        .as_ref()
        .map(|a| &buf[a.clone()])
        .or_else(|| info.host.map(|i| fields[i].value(buf)));
    if let Some(local) = Local::of(server, from, path, &info) {
        let mut s = new_session(request, fields, deadline);
        let status = local.answer(w, &mut s, host, path, is_head, &line).await;
        let log = RequestLog {
            line: &line,
            id: b"-",
        };
        finish(w, &log, from.peer, status, started);
        return scratch.keep(s.take_fields(), line);
    }
    let routing = crate::route::Target {
        method: &buf[head.method.clone()],
        host,
        target: path,
        head: buf,
        fields: &fields,
    };
    let (route, failure) = match crate::route::find(&live.routes, &routing, &mut scratch.path) {
        Ok(r) => (r.route.map(|route| (route, r.rewritten)), Failure::NoRoute),
        Err(_) => (None, Failure::Invalid(InvalidReason::BadPath)),
    };
    let Some((route, rewritten)) = route else {
        let mut s = new_session(request, fields, deadline);
        fail(w, &mut s, failure, &line, b"-", from.peer, started).await;
        return scratch.keep(s.take_fields(), line);
    };
    let deadline = route
        .client_request_timeout
        .map_or(deadline, |t| started + t);
    let mut id = std::mem::take(&mut scratch.id);
    id.clear();
    let next_id = w.next_request_id();
    edge_core::http::request_id::RequestId::of(buf, &fields, next_id).write(buf, &fields, &mut id);
    let mut s = new_session(request, fields, deadline);
    let log = RequestLog {
        line: &line,
        id: &id,
    };
    let exchange = Exchange {
        route,
        info,
        is_head,
        method: &parts.method,
        from,
        log,
        path: rewritten.then_some(scratch.path.as_slice()),
    };
    forward(w, &live, &mut s, exchange, started).await;
    scratch.keep(s.take_fields(), line);
    scratch.id = id;
}

impl Scratch {
    /// Keeps the memory of a served stream's fields and log line for the next stream.
    fn keep(&mut self, fields: Fields, line: Vec<u8>) {
        self.fields = fields;
        self.line = line;
    }
}

/// What [`forward`] needs besides the session.
struct Exchange<'a> {
    route: &'a edge_core::config::ResolvedRoute,
    info: RequestInfo,
    is_head: bool,
    method: &'a http::Method,
    from: Origin,
    log: RequestLog<'a>,
    /// The normalised path when it differs from the received one.
    path: Option<&'a [u8]>,
}

/// Runs the exchange through the orchestrator and counts (or answers) how it ended.
async fn forward(
    w: &Worker,
    live: &crate::worker::Live,
    s: &mut H2Session<'_>,
    x: Exchange<'_>,
    started: Instant,
) {
    let upstream = &live.upstreams[x.route.upstream];
    let request_timeout = x
        .route
        .request_timeout
        .unwrap_or(upstream.config.request_timeout)
        .0;
    use http::Method;
    let idempotent = [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::TRACE,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(x.method);
    let req = proxy::Request {
        info: x.info,
        is_head: x.is_head,
        idempotent,
        cfg: &live.cfg,
        upstream,
        request_timeout,
        close: false,
        peer: x.from.peer.ip(),
        https: x.from.https,
        log: x.log,
        path: x.path,
    };
    w.metrics.in_flight.increment(1.0);
    let outcome = proxy::run(w, s, req).await;
    w.metrics.in_flight.decrement(1.0);
    let peer = x.from.peer;
    match outcome {
        Outcome::Done { status, .. } => finish(w, &x.log, peer, status, started),
        Outcome::Truncated { status } => {
            // The session resets the stream when it is dropped (RST_STREAM INTERNAL_ERROR).
            w.metrics.http2_reset(ResetSide::Edge).increment(1);
            finish(w, &x.log, peer, status, started)
        }
        Outcome::Upgraded { .. } => finish(w, &x.log, peer, 101, started),
        Outcome::ClientGone => w.metrics.http2_reset(ResetSide::Client).increment(1),
        Outcome::Failed { failure, .. } => {
            fail(w, s, failure, x.log.line, x.log.id, peer, started).await
        }
    }
}

/// Counts and logs `f` and answers it on the stream (the connection goes on).
async fn fail(
    w: &Worker,
    s: &mut H2Session<'_>,
    f: Failure,
    line: &[u8],
    id: &[u8],
    peer: SocketAddr,
    started: Instant,
) {
    let log = RequestLog { line, id };
    f.record(w, &log);
    if s.started() {
        return;
    }
    if let Err(e) = s
        .answer(f.status(), f.text(), f.status() == 503, false)
        .await
    {
        let cause = match e {
            respond::SendFailure::Closed => "client reset the stream before the error response",
            respond::SendFailure::Timeout => "client did not read the error response within send",
        };
        respond::record_undelivered(w, &log, f.status(), cause);
    }
    finish(w, &log, peer, f.status(), started);
}

/// A stream edge answers itself, in the order HTTP/1.1 checks them (DESIGN.md "Status codes").
enum Local {
    /// `health_path`: 200, or 503 when not ready.
    Health,
    /// OPTIONS or TRACE with `Max-Forwards: 0` (RFC 9110 §7.6.2).
    LastHop,
    /// `redirect_plain` on the plain listener (h2c): 308 to https.
    Redirect,
    /// Accepted over capacity (from this client): 503 + Retry-After.
    Shed(SocketAddr),
}

impl Local {
    /// Whether the stream for `path` is answered locally, and how.
    fn of(
        server: &edge_core::config::Server,
        from: Origin,
        path: &[u8],
        info: &RequestInfo,
    ) -> Option<Local> {
        let redirect = server.tls.as_ref().is_some_and(|t| t.redirect_plain) && !from.https;
        match () {
            _ if path.split(|&b| b == b'?').next() == Some(server.health_path.as_bytes()) => {
                Some(Local::Health)
            }
            _ if from.shed => Some(Local::Shed(from.peer)),
            _ if info.max_forwards == Some(0) => Some(Local::LastHop),
            _ if redirect => Some(Local::Redirect),
            _ => None,
        }
    }

    /// Answers the stream; returns the status. `host` and `path` (with its query) build a redirect's
    /// `Location`; `line` names the request in log lines.
    async fn answer(
        self,
        w: &Worker,
        s: &mut H2Session<'_>,
        host: Option<&[u8]>,
        path: &[u8],
        is_head: bool,
        line: &[u8],
    ) -> u16 {
        match self {
            Local::Health => {
                let ready = w.shared.ready();
                let (status, text) = match ready {
                    true => (200, "ok"),
                    false => (503, "not ready\n"),
                };
                let _ = s.answer(status, text, !ready, is_head).await;
                status
            }
            Local::LastHop => last_hop(s, is_head).await,
            Local::Redirect => {
                let port = w.shared.tls_port.load(std::sync::atomic::Ordering::Relaxed);
                let target = path;
                let location = Redirect { host, target, port }.location();
                let location: &[(&str, &[u8])] = &[("location", &location)];
                let _ = s.answer_with(308, location, "", is_head).await;
                308
            }
            Local::Shed(peer) => shed(w, s, peer, line).await,
        }
    }
}

/// Answers an OPTIONS or TRACE stream carrying `Max-Forwards: 0` itself, as for HTTP/1.1 (RFC 9110
/// §7.6.2): OPTIONS gets 200 with `Allow`, TRACE 405 (edge never reflects a request). Returns the
/// status.
async fn last_hop(s: &mut H2Session<'_>, is_head: bool) -> u16 {
    if s.request().method() == b"TRACE" {
        let text = "method not allowed: edge does not answer TRACE itself (Max-Forwards: 0)\n";
        let _ = s.answer(405, text, false, is_head).await;
        return 405;
    }
    let _ = s
        .answer_with(200, &[("allow", respond::ALLOW)], "", is_head)
        .await;
    200
}

/// The stream of a connection accepted over capacity that is not a health probe (DESIGN.md
/// "Capacity"): 503 with `Retry-After: 1`, `edge_connections_shed_total{reason="limit"}`, and the
/// connection's GOAWAY follows (it serves one stream).
async fn shed(w: &Worker, s: &mut H2Session<'_>, peer: SocketAddr, line: &[u8]) -> u16 {
    w.metrics.connection_shed(ShedReason::Limit).increment(1);
    if w.log_limit.allow() {
        tracing::warn!(event = "connection.shed", worker = w.id, peer = %peer, reason = "limit", "at max_connections with nothing evictable");
    }
    let text = "service unavailable: connection limit reached\n";
    if let Err(e) = s.answer(503, text, true, false).await {
        let log = RequestLog { line, id: b"-" };
        let cause = match e {
            respond::SendFailure::Closed => "client reset the stream before the error response",
            respond::SendFailure::Timeout => "client did not read the error response within send",
        };
        respond::record_undelivered(w, &log, 503, cause);
    }
    503
}

/// Counts a finished stream and logs it as HTTP/1.1 requests are ([`respond::finish_request`]).
fn finish(w: &Worker, log: &RequestLog<'_>, peer: SocketAddr, status: u16, started: Instant) {
    respond::finish_request(w, Protocol::H2, log, peer, status, started);
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
