//! What the received response bytes hold. An upstream session keeps the response in HTTP/1.1 syntax
//! (heads, then body bytes in the framing the final head declares), the protocol-neutral form the
//! orchestrator and the downstream sessions read ([`crate::session::UpstreamSession::received`]); these
//! sans-IO checks classify it.

use edge_core::{
    buf::RecvBuf,
    http::head::{parse_response, Fields, ResponseHead},
};

/// Longest upstream response head edge reads, bytes.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// An interim response edge forwards (RFC 9110 §15.2): 1xx other than 101, which ends HTTP/1.1 on the
/// connection.
pub fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// Whether `buf` holds nothing but complete interim (1xx other than 101) response heads, within
/// [`MAX_RESPONSE_HEAD`] (a partial head counts as the response having started).
pub fn only_interim(buf: &RecvBuf, fields: &mut Fields) -> bool {
    let data = buf.data();
    if data.len() > MAX_RESPONSE_HEAD {
        return false;
    }
    let mut at = 0;
    while at < data.len() {
        match parse_response(&data[at..], fields) {
            Ok(Some(h)) if is_interim(h.status) => at += h.len,
            _ => return false,
        }
    }
    true
}

/// What is buffered at the start of an exchange waiting for `100 Continue`.
#[derive(Clone, Debug)]
pub enum Buffered {
    /// A complete interim head (its fields in `fields`).
    Interim(ResponseHead),
    /// Nothing yet, or part of a head within [`MAX_RESPONSE_HEAD`].
    Incomplete,
    /// The final response has begun (a final head, or something that is not an interim head).
    Final,
}

/// Classifies what `buf` holds (see [`Buffered`]).
pub fn buffered(buf: &RecvBuf, fields: &mut Fields) -> Buffered {
    match parse_response(buf.data(), fields) {
        Ok(Some(h)) if is_interim(h.status) => Buffered::Interim(h),
        Ok(None) if buf.len() < MAX_RESPONSE_HEAD => Buffered::Incomplete,
        _ => Buffered::Final,
    }
}
