//! One error type for the upstream side: a kind (mapped to status, counter and log event in exactly one
//! place, the frontend's `respond` module) and whether a retry is safe.

use std::{fmt, net::SocketAddr};

use edge_core::metrics::{ShedReason, UpstreamErrorLabel, UpstreamPhase};

/// What went wrong talking to an upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamErrorKind {
    /// Connect refused: 502 `refused`.
    Refused,
    /// Connect did not finish within `connect_timeout`: 504 `connect`.
    ConnectTimeout,
    /// Reset (or another IO error) before a complete response: 502 `reset`.
    Reset,
    /// EOF before a complete response: 502 `closed_early`.
    ClosedEarly,
    /// Malformed response head or framing: 502 `bad_response`.
    BadResponse,
    /// No progress writing the request within `write_timeout`: 504 `write`.
    WriteTimeout,
    /// No response head within `request_timeout`: 504 `request`.
    RequestTimeout,
    /// Inactive past the zombie threshold: 504 `zombie`.
    Zombie,
    /// `max_active` reached and no connection freed within `queue_timeout`: 503 `upstream_queue`.
    QueueTimeout,
    /// TLS handshake or certificate verification failed (`tls = true`): 502 `tls`.
    Tls,
    /// The upstream has no address yet: every endpoint name is still unresolved (edge keeps resolving
    /// them): 503 `no_endpoint`.
    NoEndpoint,
    /// An HTTP/2 upstream refused the stream (RST_STREAM REFUSED_STREAM, RFC 9113 §8.7): it was never
    /// processed, so it is retried whatever the method ([`UpstreamErrorKind::unprocessed`]); 502
    /// `refused_stream` when not.
    RefusedStream,
    /// The stream was above an HTTP/2 upstream's graceful GOAWAY last-stream-id, or the connection was
    /// going away as the stream was opened (RFC 9113 §6.8): never processed, retried whatever the
    /// method; 502 `goaway` when not.
    GoAway,
}

impl UpstreamErrorKind {
    /// The request never reached the upstream's application (RFC 9113 §8.7): it may be sent again on
    /// another connection whatever its method, when what was sent can be replayed.
    pub const fn unprocessed(self) -> bool {
        matches!(
            self,
            UpstreamErrorKind::RefusedStream | UpstreamErrorKind::GoAway
        )
    }
}

/// An upstream failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamError {
    /// What happened.
    pub kind: UpstreamErrorKind,
    /// Nothing reached the upstream application (refused or timed-out connect, or a reused pooled
    /// connection that was closed before any response byte), so the request may be sent again.
    pub retry_safe: bool,
    /// The endpoint it happened on, for the `endpoint` field of its log line (DESIGN.md
    /// "Observability"); `None` when no endpoint was involved (`NoEndpoint`) or before the orchestrator
    /// names it ([`UpstreamError::at`]).
    pub endpoint: Option<SocketAddr>,
}

impl UpstreamError {
    /// An error that is not safe to retry.
    pub const fn new(kind: UpstreamErrorKind) -> Self {
        UpstreamError {
            kind,
            retry_safe: false,
            endpoint: None,
        }
    }

    /// An error that is safe to retry: nothing reached the upstream application.
    pub const fn retry_safe(kind: UpstreamErrorKind) -> Self {
        UpstreamError {
            kind,
            retry_safe: true,
            endpoint: None,
        }
    }

    /// The same error, on `endpoint`.
    #[must_use]
    pub const fn at(self, endpoint: SocketAddr) -> Self {
        UpstreamError {
            endpoint: Some(endpoint),
            ..self
        }
    }

    /// Classifies an IO error from an established connection. A TLS error from the connection's
    /// records (e.g. a TLS 1.3 server that refuses the client certificate alerts on the first read after
    /// the handshake, RFC 8446 §4.4.2.4) is `Tls`.
    pub fn from_io(e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let is_tls = e
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
        let kind = match e.kind() {
            _ if is_tls => UpstreamErrorKind::Tls,
            K::UnexpectedEof => UpstreamErrorKind::ClosedEarly,
            _ => UpstreamErrorKind::Reset,
        };
        UpstreamError::new(kind)
    }
}

impl From<edge_core::io::body::SinkError> for UpstreamError {
    /// A request-body write that failed ([`UpstreamError::from_io`]) or made no progress within
    /// `write_timeout` (`WriteTimeout`).
    fn from(e: edge_core::io::body::SinkError) -> Self {
        use edge_core::io::body::SinkError;
        match e {
            SinkError::Io(e) => UpstreamError::from_io(&e),
            SinkError::Timeout => UpstreamError::new(UpstreamErrorKind::WriteTimeout),
        }
    }
}

/// Where a failure of some [`UpstreamErrorKind`] is counted (DESIGN.md "Status codes", "Metrics").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// `edge_upstream_errors_total{kind}` with `upstream.error`.
    Error(UpstreamErrorLabel),
    /// `edge_upstream_timeouts_total{phase}` with `upstream.timeout` (the zombie verdict logs
    /// `upstream.zombie` instead).
    Timeout(UpstreamPhase),
    /// `edge_requests_shed_total{reason}` (`upstream_queue`, `no_endpoint`) with `request.shed`.
    Shed(ShedReason),
}

impl UpstreamErrorKind {
    /// The one map from a kind to its counter, before or after the response head.
    pub const fn counted(self) -> Counted {
        use UpstreamErrorKind as K;
        match self {
            K::Refused => Counted::Error(UpstreamErrorLabel::Refused),
            K::Reset => Counted::Error(UpstreamErrorLabel::Reset),
            K::ClosedEarly => Counted::Error(UpstreamErrorLabel::ClosedEarly),
            K::BadResponse => Counted::Error(UpstreamErrorLabel::BadResponse),
            K::ConnectTimeout => Counted::Timeout(UpstreamPhase::Connect),
            K::WriteTimeout => Counted::Timeout(UpstreamPhase::Write),
            K::RequestTimeout => Counted::Timeout(UpstreamPhase::Request),
            K::Zombie => Counted::Timeout(UpstreamPhase::Zombie),
            K::QueueTimeout => Counted::Shed(ShedReason::UpstreamQueue),
            K::NoEndpoint => Counted::Shed(ShedReason::NoEndpoint),
            K::Tls => Counted::Error(UpstreamErrorLabel::Tls),
            K::RefusedStream => Counted::Error(UpstreamErrorLabel::RefusedStream),
            K::GoAway => Counted::Error(UpstreamErrorLabel::Goaway),
        }
    }
}

impl fmt::Display for UpstreamErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UpstreamErrorKind::Refused => "connection refused",
            UpstreamErrorKind::ConnectTimeout => "connect timed out",
            UpstreamErrorKind::Reset => "connection reset",
            UpstreamErrorKind::ClosedEarly => "connection closed before a complete response",
            UpstreamErrorKind::BadResponse => "malformed response",
            UpstreamErrorKind::WriteTimeout => "request write timed out",
            UpstreamErrorKind::RequestTimeout => "no response within request_timeout",
            UpstreamErrorKind::Zombie => "upstream connection inactive past the zombie threshold",
            UpstreamErrorKind::QueueTimeout => "no upstream connection free within queue_timeout",
            UpstreamErrorKind::Tls => "TLS handshake or certificate verification failed",
            UpstreamErrorKind::NoEndpoint => "no endpoint address resolved yet",
            UpstreamErrorKind::RefusedStream => "HTTP/2 stream refused by the upstream",
            UpstreamErrorKind::GoAway => "HTTP/2 upstream connection going away",
        })
    }
}
