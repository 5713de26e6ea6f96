//! `Expect: 100-continue` (RFC 9110 §10.1.1). When the client waits for the go-ahead (no body byte came
//! with the head), edge holds the body until the upstream answers: a 100 is relayed and the body
//! streamed; a final status is relayed without sending the body, the upstream connection is not reused
//! and the client connection closes (`Connection: close`, lingering close); after [`CONTINUE_WAIT`] of
//! silence edge sends its own `100 Continue` and streams the body.

use std::time::Duration;

use edge_core::http::head::Fields;
use edge_upstream::{
    received::{buffered, Buffered},
    session::{UpstreamSession, Waited},
    UpstreamError,
};
use monoio::time::Instant;

use super::interim::Interim;
use crate::{respond::SendFailure, server::Session};

/// How long edge holds a request body waiting for the upstream's answer to `Expect: 100-continue` before
/// it sends its own `100 Continue` and the body anyway. One second, like curl's default: an origin that
/// ignores Expect (RFC 9110 §10.1.1 allows it; HTTP/1.0 origins do) costs at most this much.
pub const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// How waiting for the upstream's answer ended.
pub enum End {
    /// The upstream said 100 (relayed), or stayed silent for [`CONTINUE_WAIT`] (edge sent its own 100):
    /// send the body.
    SendBody,
    /// The upstream's response (a final status, or a head judged by the response-head read) is buffered:
    /// the body is not sent.
    Final,
}

/// Why the wait failed.
pub enum Failed {
    /// The client could not be written to.
    Client(SendFailure),
    /// The upstream closed or reset (retry-safe while it sent nothing).
    Upstream(UpstreamError),
}

/// Waits (at most [`CONTINUE_WAIT`]) for the upstream's answer to a request head sent with
/// `Expect: 100-continue`, relaying interim responses as they come.
///
/// # Errors
/// See [`Failed`].
///
/// # Cancel safety
/// The upstream read is cancelled at the deadline and awaited, so bytes that won the race stay buffered.
pub async fn await_continue<S: Session, E: UpstreamSession>(
    s: &mut S,
    up: &mut E,
    fields: &mut Fields,
    interim: &mut Interim,
) -> Result<End, Failed> {
    let until = Instant::now() + CONTINUE_WAIT;
    let mut received = false;
    loop {
        loop {
            match buffered(up.received(), fields) {
                Buffered::Interim(h) => {
                    interim
                        .forward(s, up.received_mut(), &h, fields)
                        .await
                        .map_err(Failed::Client)?;
                    if h.status == 100 {
                        return Ok(End::SendBody);
                    }
                }
                Buffered::Incomplete => break,
                Buffered::Final => return Ok(End::Final),
            }
        }
        match up.wait_more(until, received).await {
            Ok(Waited::Bytes) => received = true,
            // Part of a head at the deadline: the response has begun.
            Ok(Waited::Deadline) if !up.received().is_empty() => return Ok(End::Final),
            Ok(Waited::Deadline) => {
                // Silence: edge gives the go-ahead itself.
                s.send_continue().await.map_err(Failed::Client)?;
                interim.sent_100 = true;
                return Ok(End::SendBody);
            }
            Err(e) => return Err(Failed::Upstream(e)),
        }
    }
}
