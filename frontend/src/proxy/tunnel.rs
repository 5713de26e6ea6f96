//! Upgrade (RFC 9110 §7.8, §15.2.2): a `101` is accepted only for a request that asked for an upgrade
//! (see `RequestInfo::upgrade`), whose body was sent whole, and that the downstream session accepts
//! (an HTTP/2 WebSocket stream checks Sec-WebSocket-Accept: [`Session::switch_accepted`]) (`switch`);
//! any other 101 is 502. Then
//! the byte tunnel ([`tunnel`]): once the upstream agreed to an upgrade the client asked for, edge copies
//! bytes both ways on the same worker until both sides have
//! closed. A side that closes its write half (EOF) is passed on with `shutdown(Write)` and the other
//! direction goes on (half-close). The tunnel ends early when either direction fails, or when no byte
//! moved in either direction for the `idle` timeout (DESIGN.md "Inbound deadlines": counted as
//! `edge_inbound_timeouts_total{phase="idle"}`, logged at debug). The upstream connection is never pooled
//! afterwards; it counts in `edge_upstream_connections{state="active"}` while the tunnel runs. The client
//! side is a connection's halves, or an HTTP/2 stream's (RFC 8441: [`relay`]).

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
///
/// Whatever the upstream's protocol: an HTTP/2 upstream's extended CONNECT (RFC 8441) arrives here as
/// the same `101`, which its upstream session writes from its 2xx; that session is the one place it
/// plugs in ([`edge_core::websocket`] says how).
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
    if !s.switch_accepted(&view) {
        return bad_response(true);
    }
    if let Err(e) = s.send_switching(&view).await {
        return client_gone(w, &req.log, e, Some(101));
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
    client_buf: RecvBuf,
    up: U,
) {
    let (cr, cw) = client.split();
    relay(w, cr, cw, client_buf, up).await;
}

/// How a tunnel ended ([`relay`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Both directions reached EOF and passed it on.
    Closed,
    /// No byte moved either way for the `idle` timeout.
    Idle,
    /// Reading from or writing to the client failed (it closed or reset its side).
    Client,
    /// Reading from or writing to the upstream failed.
    Upstream,
}

impl End {
    /// The reason as log lines name it.
    pub fn as_str(self) -> &'static str {
        match self {
            End::Closed => "both sides closed",
            End::Idle => "idle",
            End::Client => "client read or write failed",
            End::Upstream => "upstream read or write failed",
        }
    }
}

/// The tunnel of [`tunnel`] between the client's halves (`cr` to read, `cw` to write: a connection's,
/// or an HTTP/2 stream's, RFC 8441) and `up`, until it ends; returns how. The idle expiry is counted
/// (`edge_inbound_timeouts_total{phase="idle"}`) and the end logged at debug (`tunnel.closed`), here
/// for every kind of client; the caller closes or resets what is left.
pub async fn relay<CR, CW, U>(
    w: &Worker,
    mut cr: CR,
    mut cw: CW,
    mut client_buf: RecvBuf,
    up: U,
) -> End
where
    CR: AsyncReadRent,
    CW: AsyncWriteRent,
    U: UpstreamTunnel,
{
    let _active = super::ActiveGauge::new(&w.metrics.upstream_active);
    let idle = w.current().cfg.config.server.timeouts.idle.0;
    let TunnelHalves {
        read: mut ur,
        write: mut uw,
        received: mut up_buf,
        held: _held,
    } = up.into_halves();
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
                match r {
                    Ok(()) => {}
                    Err(Failed::Read) => return Poll::Ready(End::Client),
                    Err(Failed::Write) => return Poll::Ready(End::Upstream),
                }
            }
        }
        if !down_done {
            if let Poll::Ready(r) = downward.as_mut().poll(cx) {
                down_done = true;
                match r {
                    Ok(()) => {}
                    Err(Failed::Read) => return Poll::Ready(End::Upstream),
                    Err(Failed::Write) => return Poll::Ready(End::Client),
                }
            }
        }
        if up_done && down_done {
            return Poll::Ready(End::Closed);
        }
        while timer.as_mut().poll(cx).is_ready() {
            let deadline = last.get() + idle;
            if Instant::now() >= deadline {
                return Poll::Ready(End::Idle);
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await;
    if end == End::Idle {
        w.metrics.inbound_timeout(InboundPhase::Idle).increment(1);
    }
    tracing::debug!(event = "tunnel.closed", worker = w.id, why = end.as_str());
    end
}

/// Which side of a [`pump`] failed.
enum Failed {
    /// Reading its source.
    Read,
    /// Writing (or shutting down) its destination.
    Write,
}

/// Copies `src` to `dst` (bytes already in `buf` first) until `src` reaches EOF, then shuts down `dst`'s
/// write half. Every completed read or write marks `last`. A source is read again only once the bytes
/// of its last read were all written (an HTTP/2 stream releases its flow-control window then).
///
/// # Errors
/// The side that failed: a read, or a write or the shutdown.
///
/// # Cancel safety
/// Not cancel safe (bytes in flight are lost); the tunnel drops it only to close both connections.
async fn pump<R: AsyncReadRent, W: AsyncWriteRent>(
    src: &mut R,
    dst: &mut W,
    buf: &mut RecvBuf,
    last: &Cell<Instant>,
) -> Result<(), Failed> {
    loop {
        if !buf.is_empty() {
            let n = buf.len();
            buf.write_prefix(dst, n).await.map_err(|_| Failed::Write)?;
            last.set(Instant::now());
        }
        if buf.fill(src).await.map_err(|_| Failed::Read)? == 0 {
            return dst.shutdown().await.map_err(|_| Failed::Write);
        }
        last.set(Instant::now());
    }
}
