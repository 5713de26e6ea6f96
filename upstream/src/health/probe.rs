//! One active probe (DESIGN.md "Upstream health, discovery and balancing"): connect to the endpoint's
//! address, write `GET path HTTP/1.1` with `Host` = the endpoint as configured, `User-Agent:
//! edge-health` and `Connection: close`, and read the response head. The whole probe, connect, write
//! and response head together, runs under `timeout`; the body is never read and the connection is closed
//! (dropped) afterwards, so a probe cut at its deadline loses nothing anyone needs.

use std::net::SocketAddr;

use edge_core::{
    config::HealthCheck,
    http::head::{parse_response, Fields},
};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};

use crate::{
    connect::{connect, TlsTarget},
    error::UpstreamErrorKind,
};

use super::tracker::{Failure, Verdict};

/// A response head larger than this fails the probe.
const MAX_HEAD: usize = 16 * 1024;
/// Bytes asked for per read.
const READ_CHUNK: usize = 4096;

/// The request a probe writes, from the upstream's `[upstreams.health_check]` and the endpoint's address
/// text as configured (`host:port`, the `Host` value).
pub fn request(check: &HealthCheck, host: &str) -> Vec<u8> {
    format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: edge-health\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        check.path
    )
    .into_bytes()
}

/// Probes `addr` (an endpoint of `upstream`) with `request` (see [`request`]), the connection starting
/// with `proxy_header` when there is one; passes when the status is within `check.expect_status` before
/// `check.timeout`.
///
/// # Cancel safety
/// Dropping the future drops the connection; nothing outlives it.
pub async fn probe(
    upstream: &str,
    addr: SocketAddr,
    request: Vec<u8>,
    check: &HealthCheck,
    tls: Option<&TlsTarget>,
    proxy_header: Option<Vec<u8>>,
) -> Verdict {
    let exchange = exchange(upstream, addr, request, check.timeout.0, tls, proxy_header);
    match edge_core::clock::timeout(check.timeout.0, exchange).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(f)) => Err(f),
        Ok(Ok(status)) if check.expect_status.contains(status) => Ok(status),
        Ok(Ok(status)) => Err(Failure::Status(status)),
    }
}

/// Connect (with TLS for a `tls = true` upstream), write, read the head; the response status.
async fn exchange(
    upstream: &str,
    addr: SocketAddr,
    request: Vec<u8>,
    timeout: std::time::Duration,
    tls: Option<&TlsTarget>,
    proxy_header: Option<Vec<u8>>,
) -> Result<u16, Failure> {
    let mut conn = connect(upstream, addr, timeout, tls, proxy_header)
        .await
        .map_err(|e| match e.kind {
            UpstreamErrorKind::ConnectTimeout => Failure::Timeout,
            UpstreamErrorKind::Tls => Failure::Tls,
            _ => Failure::Connect(std::io::ErrorKind::ConnectionRefused),
        })?;
    let (res, _) = conn.write_all(request).await;
    res.map_err(|_| Failure::Closed)?;
    let mut head = Vec::new();
    let mut fields = Fields::new();
    loop {
        let (res, chunk) = conn.read(Vec::with_capacity(READ_CHUNK)).await;
        match res {
            Ok(0) | Err(_) => return Err(Failure::Closed),
            Ok(_) => head.extend_from_slice(&chunk),
        }
        match parse_response(&head, &mut fields) {
            Ok(Some(h)) => return Ok(h.status),
            Ok(None) if head.len() <= MAX_HEAD => {}
            Ok(None) | Err(_) => return Err(Failure::BadResponse),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_host_user_agent_and_close() {
        let check = HealthCheck {
            path: "/healthz?x=1".into(),
            ..HealthCheck::default()
        };
        let text = String::from_utf8(request(&check, "app.internal:8081")).unwrap();
        assert_eq!(
            text,
            "GET /healthz?x=1 HTTP/1.1\r\nHost: app.internal:8081\r\nUser-Agent: edge-health\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }
}
