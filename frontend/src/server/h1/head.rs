//! Reading and checking an HTTP/1.1 request head (RFC 9112 §2-3, §6.3) under the connection's `request`
//! deadline.

use edge_core::{
    clock::timeout_at,
    http::{
        framing::{request_info, Body, FramingError},
        head::{parse_request, request_line_complete, Fields, HeadError, RequestHead},
    },
    io::Transport,
    metrics::InvalidReason,
};
use monoio::time::Instant;

use super::conn::Conn;
use crate::{context::Worker, respond::Failure};

/// How [`read_head`] ended, when there is nothing to answer with a failure.
pub(super) enum HeadRead {
    /// A whole head, parsed.
    Head(RequestHead),
    /// No request to answer or log: the client closed before sending a byte of one (only the empty
    /// lines RFC 9112 §2.2 lets a server ignore), or sent a PROXY header where none is accepted
    /// (counted and logged where it was refused).
    Nothing,
    /// The client closed (or its connection failed) with part of a head sent: a request it left before
    /// an answer, logged and counted as one (DESIGN.md "Status codes": 499).
    Left,
}

impl HeadRead {
    /// The head, if a whole one was read.
    pub(super) fn head(self) -> Option<RequestHead> {
        match self {
            HeadRead::Head(h) => Some(h),
            HeadRead::Nothing | HeadRead::Left => None,
        }
    }
}

/// Whether `buffered` holds the start of a request: anything but the empty lines a server ignores
/// before a request line (RFC 9112 §2.2).
fn began_request(buffered: &[u8]) -> bool {
    buffered.iter().any(|&b| b != b'\r' && b != b'\n')
}

/// Reads a whole request head under `deadline`.
///
/// # Errors
/// The failure to answer: 408 at `deadline`, 400/414/431 for a head that cannot be a request.
pub(super) async fn read_head<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    limits: &edge_core::config::Limits,
    deadline: Instant,
) -> Result<HeadRead, Failure> {
    let max_head = limits.max_head_bytes.0 as usize;
    loop {
        if c.refuse_proxy_header {
            match crate::accept::proxy_protocol::refuse_header(w, c.peer, c.rb.data()) {
                Some(true) => return Ok(HeadRead::Nothing),
                Some(false) => c.refuse_proxy_header = false,
                None => {}
            }
        }
        match parse_request(c.rb.data(), limits.max_headers, &mut c.v.get().fields) {
            Ok(Some(h)) if h.len > max_head => {
                return Err(over_head_limit(&c.rb.data()[..max_head]))
            }
            Ok(Some(h)) => return Ok(HeadRead::Head(h)),
            Ok(None) if c.rb.len() >= max_head => {
                return Err(over_head_limit(&c.rb.data()[..max_head]))
            }
            Ok(None) => {}
            Err(HeadError::Invalid) => return Err(Failure::Invalid(InvalidReason::BadHead)),
            Err(HeadError::TooManyFields) => {
                return Err(Failure::Invalid(InvalidReason::HeadTooLarge))
            }
        }
        match timeout_at(deadline, c.rb.fill(&mut c.stream)).await {
            Err(_) => return Err(Failure::RequestTimeout),
            Ok(Ok(0)) | Ok(Err(_)) if began_request(c.rb.data()) => {
                tracing::debug!(event = "request.aborted", worker = w.id, peer = %c.peer, cause = "client closed during the head");
                return Ok(HeadRead::Left);
            }
            Ok(Ok(0)) | Ok(Err(_)) => {
                tracing::debug!(event = "connection.closed", worker = w.id, peer = %c.peer, why = "closed before a request");
                return Ok(HeadRead::Nothing);
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// A head over `max_head_bytes` (`within` is its first `max_head_bytes`): 414 when the request line alone
/// does not fit (RFC 9112 §3), else 431.
fn over_head_limit(within: &[u8]) -> Failure {
    Failure::Invalid(if request_line_complete(within) {
        InvalidReason::HeadTooLarge
    } else {
        InvalidReason::UriTooLong
    })
}

fn framing_failure(e: FramingError) -> Failure {
    Failure::Invalid(match e {
        FramingError::BadFraming => InvalidReason::BadFraming,
        FramingError::BadHost => InvalidReason::BadHost,
        FramingError::TransferCoding => InvalidReason::TransferCoding,
        FramingError::BodyTooLarge => InvalidReason::BodyTooLarge,
    })
}

/// The checks a parsed head must pass before anything else happens: CONNECT is refused (edge is not a
/// forward proxy), framing is decided (RFC 9112 §6.3), and a declared Content-Length over
/// `max_body_bytes` is 413 before any body byte is read.
pub(super) fn check_head(
    buf: &[u8],
    head: &RequestHead,
    fields: &Fields,
    limits: &edge_core::config::Limits,
) -> Result<edge_core::http::framing::RequestInfo, Failure> {
    if &buf[head.method.clone()] == b"CONNECT" {
        return Err(Failure::Invalid(InvalidReason::Method));
    }
    let info = request_info(buf, head, fields).map_err(framing_failure)?;
    if let (Body::Length(n), Some(max)) = (info.body, limits.max_body_bytes.0) {
        if n > max {
            return Err(Failure::Invalid(InvalidReason::BodyTooLarge));
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::began_request;

    #[test]
    fn only_bytes_other_than_empty_lines_begin_a_request() {
        assert!(!began_request(b""));
        assert!(!began_request(b"\r\n\r\n"));
        assert!(began_request(b"G"));
        assert!(began_request(b"\r\nGET / HTTP/1.1\r\nHost"));
    }
}
