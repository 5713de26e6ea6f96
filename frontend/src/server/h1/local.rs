//! Requests the HTTP/1.1 connection answers itself: `health_path` (readiness), OPTIONS and TRACE with
//! `Max-Forwards: 0`, and connections accepted over capacity (DESIGN.md "Capacity"): their first head is
//! read under 1 s, a health probe is answered, anything else gets 503. Also the discarding of a small
//! unread body so a connection can be kept after a local answer.

use std::time::Duration;

use edge_core::{
    buf::SendBuf, clock::timeout_at, http::framing::Body, io::Transport, metrics::ShedReason,
};
use monoio::time::Instant;

use super::conn::{finish, read_head, Conn, Next};
use crate::context::Worker;

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

/// Answers `health_path` locally: 200 `ok`, or 503 while draining or while a worker is stale.
pub(super) async fn health<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    head_len: usize,
    body: Body,
    is_head: bool,
    close: bool,
    started: Instant,
) -> Next {
    answer_locally(w, c, head_len, body, close, started, |out, close| {
        let ready = w.shared.ready();
        let (status, text) = if ready {
            (200, "ok")
        } else {
            (503, "not ready\n")
        };
        crate::server::h1::answer::simple(out, status, text, close, !ready, is_head);
        status
    })
    .await
}

/// Answers an OPTIONS or TRACE request carrying `Max-Forwards: 0` itself: edge is its final recipient
/// (RFC 9110 §7.6.2). OPTIONS gets 200 with `Allow` (the methods edge forwards) and no content
/// (RFC 9110 §9.3.7). TRACE gets 405: edge never reflects a request (an echoed request hands cookies and
/// credentials back to scripts, "cross-site tracing"; nginx refuses TRACE the same way), though it
/// forwards TRACE with a higher Max-Forwards (decremented) for the origin to decide. Neither is a failure:
/// counted in `edge_requests_total{status}` only, the connection is kept when the body could be discarded.
pub(super) async fn last_hop<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    head_len: usize,
    body: Body,
    trace: bool,
    close: bool,
    started: Instant,
) -> Next {
    answer_locally(w, c, head_len, body, close, started, |out, close| {
        if trace {
            crate::server::h1::answer::simple(
                out,
                405,
                "method not allowed: edge does not answer TRACE itself (Max-Forwards: 0)\n",
                close,
                false,
                false,
            );
            405
        } else {
            crate::server::h1::answer::options(out, close);
            200
        }
    })
    .await
}

/// Where `redirect_plain` sends a plain request (DESIGN.md "TLS"): `https://` + the request's host
/// (without its port) + `:port` unless 443 + the target as received (path and query).
pub(crate) struct Redirect<'a> {
    /// The Host (or absolute-form authority); `None`: the TLS listener's own address is not known to
    /// the client either, so `localhost` is used.
    pub host: Option<&'a [u8]>,
    /// The origin-form target.
    pub target: &'a [u8],
    /// The TLS listener's port.
    pub port: u16,
}

impl Redirect<'_> {
    /// The `Location` value.
    pub(crate) fn location(&self) -> Vec<u8> {
        let mut location = Vec::with_capacity(64 + self.target.len());
        location.extend_from_slice(b"https://");
        let host = self.host.unwrap_or(b"localhost");
        // Strip a port; a bracketed IPv6 literal keeps its brackets.
        let name = match host.iter().rposition(|&b| b == b':') {
            Some(i) if !host[i..].contains(&b']') => &host[..i],
            _ => host,
        };
        location.extend_from_slice(name);
        if self.port != 443 && self.port != 0 {
            location.extend_from_slice(format!(":{}", self.port).as_bytes());
        }
        location.extend_from_slice(self.target);
        location
    }
}

/// Answers a request on the plain listener with `redirect_plain = true`: 308 Permanent Redirect (RFC
/// 9110 §15.4.9: the method and body are kept) to `location` (its https URL, [`Redirect::location`]).
/// The health path is answered before this, never redirected.
pub(super) async fn redirect<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    head_len: usize,
    body: Body,
    location: Vec<u8>,
    close: bool,
    started: Instant,
) -> Next {
    answer_locally(w, c, head_len, body, close, started, move |out, close| {
        out.extend_from_slice(b"HTTP/1.1 308 Permanent Redirect\r\nLocation: ");
        out.extend_from_slice(&location);
        out.extend_from_slice(b"\r\nContent-Length: 0\r\nCache-Control: no-store\r\n");
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        308
    })
    .await
}

/// A request edge answers itself: its body is discarded (up to the `request` deadline), `write` builds
/// the response (given whether it closes) and returns its status, which is counted like any other.
/// A connection that closes with input possibly unread gets a lingering close.
async fn answer_locally<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    head_len: usize,
    body: Body,
    close: bool,
    started: Instant,
    write: impl FnOnce(&mut Vec<u8>, bool) -> u16,
) -> Next {
    c.rb.consume(head_len);
    let deadline = started + w.current().cfg.config.server.timeouts.request.0;
    let close = close || !discard_body(c, body, deadline).await;
    let mut out = SendBuf::take();
    let status = write(&mut out.0, close);
    let r = crate::server::send::within_send(w.send_timeout(), out.flush(&mut c.stream)).await;
    finish(w, c, status, started);
    match (r.is_err(), close) {
        (true, _) => Next::Close,
        (false, true) => Next::Linger,
        (false, false) => Next::Keep,
    }
}

/// A connection accepted with nothing evictable at `max_connections` (DESIGN.md "Capacity"): its first
/// head is read under 1 s; a health probe is answered normally, anything else gets 503 + Retry-After.
pub(super) async fn shed<T: Transport>(w: &Worker, mut c: Conn<T>) {
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
            .flatten()
    } else {
        None
    };
    if let Some(h) = &head {
        let target = &c.rb.data()[h.target.clone()];
        let path = target.split(|&b| b == b'?').next().unwrap_or(target);
        if path == server.health_path.as_bytes() {
            health(w, &mut c, h.len, Body::None, false, true, started).await;
            return crate::server::h1::linger::linger_close(c.stream).await;
        }
    }
    w.metrics.connection_shed(ShedReason::Limit).increment(1);
    if w.log_limit.allow() {
        tracing::warn!(event = "connection.shed", worker = w.id, peer = %c.peer, reason = "limit", "at max_connections with nothing evictable");
    }
    let mut out = SendBuf::take();
    crate::server::h1::answer::simple(
        &mut out.0,
        503,
        "service unavailable: connection limit reached\n",
        true,
        true,
        false,
    );
    let r = crate::server::send::within_send(w.send_timeout(), out.flush(&mut c.stream)).await;
    w.metrics
        .count_status(edge_core::metrics::Protocol::Http1, 503);
    if r.is_ok() {
        crate::server::h1::linger::linger_close(c.stream).await;
    }
}
