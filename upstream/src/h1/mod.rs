//! The upstream HTTP/1.1 session (DESIGN.md "Layout", "Upstream pools and retries", "Zombie
//! detection"), the one [`UpstreamSession`](crate::session::UpstreamSession) implementation today
//! ([`H1Exchange`]): it sends the request head with the body bytes that came with it
//! (`request::send_head`), streams the rest while watching for an early answer
//! (`request::send_body_watching_response`), reads response heads, interim ones included, under
//! `request_timeout` and the zombie clock (`response::read_head`), and reads the response body under
//! the zombie clock (`response::read_body`), on an exclusive connection checked out of its endpoint's
//! pool and checked back in after a clean response. It writes and parses HTTP/1.1 wire bytes to and from
//! the upstream only: it knows nothing of the client. HTTP/1.1 is also the seam's neutral form, so the
//! head goes out and the response stays in the receive buffer as they are.

mod request;
mod response;
mod session;

pub use session::{H1Exchange, H1Tunnel};
