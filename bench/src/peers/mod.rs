//! The bench's own HTTP/1.1 peers on monoio: the test origin edge forwards to and the load
//! generators that drive it, with the sans-IO framing and buffered reads they share, and the
//! rustls adapter over monoio streams ([`tls_stream`]) the origin's TLS mode runs on.
//! [`h2_frames`] is a raw-frame HTTP/2 client for the flood cases (tests and matrix).

pub mod chunked;
pub mod grpc;
pub mod h2_client;
pub mod h2_frames;
pub mod http;
pub mod load;
pub mod origin;
pub mod stop;
pub mod tls_stream;
pub mod wire;
