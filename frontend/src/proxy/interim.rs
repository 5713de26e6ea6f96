//! Interim responses on their way to the client (RFC 9110 §15.2): 1xx heads other than 101 are handed to
//! the session as they arrive (after the request body phase when they arrive during it); at most one
//! `100 Continue` reaches the client, the upstream's or edge's own. Also what happens when the client is
//! gone while edge writes to it.

use edge_core::{
    buf::RecvBuf,
    http::{head::ResponseHead, view::ResponseView},
};

use super::Outcome;
use crate::log::RequestLog;
use crate::{context::Worker, respond::SendFailure, server::Respond};

/// What reached the client of the interim responses so far.
#[derive(Default)]
pub struct Interim {
    /// A `100 Continue` reached the client: later ones are dropped.
    pub sent_100: bool,
}

impl Interim {
    /// Consumes the interim head `h` at the start of `buf` (its fields in `fields`) and hands it to the
    /// session, except a second `100 Continue`.
    ///
    /// # Errors
    /// The client could not be written to.
    pub async fn forward<S: Respond>(
        &mut self,
        s: &mut S,
        buf: &mut RecvBuf,
        h: &ResponseHead,
        fields: &[edge_core::http::head::Field],
    ) -> Result<(), SendFailure> {
        let r = match h.status == 100 && self.sent_100 {
            true => Ok(()),
            false => {
                let view = ResponseView {
                    buf: buf.data(),
                    head: h,
                    fields,
                };
                s.send_interim(&view).await
            }
        };
        self.sent_100 |= h.status == 100;
        buf.consume(h.len);
        r
    }
}

/// The client went away while edge wrote to it: a `send` timeout is counted (inbound timeout and
/// truncation) and logged at warn; a close at debug. `status`: edge's answer, once it had one.
pub fn client_gone<U>(
    w: &Worker,
    log: &RequestLog<'_>,
    e: SendFailure,
    status: Option<u16>,
) -> Outcome<U> {
    crate::respond::record_client_gone(w, log, e, status);
    Outcome::ClientGone {
        status,
        closed: e == SendFailure::Closed,
    }
}
