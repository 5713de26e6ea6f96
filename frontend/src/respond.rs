//! Every drop path of DESIGN.md "Status codes" in one place: [`Failure`] is what went wrong before a
//! response head reached the client, and [`Failure::answer`] decides the status, whether the connection
//! closes, the counter and the log event. Also the local answers (health) and the lingering close.

use std::{cell::Cell, io::Write, time::Duration};

use edge_core::metrics::{InboundPhase, InvalidReason, UpstreamPhase};
use edge_upstream::{UpstreamError, UpstreamErrorKind};
use monoio::{
    io::{AsyncReadRent, Splitable},
    net::TcpStream,
    time::Instant,
};

use crate::worker::Worker;

/// A failure that is answered with an error response (the response head was not sent yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// 400/405/413/414/431/501, by reason.
    Invalid(InvalidReason),
    /// 408: the `request` deadline passed before the head and body were read.
    RequestTimeout,
    /// 404: no route.
    NoRoute,
    /// 502/504 from the upstream side.
    Upstream(UpstreamError),
}

/// What the request looked like, for log lines (owned copies are made only on the logging path).
pub struct RequestLog<'a> {
    /// Method and target, as received (possibly cut at 256 bytes).
    pub line: &'a [u8],
    /// The request id.
    pub id: &'a [u8],
}

impl Failure {
    /// The status code (DESIGN.md "Status codes").
    pub fn status(self) -> u16 {
        match self {
            Failure::Invalid(r) => match r {
                InvalidReason::BadHead
                | InvalidReason::BadFraming
                | InvalidReason::BadChunk
                | InvalidReason::BadHost => 400,
                InvalidReason::HeadTooLarge => 431,
                InvalidReason::UriTooLong => 414,
                InvalidReason::BodyTooLarge => 413,
                InvalidReason::TransferCoding => 501,
                InvalidReason::Method => 405,
            },
            Failure::RequestTimeout => 408,
            Failure::NoRoute => 404,
            Failure::Upstream(e) => match e.kind {
                UpstreamErrorKind::ConnectTimeout
                | UpstreamErrorKind::WriteTimeout
                | UpstreamErrorKind::RequestTimeout
                | UpstreamErrorKind::Zombie => 504,
                UpstreamErrorKind::QueueTimeout => 503,
                _ => 502,
            },
        }
    }

    /// Whether the connection always closes after this answer (the framing can no longer be trusted or the
    /// client is too slow); otherwise it is kept only if the request body was read to its end.
    pub fn closes(self) -> bool {
        matches!(self, Failure::Invalid(_) | Failure::RequestTimeout)
    }

    /// A short name of the failure kind for `request.failed` lines.
    pub fn kind(self) -> &'static str {
        match self {
            Failure::Invalid(r) => r.as_str(),
            Failure::RequestTimeout => "request_timeout",
            Failure::NoRoute => "no_route",
            Failure::Upstream(e) => match e.kind {
                UpstreamErrorKind::Refused => "upstream_refused",
                UpstreamErrorKind::ConnectTimeout => "upstream_connect_timeout",
                UpstreamErrorKind::Reset => "upstream_reset",
                UpstreamErrorKind::ClosedEarly => "upstream_closed_early",
                UpstreamErrorKind::BadResponse => "upstream_bad_response",
                UpstreamErrorKind::WriteTimeout => "upstream_write_timeout",
                UpstreamErrorKind::RequestTimeout => "upstream_request_timeout",
                UpstreamErrorKind::Zombie => "upstream_zombie",
                UpstreamErrorKind::QueueTimeout => "upstream_queue",
            },
        }
    }

    fn text(self) -> &'static str {
        match self {
            Failure::Invalid(r) => match r {
                InvalidReason::BadHead => "bad request: malformed request head\n",
                InvalidReason::BadFraming => {
                    "bad request: ambiguous or malformed message framing\n"
                }
                InvalidReason::BadChunk => "bad request: malformed chunked body\n",
                InvalidReason::BadHost => "bad request: missing, repeated or malformed Host\n",
                InvalidReason::HeadTooLarge => "request header fields too large\n",
                InvalidReason::UriTooLong => "request line too long\n",
                InvalidReason::BodyTooLarge => "request body too large\n",
                InvalidReason::TransferCoding => "transfer coding not implemented\n",
                InvalidReason::Method => "method not allowed: edge is not a forward proxy\n",
            },
            Failure::RequestTimeout => "request timeout: the request was not received in time\n",
            Failure::NoRoute => "no route for this request\n",
            Failure::Upstream(e) => match e.kind {
                UpstreamErrorKind::Refused => "bad gateway: upstream refused the connection\n",
                UpstreamErrorKind::Reset => "bad gateway: upstream reset the connection\n",
                UpstreamErrorKind::ClosedEarly => {
                    "bad gateway: upstream closed the connection early\n"
                }
                UpstreamErrorKind::BadResponse => "bad gateway: malformed upstream response\n",
                UpstreamErrorKind::ConnectTimeout => {
                    "gateway timeout: upstream connect timed out\n"
                }
                UpstreamErrorKind::WriteTimeout => {
                    "gateway timeout: writing to the upstream timed out\n"
                }
                UpstreamErrorKind::RequestTimeout => {
                    "gateway timeout: upstream did not answer in time\n"
                }
                UpstreamErrorKind::Zombie => "gateway timeout: upstream connection went silent\n",
                UpstreamErrorKind::QueueTimeout => {
                    "service unavailable: upstream connection limit reached\n"
                }
            },
        }
    }

    /// Counts the failure and logs its event (rate-limited at warn).
    pub fn record(self, w: &Worker, req: &RequestLog<'_>) {
        let line = String::from_utf8_lossy(req.line);
        let id = String::from_utf8_lossy(req.id);
        let status = self.status();
        if self != Failure::NoRoute && w.log_limit.allow() {
            let (method, path) = line.split_once(' ').unwrap_or((&line, ""));
            tracing::info!(event = "request.failed", worker = w.id, method, path, status, kind = self.kind(), request_id = %id);
        }
        match self {
            Failure::Invalid(r) => {
                w.metrics.invalid(r).increment(1);
                if w.log_limit.allow() {
                    tracing::warn!(event = "request.invalid", worker = w.id, status, reason = r.as_str(), request = %line, request_id = %id);
                }
            }
            Failure::RequestTimeout => {
                w.metrics
                    .inbound_timeout(InboundPhase::Request)
                    .increment(1);
                if w.log_limit.allow() {
                    tracing::warn!(event = "request.timeout", worker = w.id, status, request = %line, request_id = %id);
                }
            }
            Failure::NoRoute => {}
            Failure::Upstream(e) if e.kind == UpstreamErrorKind::QueueTimeout => {
                w.metrics.request_shed().increment(1);
                if w.log_limit.allow() {
                    tracing::warn!(event = "request.shed", worker = w.id, status, reason = "upstream_queue", request = %line, request_id = %id);
                }
            }
            Failure::Upstream(e) => {
                let phase = match e.kind {
                    UpstreamErrorKind::ConnectTimeout => Some(UpstreamPhase::Connect),
                    UpstreamErrorKind::WriteTimeout => Some(UpstreamPhase::Write),
                    UpstreamErrorKind::RequestTimeout => Some(UpstreamPhase::Request),
                    UpstreamErrorKind::Zombie => Some(UpstreamPhase::Zombie),
                    _ => None,
                };
                match phase {
                    Some(p) => {
                        w.metrics.upstream_timeout(p).increment(1);
                        if p != UpstreamPhase::Zombie && w.log_limit.allow() {
                            tracing::warn!(event = "upstream.timeout", worker = w.id, status, phase = p.as_str(), request = %line, request_id = %id);
                        }
                    }
                    None => {
                        let kind = upstream_kind(e.kind);
                        w.metrics.upstream_error(kind).increment(1);
                        if w.log_limit.allow() {
                            tracing::warn!(event = "upstream.error", worker = w.id, status, kind = kind.as_str(), error = %e.kind, request = %line, request_id = %id);
                        }
                    }
                }
            }
        }
    }
}

/// The counter label of an upstream error kind that is not a timeout.
pub fn upstream_kind(k: UpstreamErrorKind) -> edge_core::metrics::UpstreamErrorKind {
    use edge_core::metrics::UpstreamErrorKind as L;
    match k {
        UpstreamErrorKind::Refused => L::Refused,
        UpstreamErrorKind::ClosedEarly => L::ClosedEarly,
        UpstreamErrorKind::BadResponse => L::BadResponse,
        _ => L::Reset,
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// The methods edge forwards, for `Allow` (RFC 9110 §10.2.1) on a 405 and on its own answer to
/// `OPTIONS` with `Max-Forwards: 0`. CONNECT is refused; TRACE is forwarded but never answered by edge.
pub const ALLOW: &[u8] = b"GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE";

/// Writes edge's own answer to `OPTIONS` with `Max-Forwards: 0` (RFC 9110 §7.6.2, §9.3.7): 200, `Allow`
/// ([`ALLOW`]), no content.
pub fn options(out: &mut Vec<u8>, close: bool) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nAllow: ");
    out.extend_from_slice(ALLOW);
    out.extend_from_slice(b"\r\n");
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes a complete short response (Content-Length, text body) into `out`.
pub fn simple(
    out: &mut Vec<u8>,
    status: u16,
    body: &str,
    close: bool,
    retry_after: bool,
    head_only: bool,
) {
    local(
        out,
        status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        close,
        retry_after,
        head_only,
    );
}

/// Writes a complete response edge answers itself (errors, health, admin): Content-Length framing,
/// `Cache-Control: no-store`, `Retry-After: 1` on request, `Allow` on 405 (RFC 9110 §15.5.6).
pub fn local(
    out: &mut Vec<u8>,
    status: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
    retry_after: bool,
    head_only: bool,
) {
    let _ = write!(
        out,
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
        reason_phrase(status),
        body.len()
    );
    if retry_after {
        out.extend_from_slice(b"Retry-After: 1\r\n");
    }
    if status == 405 {
        out.extend_from_slice(b"Allow: ");
        out.extend_from_slice(ALLOW);
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// The error response for `f` (503 carries `Retry-After: 1`).
pub fn error_response(out: &mut Vec<u8>, f: Failure, close: bool) {
    simple(out, f.status(), f.text(), close, f.status() == 503, false);
}

/// Runs one write to the client under the `send` deadline (DESIGN.md "Inbound deadlines": no progress
/// writing to the client), mapping the outcome to [`SendFailure`]. Every write to a client goes through
/// here.
pub async fn within_send<T>(
    send: Duration,
    write: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, SendFailure> {
    match monoio::time::timeout(send, write).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(SendFailure::Closed),
        Err(_) => Err(SendFailure::Timeout),
    }
}

/// Why bytes could not be delivered to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendFailure {
    /// The client closed or reset the connection.
    Closed,
    /// The `send` deadline passed without progress.
    Timeout,
}

/// Lingering close (DESIGN.md "Status codes"): shut the write side, then discard input for up to 1 s or
/// 256 KiB so the client reads the response instead of a reset.
pub async fn linger_close(stream: TcpStream) {
    const LIMIT: usize = 256 * 1024;
    let until = Instant::now() + Duration::from_secs(1);
    let (mut rd, mut wr) = stream.into_split();
    let _ = monoio::io::AsyncWriteRent::shutdown(&mut wr).await;
    let mut buf = edge_core::buf::take();
    let mut seen = 0;
    while seen < LIMIT {
        buf.clear();
        match monoio::time::timeout_at(until, rd.read(buf)).await {
            Ok((Ok(n), b)) if n > 0 => {
                seen += n;
                buf = b;
            }
            Ok((_, b)) => {
                buf = b;
                break;
            }
            Err(_) => return,
        }
    }
    edge_core::buf::give(buf);
}

/// A per-worker limit on warn-level drop logs: at most `PER_SECOND` lines a second; the first line of the
/// next second carries a summary of how many were suppressed.
#[derive(Default)]
pub struct LogLimit {
    worker: usize,
    window: Cell<u64>,
    count: Cell<u32>,
    suppressed: Cell<u64>,
}

impl LogLimit {
    const PER_SECOND: u32 = 20;

    /// A limiter for worker `worker`'s warn lines.
    pub fn new(worker: usize) -> Self {
        LogLimit {
            worker,
            ..Default::default()
        }
    }

    /// Whether a warn line may be written now.
    pub fn allow(&self) -> bool {
        self.roll(coarse_secs());
        let c = self.count.get() + 1;
        self.count.set(c);
        if c > Self::PER_SECOND {
            self.suppressed.set(self.suppressed.get() + 1);
            false
        } else {
            true
        }
    }

    /// Writes the summary of a finished window that suppressed lines; called from the worker's timer so
    /// the summary appears even when no further warn line follows.
    pub fn flush(&self) {
        if self.suppressed.get() > 0 {
            self.roll(coarse_secs());
        }
    }

    fn roll(&self, sec: u64) {
        if sec == self.window.get() {
            return;
        }
        self.window.set(sec);
        self.count.set(0);
        let s = self.suppressed.replace(0);
        if s > 0 {
            tracing::warn!(
                event = "log.suppressed",
                worker = self.worker,
                suppressed = s,
                "warn-level drop logs were rate-limited"
            );
        }
    }
}

fn coarse_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
