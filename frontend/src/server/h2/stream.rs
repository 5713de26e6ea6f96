//! One HTTP/2 stream from its HEADERS to its end (DESIGN.md "HTTP/2"): the request view is built
//! ([`super::request`]) and checked like an HTTP/1.1 head (CONNECT refused, framing, `max_headers`,
//! `max_body_bytes`), `health_path` is answered locally, the route is found and the exchange runs through
//! the orchestrator ([`crate::proxy::run`]) as an HTTP/1.1 request from this worker's pools. Failures
//! before the response head are answered from the status table; after it the stream is reset (the
//! session does that), never the connection. The stream's `request` deadline runs from its HEADERS.

use std::net::SocketAddr;

use edge_core::{
    buf::SendBuf,
    http::{
        framing::{request_info, Body, RequestInfo},
        head::{parse_request, Fields, HeadError, RequestHead},
    },
    metrics::{InvalidReason, Protocol, ResetSide},
};
use h2::{server::SendResponse, RecvStream};
use monoio::time::Instant;

use super::session::{Chunk, H2Session, Request};
use crate::{
    proxy::{self, Outcome},
    respond::{self, Failure, RequestLog},
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

/// Method and target of the head in `buf` (at most [`LOG_LINE_MAX`] bytes), for log lines.
fn log_line(buf: &[u8]) -> Vec<u8> {
    let line = &buf[..buf.len().min(LOG_LINE_MAX)];
    let end = line.windows(9).position(|w| w == b" HTTP/1.1");
    line[..end.unwrap_or(line.len())].to_vec()
}

/// Whether the client reset the stream already (h2 hands over streams reset before they were
/// accepted, e.g. HEADERS and RST_STREAM in one read: the rapid-reset pattern); such a stream gets no
/// work at all. Polls once, without waiting.
fn reset_already(respond: &mut SendResponse<Chunk>) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    respond.poll_reset(&mut cx).is_ready()
}

/// Serves one stream: `req` is its head (the body streams from its `RecvStream`), `respond` its
/// response side.
pub async fn serve(
    w: &Worker,
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Chunk>,
    from: Origin,
) {
    if reset_already(&mut respond) {
        w.metrics.http2_reset(ResetSide::Client).increment(1);
        return;
    }
    let started = Instant::now();
    let live = w.live();
    let server = &live.cfg.config.server;
    let (parts, body) = req.into_parts();
    let mut head_buf = SendBuf::take();
    let mut fields = Fields::new();
    let written = super::request::write_head(&mut head_buf.0, &parts, body.is_end_stream());
    let line = log_line(&head_buf.0);
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
            let mut s = new_session(req, Fields::new(), deadline);
            return fail(w, &mut s, f, &line, b"-", started).await;
        }
    };
    let request = Request {
        buf,
        head: &head,
        info,
    };
    let path = &buf[head.path.clone()];
    let is_head = parts.method == http::Method::HEAD;
    if path.split(|&b| b == b'?').next() == Some(server.health_path.as_bytes()) {
        let mut s = new_session(request, fields, deadline);
        let ready = w.shared.ready();
        let (status, text) = if ready {
            (200, "ok")
        } else {
            (503, "not ready\n")
        };
        let _ = s.answer(status, text, !ready, is_head).await;
        return finish(w, status, started);
    }
    let host = head
        .authority
        .as_ref()
        .map(|a| &buf[a.clone()])
        .or_else(|| info.host.map(|i| fields[i].value(buf)));
    let Some(route) = live.router.find(path, host) else {
        let mut s = new_session(request, fields, deadline);
        return fail(w, &mut s, Failure::NoRoute, &line, b"-", started).await;
    };
    let deadline = route
        .client_request_timeout
        .map_or(deadline, |t| started + t);
    let mut id = Vec::new();
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
    };
    forward(w, &live, &mut s, exchange, started).await;
}

/// What [`forward`] needs besides the session.
struct Exchange<'a> {
    route: &'a edge_core::config::ResolvedRoute,
    info: RequestInfo,
    is_head: bool,
    method: &'a http::Method,
    from: Origin,
    log: RequestLog<'a>,
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
    };
    w.metrics.in_flight.increment(1.0);
    let outcome = proxy::run(w, s, req).await;
    w.metrics.in_flight.decrement(1.0);
    match outcome {
        Outcome::Done { status, .. } => finish(w, status, started),
        Outcome::Truncated { status } => {
            // The session resets the stream when it is dropped (RST_STREAM INTERNAL_ERROR).
            w.metrics.http2_reset(ResetSide::Edge).increment(1);
            finish(w, status, started)
        }
        Outcome::Upgraded { .. } => finish(w, 101, started),
        Outcome::ClientGone => w.metrics.http2_reset(ResetSide::Client).increment(1),
        Outcome::Failed { failure, .. } => fail(w, s, failure, x.log.line, x.log.id, started).await,
    }
}

/// Counts and logs `f` and answers it on the stream (the connection goes on).
async fn fail(
    w: &Worker,
    s: &mut H2Session<'_>,
    f: Failure,
    line: &[u8],
    id: &[u8],
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
    finish(w, f.status(), started);
}

/// Counts a finished request.
fn finish(w: &Worker, status: u16, started: Instant) {
    w.metrics.count_status(Protocol::H2, status);
    w.metrics.duration.record(started.elapsed());
}
