//! Opening an upstream connection under `connect_timeout` (started when the connect is issued, stopped
//! when it completes): refused is 502, expiry is 504 (DESIGN.md "Status codes").

use std::{io, net::SocketAddr, time::Duration};

use monoio::net::TcpStream;

use crate::error::{UpstreamError, UpstreamErrorKind};

/// The transport of the connections edge opens to upstreams (plain TCP; the upstream TLS variant joins
/// here).
pub type UpstreamStream = edge_core::io::Plain;

/// Connects to `addr` within `timeout`, with TCP_NODELAY set.
///
/// # Errors
/// `Refused` (also for other immediate connect failures, e.g. unreachable) or `ConnectTimeout`; both are
/// retry-safe (nothing was sent).
pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<UpstreamStream, UpstreamError> {
    match monoio::time::timeout(timeout, TcpStream::connect_addr(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(UpstreamError {
            kind: classify(&e),
            retry_safe: true,
        }),
        Err(_) => Err(UpstreamError {
            kind: UpstreamErrorKind::ConnectTimeout,
            retry_safe: true,
        }),
    }
}

fn classify(e: &io::Error) -> UpstreamErrorKind {
    match e.kind() {
        io::ErrorKind::TimedOut => UpstreamErrorKind::ConnectTimeout,
        _ => UpstreamErrorKind::Refused,
    }
}
