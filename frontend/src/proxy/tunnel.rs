//! Upgrade (RFC 9110 §7.8, §15.2.2): a `101` is accepted only for a request that asked for an upgrade
//! (see `RequestInfo::upgrade`) and whose body was sent whole (`switch`); any other 101 is 502. Then
//! the byte tunnel ([`tunnel`]): once the upstream agreed to an upgrade the client asked for, edge copies
//! bytes both ways on the same worker until both sides have
//! closed. A side that closes its write half (EOF) is passed on with `shutdown(Write)` and the other
//! direction goes on (half-close). The tunnel ends early when either direction fails, or when no byte
//! moved in either direction for the `idle` timeout (DESIGN.md "Inbound deadlines": counted as
//! `edge_inbound_timeouts_total{phase="idle"}`, logged at debug). The upstream connection is never pooled
//! afterwards; it counts in `edge_upstream_connections{state="active"}` while the tunnel runs.

use std::{cell::Cell, future::Future, pin::pin, task::Poll};

use edge_core::{
    buf::RecvBuf,
    http::{
        head::{Fields, ResponseHead},
        view::ResponseView,
    },
    io::Transport,
    metrics::InboundPhase,
};
use edge_upstream::session::{TunnelHalves, UpstreamSession, UpstreamTunnel};
use monoio::{
    io::{AsyncReadRent, AsyncWriteRent},
    time::{sleep_until, Instant},
};

use super::{bad_response, interim::client_gone, Admitted, Outcome};
use crate::{context::Worker, server::Session};

/// Judges the upstream's `101` (head `head` at the start of the received bytes of `up`): a switch needs
/// a request that asked for it (edge forwards Upgrade only then) and whose body went out whole (`early`
/// is false), since the bytes after it belong to the new protocol. The 101 head goes to the client and
/// the caller tunnels ([`Outcome::Upgraded`]).
pub(crate) async fn switch<S: Session, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    req: &Admitted<'_>,
    mut up: E,
    head: &ResponseHead,
    fields: &Fields,
    early: bool,
) -> Outcome<E::Tunnel> {
    if !req.info.upgrade || early {
        return bad_response(!early);
    }
    let view = ResponseView {
        buf: up.received().data(),
        head,
        fields,
    };
    if let Err(e) = s.send_switching(&view).await {
        return client_gone(w, &req.log, e);
    }
    up.received_mut().consume(head.len);
    Outcome::Upgraded {
        tunnel: up.into_tunnel(),
    }
}

/// Runs the tunnel between `client` and `up` until it ends; both connections are closed afterwards.
/// `client_buf` holds bytes the client sent after its request (they go upstream first); `up` the bytes
/// the upstream sent after its 101 head (they go to the client first).
pub async fn tunnel<T: Transport, U: UpstreamTunnel>(
    w: &Worker,
    client: T,
    mut client_buf: RecvBuf,
    up: U,
) {
    let _active = super::ActiveGauge::new(&w.metrics.upstream_active);
    let idle = w.current().cfg.config.server.timeouts.idle.0;
    let TunnelHalves {
        read: mut ur,
        write: mut uw,
        received: mut up_buf,
        held: _held,
    } = up.into_halves();
    let (mut cr, mut cw) = client.split();
    let last = Cell::new(Instant::now());
    let mut upward = pin!(pump(&mut cr, &mut uw, &mut client_buf, &last));
    let mut downward = pin!(pump(&mut ur, &mut cw, &mut up_buf, &last));
    let mut timer = pin!(sleep_until(last.get() + idle));
    let (mut up_done, mut down_done) = (false, false);
    let end = std::future::poll_fn(|cx| {
        // The two directions have different future types (client and upstream transports differ).
        if !up_done {
            if let Poll::Ready(r) = upward.as_mut().poll(cx) {
                up_done = true;
                if r.is_err() {
                    return Poll::Ready("read or write failed");
                }
            }
        }
        if !down_done {
            if let Poll::Ready(r) = downward.as_mut().poll(cx) {
                down_done = true;
                if r.is_err() {
                    return Poll::Ready("read or write failed");
                }
            }
        }
        if up_done && down_done {
            return Poll::Ready("both sides closed");
        }
        while timer.as_mut().poll(cx).is_ready() {
            let deadline = last.get() + idle;
            if Instant::now() >= deadline {
                return Poll::Ready("idle");
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await;
    if end == "idle" {
        w.metrics.inbound_timeout(InboundPhase::Idle).increment(1);
    }
    tracing::debug!(event = "tunnel.closed", worker = w.id, why = end);
}

/// Copies `src` to `dst` (bytes already in `buf` first) until `src` reaches EOF, then shuts down `dst`'s
/// write half. Every completed read or write marks `last`.
///
/// # Errors
/// A failed read, write or shutdown.
///
/// # Cancel safety
/// Not cancel safe (bytes in flight are lost); the tunnel drops it only to close both connections.
async fn pump<R: AsyncReadRent, W: AsyncWriteRent>(
    src: &mut R,
    dst: &mut W,
    buf: &mut RecvBuf,
    last: &Cell<Instant>,
) -> std::io::Result<()> {
    loop {
        if !buf.is_empty() {
            let n = buf.len();
            buf.write_prefix(dst, n).await?;
            last.set(Instant::now());
        }
        if buf.fill(src).await? == 0 {
            return dst.shutdown().await;
        }
        last.set(Instant::now());
    }
}
