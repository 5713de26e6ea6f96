//! The accept side of the PROXY protocol (DESIGN.md "Upstream health, discovery and balancing", its
//! PROXY protocol paragraph, and the "Status codes" row): before anything else is read from a traffic
//! connection, [`client_address`] checks that the peer may send a header, reads the header into the
//! connection's receive buffer with the sans-IO parser ([`edge_core::proxy_protocol`]), and gives the
//! client address the rest of the connection uses (X-Forwarded-For, the `trusted_proxies` check, logs).
//! Bytes after the header stay buffered for the HTTP parser.
//!
//! Every refusal closes the connection without an answer (nothing was forwarded), counts
//! `edge_connections_shed_total{reason="proxy_protocol"}` and logs one rate-limited `connection.rejected`
//! warn line with the peer and the reason.

use std::{net::SocketAddr, time::Duration};

use edge_core::{
    buf::RecvBuf,
    config::ProxyProtocol,
    io::Transport,
    metrics::ShedReason,
    proxy_protocol::{parse, Parse, Source, Versions},
};
use monoio::time::{timeout_at, Instant};

use crate::worker::Worker;

/// The header deadline of a connection accepted over capacity (as its first head's, DESIGN.md
/// "Capacity"), when shorter than `request`.
const OVER_CAPACITY_DEADLINE: Duration = Duration::from_secs(1);

/// The header versions traffic connections must start with, or `None` when `server.proxy_protocol` is
/// "off"; read from the worker's live configuration, so it follows reloads.
pub fn expected(w: &Worker) -> Option<Versions> {
    match w.live().cfg.config.server.proxy_protocol {
        ProxyProtocol::Off => None,
        ProxyProtocol::V1 => Some(Versions::V1),
        ProxyProtocol::V2 => Some(Versions::V2),
        ProxyProtocol::Any => Some(Versions::Any),
    }
}

/// The address to treat as the client's, for a connection that must start with a header of `versions`
/// ([`expected`]): the header's source, or `peer` itself when the header keeps it (v2 LOCAL, v1
/// UNKNOWN). `None`: the connection closes (already counted and logged, or, when the peer closed before
/// sending a byte, logged at debug: a load balancer's TCP health check).
///
/// The header must be complete within the `request` timeout from accept (at most 1 s when
/// `over_capacity`).
///
/// # Cancel safety
/// Not cancel safe (a read in flight may lose bytes); the caller closes the connection when this future
/// is dropped.
pub async fn client_address<T: Transport>(
    w: &Worker,
    stream: &mut T,
    rb: &mut RecvBuf,
    peer: SocketAddr,
    versions: Versions,
    over_capacity: bool,
) -> Option<SocketAddr> {
    let live = w.current().clone();
    let server = &live.cfg.config.server;
    if !live
        .cfg
        .proxy_protocol_from
        .iter()
        .any(|c| c.contains(peer.ip()))
    {
        return reject(w, peer, "peer outside proxy_protocol_from");
    }
    let mut wait = server.timeouts.request.0;
    if over_capacity {
        wait = wait.min(OVER_CAPACITY_DEADLINE);
    }
    let deadline = Instant::now() + wait;
    drop(live);
    loop {
        match parse(rb.data(), versions) {
            Ok(Parse::Done(h)) => {
                rb.consume(h.len);
                // While idle the connection holds no buffer (server::h1::conn).
                rb.release();
                return Some(match h.source {
                    Source::Client(a) => a,
                    Source::Peer => peer,
                });
            }
            Ok(Parse::Incomplete) => {}
            Err(e) => return reject(w, peer, e.reason()),
        }
        match timeout_at(deadline, rb.fill(stream)).await {
            Err(_) => {
                return reject(
                    w,
                    peer,
                    "no complete PROXY header within the request timeout",
                )
            }
            Ok(Ok(0)) if rb.is_empty() => {
                tracing::debug!(event = "connection.closed", worker = w.id, %peer, "client closed before a PROXY header");
                return None;
            }
            Ok(Ok(0)) => return reject(w, peer, "client closed within the PROXY header"),
            Ok(Err(e)) => {
                tracing::debug!(event = "connection.error", worker = w.id, %peer, error = %e, "read failed before a PROXY header");
                return None;
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// Counts and logs a refused connection; always `None` (close).
fn reject(w: &Worker, peer: SocketAddr, reason: &'static str) -> Option<SocketAddr> {
    w.metrics
        .connection_shed(ShedReason::ProxyProtocol)
        .increment(1);
    if w.log_limit.allow() {
        tracing::warn!(event = "connection.rejected", worker = w.id, %peer, reason, "PROXY protocol: connection closed");
    }
    None
}
