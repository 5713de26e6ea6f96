//! `protocol` and `max_streams_per_connection` on `[[upstreams]]` (DESIGN.md "HTTP/2 and gRPC
//! upstreams"): which HTTP version edge speaks to an upstream, and how many requests share one HTTP/2
//! connection.

use serde::{Deserialize, Serialize};

/// `protocol` on `[[upstreams]]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (RFC 9112) on exclusive pooled connections; TLS offers ALPN `http/1.1`.
    #[default]
    Http1,
    /// HTTP/2 (RFC 9113), multiplexed: over TLS with ALPN `h2` (a server that does not choose it is a
    /// TLS failure), or h2c with prior knowledge (RFC 9113 §3.3) when `tls = false`.
    H2,
    /// TLS: ALPN offers `h2` then `http/1.1` and the server's choice is spoken; plain: HTTP/1.1 (a
    /// plain connection has no negotiation, RFC 9113 §3.3).
    Auto,
}

impl UpstreamProtocol {
    /// The ALPN protocol ids a TLS connection to the upstream offers, in order of preference.
    pub fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
            UpstreamProtocol::H2 => vec![b"h2".to_vec()],
            UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }

    /// Whether a connection opened with `tls` may speak HTTP/2.
    pub fn may_speak_h2(self, tls: bool) -> bool {
        match self {
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::H2 => true,
            UpstreamProtocol::Auto => tls,
        }
    }
}

/// The default `max_streams_per_connection`.
pub fn max_streams_default() -> u32 {
    100
}
