//! HTTP/2 downstream (RFC 9113, DESIGN.md "HTTP/2") on hyperium's `h2` crate, run on the worker's own
//! monoio runtime through [`edge_core::io::PollIo`]: the connection and its accept loop ([`conn`]),
//! edge's own flood limits ([`flood`], [`filter`], sans-IO) and the IO that runs them under h2
//! ([`guard`]), the connection's reused stream tasks ([`tasks`]), one stream's request lifecycle
//! ([`stream`]), the stream's request view as an HTTP/1.1-syntax head ([`request`]) and its response
//! head as h2 sends it ([`head`]), [`session::H2Session`], one stream as a
//! [`Session`](super::Session) for the orchestrator, made of its request body ([`body`]) and its
//! response side ([`reply`]), and a WebSocket stream's tunnel after the switch (RFC 8441, [`tunnel`]).
pub mod body;
pub mod chunk;
pub mod conn;
pub mod filter;
pub mod flood;
pub mod guard;
pub mod head;
pub mod reply;
pub mod request;
pub mod session;
pub mod stream;
pub mod tasks;
pub mod tunnel;

pub use conn::{serve, PREFACE};
pub use stream::Origin;
