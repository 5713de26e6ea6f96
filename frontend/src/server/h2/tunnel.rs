//! The tunnel of a WebSocket stream (RFC 8441 §5, DESIGN.md "HTTP/2 and gRPC upstreams"): once the
//! upstream switched and the stream's `200` went out, the stream's DATA and the upstream connection
//! are one byte tunnel both ways, run by the same loop as an HTTP/1.1 upgrade
//! ([`crate::proxy::tunnel::relay`]: half-close, `idle`, the `tunnel.closed` line) over the stream's two
//! sides as owned-buffer reader and writer ([`edge_core::io::h2_stream`]).
//!
//! - Flow control (RFC 9113 §5.2): the client's DATA is taken only as the upstream write of the bytes
//!   before it completed, and its window released as consumed, so a slow upstream slows only this
//!   stream; bytes to the client wait for the stream's send capacity (its window, and h2 holding at
//!   most the connection's per-stream send buffer), so a client that stops reading pauses the
//!   upstream reads until `idle` (no byte moved either way) ends the tunnel.
//! - Ends: the client's END_STREAM half-closes the upstream's write side; the upstream's EOF ends the
//!   stream with END_STREAM. Both done: the stream is complete. The upstream failing (RFC 9113 §8.5: a
//!   TCP error) resets the stream with CONNECT_ERROR, `idle` with CANCEL, both counted in
//!   `edge_http2_resets_total{side="edge"}`; the client resetting the stream (or its connection
//!   ending) closes the upstream connection, counted as `side="client"`.

use edge_core::{
    buf::RecvBuf,
    io::h2_stream::{StreamRead, StreamWrite},
    metrics::ResetSide,
};
use h2::Reason;

use super::session::{Chunk, H2Session};
use crate::{
    context::Worker,
    proxy::{
        tunnel::{relay, End},
        Tunnel,
    },
};

/// Runs the tunnel between the switched WebSocket stream of `s` and the upstream side `up` until it
/// ends, then ends the stream as the module's text says. A session whose switch did not go out has
/// nothing to tunnel: `up` is closed.
pub async fn run(w: &Worker, s: &mut H2Session<'_>, up: Tunnel) {
    let Some((recv, send)) = s.tunnel_sides() else {
        return;
    };
    let read = StreamRead::new(recv);
    let write = StreamWrite::<_, Chunk>::new(send);
    // Both sides are handed to the relay and dropped with it: the stream is reached again through `s`.
    let end = relay(w, read, write, RecvBuf::new(), up).await;
    let reset = match end {
        End::Closed => None,
        End::Idle => Some(Reason::CANCEL),
        End::Upstream => Some(Reason::CONNECT_ERROR),
        // The client reset the stream, or its connection ended: nothing more goes to it.
        End::Client => {
            w.metrics.http2_reset(ResetSide::Client).increment(1);
            None
        }
    };
    if let (Some(reason), Some((_, send))) = (reset, s.tunnel_sides()) {
        send.send_reset(reason);
        w.metrics.http2_reset(ResetSide::Edge).increment(1);
    }
    s.tunnel_ended();
}
