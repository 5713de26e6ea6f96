//! HTTP/2 with prior knowledge on the plain listener (`server.h2c`, DESIGN.md "HTTP/2"): a connection
//! whose first bytes are the connection preface (RFC 9113 §3.4) goes to the h2 server with those bytes;
//! anything else stays HTTP/1.1. The bytes read to decide stay buffered for whichever session serves
//! them; nothing is read past the preface's length.

use std::rc::Rc;

use edge_core::{clock::timeout_at, io::Transport, metrics::Protocol};
use monoio::time::Instant;

use super::{
    conn::{close, Conn},
    idle::wait_idle,
};
use crate::context::Worker;

/// Sniffs the connection's first bytes: `true` when it is HTTP/1.1 (counted as such), `false` when it
/// is HTTP/2 or closed (then [`serve_h2`] takes it).
pub(super) async fn stays_http1<T: Transport>(w: &Worker, c: &mut Conn<T>) -> bool {
    let sniffed = sniff_preface(w, c).await;
    if matches!(sniffed, Sniffed::H2) {
        return false;
    }
    w.metrics.connection_opened(Protocol::Http1);
    if matches!(sniffed, Sniffed::Close) {
        // Nothing to serve: an empty buffer makes `serve_h2` close it.
        c.rb.release();
        return false;
    }
    true
}

/// Serves a connection [`stays_http1`] refused: HTTP/2 from its buffered preface on, or (nothing
/// buffered: it closed or idled out) closes it.
/// `shed`: the client is over `max_connections_per_client` (its one stream gets 429).
pub(super) async fn serve_h2<T: Transport>(
    w: Rc<Worker>,
    mut c: Conn<T>,
    shed: Option<edge_core::metrics::ShedReason>,
) {
    if c.rb.is_empty() {
        return close(&w, c.stream).await;
    }
    let from = crate::server::h2::Origin {
        peer: c.peer,
        local: c.local,
        https: c.https,
        shed,
    };
    let rb = std::mem::take(&mut c.rb);
    // Inline: the caller boxes this whole future (see `super::conn::serve`).
    crate::server::h2::serve(w, c.stream, rb.data(), from).await
}

/// What the first bytes of a plain connection are, with `server.h2c` on.
enum Sniffed {
    /// The HTTP/2 connection preface (RFC 9113 §3.4): HTTP/2 with prior knowledge.
    H2,
    /// Anything else: HTTP/1.1.
    Http1,
    /// Nothing came within `idle`, or the client closed.
    Close,
}

/// Reads (under `idle`) until the buffered bytes either start with the HTTP/2 connection preface or
/// cannot be its start; the bytes stay in `c.rb` for whichever session serves them.
async fn sniff_preface<T: Transport>(w: &Worker, c: &mut Conn<T>) -> Sniffed {
    use crate::server::h2::PREFACE;
    let until = match c.rb.is_empty() {
        true => match wait_idle(w, c).await {
            Some(until) => until,
            None => return Sniffed::Close,
        },
        false => Instant::now() + w.current().cfg.config.server.timeouts.idle.0,
    };
    while c.rb.len() < PREFACE.len() && PREFACE.starts_with(c.rb.data()) {
        match timeout_at(until, c.rb.fill(&mut c.stream)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Sniffed::Close,
        }
    }
    match c.rb.data().starts_with(PREFACE) {
        true => Sniffed::H2,
        false => Sniffed::Http1,
    }
}
