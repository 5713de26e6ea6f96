//! HTTP/2 upstreams (DESIGN.md "HTTP/2 and gRPC upstreams"): per-worker connections per endpoint,
//! multiplexed up to `max_streams_per_connection` ([`conn`]), opened as needed (`open`); each request
//! a stream ([`session::H2Exchange`]) that speaks the seam's HTTP/1.1 syntax (`head`, `body`) so
//! the orchestrator and the downstream sessions stay as they are. The protocol is hyperium's `h2`
//! client on the worker's monoio runtime through [`edge_core::io::PollIo`].

mod body;
pub mod conn;
mod head;
mod open;
pub mod session;

pub use body::H2BodySink;
pub use conn::H2Conns;
pub use session::{H2Exchange, H2Tunnel};
