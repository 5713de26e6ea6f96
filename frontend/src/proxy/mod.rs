//! The orchestrator (DESIGN.md "Layout", `frontend/src/proxy`): admitted request → upstream session →
//! response, written once against two seams: the downstream [`Session`] and the upstream session
//! ([`edge_upstream::session`]: [`Open`] opens an [`UpstreamSession`] per request, whatever protocol the
//! upstream speaks). The request head is rewritten and sent with whatever body bytes already arrived,
//! the rest of the body is streamed as it arrives (never buffered whole), the response head is read
//! under `request_timeout` and the zombie threshold, and the body is relayed back. Everything here is
//! generic over the upstream session; [`run`] uses the one the route's [`Upstream`] opens.
//!
//! Deadlines (DESIGN.md "Inbound deadlines", "Zombie detection"): the client `request` deadline bounds
//! reading the body (in the session); `write_timeout` bounds each write upstream; `request_timeout`
//! runs from the last request byte written to the response head; upstream inactivity past the zombie
//! threshold ends the exchange with 504 (or a truncated response once the head is out). Time spent
//! blocked writing to a slow client does not count as upstream inactivity.
//!
//! Concerns in their own files: [`expect`] (`Expect: 100-continue`), [`interim`] (1xx forwarding),
//! [`relay`] (the response head and body), [`duplex`] (the body and the response together, for an
//! upstream that takes the body after its head: gRPC streaming), [`tunnel`] (101 and the byte tunnel). Retries follow
//! [`edge_upstream::retry`].

mod duplex;
#[cfg(test)]
mod duplex_tests;
pub mod expect;
mod hold;
pub mod interim;
#[cfg(test)]
mod mem_tests;
#[cfg(test)]
mod mem_upstream;
pub mod mirror;
pub mod relay;
mod splice;
#[cfg(test)]
mod tests;
pub mod tunnel;

use std::time::Duration;

use edge_core::{buf::SendBuf, clock::coarse_now, http::head::Fields, metrics::LocalGauge};
use edge_upstream::{
    head::{request_head, RequestRewrite},
    received::is_interim,
    retry::Attempt,
    session::{BodyEnd, BodyError, Finish, HeadBuffer, Open, Reuse, UpstreamSession},
    zombie::{self, ActivityClock},
    UpstreamError, UpstreamErrorKind,
};
use monoio::time::Instant;

pub use expect::CONTINUE_WAIT;

use crate::{
    context::Worker,
    respond::{Failure, SendFailure},
    server::{BodyFailure, Respond, Session},
};

/// The admitted request the orchestrator runs ([`crate::request::admit`]), re-exported for its phases.
pub use crate::request::Admitted;

/// The upstream side of a tunnel after a `101` ([`Outcome::Upgraded`], [`tunnel::tunnel`]): what the
/// route's upstream opens.
pub type Tunnel = edge_upstream::Tunnel;

/// How the exchange ended. `U` is the upstream side of a tunnel ([`Tunnel`] for every real upstream).
pub enum Outcome<U = Tunnel> {
    /// The response was delivered whole.
    Done {
        /// Status sent.
        status: u16,
        /// The client connection may serve another request.
        keep: bool,
        /// The client may still be sending a body edge did not read (the upstream answered early): close
        /// with a lingering close.
        unread_body: bool,
    },
    /// Nothing was sent to the client yet; the caller answers with an error response.
    Failed {
        /// What failed.
        failure: Failure,
        /// Whether the request body was read to its end (the connection may then be kept).
        body_done: bool,
    },
    /// The response head was sent and the exchange then failed: the response is cut short and the
    /// connection closes (already counted and logged).
    Truncated {
        /// Status that was sent.
        status: u16,
    },
    /// The client went away (closed, reset, or stopped reading past `send`); already logged, and a
    /// `send` deadline already counted. The caller writes the access line ([`respond::client_left`]).
    ClientGone {
        /// The status of edge's answer, once it had one; `None` when the client left first.
        status: Option<u16>,
        /// The client closed its connection or reset its stream; `false`: the `send` deadline ran out.
        closed: bool,
    },
    /// The upstream answered `101 Switching Protocols` to an upgrade request and the 101 head reached the
    /// client: the caller tunnels bytes between the two connections ([`tunnel::tunnel`]). Bytes the
    /// upstream sent after its head are still in the tunnel.
    Upgraded {
        /// The upstream side, never reused (a pointer for HTTP/1.1).
        tunnel: U,
    },
}

/// The response head has been read: everything the response phase needs besides the upstream session.
pub(crate) struct Answered {
    pub(crate) head: edge_core::http::head::ResponseHead,
    pub(crate) clock: ActivityClock,
    /// The upstream answered before the whole request body was sent.
    pub(crate) early: bool,
}

/// Runs one exchange for the request of `s` on the route's upstream.
pub async fn run<S: Session>(w: &Worker, s: &mut S, req: Admitted<'_>) -> Outcome {
    let (out, wait_continue, head_len) = match start(s, &req) {
        Ok(started) => started,
        Err(f) => return failed(f, false),
    };
    if let Some(m) = req.route.rules.mirror.as_ref().filter(|m| m.chosen()) {
        let whole = s.body_done() && !wait_continue;
        mirror::start(
            w,
            w.live(),
            m.upstream,
            &out.0,
            head_len,
            whole,
            client_conn(&req),
        );
    }
    let mut fields = s.take_fields();
    let outcome = exchange(w, s, &req, req.upstream, out, &mut fields, wait_continue).await;
    s.put_fields(fields);
    let (taken, sent) = s.body_bytes();
    req.facts.request_bytes.set(taken);
    req.facts.response_bytes.set(sent);
    outcome
}

/// Writes the upstream request head and the body bytes that came with it into a pooled buffer, and
/// says whether to wait for `100 Continue` before the rest of the body.
///
/// # Errors
/// The body prefix failed its framing or limit checks (400, 413).
fn start<S: Session>(s: &mut S, req: &Admitted<'_>) -> Result<(SendBuf, bool, usize), Failure> {
    // Held until the response head (a retry sends it again): a head buffer, which the body bytes that
    // came with the request grow into a larger pooled one (`Session::body_prefix`).
    let mut out = SendBuf::take_head();
    {
        let view = s.request();
        let rw = RequestRewrite {
            peer: req.peer.ip(),
            trusted: req
                .cfg
                .trusted_proxies
                .iter()
                .any(|c| c.contains(req.peer.ip())),
            https: req.https,
            id: req.log.id,
            body: req.info.body,
            upgrade: req.info.upgrade,
            max_forwards: req.info.max_forwards,
            path: req.rewrite.path,
            host: req.rewrite.host,
            rules: req.rewrite.rules,
            added: req.rewrite.added,
            traceparent: req.rewrite.traceparent,
        };
        // Room for the head and the fields edge adds (forwarding fields, request id, trace context:
        // about 300 bytes; a rule's fields beyond that grow the buffer within its class), in a pooled
        // buffer of the class that holds it.
        out.reserve_pooled(view.head.len + 512);
        request_head(&mut out.0, &view, &rw);
    }
    // Body bytes that arrived with the head go out in the same write.
    let head_len = out.0.len();
    s.body_prefix(&mut out.0)?;
    // The client waits for a go-ahead before its body (RFC 9110 §10.1.1): so does edge, for the
    // upstream's.
    let wait_continue = s.expects_continue() && out.0.len() == head_len;
    Ok((out, wait_continue, head_len))
}

/// What an attempt on one upstream session led to, when it did not get a response head.
enum Stop<U> {
    /// The failure (of this kind) is retry-safe and the policy allows another attempt.
    Retry(UpstreamErrorKind),
    /// The exchange ends with this outcome.
    End(Outcome<U>),
}

/// Sends the request on sessions `open` opens (retrying per policy), reads up to the final response
/// head (forwarding interim responses) and relays the response. `out` holds the upstream head and the
/// body prefix.
///
/// The upstream session stays in this frame from its opening to the response phase, and the phases
/// borrow it instead of handing it on from one to the next, so no phase moves it (bench/README.md
/// "Future moves").
async fn exchange<S: Session, O: Open>(
    w: &Worker,
    s: &mut S,
    req: &Admitted<'_>,
    open: &O,
    mut out: SendBuf,
    fields: &mut Fields,
    wait_continue: bool,
) -> Outcome<O::Tunnel> {
    let sent_whole = s.body_done();
    let mut interim = interim::Interim::default();
    let mut previous = 0;
    // The last attempt's stream was never processed (HTTP/2 REFUSED_STREAM or GOAWAY): the next may
    // go on a connection already open (RFC 9113 §8.7; a connection that sent GOAWAY takes no new
    // stream), not necessarily a new one.
    let mut unprocessed = false;
    loop {
        // The retry rule, asked before the opening: would a failure on a reused connection be sent
        // again on a fresh one?
        let retried_if_reused = Attempt {
            reused: true,
            idempotent: req.idempotent,
            replayable: sent_whole || wait_continue,
            previous,
        }
        .may_retry();
        let reuse = match (previous, retried_if_reused) {
            (1.., _) if unprocessed => Reuse::Checked,
            (1.., _) => Reuse::Fresh,
            (0, true) => Reuse::RetrySafe,
            (0, false) => Reuse::Checked,
        };
        let opened = match open.open(reuse, client_conn(req), req.hash_key).await {
            Ok(opened) => opened,
            Err(e) => {
                // A connection was tried, unless none could be (no endpoint address, or the queue for
                // `max_active` timed out).
                let tried = !matches!(
                    e.kind,
                    UpstreamErrorKind::NoEndpoint | UpstreamErrorKind::QueueTimeout
                );
                req.facts
                    .attempts
                    .set(req.facts.attempts.get() + u32::from(tried));
                return failed(Failure::Upstream(e), sent_whole);
            }
        };
        if opened.retried {
            req.upstream.metrics.retries.increment(1);
        }
        req.upstream.metrics.requests.increment(1);
        let facts = req.facts;
        facts
            .attempts
            .set(facts.attempts.get() + 1 + u32::from(opened.retried));
        facts.endpoint.set(Some(opened.session.endpoint()));
        let sent_at = Instant::now();
        // Everything sent so far is in `out` (the body is whole in it, or not started): it can be replayed.
        let attempt = Attempt {
            reused: opened.session.reused(),
            idempotent: req.idempotent,
            replayable: sent_whole || wait_continue,
            previous,
        };
        let on = Attempted {
            may_retry: attempt.may_retry(),
            // A stream an HTTP/2 upstream never processed (refused, or above its GOAWAY) goes again
            // on another connection whatever the method, while what was sent can be replayed
            // (DESIGN.md "HTTP/2 and gRPC upstreams"); bounded like any retry loop.
            may_resend: (sent_whole || wait_continue) && previous < MAX_RESENDS,
            wait_continue,
        };
        let mut up = opened.session;
        // An HTTP/1.1 exchange holds an upstream connection (`state="active",protocol="http1"`); an
        // HTTP/2 stream does not (its connection counts in the sweep's h2 gauges).
        let _active = (!up.duplex()).then(|| ActiveGauge::new(&w.metrics.upstream_active));
        let sent =
            match send_request(w, s, req, &mut up, &mut out.0, fields, &mut interim, &on).await {
                Ok(Sent::Whole { early }) => Ok((early, false)),
                Ok(Sent::BodyPending) if up.duplex() => {
                    // Nothing is sent again once the body streams: the upstream head's buffer goes
                    // back to the pool for the (maybe long) duplex phase.
                    edge_core::buf::give(std::mem::take(&mut out.0));
                    let i = &mut interim;
                    // Boxed: the full-duplex phase (HTTP/2 upstreams with a streamed body) is the
                    // largest of the exchange's phases, and inline it would size every exchange's
                    // future, an HTTP/2 stream task's included (bench/README.md "Large bodies after
                    // the slow-reader work").
                    match Box::pin(duplex::run(w, s, req, &mut up, fields, i, sent_at)).await {
                        Some((outcome, finish)) => {
                            return ended_duplex(up, outcome, finish);
                        }
                        None => {
                            let write_timeout = req.upstream.config.write_timeout.0;
                            let (u, r) = stream_body_in_slot(w, s, up, fields, write_timeout).await;
                            up = u;
                            r.map(|early| (early, true))
                        }
                    }
                }
                Ok(Sent::BodyPending) => {
                    let write_timeout = req.upstream.config.write_timeout.0;
                    let (u, r) = stream_body_in_slot(w, s, up, fields, write_timeout).await;
                    up = u;
                    r.map(|early| (early, true))
                }
                Err(stop) => Err(stop),
            };
        let r = match sent {
            Ok((early, streamed)) => {
                // Once body bytes were streamed from the client they cannot be sent again.
                let retry = Retried {
                    reused: on.may_retry && !streamed,
                    unprocessed: on.may_resend && !streamed,
                };
                let timeout = req.request_timeout;
                response_head(
                    w,
                    s,
                    req,
                    &mut up,
                    early,
                    fields,
                    &mut interim,
                    retry,
                    timeout,
                )
                .await
            }
            Err(stop) => Err(stop),
        };
        let endpoint = up.endpoint();
        match r {
            Ok(answered) => {
                up.endpoint_metrics().answered(answered.head.status);
                facts.ttfb.set(Some(sent_at.elapsed()));
                // The upstream head is no longer needed (no retry once a head arrived): its buffer goes
                // back to the pool before the session takes one for the response.
                drop(out);
                if answered.head.status == 101 {
                    let early = answered.early;
                    return tunnel::switch(w, s, req, up, &answered.head, fields, early).await;
                }
                let (outcome, finish) = relay::respond(w, s, req, &mut up, answered, fields).await;
                up.finish(finish);
                return on_endpoint(outcome, endpoint);
            }
            // Asked for only where `on` allowed it.
            Err(Stop::Retry(kind)) => {
                up.endpoint_metrics().failed();
                if let edge_upstream::Counted::Error(label) = kind.counted() {
                    if kind.unprocessed() {
                        req.upstream.metrics.error(label).increment(1);
                    }
                }
                previous += 1;
                unprocessed = kind.unprocessed();
                req.upstream.metrics.retries.increment(1);
            }
            Err(Stop::End(o)) => {
                if let Outcome::Failed {
                    failure: Failure::Upstream(_),
                    ..
                } = o
                {
                    up.endpoint_metrics().failed();
                }
                return on_endpoint(o, endpoint);
            }
        }
    }
}

/// The end of an exchange that ran full duplex ([`duplex::run`]): the endpoint's counters, the upstream
/// session finished as the phase decided.
fn ended_duplex<E: UpstreamSession>(
    up: E,
    o: Outcome<E::Tunnel>,
    finish: Finish,
) -> Outcome<E::Tunnel> {
    if let Outcome::Failed {
        failure: Failure::Upstream(_),
        ..
    } = o
    {
        up.endpoint_metrics().failed();
    }
    let endpoint = up.endpoint();
    up.finish(finish);
    on_endpoint(o, endpoint)
}

/// How one attempt may go.
struct Attempted {
    /// A retry-safe failure on a reused connection may be retried ([`Attempt::may_retry`]).
    may_retry: bool,
    /// An unprocessed stream ([`UpstreamErrorKind::unprocessed`]) may be sent again.
    may_resend: bool,
    wait_continue: bool,
}

/// Attempts at most made for streams an HTTP/2 upstream did not process, besides the first.
const MAX_RESENDS: u32 = 5;

/// Which failures of the response-head phase are retried.
#[derive(Clone, Copy)]
struct Retried {
    /// Retry-safe ones (no response byte on a reused connection).
    reused: bool,
    /// Unprocessed streams.
    unprocessed: bool,
}

impl Retried {
    /// None is (the body was streamed: nothing can be sent again).
    const NONE: Retried = Retried {
        reused: false,
        unprocessed: false,
    };
}

/// How far [`send_request`] got.
enum Sent {
    /// The whole request is out, or the upstream answered the `100-continue` wait with a final status
    /// (`early`: the body was not sent).
    Whole { early: bool },
    /// The head is out; the rest of the body is to be streamed ([`stream_body`]).
    BodyPending,
}

/// Sends the head (and body prefix) on `up` and waits for `100 Continue` when the client does.
#[allow(clippy::too_many_arguments)]
async fn send_request<S: Session, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    req: &Admitted<'_>,
    up: &mut E,
    out: &mut Vec<u8>,
    fields: &mut Fields,
    interim: &mut interim::Interim,
    on: &Attempted,
) -> Result<Sent, Stop<E::Tunnel>> {
    let cfg = &req.upstream.config;
    let sent_whole = s.body_done();
    match up.send_head(out, cfg.write_timeout.0).await {
        Ok(()) => {}
        Err(e) if on.may_retry && e.kind != UpstreamErrorKind::WriteTimeout => {
            return Err(Stop::Retry(e.kind))
        }
        Err(e) if on.may_resend && e.kind.unprocessed() => return Err(Stop::Retry(e.kind)),
        Err(e) => return Err(Stop::End(failed(Failure::Upstream(e), sent_whole))),
    }
    if on.wait_continue {
        match expect::await_continue(s, up, fields, interim).await {
            Ok(expect::End::SendBody) => {}
            Ok(expect::End::Final) => return Ok(Sent::Whole { early: true }),
            Err(expect::Failed::Client(e)) => {
                return Err(Stop::End(interim::client_gone(w, &req.log, e, None)))
            }
            Err(expect::Failed::Upstream(e)) if on.may_retry && e.retry_safe => {
                return Err(Stop::Retry(e.kind))
            }
            Err(expect::Failed::Upstream(e)) => {
                return Err(Stop::End(failed(Failure::Upstream(e), false)))
            }
        }
    } else if sent_whole {
        return Ok(Sent::Whole { early: false });
    }
    Ok(Sent::BodyPending)
}

/// [`stream_body`] in a slot from the worker's free list ([`edge_core::slot`]): streaming a request
/// body is the largest phase of an exchange but the full-duplex one (about 4.4 KB, most of it the
/// upstream write and its timers), and inline it would size every exchange's future, and so every
/// HTTP/2 stream task, for the requests without a body too (bench/README.md "Large bodies after the
/// slow-reader work"). Steady uploads reuse the slot: no allocation per request.
async fn stream_body_in_slot<S: Session, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    up: E,
    fields: &mut Fields,
    write_timeout: Duration,
) -> (E, Result<bool, Stop<E::Tunnel>>) {
    let mut held = edge_core::slot::Held::default();
    let end = edge_core::slot::run_in(&mut held.0, stream_body(s, up, fields, write_timeout)).await;
    if s.body_spliced() {
        w.metrics.request_spliced.increment(1);
    }
    end
}

/// Streams the rest of the request body on `up` while watching for an early answer; `Ok(early)` when
/// it ends without a failure. The session is handed over and back (HTTP/1.1 reads and writes its
/// connection's halves at once): the one phase that moves it, and only for a body that did not come
/// with the head.
async fn stream_body<S: Session, E: UpstreamSession>(
    s: &mut S,
    up: E,
    fields: &mut Fields,
    write_timeout: Duration,
) -> (E, Result<bool, Stop<E::Tunnel>>) {
    let (up, body) = up.send_body(s, fields, write_timeout).await;
    let end = |o| Err(Stop::End(o));
    let r = match body {
        Ok(BodyEnd::Sent) => Ok(false),
        Ok(BodyEnd::Early) => Ok(true),
        Err(BodyError::Source(BodyFailure::Client(f))) => end(failed(f, false)),
        Err(BodyError::Source(BodyFailure::ClientGone)) => end(Outcome::ClientGone {
            status: None,
            closed: true,
        }),
        Err(BodyError::Upstream(e)) => end(failed(Failure::Upstream(e), false)),
    };
    (up, r)
}

/// Reads the response head under `request_timeout` (`None`: none; the duplex phase runs it itself) and
/// the zombie clock, handing interim heads to the session. `early`: the upstream answered before the
/// whole body was sent. A retry-safe failure (no response byte arrived) is retried when `retry` allows
/// it.
#[allow(clippy::too_many_arguments)]
async fn response_head<S: Respond, E: UpstreamSession>(
    w: &Worker,
    s: &mut S,
    req: &Admitted<'_>,
    up: &mut E,
    early: bool,
    fields: &mut Fields,
    interim: &mut interim::Interim,
    retry: Retried,
    request_timeout: Option<Duration>,
) -> Result<Answered, Stop<E::Tunnel>> {
    let cfg = &req.upstream.config;
    let threshold = zombie::threshold(
        cfg.max_inactive.0,
        cfg.max_inactive_cap.0,
        req.request_timeout,
    );
    let now = coarse_now();
    // Response bytes already buffered (an early answer) make a failure unsafe to retry.
    let received = !up.received().is_empty();
    let mut clock = ActivityClock::started(now, received, cfg.zombie_counts_received, threshold);
    let head_deadline = request_timeout.map(|t| now + t);
    // A client that abandons the request meanwhile ends the exchange: dropping the session resets an
    // HTTP/2 upstream stream (RST_STREAM CANCEL) and closes an HTTP/1.1 upstream connection. Watched
    // for HTTP/2 upstream streams (DESIGN.md "HTTP/2 and gRPC upstreams"), for any upstream where
    // the client's word is certain (an HTTP/2 stream's reset, [`Respond::abandonment_is_certain`]),
    // and where the route takes an HTTP/1.1 client's close for abandonment (`abandon_on_client_close`).
    let watch_client =
        up.duplex() || s.abandonment_is_certain() || req.route.abandon_on_client_close;
    // A stream of a multiplexed client connection reads its head into a head buffer: the body bytes
    // that come with it wait there for the connection's other streams.
    let buffer = match s.relay_share() {
        Some(_) => HeadBuffer::Head,
        None => HeadBuffer::Large,
    };
    loop {
        let gone = async {
            match watch_client {
                true => s.client_gone().await,
                false => std::future::pending().await,
            }
        };
        let head = monoio::select! {
            h = up.read_head(fields, &mut clock, head_deadline, buffer) => h,
            () = gone => {
                return Err(Stop::End(interim::client_gone(
                    w,
                    &req.log,
                    SendFailure::Closed,
                    None,
                )));
            }
        };
        match head {
            Ok(h) if is_interim(h.status) => {
                let started = coarse_now();
                if let Err(e) = interim.forward(s, up.received_mut(), &h, fields).await {
                    return Err(Stop::End(interim::client_gone(w, &req.log, e, None)));
                }
                clock.pause(coarse_now() - started);
            }
            Ok(head) => return Ok(Answered { head, clock, early }),
            Err(e) if retry.reused && e.retry_safe => return Err(Stop::Retry(e.kind)),
            Err(e) if retry.unprocessed && e.kind.unprocessed() => return Err(Stop::Retry(e.kind)),
            Err(e) => {
                if e.kind == UpstreamErrorKind::Zombie {
                    relay::log_zombie(w, &req.log, up.endpoint(), &clock, req.request_timeout);
                }
                // After an early answer the client's body was not read: the connection must close.
                return Err(Stop::End(failed(Failure::Upstream(e), !early)));
            }
        }
    }
}

/// The request's client connection as an upstream PROXY protocol header describes it: the client
/// address edge uses and the address it reached edge on (the unspecified address of the client's
/// family when that was not looked up: a connection accepted before a reload turned
/// `send_proxy_protocol` on).
fn client_conn(req: &Admitted<'_>) -> edge_upstream::session::ClientConn {
    let unspecified = match req.peer {
        std::net::SocketAddr::V4(_) => std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
        std::net::SocketAddr::V6(_) => std::net::SocketAddr::from(([0u16; 8], 0)),
    };
    edge_upstream::session::ClientConn {
        source: req.peer,
        destination: req.local.unwrap_or(unspecified),
    }
}

/// `o` with its upstream failure (if any) placed on `endpoint`, for the log line
/// ([`UpstreamError::endpoint`]): the sessions' errors do not name their endpoint, the orchestrator
/// does, in this one place.
fn on_endpoint<U>(o: Outcome<U>, endpoint: std::net::SocketAddr) -> Outcome<U> {
    match o {
        Outcome::Failed {
            failure: Failure::Upstream(e),
            body_done,
        } => failed(Failure::Upstream(e.at(endpoint)), body_done),
        o => o,
    }
}

/// [`Outcome::Failed`].
fn failed<U>(failure: Failure, body_done: bool) -> Outcome<U> {
    Outcome::Failed { failure, body_done }
}

/// A malformed upstream response before anything reached the client: 502 `bad_response`.
pub(crate) fn bad_response<U>(body_done: bool) -> Outcome<U> {
    failed(
        Failure::Upstream(UpstreamError::new(UpstreamErrorKind::BadResponse)),
        body_done,
    )
}

/// `edge_upstream_connections{state="active"}` for the duration of one exchange.
struct ActiveGauge<'a>(&'a LocalGauge);

impl<'a> ActiveGauge<'a> {
    fn new(g: &'a LocalGauge) -> Self {
        g.increment(1.0);
        ActiveGauge(g)
    }
}

impl Drop for ActiveGauge<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

impl Worker {
    /// The client `send` deadline.
    pub fn send_timeout(&self) -> Duration {
        self.current().cfg.config.server.timeouts.send.0
    }
}
