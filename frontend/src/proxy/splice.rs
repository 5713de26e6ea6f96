//! The rest of a response body by splice: from the upstream's socket through a pipe to the client's,
//! with no copy into user space ([`edge_core::io::splice`]; DESIGN.md "Memory under slow readers and
//! large bodies").
//!
//! Which bodies: a body of declared length going out unchanged, with both sockets plain TCP
//! ([`Respond::splice_sink`], [`UpstreamSession::splice_source`]), once its relay has grown to the full
//! pace ([`edge_core::buf::RELAY_BUF_SIZE`]: the client keeps up). A slow reader's relay stays on the
//! copy, at the small buffer the pace gives it; a splicing relay keeps its full share of the worker's
//! relay budget, which covers what its pipe holds ([`edge_core::io::splice::PIPE_SIZE`]).
//!
//! The deadlines are the copy's: the zombie clock while waiting for the upstream (paused while the
//! client is waited for), the `send` deadline, counting time without progress, while waiting for the
//! client.

use std::os::fd::RawFd;

use edge_core::{
    clock::coarse_now,
    io::splice::{Moved, Pipe},
};
use edge_upstream::{session::UpstreamSession, zombie::ActivityClock, UpstreamErrorKind};

use crate::{context::Worker, respond::SendFailure, server::Respond};

/// How a spliced body ended.
pub(super) enum Spliced {
    /// Every byte of it reached the client's socket.
    Complete,
    /// The upstream failed: went silent (`Zombie`), reset (`Reset`) or closed early (`ClosedEarly`).
    Upstream(UpstreamErrorKind),
    /// The client stopped reading for `send`, or its connection failed.
    Client(SendFailure),
}

/// Splices the rest of the response body from `up` to the client of `s`, when both sides allow it
/// (see the module doc); `None` when they do not, or no pipe could be opened (out of descriptors),
/// and the caller copies. `up`'s receive buffer is empty then, and given back while the body is
/// spliced.
///
/// # Cancel safety
/// Not cancel safe: a dropped splice leaves the body half sent (the caller drops the connections).
pub(super) async fn rest<S: Respond, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    up: &mut E,
    clock: &mut ActivityClock,
) -> Option<Spliced> {
    let (client, left) = s.splice_sink()?;
    let source = up.splice_source()?;
    let mut pipe = match Pipe::between(source, client) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(event = "relay.splice_unavailable", error = %e, "copying instead");
            return None;
        }
    };
    up.received_mut().release();
    w.metrics.relay_spliced.increment(1);
    let end = relay(s, up, clock, &mut pipe, (source, client), left).await;
    pipe.give();
    Some(end)
}

/// The splice loop: fills the pipe from `source` with what the socket has (up to the body's end),
/// then drains it into `client`, waiting for either side as the copy would.
async fn relay<S: Respond, E: UpstreamSession>(
    s: &mut S,
    up: &mut E,
    clock: &mut ActivityClock,
    pipe: &mut Pipe,
    (source, client): (RawFd, RawFd),
    mut left: u64,
) -> Spliced {
    let mut coop = edge_core::io::coop::Coop::default();
    loop {
        if pipe.held() == 0 {
            match pipe.fill(source, usize::try_from(left).unwrap_or(usize::MAX)) {
                Ok(Moved::Bytes(n)) => {
                    left -= n as u64;
                    clock.received();
                }
                Ok(Moved::WouldBlock) => match up.body_readable(clock).await {
                    Ok(()) => continue,
                    Err(e) => return Spliced::Upstream(e.kind),
                },
                Ok(Moved::Eof) => return Spliced::Upstream(UpstreamErrorKind::ClosedEarly),
                Err(_) => return Spliced::Upstream(UpstreamErrorKind::Reset),
            }
        }
        match pipe.drain(client) {
            Ok(Moved::Bytes(n)) => {
                if s.spliced(n as u64) {
                    return Spliced::Complete;
                }
                coop.moved(n).await;
            }
            Ok(_) => {
                let waited = coarse_now();
                if let Err(e) = s.client_room().await {
                    return Spliced::Client(e);
                }
                // Time the client took does not count as upstream inactivity.
                clock.pause(coarse_now() - waited);
            }
            Err(_) => return Spliced::Client(SendFailure::Closed),
        }
    }
}
