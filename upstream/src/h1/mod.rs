//! The upstream HTTP/1.1 client session (DESIGN.md "Layout", "Upstream pools and retries", "Zombie
//! detection"): it encodes the request head ([`encode::request_head`]), sends it with the body bytes that
//! came with it
//! ([`request::send_head`]), streams the rest while watching for an early answer
//! ([`request::send_body_watching_response`]), reads response heads, interim ones included, under
//! `request_timeout` and the zombie clock ([`response::read_head`]), and reads the response body under
//! the zombie clock ([`response::read_body`]). It writes and parses HTTP/1.1 wire bytes to and from the
//! upstream only: it knows nothing of the client. What it yields is protocol-neutral: a parsed response
//! head (a view over its buffer), body bytes in the connection's receive buffer, the end, or an
//! [`UpstreamError`](crate::UpstreamError) with its kind and retry-safety.

pub mod encode;
pub mod request;
pub mod response;

/// Longest upstream response head edge reads, bytes.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// An interim response edge forwards (RFC 9110 §15.2): 1xx other than 101, which ends HTTP/1.1 on the
/// connection.
pub fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}
