//! The full-duplex phase (DESIGN.md "HTTP/2 and gRPC upstreams": streaming calls): when the upstream
//! session keeps taking request body bytes after its response head
//! ([`UpstreamSession::duplex`]) and the downstream session splits into its request-body and response
//! halves ([`Session::split`]), the rest of the request body and the whole response go on together in
//! one task until each ends, instead of the half-duplex body phase (where an answer that starts before
//! the body is sent ends the body and closes the client connection).
//!
//! - Upward: the client's body into the upstream session's body sink
//!   ([`UpstreamSession::take_body_sink`]), each write under `write_timeout`.
//! - Downward: the response head (interim heads relayed) and the response body, as for any exchange
//!   ([`super::relay::respond`]).
//!
//! How it ends:
//! - the client ends its body first: the response goes on to its end, and the session ends as the
//!   response says (an HTTP/2 stream whose both sides ended is finished, [`Finish::Reuse`]);
//! - the upstream ends its response first: the rest of the client's body is not forwarded (the answer
//!   is complete, RFC 9113 §8.1 lets a server answer before the whole request); the upstream stream is
//!   cancelled ([`Finish::Close`]: RST_STREAM CANCEL unless the upstream already reset it with
//!   NO_ERROR), and the client's stream, whose request the session leaves unread, is reset with
//!   NO_ERROR by h2 as the session is dropped (RFC 9113 §8.1), [`Outcome::Done`] `unread_body`;
//! - the client resets or closes mid-body: the upstream is cancelled ([`Outcome::ClientGone`],
//!   [`Finish::Close`]); a client body refused on its way (413, 400) or stalled past `request` is
//!   answered as the status table says while nothing of the response went out, else truncates it;
//! - the upstream fails: before the response head, an error answer (502/504) as in the half-duplex
//!   phase; once the head is read, the response is truncated (DESIGN.md "Status codes": failure after
//!   the response head). An upstream that stops taking the body after its head (it may have ended its
//!   side with RST_STREAM NO_ERROR after a complete answer) only ends the upward direction: the
//!   response goes on and its own end decides.
//!
//! Deadlines: `request_timeout` runs from the end of the request body to the response head (as in the
//! half-duplex phase, where it starts at the last request byte written), here on this phase's own timer
//! since the head may come while the body still streams; it never applies once the head arrived. The
//! zombie clock runs as for any response, the body sink's writes counting as activity (the session's
//! part). The client's `request` deadline counts time without body progress from the split on (see
//! [`Session::split`]): a long-lived stream whose data keeps flowing is never cut, a silent one is.

use std::{cell::Cell, future::Future, pin::pin, task::Poll};

use edge_core::{
    http::head::Fields,
    io::body::{BodySource, SendBodyError},
};
use edge_upstream::{
    session::{Finish, UpstreamSession},
    UpstreamError, UpstreamErrorKind,
};
use monoio::time::{sleep_until, Instant};

use super::{
    bad_response, failed, interim::Interim, relay, response_head, Admitted, Outcome, Retried, Stop,
};
use crate::{
    context::Worker,
    respond::{self, Failure},
    server::{BodyFailure, Respond, Session},
};

/// Runs the rest of the exchange full duplex when both sessions can (see the module doc); `None` when
/// either cannot, and the caller goes on half duplex. `sent_at` is when the request head went out (for
/// the time to the first response byte).
pub(super) async fn run<S: Session, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    req: &Admitted<'_>,
    up: &mut E,
    fields: &mut Fields,
    interim: &mut Interim,
    sent_at: Instant,
) -> Option<(Outcome<E::Tunnel>, Finish)> {
    if !up.duplex() {
        return None;
    }
    let request = req
        .route
        .client_request_timeout
        .unwrap_or(req.cfg.config.server.timeouts.request.0);
    let (body, reply) = s.split(request)?;
    let sink = up.take_body_sink()?;
    let halves = Halves {
        body,
        reply,
        interim,
    };
    Some(both_ways(w, req, up, sink, halves, fields, sent_at).await)
}

/// The downstream session's halves and the interim-response state.
struct Halves<'x, B, R> {
    body: &'x mut B,
    reply: &'x mut R,
    interim: &'x mut Interim,
}

/// What ended the duplex phase.
enum End<U> {
    /// The downward direction ended, with its outcome and how the upstream session ends.
    Response(Outcome<U>, Finish),
    /// The client reset or closed mid-body.
    ClientGone,
    /// The client's body was refused on its way or stalled past `request`.
    Client(Failure),
    /// The upstream failed to take the body before its response head.
    Upstream(UpstreamError),
    /// The request body ended and no response head came within `request_timeout`.
    RequestTimeout,
}

/// Drives both directions (see the module doc) and maps how they ended.
async fn both_ways<B, R, E>(
    w: &Worker,
    req: &Admitted<'_>,
    up: &mut E,
    mut sink: E::BodySink,
    h: Halves<'_, B, R>,
    fields: &mut Fields,
    sent_at: Instant,
) -> (Outcome<E::Tunnel>, Finish)
where
    B: BodySource<Error = BodyFailure>,
    R: Respond,
    E: UpstreamSession,
{
    let write_timeout = req.upstream.config.write_timeout.0;
    // The final response head's status once read: `request_timeout` no longer applies, and a failure
    // truncates instead of answering.
    let head = Cell::new(None::<u16>);
    // The client's whole body went upstream.
    let mut body_sent = false;
    let end = {
        let Halves {
            body,
            reply,
            interim,
        } = h;
        let mut upward = pin!(body.forward_rest(&mut sink, write_timeout));
        let mut upward_done = false;
        let mut downward = pin!(async {
            let a = match response_head(
                w,
                reply,
                req,
                up,
                false,
                fields,
                interim,
                Retried::NONE,
                None,
            )
            .await
            {
                Ok(a) => a,
                Err(Stop::End(o)) => return (o, Finish::Close),
                Err(Stop::Retry(_)) => return (bad_response(false), Finish::Close),
            };
            up.endpoint_metrics().answered(a.head.status);
            req.facts.ttfb.set(Some(sent_at.elapsed()));
            if a.head.status == 101 {
                // An upgrade needs the whole request sent first (see `tunnel::switch`).
                return (bad_response(false), Finish::Close);
            }
            head.set(Some(a.head.status));
            relay::respond(w, reply, req, up, a, fields).await
        });
        let far = Instant::now() + std::time::Duration::from_secs(86_400 * 365);
        let mut timer = pin!(sleep_until(far));
        let mut timed = false;
        std::future::poll_fn(|cx| {
            if !upward_done {
                if let Poll::Ready(r) = upward.as_mut().poll(cx) {
                    upward_done = true;
                    match r {
                        Ok(()) => {
                            body_sent = true;
                            if let (Some(t), None) = (req.request_timeout, head.get()) {
                                timer.as_mut().reset(Instant::now() + t);
                                timed = true;
                            }
                        }
                        Err(SendBodyError::Source(BodyFailure::ClientGone)) => {
                            return Poll::Ready(End::ClientGone)
                        }
                        Err(SendBodyError::Source(BodyFailure::Client(f))) => {
                            return Poll::Ready(End::Client(f))
                        }
                        Err(SendBodyError::Sink(e)) if head.get().is_none() => {
                            return Poll::Ready(End::Upstream(e.into()))
                        }
                        // After its head the upstream may stop taking the body: the response decides.
                        Err(SendBodyError::Sink(_)) => {}
                    }
                }
            }
            if let Poll::Ready((o, finish)) = downward.as_mut().poll(cx) {
                return Poll::Ready(End::Response(o, finish));
            }
            if timed && head.get().is_none() && timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(End::RequestTimeout);
            }
            Poll::Pending
        })
        .await
    };
    ended(w, req, end, head.get(), body_sent)
}

/// The outcome and the upstream session's end for how the duplex phase ended (see the module doc).
/// `head`: the final response head's status, once read; `body_sent`: the whole request body went
/// upstream.
fn ended<U>(
    w: &Worker,
    req: &Admitted<'_>,
    end: End<U>,
    head: Option<u16>,
    body_sent: bool,
) -> (Outcome<U>, Finish) {
    let closed = |o| (o, Finish::Close);
    match end {
        End::Response(o, finish) if body_sent => (o, finish),
        // The answer ended before the request: the rest of the body is not forwarded.
        End::Response(o, _) => closed(match o {
            Outcome::Done { status, keep, .. } => Outcome::Done {
                status,
                keep,
                unread_body: true,
            },
            Outcome::Failed { failure, .. } => failed(failure, false),
            o => o,
        }),
        End::ClientGone => closed(Outcome::ClientGone {
            status: head,
            closed: true,
        }),
        End::Client(f) => match head {
            None => closed(failed(f, false)),
            Some(status) => {
                let cause = "client request body refused mid-stream";
                respond::record_truncation(w, &req.log, status, cause);
                closed(Outcome::Truncated { status })
            }
        },
        End::Upstream(e) => closed(failed(Failure::Upstream(e), false)),
        End::RequestTimeout => {
            let e = UpstreamError::new(UpstreamErrorKind::RequestTimeout);
            closed(failed(Failure::Upstream(e), true))
        }
    }
}
