//! HTTP/1.1 message framing shared by the downstream and upstream sides: head parsing on httparse
//! ([`head`]), the framing decisions of RFC 9112 §6.3 ([`framing`]), the chunked decoder ([`chunked`],
//! [`body`]), the hop-by-hop rules ([`hop`]), what edge reads and writes of gRPC ([`grpc`]), the request
//! id ([`request_id`]), W3C trace context ([`trace`]), and the protocol-neutral message views both kinds
//! of session use ([`view`]). All sans-IO. The WebSocket handshake's key and accept are
//! [`crate::websocket`] (they need a random source and SHA-1).

pub mod body;
pub mod chunked;
pub mod framing;
pub mod grpc;
pub mod head;
pub mod hop;
pub mod request_id;
pub mod trace;
pub mod view;
pub mod write;
