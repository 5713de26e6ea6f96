//! The response phase: the final head is judged (framing both ways, keep-alive both ways), handed to the
//! session with the body bytes that came with it, and the rest of the body is relayed under the zombie
//! clock. A failure once the head is out truncates the response (DESIGN.md "Status codes": "failure
//! after the response head was sent").

use std::{net::SocketAddr, time::Duration};

use edge_core::{
    buf::{RecvBuf, RELAY_BUF_SIZE},
    clock::coarse_now,
    http::{
        framing::{keep_alive_timeout, response_body, response_keeps_alive, Body},
        head::Fields,
    },
};
use edge_upstream::{
    session::{BodyRead, Finish, UpstreamSession},
    zombie::ActivityClock,
    UpstreamErrorKind,
};
use monoio::time::Instant;

use super::{
    bad_response, hold::RelayHold, interim::client_gone, splice::Spliced, Admitted, Answered,
    Outcome,
};
use crate::log::RequestLog;
use crate::{
    context::Worker,
    respond,
    respond::SendFailure,
    server::{RelayError, Respond},
};

/// Sends the response of `a` (not a `101`: [`super::tunnel::switch`]) to the client, reading its body
/// from `up`; says how the upstream session ends ([`Finish::Reuse`] when it may serve another request).
/// The session is borrowed, not moved (bench/README.md "Future moves").
pub(crate) async fn respond<S: Respond, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    req: &Admitted<'_>,
    up: &mut E,
    a: Answered,
    fields: &mut Fields,
) -> (Outcome<E::Tunnel>, Finish) {
    let dropped = |o| (o, Finish::Close);
    let Answered {
        head,
        mut clock,
        early,
    } = a;
    let status = head.status;
    let ubuf = up.received().data();
    // A trailers-only gRPC answer carries its grpc-status in the head (DESIGN.md "Observability").
    let head_fields = fields.iter().map(|f| (f.name(ubuf), f.value(ubuf)));
    crate::log::grpc::note_status(req.facts, head_fields);
    let Ok(upstream_body) = response_body(ubuf, &head, fields, req.is_head) else {
        return dropped(bad_response(!early));
    };
    // Draining may have started while the upstream worked on this request.
    let close = req.close || early || w.shared.draining.load(std::sync::atomic::Ordering::Relaxed);
    let reusable = !early
        && response_keeps_alive(ubuf, &head, fields)
        && upstream_body != Body::CloseDelimited;
    let keep_alive = keep_alive_timeout(ubuf, fields);
    let write_started = coarse_now();
    let started = match s
        .send_head(&head, fields, upstream_body, close, up.received_mut())
        .await
    {
        Ok(started) => started,
        Err(RelayError::BadBody) => return dropped(bad_response(!early)),
        Err(RelayError::Client(e)) => return dropped(client_gone(w, &req.log, e, Some(status))),
    };
    let mut complete = started.complete;
    if complete {
        return (
            done(status, started.close, early),
            finish(reusable, up, keep_alive),
        );
    }
    // The upstream clocks run on only while body bytes are still to come from the upstream.
    clock.pause(coarse_now() - write_started);
    let from = (s.relay_share(), s.relay_start());
    let mut hold = RelayHold::start(w, s.passthrough(), from, up.received_mut()).await;
    let endpoint = up.endpoint();
    let mut coop = edge_core::io::coop::Coop::default();
    while !complete {
        let mid_body =
            |kind, cause| upstream_failed_mid_body(w, &req.log, status, kind, endpoint, cause);
        // A client that keeps up gets the rest of a plain body by splice (`super::splice`).
        if hold.size() >= RELAY_BUF_SIZE {
            match super::splice::rest(w, s, up, &mut clock).await {
                None => {}
                Some(Spliced::Complete) => break,
                Some(Spliced::Client(e)) => {
                    return dropped(client_gone(w, &req.log, e, Some(status)))
                }
                Some(Spliced::Upstream(kind)) => {
                    if kind == UpstreamErrorKind::Zombie {
                        log_zombie(w, &req.log, endpoint, &clock, req.request_timeout);
                    }
                    return dropped(mid_body(kind, spliced_cause(kind)));
                }
            }
        }
        let more = up.read_body(&mut clock, hold.size()).await;
        match more {
            Err(e) if e.kind == UpstreamErrorKind::Zombie => {
                log_zombie(w, &req.log, up.endpoint(), &clock, req.request_timeout);
                return dropped(mid_body(e.kind, "upstream connection went silent (zombie)"));
            }
            Err(e) => return dropped(mid_body(e.kind, "upstream reset during the body")),
            Ok(BodyRead::Eof) if upstream_body == Body::CloseDelimited => {
                if let Err(e) = s.end_body().await {
                    return dropped(client_gone(w, &req.log, e, Some(status)));
                }
                complete = true;
            }
            Ok(BodyRead::Eof) => {
                return dropped(mid_body(
                    UpstreamErrorKind::ClosedEarly,
                    "upstream closed before the end of the body",
                ))
            }
            Ok(BodyRead::Data) => {
                let started = coarse_now();
                let (len, t) = (up.received().len(), std::time::Instant::now());
                match s.send_body(up.received_mut()).await {
                    Ok(c) => complete = c,
                    Err(RelayError::BadBody) => {
                        return dropped(mid_body(
                            UpstreamErrorKind::BadResponse,
                            "malformed chunked body from upstream",
                        ))
                    }
                    Err(RelayError::Client(e)) => {
                        return dropped(client_gone(w, &req.log, e, Some(status)))
                    }
                }
                let paced = after_chunk(s, &mut hold, up.received_mut(), complete, (len, t)).await;
                if let Err(e) = paced {
                    return dropped(client_gone(w, &req.log, e, Some(status)));
                }
                coop.moved(len).await;
                clock.pause(coarse_now() - started);
            }
        }
    }
    if s.passthrough() {
        s.relay_ended(hold.pace());
    }
    drop(hold);
    if let Some(t) = up.received_trailers() {
        let trailer_fields = t.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        crate::log::grpc::note_status(req.facts, trailer_fields);
    }
    (
        done(status, started.close, early),
        finish(reusable, up, keep_alive),
    )
}

/// After a chunk of `len` bytes written since `t` (`rest` is the relay's buffer): an HTTP/2 stream
/// waits until h2 let go of the chunk, so it holds one (the wait is part of the time the client took
/// it; the last chunk too, so the stream's share of its connection goes back only once its bytes are
/// out); the pace is told; a multiplexed stream takes its next turn; a relay whose client is not
/// reading waits for its socket holding no buffer and no share of the budget (DESIGN.md "Memory under
/// slow readers and large bodies").
///
/// # Errors
/// The client stopped reading for `send`, or its connection failed.
async fn after_chunk<S: Respond>(
    s: &mut S,
    hold: &mut RelayHold<'_>,
    rest: &mut RecvBuf,
    complete: bool,
    (len, t): (usize, std::time::Instant),
) -> Result<(), SendFailure> {
    if s.window_paced() {
        let mut room = std::pin::pin!(s.client_room());
        if hold.in_turn() {
            match monoio::time::timeout(super::hold::SLOW_TURN, room.as_mut()).await {
                Ok(r) => r?,
                Err(_) => {
                    hold.leave_turn();
                    room.await?;
                }
            }
        } else {
            room.await?;
        }
    }
    hold.wrote(len, t.elapsed(), s.client_socket());
    if !complete && rest.is_empty() {
        hold.next_turn(rest).await;
    }
    if !complete && rest.is_empty() && hold.client_behind(s.client_socket()) {
        hold.pause(rest);
        s.client_room().await?;
        hold.resume().await;
    }
    Ok(())
}

/// The `response.truncated` cause of an upstream failure during a spliced body, in the copy's words.
fn spliced_cause(kind: UpstreamErrorKind) -> &'static str {
    match kind {
        UpstreamErrorKind::Zombie => "upstream connection went silent (zombie)",
        UpstreamErrorKind::ClosedEarly => "upstream closed before the end of the body",
        _ => "upstream reset during the body",
    }
}

/// A response relayed whole; `close`: the connection closes after it.
fn done<U>(status: u16, close: bool, early: bool) -> Outcome<U> {
    Outcome::Done {
        status,
        keep: !close,
        unread_body: early,
    }
}

/// How the upstream session of a whole response ends: back to its pool when the connection may serve
/// another request and nothing unread is left on it.
fn finish<E: UpstreamSession>(reusable: bool, up: &E, keep_alive: Option<u64>) -> Finish {
    match reusable && up.received().is_empty() {
        true => Finish::Reuse {
            keep_alive_secs: keep_alive,
        },
        false => Finish::Close,
    }
}

/// The upstream failed after the response head went out: counted by its kind
/// ([`respond::record_upstream_mid_body`]), and the truncation with its `response.truncated` line.
fn upstream_failed_mid_body<U>(
    w: &Worker,
    log: &RequestLog<'_>,
    status: u16,
    kind: UpstreamErrorKind,
    endpoint: SocketAddr,
    cause: &'static str,
) -> Outcome<U> {
    respond::record_upstream_mid_body(w, log, status, kind, endpoint, cause);
    truncated(w, log, status, cause)
}

/// Counts and logs a response cut short after its head.
fn truncated<U>(w: &Worker, log: &RequestLog<'_>, status: u16, cause: &'static str) -> Outcome<U> {
    respond::record_truncation(w, log, status, cause);
    Outcome::Truncated { status }
}

/// The `upstream.zombie` line (DESIGN.md "Zombie detection"): the threshold and the clock's readings.
pub(crate) fn log_zombie(
    w: &Worker,
    log: &RequestLog<'_>,
    endpoint: SocketAddr,
    clock: &ActivityClock,
    request_timeout: Option<Duration>,
) {
    // The zombie clock's instants are coarse readings (rounded up to a tick), so "ago" is read on the
    // same clock: a precise `now` could come out up to a tick before them.
    let now = coarse_now();
    let ago = |t: Instant| format!("{}ms ago", now.saturating_duration_since(t).as_millis());
    let (method, path, id, trace_id) = log.parts();
    tracing::warn!(
        event = "upstream.zombie",
        worker = w.id,
        method,
        path,
        request_id = id,
        trace_id,
        upstream = log.upstream_name(),
        endpoint = %endpoint,
        inactive_duration_threshold_ms = clock.threshold.as_millis() as u64,
        last_request_sent_at = ago(clock.last_sent),
        last_received_at = clock.last_received.map_or("never".to_string(), ago),
        max_request_timeout_ms = request_timeout.map_or(-1, |d| d.as_millis() as i64),
    );
}
