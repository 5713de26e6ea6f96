//! The accept side of the PROXY protocol (DESIGN.md "Upstream health, discovery and balancing", its
//! PROXY protocol paragraph, and the "Status codes" row): before anything else is read from a traffic
//! connection, [`client_address`] checks whether the peer must send a header, reads the header into the
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
    clock::timeout_at,
    config::ProxyProtocol,
    io::Transport,
    metrics::ShedReason,
    proxy_protocol::{parse, Parse, Source, Versions},
};
use monoio::time::Instant;

use crate::context::Worker;

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

/// How a traffic connection starts when `server.proxy_protocol` is on.
pub enum Start {
    /// A peer in `proxy_protocol_from` sent a valid header: the address to treat as the client's (the
    /// header's source, or the peer itself when the header keeps it: v2 LOCAL, v1 UNKNOWN).
    Client(SocketAddr),
    /// A peer outside `proxy_protocol_from`: served as a plain connection with its own address, but
    /// closed if it starts with a PROXY header ([`refuse_header`]) — DESIGN.md: a header "sent by a peer
    /// outside `proxy_protocol_from` closes the connection"; without one it is a direct client (a
    /// container or node health check, `edge healthcheck`).
    Direct,
    /// Close (already counted and logged, or, when the peer closed before sending a byte, logged at
    /// debug: a load balancer's TCP health check).
    Close,
}

/// For a connection from outside `proxy_protocol_from` ([`Start::Direct`]), whether its first bytes
/// `head` (the start of its first request) are a PROXY header: then it is counted and logged, and the
/// caller closes it. `None`: too few bytes to tell yet.
pub fn refuse_header(w: &Worker, peer: SocketAddr, head: &[u8]) -> Option<bool> {
    let header = edge_core::proxy_protocol::starts_header(head)?;
    if header {
        reject(
            w,
            peer,
            "PROXY header from a peer outside proxy_protocol_from",
        );
    }
    Some(header)
}

/// How the connection from `peer` starts when headers of `versions` are expected ([`expected`]): a peer
/// in `proxy_protocol_from` must send one (read here); any other is [`Start::Direct`].
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
) -> Start {
    let live = w.current().clone();
    let server = &live.cfg.config.server;
    if !live
        .cfg
        .proxy_protocol_from
        .iter()
        .any(|c| c.contains(peer.ip()))
    {
        return Start::Direct;
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
                return Start::Client(match h.source {
                    Source::Client(a) => a,
                    Source::Peer => peer,
                });
            }
            Ok(Parse::Incomplete) => {}
            Err(e) => return reject(w, peer, e.reason()).into(),
        }
        match timeout_at(deadline, rb.fill(stream)).await {
            Err(_) => {
                return reject(
                    w,
                    peer,
                    "no complete PROXY header within the request timeout",
                )
                .into()
            }
            Ok(Ok(0)) if rb.is_empty() => {
                tracing::debug!(event = "connection.closed", worker = w.id, %peer, "client closed before a PROXY header");
                return Start::Close;
            }
            Ok(Ok(0)) => return reject(w, peer, "client closed within the PROXY header").into(),
            Ok(Err(e)) => {
                tracing::debug!(event = "connection.error", worker = w.id, %peer, error = %e, "read failed before a PROXY header");
                return Start::Close;
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// A refusal: close.
struct Rejected;

impl From<Rejected> for Start {
    fn from(_: Rejected) -> Start {
        Start::Close
    }
}

/// Counts and logs a refused connection.
fn reject(w: &Worker, peer: SocketAddr, reason: &'static str) -> Rejected {
    w.metrics
        .connection_shed(ShedReason::ProxyProtocol)
        .increment(1);
    if w.log_limit.allow() {
        tracing::warn!(event = "connection.rejected", worker = w.id, %peer, reason, "PROXY protocol: connection closed");
    }
    Rejected
}
