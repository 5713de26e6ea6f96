//! Requests the HTTP/1.1 connection answers itself: the request pipeline's local answers
//! ([`crate::request::Local`]), and connections accepted over capacity (DESIGN.md "Capacity"): their
//! first head is read under 1 s, a health probe is answered, anything else gets 503. Also the
//! discarding of a small unread body so a connection can be kept after a local answer.

use std::time::Duration;

use edge_core::{
    buf::SendBuf, clock::timeout_at, http::framing::Body, io::Transport, metrics::ShedReason,
};
use monoio::time::Instant;

use super::{
    conn::{finish, Conn, Next},
    head::{read_head, HeadRead},
};
use crate::{context::Worker, request::Local};

/// Most unread request body edge discards to keep a connection after an error response.
const DISCARD_MAX: u64 = 64 * 1024;
/// Deadline for the first head of a connection accepted over capacity (DESIGN.md "Capacity").
pub(crate) const SHED_HEAD_DEADLINE: Duration = Duration::from_secs(1);

/// Reads and drops a Content-Length body of at most [`DISCARD_MAX`] bytes; `true` when it was read whole.
pub(super) async fn discard_body<T: Transport>(
    c: &mut Conn<T>,
    body: Body,
    deadline: Instant,
) -> bool {
    let mut left = match body {
        Body::None => return true,
        Body::Length(n) if n <= DISCARD_MAX => n,
        _ => return false,
    };
    loop {
        let n = left.min(c.rb.len() as u64);
        c.rb.consume(n as usize);
        left -= n;
        if left == 0 {
            return true;
        }
        match timeout_at(deadline, c.rb.fill(&mut c.stream)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return false,
        }
    }
}

/// Answers a request of the pipeline's first phase ([`Local`], decided by [`crate::request::admit`]):
/// not a failure, so counted in `edge_requests_total{status}` only; the connection is kept when the
/// body could be discarded. A gRPC call gets the answer's gRPC form when it has one
/// ([`Local::grpc_code`]), counted with the answer's HTTP status.
#[allow(clippy::too_many_arguments)]
pub(super) async fn answer<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    head_len: usize,
    body: Body,
    local: &Local,
    is_head: bool,
    close: bool,
    started: Instant,
) -> Next {
    let grpc = c.v.facts().filter(|f| f.grpc).and(local.grpc_code());
    if let (Some(code), Some(facts)) = (grpc, c.v.facts()) {
        facts.grpc_status.set(Some(code.as_u16()));
    }
    answer_locally(w, c, head_len, body, close, started, |out, close, id| {
        if let Some(code) = grpc {
            let (message, lines) = (local.body().trim_ascii_end(), local.route_fields());
            let answer = crate::server::h1::answer::grpc_answer;
            answer(out, code, message, local.field(), close, id, lines);
            return (local.status(), 0);
        }
        crate::server::h1::answer::local_answer(out, local, close, is_head, id);
        let sent = if is_head { 0 } else { local.body().len() };
        (local.status(), sent as u64)
    })
    .await
}

/// A request edge answers itself: its body is discarded (up to the `request` deadline), `write` builds
/// the response (given whether it closes and the request id) and returns its status, counted like any
/// other, and its body bytes.
/// A connection that closes with input possibly unread gets a lingering close.
async fn answer_locally<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    head_len: usize,
    body: Body,
    close: bool,
    started: Instant,
    write: impl FnOnce(&mut Vec<u8>, bool, &[u8]) -> (u16, u64),
) -> Next {
    c.rb.consume(head_len);
    let deadline = started + w.current().cfg.config.server.timeouts.request.0;
    let close = close || !discard_body(c, body, deadline).await;
    let mut out = SendBuf::take();
    let (status, sent) = write(&mut out.0, close, c.v.log_id());
    if let Some(facts) = c.v.facts() {
        facts.response_bytes.set(sent);
    }
    let r =
        crate::server::send::within_send(w.send_timeout(), c.stream.fd(), out.flush(&mut c.stream))
            .await;
    finish(w, c, status, started);
    match (r.is_err(), close) {
        (true, _) => Next::Close,
        (false, true) => Next::Linger,
        (false, false) => Next::Keep,
    }
}

/// A connection shed at accept (`reason`): at `max_connections` with nothing evictable (DESIGN.md
/// "Capacity", `limit`), or its client at `max_connections_per_client` (`client_limit`). Its first head
/// is read under 1 s; a health probe is answered normally, anything else gets 503 (429 for
/// `client_limit`) + Retry-After: 1, then the connection closes.
pub(super) async fn shed<T: Transport>(w: &Worker, mut c: Conn<T>, reason: ShedReason) {
    let started = Instant::now();
    let deadline = started + SHED_HEAD_DEADLINE;
    let live = w.live();
    let server = &live.cfg.config.server;
    // Bytes may already be buffered (read behind a PROXY header): then no readiness wait.
    let ready = !c.rb.is_empty()
        || matches!(
            timeout_at(deadline, c.stream.readable(true)).await,
            Ok(Ok(()))
        );
    let head = if ready {
        read_head(w, &mut c, &server.limits, deadline)
            .await
            .ok()
            .and_then(HeadRead::head)
    } else {
        None
    };
    if let Some(h) = &head {
        let target = &c.rb.data()[h.target.clone()];
        let path = target.split(|&b| b == b'?').next().unwrap_or(target);
        if path == server.health_path.as_bytes() {
            let ready = Local::Health {
                ready: w.shared.ready(),
            };
            answer(w, &mut c, h.len, Body::None, &ready, false, true, started).await;
            return crate::server::h1::linger::linger_close(c.stream).await;
        }
    }
    w.metrics.connection_shed(reason).increment(1);
    crate::request::local::log_shed(w, c.peer, reason);
    // No request was admitted: the answer still gets an id (X-Request-Id on every response).
    w.generate_request_id(&mut c.v.get().log_id);
    let shed = Local::Shed(reason);
    let mut out = SendBuf::take();
    let grpc = head.is_some() && crate::request::grpc::is_call(c.rb.data(), &c.v.get().fields);
    match shed.grpc_code().filter(|_| grpc) {
        Some(code) => {
            let message = shed.body().trim_ascii_end();
            let answer = crate::server::h1::answer::grpc_answer;
            answer(
                &mut out.0,
                code,
                message,
                shed.field(),
                true,
                c.v.log_id(),
                b"",
            );
        }
        None => {
            crate::server::h1::answer::local_answer(&mut out.0, &shed, true, false, c.v.log_id())
        }
    }
    let r =
        crate::server::send::within_send(w.send_timeout(), c.stream.fd(), out.flush(&mut c.stream))
            .await;
    if let Some(h) = &head {
        let line = &c.rb.data()[h.method.start..h.target.end.min(h.method.start + 256)];
        let log_line = &mut c.v.get().log_line;
        log_line.clear();
        log_line.extend_from_slice(line);
    }
    finish(w, &c, 503, started);
    if r.is_ok() {
        crate::server::h1::linger::linger_close(c.stream).await;
    }
}
