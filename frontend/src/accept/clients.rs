//! `server.limits.max_connections_per_client` (DESIGN.md "Request pipeline and traffic rules"): each
//! connection's client (the PROXY header's source when there was one) is counted in the process-wide
//! table ([`edge_core::policy::limit::conns::ClientConns`]) once it is known, and uncounted when the
//! connection ends; an HTTP/2 connection counts once, however many streams it carries. A connection
//! over the limit is shed like one over `max_connections`: its first request is answered (a health
//! probe normally, anything else 429 + `Retry-After: 1`), then it closes (HTTP/2: GOAWAY).

use std::{net::SocketAddr, rc::Rc};

use edge_core::{metrics::ShedReason, policy::limit::conns::Entry};

use crate::context::Worker;

/// A connection counted against its client's limit; uncounted when dropped (the connection's task
/// holds it to its end).
pub struct ClientSlot {
    w: Rc<Worker>,
    slot: usize,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.w.shared.clients.leave(self.slot);
    }
}

/// Counts a connection of `client`: its slot (none when the limit is off or the table is full), or
/// the shed reason `client_limit` when the client is at its limit.
pub fn enter(w: &Rc<Worker>, client: SocketAddr) -> (Option<ClientSlot>, Option<ShedReason>) {
    let limit = w
        .current()
        .cfg
        .config
        .server
        .limits
        .max_connections_per_client;
    if limit == 0 {
        return (None, None);
    }
    match w.shared.clients.enter(client.ip(), limit) {
        Entry::Counted(slot) => (Some(ClientSlot { w: w.clone(), slot }), None),
        Entry::Over => (None, Some(ShedReason::ClientLimit)),
        Entry::Uncounted => (None, None),
    }
}
