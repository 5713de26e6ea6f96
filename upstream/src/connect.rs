//! Opening an upstream connection under `connect_timeout` (started when the connect is issued, stopped
//! when the connection is usable: for a `tls = true` upstream, when the TLS handshake is done): refused
//! is 502, expiry is 504, a failed TLS handshake or certificate verification is 502 `kind="tls"`
//! (DESIGN.md "Status codes", "TLS"). With `send_proxy_protocol` the PROXY header is the first thing
//! written, before the TLS handshake, within the same deadline.

use std::{cell::Cell, io, net::SocketAddr, sync::Arc, time::Duration};

use edge_core::{io::tls::Tls, metrics::TlsResult};
use monoio::{io::AsyncWriteRentExt, net::TcpStream, time::Instant};
use rustls::{pki_types::ServerName, ClientConnection};

use crate::error::{UpstreamError, UpstreamErrorKind};
pub use crate::stream::UpstreamStream;

/// How to open TLS to one endpoint: the upstream's client configuration (roots, client certificate,
/// ALPN http/1.1, its session cache for resumption) and the name sent as SNI and verified.
#[derive(Clone)]
pub struct TlsTarget {
    /// The upstream's rustls client configuration.
    pub config: Arc<rustls::ClientConfig>,
    /// `tls_server_name`, else the endpoint's host name.
    pub server_name: ServerName<'static>,
    /// `edge_upstream_tls_handshakes_total{worker,result}`, in [`TlsResult::ALL`] order.
    pub handshakes: Arc<[metrics::Counter; 4]>,
}

/// Connects to `addr` (an endpoint of `upstream`, named in log lines) within `timeout`, with
/// TCP_NODELAY set, writes `proxy_header` (a PROXY protocol header, [`edge_core::proxy_protocol::encode`])
/// when there is one, and with `tls` runs the TLS handshake inside the same deadline.
///
/// # Errors
/// `Refused` (also for other immediate connect failures, e.g. unreachable), `ConnectTimeout`, or `Tls`
/// (the reason is logged here, rate-limited); all are retry-safe (no request byte was sent).
pub async fn connect(
    upstream: &str,
    addr: SocketAddr,
    timeout: Duration,
    tls: Option<&TlsTarget>,
    proxy_header: Option<Vec<u8>>,
) -> Result<UpstreamStream, UpstreamError> {
    let deadline = Instant::now() + timeout;
    let mut tcp = tcp_connect(addr, timeout).await?;
    if let Some(header) = proxy_header {
        // Nothing of a request was sent yet: a failure here is as retry-safe as a refused connect.
        match edge_core::clock::timeout_at(deadline, tcp.write_all(header)).await {
            Ok((Ok(_), _)) => {}
            Ok((Err(_), _)) => return Err(UpstreamError::retry_safe(UpstreamErrorKind::Reset)),
            Err(_) => return Err(UpstreamError::retry_safe(UpstreamErrorKind::ConnectTimeout)),
        }
    }
    let Some(target) = tls else {
        return Ok(UpstreamStream::Plain(tcp));
    };
    let count = |r: TlsResult| target.handshakes[r as usize].increment(1);
    let failed = |reason: &dyn std::fmt::Display| {
        count(TlsResult::Failed);
        log_tls_failure(upstream, addr, reason);
        Err(UpstreamError::retry_safe(UpstreamErrorKind::Tls))
    };
    let conn = match ClientConnection::new(target.config.clone(), target.server_name.clone()) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match edge_core::clock::timeout_at(deadline, Tls::handshake(tcp, conn)).await {
        Ok(Ok(s)) => {
            count(s.handshake_result());
            Ok(UpstreamStream::Tls(Box::new(s)))
        }
        Ok(Err((e, _))) => failed(&e),
        Err(_) => {
            count(TlsResult::Timeout);
            Err(UpstreamError::retry_safe(UpstreamErrorKind::ConnectTimeout))
        }
    }
}

thread_local! {
    /// (second, lines this second, suppressed) of `upstream.tls_failed` lines on this worker.
    static TLS_LOG: Cell<(u64, u32, u64)> = const { Cell::new((0, 0, 0)) };
}

/// `upstream.tls_failed` with the reason, at most 5 lines a second per worker (the request's own
/// `upstream.error` line carries `kind="tls"`).
fn log_tls_failure(upstream: &str, addr: SocketAddr, reason: &dyn std::fmt::Display) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    TLS_LOG.with(|c| {
        let (sec, n, suppressed) = c.get();
        let (n, suppressed) = if sec == now { (n, suppressed) } else { (0, suppressed) };
        if n < 5 {
            tracing::warn!(event = "upstream.tls_failed", upstream, endpoint = %addr, reason = %reason, suppressed, "upstream TLS handshake failed");
            c.set((now, n + 1, 0));
        } else {
            c.set((now, n, suppressed + 1));
        }
    });
}

/// The TCP connect under `timeout`.
async fn tcp_connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, UpstreamError> {
    match edge_core::clock::timeout(timeout, TcpStream::connect_addr(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(UpstreamError::retry_safe(classify(&e))),
        Err(_) => Err(UpstreamError::retry_safe(UpstreamErrorKind::ConnectTimeout)),
    }
}

fn classify(e: &io::Error) -> UpstreamErrorKind {
    match e.kind() {
        io::ErrorKind::TimedOut => UpstreamErrorKind::ConnectTimeout,
        _ => UpstreamErrorKind::Refused,
    }
}
