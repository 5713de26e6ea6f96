//! HTTP/1.1 downstream (RFC 9112): the per-connection keep-alive loop with its inbound deadlines
//! ([`conn`]) and its waits between requests (`idle`), the requests it answers itself ([`local`]),
//! the body pumps with their re-framing ([`body`]) and the request body by splice ([`upload`]), and
//! [`session::H1Session`], one request as a [`Session`](super::Session) for the orchestrator.

pub mod answer;
pub mod body;
pub mod conn;
pub mod encode;
mod head;
mod idle;
pub mod linger;
mod local;
pub mod session;
mod sniff;
pub mod upload;

pub use conn::{serve, Accepted};
pub(crate) use idle::{trim_spare_vectors, trim_spare_vectors_idle};
pub(crate) use local::SHED_HEAD_DEADLINE;
