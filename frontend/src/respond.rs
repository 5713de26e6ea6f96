//! Every drop path of DESIGN.md "Status codes" in one place: [`Failure`] is what went wrong before a
//! response head reached the client ([`Failure::status`], [`Failure::closes`] and [`Failure::record`]
//! decide the status, whether the connection closes, the counter and the log event);
//! [`record_truncation`], [`record_upstream_mid_body`] and [`record_client_gone`] are the failures after
//! it, and [`client_left`] the end of a request whose client went away. [`Failure::grpc_code`] and
//! [`Failure::grpc_message`] are the answer to a gRPC call. How each protocol writes the answer is its
//! session's job (`crate::server::h1::answer`, the h2 session's `answer`).

use std::{fmt, net::SocketAddr};

use edge_core::{
    http::grpc::Code,
    metrics::{ClientClosedPhase, InboundPhase, InvalidReason, UpstreamPhase},
};
use edge_upstream::{Counted, UpstreamError, UpstreamErrorKind};

use crate::{context::Worker, log::RequestLog};

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

/// A response cut short after its head went out (DESIGN.md "Status codes"):
/// `edge_responses_truncated_total` and `response.truncated`.
pub fn record_truncation(w: &Worker, log: &RequestLog<'_>, status: u16, cause: &'static str) {
    w.metrics.truncated.increment(1);
    crate::warn_limited!(w, log, event = "response.truncated", status, cause);
}

/// The upstream failed after the response head went out: counted by its kind as before the head
/// ([`UpstreamErrorKind::counted`]) with its `upstream.error` line naming the upstream and `endpoint`
/// (the zombie verdict logs `upstream.zombie` where it is found); the truncation is recorded besides
/// ([`record_truncation`]).
pub fn record_upstream_mid_body(
    w: &Worker,
    log: &RequestLog<'_>,
    status: u16,
    kind: UpstreamErrorKind,
    endpoint: SocketAddr,
    cause: &'static str,
) {
    let counters = log.upstream.map(|u| u.metrics);
    match kind.counted() {
        Counted::Error(label) => {
            if let Some(c) = counters {
                c.error(label).increment(1);
            }
            crate::warn_limited!(
                w,
                log,
                event = "upstream.error",
                upstream = log.upstream_name(),
                endpoint = %endpoint,
                status,
                kind = label.as_str(),
                cause
            );
        }
        Counted::Timeout(p) => {
            if let Some(c) = counters {
                c.timeout(p).increment(1);
            }
        }
        Counted::Shed(reason) => w.metrics.request_shed(reason).increment(1),
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
    let (method, path, request_id, trace_id) = log.parts();
    tracing::debug!(
        event = "response.undelivered",
        worker = w.id,
        method,
        path,
        request_id,
        trace_id,
        status,
        cause
    );
}

/// The client went away while edge wrote to it: no progress within `send` counts an inbound `send`
/// timeout and a truncation (warn); a closed connection is logged at debug (`response.undelivered`,
/// with `status` or 499 as the access line will have it) and counted at the request's end
/// ([`client_left`]).
pub fn record_client_gone(w: &Worker, log: &RequestLog<'_>, e: SendFailure, status: Option<u16>) {
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
        SendFailure::Closed => {
            let status = status.unwrap_or(CLIENT_CLOSED_REQUEST);
            record_undelivered(w, log, status, "client closed the connection")
        }
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
                UpstreamErrorKind::QueueTimeout | UpstreamErrorKind::NoEndpoint => 503,
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
                UpstreamErrorKind::NoEndpoint => "no_endpoint",
                UpstreamErrorKind::RefusedStream => "upstream_refused_stream",
                UpstreamErrorKind::GoAway => "upstream_goaway",
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
                UpstreamErrorKind::RefusedStream => "bad gateway: upstream refused the stream\n",
                UpstreamErrorKind::GoAway => "bad gateway: upstream connection going away\n",
                UpstreamErrorKind::NoEndpoint => {
                    "service unavailable: the upstream's endpoint names have not resolved yet\n"
                }
            },
        }
    }

    /// The gRPC status of the answer to a gRPC call (DESIGN.md "Status codes", its gRPC paragraph): no
    /// route 12 UNIMPLEMENTED; a request edge could not accept 13 INTERNAL, its body over
    /// `max_body_bytes` 8 RESOURCE_EXHAUSTED; the inbound `request` deadline 4 DEADLINE_EXCEEDED;
    /// shed at the upstream's queue 8 RESOURCE_EXHAUSTED; upstream timeouts and zombie 4
    /// DEADLINE_EXCEEDED; every other upstream failure (refused, reset, closed early, bad response,
    /// TLS, unresolved) 14 UNAVAILABLE.
    pub fn grpc_code(self) -> Code {
        match self {
            Failure::Invalid(InvalidReason::BodyTooLarge) => Code::ResourceExhausted,
            Failure::Invalid(_) => Code::Internal,
            Failure::RequestTimeout => Code::DeadlineExceeded,
            Failure::NoRoute => Code::Unimplemented,
            Failure::Upstream(e) => match e.kind {
                UpstreamErrorKind::ConnectTimeout
                | UpstreamErrorKind::WriteTimeout
                | UpstreamErrorKind::RequestTimeout
                | UpstreamErrorKind::Zombie => Code::DeadlineExceeded,
                UpstreamErrorKind::QueueTimeout => Code::ResourceExhausted,
                UpstreamErrorKind::Refused
                | UpstreamErrorKind::Reset
                | UpstreamErrorKind::ClosedEarly
                | UpstreamErrorKind::BadResponse
                | UpstreamErrorKind::Tls
                | UpstreamErrorKind::NoEndpoint
                | UpstreamErrorKind::RefusedStream
                | UpstreamErrorKind::GoAway => Code::Unavailable,
            },
        }
    }

    /// The `grpc-message` of the answer to a gRPC call: the text body's cause without its line end
    /// (printable ASCII without `%`, so percent-encoding leaves it as it is).
    pub fn grpc_message(self) -> &'static str {
        self.text().trim_end()
    }

    /// Counts the failure and logs its event (rate-limited at warn), each line with the request's
    /// method, path and id.
    pub fn record(self, w: &Worker, req: &RequestLog<'_>) {
        let status = self.status();
        if self != Failure::NoRoute && w.log_limit.allow() {
            let (method, path, request_id, trace_id) = req.parts();
            tracing::info!(
                event = "request.failed",
                worker = w.id,
                method,
                path,
                request_id,
                trace_id,
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
                Counted::Shed(reason) => {
                    w.metrics.request_shed(reason).increment(1);
                    crate::warn_limited!(
                        w,
                        req,
                        event = "request.shed",
                        upstream = req.upstream_name(),
                        endpoint = %EndpointField(e.endpoint),
                        status,
                        reason = reason.as_str()
                    );
                }
                Counted::Timeout(p) => {
                    if let Some(u) = req.upstream {
                        u.metrics.timeout(p).increment(1);
                    }
                    // The zombie verdict has its own line, `upstream.zombie`, written where it is found.
                    if p != UpstreamPhase::Zombie {
                        crate::warn_limited!(
                            w,
                            req,
                            event = "upstream.timeout",
                            upstream = req.upstream_name(),
                            endpoint = %EndpointField(e.endpoint),
                            status,
                            phase = p.as_str()
                        );
                    }
                }
                Counted::Error(label) => {
                    if let Some(u) = req.upstream {
                        u.metrics.error(label).increment(1);
                    }
                    crate::warn_limited!(w, req, event = "upstream.error", upstream = req.upstream_name(), endpoint = %EndpointField(e.endpoint), status, kind = label.as_str(), error = %e.kind);
                }
            },
        }
    }
}

/// The `endpoint` field of an upstream log line: the address, or `-` when the failure involved no
/// endpoint (every endpoint name still unresolved).
struct EndpointField(Option<SocketAddr>);

impl fmt::Display for EndpointField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => addr.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The status an access line and `edge_requests_total` carry for a request whose client closed its
/// connection (or reset its stream) before edge had an answer: nginx's "client closed request". It is
/// never sent (there is no one to send it to).
pub const CLIENT_CLOSED_REQUEST: u16 = 499;

/// A request whose client went away ([`crate::proxy::Outcome::ClientGone`]): a close or reset counts
/// `edge_requests_client_closed_total{phase}` (a `send` timeout is counted where it expired). Returns
/// the status its access line carries: edge's answer, or [`CLIENT_CLOSED_REQUEST`] when the client
/// left first.
pub fn client_left(w: &Worker, status: Option<u16>, closed: bool) -> u16 {
    if closed {
        let phase = match status {
            None => ClientClosedPhase::Request,
            Some(_) => ClientClosedPhase::Response,
        };
        w.metrics.client_closed(phase).increment(1);
    }
    status.unwrap_or(CLIENT_CLOSED_REQUEST)
}

/// Why bytes could not be delivered to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendFailure {
    /// The client closed or reset the connection.
    Closed,
    /// The `send` deadline passed without progress.
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::http::grpc::message_is_plain;

    /// DESIGN.md "Status codes", its gRPC paragraph, row by row.
    #[test]
    fn every_failure_has_the_grpc_status_of_its_row() {
        use InvalidReason as I;
        use UpstreamErrorKind as K;
        let up = |k| Failure::Upstream(UpstreamError::new(k));
        let table: &[(Failure, u16, Code)] = &[
            (Failure::NoRoute, 404, Code::Unimplemented),
            (Failure::Invalid(I::BadHead), 400, Code::Internal),
            (Failure::Invalid(I::BadPath), 400, Code::Internal),
            (Failure::Invalid(I::HeadTooLarge), 431, Code::Internal),
            (Failure::Invalid(I::UriTooLong), 414, Code::Internal),
            (Failure::Invalid(I::TransferCoding), 501, Code::Internal),
            (
                Failure::Invalid(I::BodyTooLarge),
                413,
                Code::ResourceExhausted,
            ),
            (Failure::RequestTimeout, 408, Code::DeadlineExceeded),
            (up(K::Refused), 502, Code::Unavailable),
            (up(K::Reset), 502, Code::Unavailable),
            (up(K::ClosedEarly), 502, Code::Unavailable),
            (up(K::BadResponse), 502, Code::Unavailable),
            (up(K::Tls), 502, Code::Unavailable),
            (up(K::NoEndpoint), 503, Code::Unavailable),
            (up(K::QueueTimeout), 503, Code::ResourceExhausted),
            (up(K::ConnectTimeout), 504, Code::DeadlineExceeded),
            (up(K::WriteTimeout), 504, Code::DeadlineExceeded),
            (up(K::RequestTimeout), 504, Code::DeadlineExceeded),
            (up(K::Zombie), 504, Code::DeadlineExceeded),
        ];
        for &(f, status, code) in table {
            assert_eq!((f.status(), f.grpc_code()), (status, code), "{f:?}");
            // The message goes out as a field value without encoding (HTTP/2 takes it as is).
            let message = f.grpc_message();
            assert!(
                message_is_plain(message.as_bytes()) && !message.is_empty(),
                "{f:?}"
            );
        }
    }
}
