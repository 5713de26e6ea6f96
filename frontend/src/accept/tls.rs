//! Connections on the TLS listener (DESIGN.md "TLS"): the handshake on the worker that accepted the
//! connection, under `handshake_timeout` from accept, evictable like an idle connection while it runs
//! (it already holds its slot of `max_connections`); then the session ALPN chose (h2, else HTTP/1.1)
//! over the TLS transport, whose `idle` deadline starts once the handshake is done.
//!
//! Every way a handshake ends is counted (`edge_tls_handshakes_total{result}`; a timeout also in
//! `edge_inbound_timeouts_total{phase="handshake"}`) and logged at debug, rate-limited; plain HTTP sent
//! to the TLS port is answered with a plain-text 400 and a lingering close, as nginx does
//! (`edge_requests_invalid_total{reason="plain_http_on_tls"}`).

use std::{net::SocketAddr, rc::Rc, sync::Arc, time::Duration};

use edge_core::{
    buf::RecvBuf,
    io::{
        tls::{HandshakeError, Tls},
        Plain, Transport,
    },
    metrics::{InboundPhase, InvalidReason, ShedReason, TlsResult},
    slot,
};
use monoio::time::Instant;
use rustls::ServerConnection;

use crate::log::RequestLog;
use crate::{
    accept::proxy_protocol::Start, context::Worker, respond::Failure, server::h1::Accepted,
};

/// How long an over-capacity connection may take for its handshake: it only gets to ask for the health
/// path (DESIGN.md "Capacity"), like a plain one gets 1 s for its head.
const OVER_CAPACITY_HANDSHAKE: Duration = Duration::from_secs(1);

/// How a handshake ended, besides success.
enum Ended {
    Evicted,
    TimedOut,
    Failed(HandshakeError, Plain),
}

/// Serves one connection accepted on the TLS listener until it closes. With `server.proxy_protocol`
/// on, the PROXY header comes first, in plain text before the handshake (as a TCP load balancer sends
/// it), read by [`crate::accept::proxy_protocol::client_address`] under the same rules as on the plain listener.
///
/// Memory: the handshake ([`start`]) runs in a request slot from the worker's free list
/// (`edge_core::slot`), given back once it ends, so that an idle TLS connection's future holds only
/// the HTTP/1.1 session's small waiting state (bench/README.md "Idle connections").
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments in its state twice"
)]
pub fn serve(
    w: Rc<Worker>,
    stream: Plain,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    over_capacity: bool,
) -> impl std::future::Future<Output = ()> {
    // An async block: an `async fn` would keep its arguments beside the locals they move into.
    async move {
        let mut held = slot::Held::default();
        let started = slot::run_in(&mut held.0, start(&w, stream, peer, over_capacity)).await;
        held.release();
        let Some(Started {
            tls,
            peer,
            proxy_header_read,
        }) = started
        else {
            return;
        };
        // The client is known: count it against `max_connections_per_client` before the session is
        // chosen (an HTTP/2 connection counts once). Held to the connection's end.
        let (_client, shed) = match over_capacity {
            true => (None, Some(ShedReason::Limit)),
            false => crate::accept::clients::enter(&w, peer),
        };
        // ALPN chose the session (DESIGN.md "TLS"): h2, or HTTP/1.1 for anything else (or no ALPN).
        if tls.with_conn(|c| c.alpn_protocol() == Some(b"h2")) {
            let from = crate::server::h2::Origin {
                peer,
                local,
                https: true,
                shed,
            };
            // Boxed, as for h2c: inline, the h2 state would enlarge every TLS connection's future.
            return Box::pin(crate::server::h2::serve(w, tls, &[], from)).await;
        }
        let accepted = Accepted {
            peer,
            shed,
            local,
            https: true,
            proxy_header_read,
        };
        crate::server::h1::serve(w, tls, accepted).await;
    }
}

/// A connection whose TLS handshake is done.
struct Started {
    tls: Tls<Plain, ServerConnection>,
    /// The client: the peer's address, or the PROXY header's source.
    peer: SocketAddr,
    /// The PROXY protocol header, when one is expected, was read.
    proxy_header_read: bool,
}

/// Reads the PROXY header when one is expected, then runs the handshake under `handshake_timeout`
/// (evictable meanwhile); counts and logs how it ended. `None`: the connection is done with.
async fn start(
    w: &Worker,
    mut stream: Plain,
    mut peer: SocketAddr,
    over_capacity: bool,
) -> Option<Started> {
    let mut received = RecvBuf::new();
    let proxy_header_read = match crate::accept::proxy_protocol::expected(w) {
        Some(versions) => {
            let header = crate::accept::proxy_protocol::client_address(
                w,
                &mut stream,
                &mut received,
                peer,
                versions,
                over_capacity,
            );
            match Box::pin(header).await {
                Start::Client(client) => peer = client,
                // A peer outside `proxy_protocol_from` that sends a PROXY header anyway fails its
                // handshake (the header is no TLS record).
                Start::Direct => {}
                Start::Close => return None,
            }
            true
        }
        None => false,
    };
    let Some((config, timeout)) = server_tls(w) else {
        // `[server.tls]` was removed by a reload: the listener lives until a restart; close.
        tracing::debug!(event = "tls.failed", worker = w.id, %peer, reason = "TLS is no longer configured");
        return None;
    };
    let timeout = if over_capacity {
        timeout.min(OVER_CAPACITY_HANDSHAKE)
    } else {
        timeout
    };
    let conn = match ServerConnection::new(config) {
        Ok(c) => c,
        Err(e) => {
            w.metrics.tls_handshake(TlsResult::Failed).increment(1);
            tracing::warn!(event = "tls.failed", worker = w.id, %peer, error = %e, "cannot start a TLS session");
            return None;
        }
    };
    let started = Instant::now();
    let ended = {
        let idle = w.idle.enter(stream.fd());
        // Bytes behind a PROXY header are the start of the ClientHello.
        let mut prefix = Vec::new();
        if !received.is_empty() {
            prefix = edge_core::buf::take();
            prefix.extend_from_slice(received.data());
        }
        drop(received);
        let handshake =
            edge_core::clock::timeout(timeout, Tls::handshake_after(stream, conn, prefix));
        monoio::select! {
            biased;
            _ = idle => Err(Ended::Evicted),
            r = handshake => match r {
                Ok(Ok(tls)) => Ok(tls),
                Ok(Err((e, io))) => Err(Ended::Failed(e, io)),
                Err(_) => Err(Ended::TimedOut),
            },
        }
    };
    let tls = match ended {
        Ok(tls) => tls,
        Err(e) => {
            handshake_failed(w, peer, e).await;
            return None;
        }
    };
    w.metrics.tls_handshake_duration.record(started.elapsed());
    let result = tls.handshake_result();
    w.metrics.tls_handshake(result).increment(1);
    tracing::trace!(event = "tls.handshake", worker = w.id, %peer, result = result.as_str());
    Some(Started {
        tls,
        peer,
        proxy_header_read,
    })
}

/// Counts and logs a handshake that did not finish; answers plain HTTP with a plain-text 400.
async fn handshake_failed(w: &Worker, peer: SocketAddr, e: Ended) {
    match e {
        Ended::Evicted => {
            w.metrics.evicted.increment(1);
            tracing::debug!(event = "connection.evicted", worker = w.id, %peer, "during the TLS handshake");
        }
        Ended::TimedOut => {
            w.metrics.tls_handshake(TlsResult::Timeout).increment(1);
            w.metrics
                .inbound_timeout(InboundPhase::Handshake)
                .increment(1);
            tracing::debug!(event = "tls.timeout", worker = w.id, %peer);
        }
        Ended::Failed(HandshakeError::Closed { started: false }, _) => {
            tracing::debug!(event = "connection.closed", worker = w.id, %peer, "before a TLS handshake");
        }
        Ended::Failed(HandshakeError::PlainHttp, io) => plain_http(w, io).await,
        Ended::Failed(e, _) => {
            w.metrics.tls_handshake(TlsResult::Failed).increment(1);
            if w.log_limit.allow() {
                tracing::debug!(event = "tls.failed", worker = w.id, %peer, reason = %e);
            }
        }
    }
}

/// DESIGN.md "Status codes": plain HTTP sent to the TLS listener gets a plain-text 400, then a lingering
/// close.
async fn plain_http(w: &Worker, mut io: Plain) {
    let failure = Failure::Invalid(InvalidReason::PlainHttpOnTls);
    let mut id = Vec::with_capacity(32);
    w.generate_request_id(&mut id);
    failure.record(w, &RequestLog::new(b"", &id));
    let mut out = Vec::with_capacity(200);
    crate::server::h1::answer::error_response(&mut out, failure, true, &id, b"");
    let send = w.current().cfg.config.server.timeouts.send.0;
    if crate::server::send::within_send(send, io.fd(), async {
        edge_core::io::progress::write_all(&mut io, out).await.0
    })
    .await
    .is_ok()
    {
        crate::server::h1::linger::linger_close(io).await;
    }
}

/// The TLS server configuration new handshakes use and `handshake_timeout`, from the configuration the
/// worker runs on now (a certificate rotation is a new configuration: DESIGN.md "TLS").
fn server_tls(w: &Worker) -> Option<(Arc<rustls::ServerConfig>, Duration)> {
    let live = w.live();
    let state = live.cfg.tls.as_ref()?;
    let timeout = live.cfg.config.server.tls.as_ref()?.handshake_timeout.0;
    Some((state.config.clone(), timeout))
}
