//! One HTTP/2 stream from its HEADERS to its end (DESIGN.md "HTTP/2"): the request view is built
//! ([`super::request`]) and checked like an HTTP/1.1 head (CONNECT refused, framing, `max_headers`,
//! `max_body_bytes`), `health_path` is answered locally, the route is found and the exchange runs through
//! the orchestrator ([`crate::proxy::run`]) as an HTTP/1.1 request from this worker's pools. Failures
//! before the response head are answered from the status table; after it the stream is reset (the
//! session does that), never the connection. The stream's `request` deadline runs from its HEADERS.

use std::net::SocketAddr;

use edge_core::{
    buf,
    http::{
        framing::{request_info, Body},
        head::{parse_request, Fields, HeadError},
    },
    metrics::{InvalidReason, Protocol},
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

/// Serves one stream: `req` is its head (the body streams from its `RecvStream`), `respond` its
/// response side.
pub async fn serve(
    w: &Worker,
    req: http::Request<RecvStream>,
    respond: SendResponse<Chunk>,
    from: Origin,
) {
    let started = Instant::now();
    let live = w.live();
    let server = &live.cfg.config.server;
    let (parts, body) = req.into_parts();
    let end_stream = body.is_end_stream();
    let mut head_buf = buf::take();
    let mut log_line = Vec::new();
    let mut log_id = Vec::new();
    let mut fields = Fields::new();
    let checked = super::request::write_head(&mut head_buf, &parts, end_stream).and_then(|()| {
        log_line.extend_from_slice(&head_buf[..head_buf.len().min(LOG_LINE_MAX)]);
        if let Some(end) = log_line.windows(9).position(|w| w == b" HTTP/1.1") {
            log_line.truncate(end);
        }
        let head = match parse_request(&head_buf, server.limits.max_headers, &mut fields) {
            Ok(Some(h)) => h,
            Ok(None) | Err(HeadError::Invalid) => {
                return Err(Failure::Invalid(InvalidReason::BadHead))
            }
            Err(HeadError::TooManyFields) => {
                return Err(Failure::Invalid(InvalidReason::HeadTooLarge))
            }
        };
        if parts.method == http::Method::CONNECT {
            return Err(Failure::Invalid(InvalidReason::Method));
        }
        let info = request_info(&head_buf, &head, &fields)
            .map_err(|_| Failure::Invalid(InvalidReason::BadFraming))?;
        if let (Body::Length(n), Some(max)) = (info.body, server.limits.max_body_bytes.0) {
            if n > max {
                return Err(Failure::Invalid(InvalidReason::BodyTooLarge));
            }
        }
        Ok((head, info))
    });
    let deadline = started + server.timeouts.request.0;
    let max_body = server.limits.max_body_bytes.0.unwrap_or(u64::MAX);
    let send = server.timeouts.send.0;
    let (head, info) = match checked {
        Ok(v) => v,
        Err(f) => {
            let (empty, dummy) = (Fields::new(), edge_core::http::head::RequestHead::default());
            let req = Request {
                buf: &head_buf,
                head: &dummy,
                info: edge_core::http::framing::RequestInfo {
                    body: Body::None,
                    host: None,
                    close: false,
                    expect_continue: false,
                    upgrade: false,
                    max_forwards: None,
                },
            };
            let mut s = H2Session::new(req, empty, body, respond, max_body, send, deadline);
            return fail(w, &mut s, f, &log_line, &log_id, started).await;
        }
    };
    let request = Request {
        buf: &head_buf,
        head: &head,
        info,
    };
    let path = &head_buf[head.path.clone()];
    let path = path.split(|&b| b == b'?').next().unwrap_or(path);
    let is_head = parts.method == http::Method::HEAD;
    let host = head
        .authority
        .as_ref()
        .map(|a| &head_buf[a.clone()])
        .or_else(|| info.host.map(|i| fields[i].value(&head_buf)));
    if path == server.health_path.as_bytes() {
        let mut s = H2Session::new(request, fields, body, respond, max_body, send, deadline);
        let ready = w.shared.ready();
        let (status, text) = if ready {
            (200, "ok")
        } else {
            (503, "not ready\n")
        };
        let _ = s.answer(status, text, !ready, is_head).await;
        return finish(w, status, started);
    }
    let Some(route) = live.router.find(&head_buf[head.path.clone()], host) else {
        let mut s = H2Session::new(request, fields, body, respond, max_body, send, deadline);
        return fail(w, &mut s, Failure::NoRoute, &log_line, &log_id, started).await;
    };
    let deadline = route
        .client_request_timeout
        .map_or(deadline, |t| started + t);
    let upstream = &live.upstreams[route.upstream];
    let request_timeout = route
        .request_timeout
        .unwrap_or(upstream.config.request_timeout)
        .0;
    edge_core::http::request_id::RequestId::of(&head_buf, &fields, w.next_request_id()).write(
        &head_buf,
        &fields,
        &mut log_id,
    );
    let idempotent = matches!(
        parts.method,
        http::Method::GET
            | http::Method::HEAD
            | http::Method::OPTIONS
            | http::Method::TRACE
            | http::Method::PUT
            | http::Method::DELETE
    );
    let mut s = H2Session::new(request, fields, body, respond, max_body, send, deadline);
    let req = proxy::Request {
        info,
        is_head,
        idempotent,
        cfg: &live.cfg,
        upstream,
        request_timeout,
        close: false,
        peer: from.peer.ip(),
        https: from.https,
        log: RequestLog {
            line: &log_line,
            id: &log_id,
        },
    };
    w.metrics.in_flight.increment(1.0);
    let outcome = proxy::run(w, &mut s, req).await;
    w.metrics.in_flight.decrement(1.0);
    match outcome {
        Outcome::Done { status, .. } | Outcome::Truncated { status } => finish(w, status, started),
        Outcome::Upgraded { .. } => finish(w, 101, started),
        Outcome::ClientGone => {}
        Outcome::Failed { failure, .. } => {
            fail(w, &mut s, failure, &log_line, &log_id, started).await
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
