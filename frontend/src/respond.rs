//! Every drop path of DESIGN.md "Status codes" in one place: [`Failure`] is what went wrong before a
//! response head reached the client ([`Failure::status`], [`Failure::closes`] and [`Failure::record`]
//! decide the status, whether the connection closes, the counter and the log event);
//! [`record_truncation`], [`record_upstream_mid_body`] and [`record_client_gone`] are the failures after
//! it. Every line about a request carries `method`, `path` and `request_id` ([`RequestLog`]); warn lines
//! are rate-limited per worker ([`warn_limited!`](crate::warn_limited)). Also the local answers (health,
//! OPTIONS) and the lingering close.

use std::{
    cell::Cell,
    future::Future,
    io::Write,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use edge_core::metrics::{InboundPhase, InvalidReason, Protocol, UpstreamPhase};
use edge_core::{clock::Deadline, io::Transport};
use edge_upstream::{Counted, UpstreamError, UpstreamErrorKind};
use monoio::{io::AsyncReadRent, time::Instant};

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
#[derive(Clone, Copy)]
pub struct RequestLog<'a> {
    /// Method and target, as received (possibly cut at 256 bytes).
    pub line: &'a [u8],
    /// The request id (`-` before one is known).
    pub id: &'a [u8],
}

impl RequestLog<'_> {
    /// (method, path, request id) for a log line.
    pub fn parts(&self) -> (String, String, String) {
        let line = String::from_utf8_lossy(self.line);
        let (method, path) = line.split_once(' ').unwrap_or((&line, ""));
        let id = match self.id {
            b"" => "-".into(),
            id => String::from_utf8_lossy(id).into_owned(),
        };
        (method.to_string(), path.to_string(), id)
    }
}

/// Counts a finished request (`edge_requests_total{protocol,status}` and the duration histogram) and
/// logs it: `request.slow` (warn) when it took `log.slow_request` or longer, `access` (info) when
/// `log.access` is on (DESIGN.md "Configuration", `[log]`). One function for HTTP/1.1 requests and
/// HTTP/2 streams, so both are counted and logged alike; `peer` is the client (the PROXY header's
/// source when there was one). Formats nothing when neither line is written.
pub fn finish_request(
    w: &Worker,
    protocol: Protocol,
    log: &RequestLog<'_>,
    peer: SocketAddr,
    status: u16,
    started: Instant,
) {
    let elapsed = started.elapsed();
    w.metrics.count_status(protocol, status);
    w.metrics.duration.record(elapsed);
    let live = w.current();
    let settings = &live.cfg.config.log;
    let slow = elapsed >= settings.slow_request.0;
    if !slow && !settings.access {
        return;
    }
    let (method, path, request_id) = log.parts();
    let duration_ms = elapsed.as_millis() as u64;
    let protocol = protocol.as_str();
    if slow {
        tracing::warn!(
            event = "request.slow",
            worker = w.id,
            protocol,
            method,
            path,
            request_id,
            status,
            duration_ms
        );
    }
    if settings.access {
        tracing::info!(event = "access", worker = w.id, protocol, method, path, request_id, status, duration_ms, peer = %peer);
    }
}

/// A warn-level drop log, rate-limited per worker ([`LogLimit`]): `warn_limited!(w, req_log, event =
/// "...", ...)` adds `worker`, `method`, `path` and `request_id`.
#[macro_export]
macro_rules! warn_limited {
    ($w:expr, $log:expr, $($field:tt)*) => {
        if $w.log_limit.allow() {
            let (method, path, request_id) = $log.parts();
            tracing::warn!(worker = $w.id, method, path, request_id, $($field)*);
        }
    };
}

/// A response cut short after its head went out (DESIGN.md "Status codes"):
/// `edge_responses_truncated_total` and `response.truncated`.
pub fn record_truncation(w: &Worker, log: &RequestLog<'_>, status: u16, cause: &'static str) {
    w.metrics.truncated.increment(1);
    crate::warn_limited!(w, log, event = "response.truncated", status, cause);
}

/// The upstream failed after the response head went out: counted by its kind as before the head
/// ([`UpstreamErrorKind::counted`]) with its `upstream.error` line (the zombie verdict logs
/// `upstream.zombie` where it is found); the truncation is recorded besides ([`record_truncation`]).
pub fn record_upstream_mid_body(
    w: &Worker,
    log: &RequestLog<'_>,
    status: u16,
    kind: UpstreamErrorKind,
    cause: &'static str,
) {
    match kind.counted() {
        Counted::Error(label) => {
            w.metrics.upstream_error(label).increment(1);
            crate::warn_limited!(
                w,
                log,
                event = "upstream.error",
                status,
                kind = label.as_str(),
                cause
            );
        }
        Counted::Timeout(p) => w.metrics.upstream_timeout(p).increment(1),
        Counted::Shed => w.metrics.request_shed().increment(1),
    }
}

/// An answer edge wrote could not be delivered (the client closed first): nothing to count, a debug
/// line.
pub fn record_undelivered(w: &Worker, log: &RequestLog<'_>, status: u16, cause: &str) {
    // The line's fields are owned copies: made only when debug lines are on, so a client closing
    // mid-response costs no allocation (`edge-bench alloc`).
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let (method, path, request_id) = log.parts();
    tracing::debug!(
        event = "response.undelivered",
        worker = w.id,
        method,
        path,
        request_id,
        status,
        cause
    );
}

/// The client went away while edge wrote to it: no progress within `send` counts an inbound `send`
/// timeout and a truncation (warn); a closed connection is logged at debug (`response.undelivered`),
/// nothing to count.
pub fn record_client_gone(w: &Worker, log: &RequestLog<'_>, e: SendFailure) {
    match e {
        SendFailure::Timeout => {
            w.metrics.inbound_timeout(InboundPhase::Send).increment(1);
            w.metrics.truncated.increment(1);
            crate::warn_limited!(
                w,
                log,
                event = "response.truncated",
                cause = "client stopped reading (send deadline)"
            );
        }
        SendFailure::Closed => record_undelivered(w, log, 0, "client closed the connection"),
    }
}

impl Failure {
    /// The status code (DESIGN.md "Status codes").
    pub fn status(self) -> u16 {
        match self {
            Failure::Invalid(r) => match r {
                InvalidReason::BadHead
                | InvalidReason::BadFraming
                | InvalidReason::BadChunk
                | InvalidReason::BadHost
                | InvalidReason::BadPath
                | InvalidReason::PlainHttpOnTls => 400,
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
                UpstreamErrorKind::Tls => "upstream_tls",
            },
        }
    }

    /// The short text body of the error response (DESIGN.md "Status codes").
    pub fn text(self) -> &'static str {
        match self {
            Failure::Invalid(r) => match r {
                InvalidReason::BadHead => "bad request: malformed request head\n",
                InvalidReason::BadFraming => {
                    "bad request: ambiguous or malformed message framing\n"
                }
                InvalidReason::BadChunk => "bad request: malformed chunked body\n",
                InvalidReason::BadHost => "bad request: missing, repeated or malformed Host\n",
                InvalidReason::BadPath => {
                    "bad request: path above the root, with an encoded NUL or a bad percent-encoding\n"
                }
                InvalidReason::HeadTooLarge => "request header fields too large\n",
                InvalidReason::UriTooLong => "request line too long\n",
                InvalidReason::BodyTooLarge => "request body too large\n",
                InvalidReason::TransferCoding => "transfer coding not implemented\n",
                InvalidReason::Method => "method not allowed: edge is not a forward proxy\n",
                InvalidReason::PlainHttpOnTls => "plain HTTP sent to the TLS port\n",
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
                UpstreamErrorKind::Tls => "bad gateway: upstream TLS handshake failed\n",
            },
        }
    }

    /// Counts the failure and logs its event (rate-limited at warn), each line with the request's
    /// method, path and id.
    pub fn record(self, w: &Worker, req: &RequestLog<'_>) {
        let status = self.status();
        if self != Failure::NoRoute && w.log_limit.allow() {
            let (method, path, request_id) = req.parts();
            tracing::info!(
                event = "request.failed",
                worker = w.id,
                method,
                path,
                request_id,
                status,
                kind = self.kind()
            );
        }
        match self {
            Failure::Invalid(r) => {
                w.metrics.invalid(r).increment(1);
                crate::warn_limited!(
                    w,
                    req,
                    event = "request.invalid",
                    status,
                    reason = r.as_str()
                );
            }
            Failure::RequestTimeout => {
                w.metrics
                    .inbound_timeout(InboundPhase::Request)
                    .increment(1);
                crate::warn_limited!(w, req, event = "request.timeout", status);
            }
            Failure::NoRoute => {}
            Failure::Upstream(e) => match e.kind.counted() {
                Counted::Shed => {
                    w.metrics.request_shed().increment(1);
                    crate::warn_limited!(
                        w,
                        req,
                        event = "request.shed",
                        status,
                        reason = "upstream_queue"
                    );
                }
                Counted::Timeout(p) => {
                    w.metrics.upstream_timeout(p).increment(1);
                    // The zombie verdict has its own line, `upstream.zombie`, written where it is found.
                    if p != UpstreamPhase::Zombie {
                        crate::warn_limited!(
                            w,
                            req,
                            event = "upstream.timeout",
                            status,
                            phase = p.as_str()
                        );
                    }
                }
                Counted::Error(label) => {
                    w.metrics.upstream_error(label).increment(1);
                    crate::warn_limited!(w, req, event = "upstream.error", status, kind = label.as_str(), error = %e.kind);
                }
            },
        }
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
/// here. A plain future rather than an `async fn`, so that the write's future is not copied into one
/// more state machine on its way (bench/README.md "Future moves").
#[inline]
pub fn within_send<T, F: Future<Output = std::io::Result<T>>>(
    send: Duration,
    write: F,
) -> WithinSend<F> {
    WithinSend(edge_core::clock::timeout(send, write))
}

/// The future of [`within_send`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct WithinSend<F>(Deadline<F>);

impl<T, F: Future<Output = std::io::Result<T>>> Future for WithinSend<F> {
    type Output = Result<T, SendFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of the only field, which is never moved out.
        let deadline = unsafe { self.map_unchecked_mut(|s| &mut s.0) };
        deadline.poll(cx).map(|r| match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(SendFailure::Closed),
            Err(_) => Err(SendFailure::Timeout),
        })
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
pub async fn linger_close<T: Transport>(stream: T) {
    const LIMIT: usize = 256 * 1024;
    let until = Instant::now() + Duration::from_secs(1);
    let (mut rd, mut wr) = stream.split();
    let _ = monoio::io::AsyncWriteRent::shutdown(&mut wr).await;
    let mut buf = edge_core::buf::take();
    let mut seen = 0;
    while seen < LIMIT {
        buf.clear();
        match edge_core::clock::timeout_at(until, rd.read(buf)).await {
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
