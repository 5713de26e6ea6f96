//! One exchange with the upstream, streamed both ways: the request head is rewritten and sent together with
//! whatever body bytes already arrived, the rest of the body is streamed as it arrives (never buffered
//! whole), the response head is read under `request_timeout` and the zombie threshold, and the response
//! body is streamed back with the client's `send` deadline on every write.
//!
//! Deadlines (DESIGN.md "Inbound deadlines", "Zombie detection"): the client `request` deadline bounds
//! reading the body; `write_timeout` bounds each write upstream; `request_timeout` runs from the last
//! request byte written to the response head; upstream inactivity past the zombie threshold ends the
//! exchange with 504 (or a truncated response once the head is out). Time spent blocked writing to a slow
//! client does not count as upstream inactivity.
//!
//! Retries (at most one): a reused pooled connection that fails before any response byte, for an
//! idempotent request whose body was sent whole with the head (or not sent at all yet, while waiting for
//! `100 Continue`), is retried on a fresh connection.
//!
//! Interim responses (RFC 9110 §15.2): 1xx heads other than 101 are forwarded to an HTTP/1.1 client as
//! they arrive (after the request body phase when they arrive during it), never to an HTTP/1.0 client;
//! at most one `100 Continue` reaches the client.
//!
//! `Expect: 100-continue` (RFC 9110 §10.1.1) is forwarded. When the client waits for the go-ahead (no body
//! byte arrived with the head), edge holds the body until the upstream answers: a 100 is relayed and the
//! body streamed; a final status is relayed without sending the body, the upstream connection is not
//! reused and the client connection closes (`Connection: close`, lingering close); after
//! [`CONTINUE_WAIT`] of silence edge sends its own `100 Continue` and streams the body.
//!
//! Upgrade (RFC 9110 §7.8): a `101` is accepted only for a request that asked for an upgrade (see
//! `RequestInfo::upgrade`) and whose body was sent whole; the exchange then ends with
//! [`Outcome::Upgraded`] and the caller runs the byte tunnel ([`crate::tunnel`]). Any other 101 is 502.

use std::time::Duration;

use edge_core::{
    buf::{RecvBuf, SendBuf, LARGE_BUF_SIZE},
    http::{
        framing::{keep_alive_timeout, response_body, response_keeps_alive, Body, RequestInfo},
        head::{parse_response, Fields, RequestHead, ResponseHead},
    },
    metrics::InboundPhase,
};
use edge_upstream::{zombie, Upstream, UpstreamConn, UpstreamError, UpstreamErrorKind};
use monoio::{
    io::{AsyncWriteRentExt, Canceller},
    net::{tcp::TcpOwnedWriteHalf, TcpStream},
    time::{timeout, timeout_at, Instant},
};

use crate::{
    forward::{self, OutFraming, RequestRewrite},
    relay::{BadBody, RequestBody, ResponseBody},
    respond::{within_send, Failure, SendFailure},
    worker::Worker,
};

/// Longest upstream response head edge reads, bytes.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// How long edge holds a request body waiting for the upstream's answer to `Expect: 100-continue` before
/// it sends its own `100 Continue` and the body anyway. One second, like curl's default: an origin that
/// ignores Expect (RFC 9110 §10.1.1 allows it; HTTP/1.0 origins do) costs at most this much.
pub const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// What the caller knows about the request.
pub struct Request<'a> {
    /// Framing and connection semantics of the request.
    pub info: RequestInfo,
    /// The parsed head (offsets into the connection's receive buffer).
    pub head: &'a RequestHead,
    /// HEAD request: the response has no body.
    pub is_head: bool,
    /// Idempotent method (RFC 9110 §9.2.2): may be retried.
    pub idempotent: bool,
    /// The configuration the request started on (it finishes on it across a reload).
    pub cfg: &'a edge_core::config::Resolved,
    /// The upstream chosen by the route.
    pub upstream: &'a Upstream,
    /// `request_timeout` for this route (`None` = unlimited).
    pub request_timeout: Option<Duration>,
    /// The client's `request` deadline (head and body).
    pub deadline: Instant,
    /// Edge will close the client connection after this response.
    pub close: bool,
    /// The request id to forward.
    pub id: &'a [u8],
}

/// How the exchange ended.
pub enum Outcome {
    /// The response was delivered whole; `keep` says whether the client connection may serve another request.
    Done {
        /// Status sent.
        status: u16,
        /// Connection reusable.
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
    /// The response head was sent and the exchange then failed: the response is cut short, the connection
    /// closes (already counted and logged here).
    Truncated {
        /// Status that was sent.
        status: u16,
    },
    /// The client went away (closed, reset, or stopped reading past `send`); already counted and logged.
    ClientGone,
    /// The upstream answered `101 Switching Protocols` to an upgrade request and the 101 head reached the
    /// client: the caller tunnels bytes between the two connections ([`crate::tunnel::run`]). Bytes the
    /// upstream sent after its head are still in `conn.buf`; the client's are in its receive buffer.
    Upgraded {
        /// The upstream connection, never pooled again.
        conn: UpstreamConn,
    },
}

/// Interim responses on their way to the client (RFC 9110 §15.2).
struct Interim {
    /// HTTP/1.0 client: interim responses are dropped (a server must not send it a 1xx).
    client_10: bool,
    /// A `100 Continue` reached the client (the upstream's or edge's own): later ones are dropped.
    sent_100: bool,
}

/// An interim response edge forwards: 1xx other than 101 (which ends HTTP/1.1 on the connection).
fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// Upstream activity clock for the zombie rule.
struct Activity {
    last_sent: Instant,
    last_received: Option<Instant>,
    counts_received: bool,
    threshold: Duration,
}

impl Activity {
    fn deadline(&self) -> Instant {
        let reference = match (self.counts_received, self.last_received) {
            (true, Some(r)) if r > self.last_sent => r,
            _ => self.last_sent,
        };
        reference + self.threshold
    }

    /// Shifts the clock by time spent waiting on the client (it does not count as upstream inactivity).
    fn pause(&mut self, d: Duration) {
        self.last_sent += d;
        if let Some(r) = &mut self.last_received {
            *r += d;
        }
    }
}

/// Runs the exchange. `rb` starts with the request head; `fields` are its fields (reused afterwards for
/// the response head).
pub async fn exchange(
    w: &Worker,
    client: &mut TcpStream,
    rb: &mut RecvBuf,
    fields: &mut Fields,
    peer: std::net::IpAddr,
    req: Request<'_>,
) -> Outcome {
    let up = req.upstream;
    let limits = &req.cfg.config.server.limits;
    let max_body = limits.max_body_bytes.0.unwrap_or(u64::MAX);
    let mut out = SendBuf::take();
    {
        let trusted = req.cfg.trusted_proxies.iter().any(|c| c.contains(peer));
        let rw = RequestRewrite {
            peer,
            trusted,
            id: req.id,
            body: req.info.body,
            upgrade: req.info.upgrade,
            max_forwards: req.info.max_forwards,
        };
        forward::request_head(&mut out.0, rb.data(), req.head, fields, &rw);
    }
    rb.consume(req.head.len);

    // Body bytes that arrived with the head go out in the same write.
    let head_len = out.0.len();
    let mut body = RequestBody::new(req.info.body, max_body);
    if let Err(f) = body.take_available(rb, &mut out.0) {
        return Outcome::Failed {
            failure: f,
            body_done: false,
        };
    }
    let sent_whole = body.done();
    // The client waits for a go-ahead before its body (RFC 9110 §10.1.1): so does edge, for the upstream's.
    let wait_continue =
        req.info.expect_continue && req.head.minor == 1 && !sent_whole && out.0.len() == head_len;
    let mut interim = Interim {
        client_10: req.head.minor == 0,
        sent_100: false,
    };

    let cfg = &up.config;
    let threshold = zombie::threshold(
        cfg.max_inactive.0,
        cfg.max_inactive_cap.0,
        req.request_timeout,
    );
    let mut attempt = 0;
    // The upstream answered before the whole request body was sent: the response is relayed, then both
    // connections close (the upstream's is mid-request; the client's has unread body).
    let mut early = false;
    let _active = ActiveGauge::new(&w.metrics.upstream_active);
    let (mut conn, head, mut act) = loop {
        let co = match up.checkout(attempt > 0).await {
            Ok(c) => c,
            Err(e) => {
                return Outcome::Failed {
                    failure: Failure::Upstream(e),
                    body_done: sent_whole,
                }
            }
        };
        if co.retried {
            w.metrics.upstream_retries.increment(1);
        }
        w.metrics.upstream_requests.increment(1);
        let mut conn = co.conn;
        // Everything sent so far is in `out` (the body is whole in it, or not started): it can be replayed.
        let retryable =
            conn.reused && req.idempotent && (sent_whole || wait_continue) && attempt == 0;
        match send_upstream(&mut conn, &mut out.0, cfg.write_timeout.0).await {
            Ok(()) => {}
            Err(e) if retryable && e.kind != UpstreamErrorKind::WriteTimeout => {
                attempt += 1;
                w.metrics.upstream_retries.increment(1);
                continue;
            }
            Err(e) => {
                return Outcome::Failed {
                    failure: Failure::Upstream(e),
                    body_done: sent_whole,
                }
            }
        }
        let mut stream_body = !sent_whole;
        if wait_continue {
            match await_continue(w, client, &mut conn, fields, &mut interim).await {
                Ok(ContinueEnd::SendBody) => {}
                Ok(ContinueEnd::Final) => {
                    early = true;
                    stream_body = false;
                }
                Err(ContinueFailure::Client(e)) => return client_gone(w, e),
                Err(ContinueFailure::Upstream(e)) if retryable && e.retry_safe => {
                    attempt += 1;
                    w.metrics.upstream_retries.increment(1);
                    continue;
                }
                Err(ContinueFailure::Upstream(e)) => {
                    return Outcome::Failed {
                        failure: Failure::Upstream(e),
                        body_done: false,
                    }
                }
            }
        }
        if stream_body {
            let (c, sent) = send_body_watching_response(
                w,
                client,
                rb,
                conn,
                fields,
                &mut body,
                cfg.write_timeout.0,
                req.deadline,
            )
            .await;
            conn = c;
            match sent {
                Ok(BodyEnd::Sent) => {}
                Ok(BodyEnd::Early) => early = true,
                Err(BodyFailure::Client(f)) => {
                    return Outcome::Failed {
                        failure: f,
                        body_done: false,
                    }
                }
                Err(BodyFailure::ClientGone) => return Outcome::ClientGone,
                Err(BodyFailure::Upstream(e)) => {
                    return Outcome::Failed {
                        failure: Failure::Upstream(e),
                        body_done: false,
                    }
                }
            }
        }
        let now = Instant::now();
        let mut act = Activity {
            last_sent: now,
            // Response bytes already buffered (an early answer) make a failure unsafe to retry.
            last_received: (!conn.buf.is_empty()).then_some(now),
            counts_received: cfg.zombie_counts_received,
            threshold,
        };
        let head_deadline = req.request_timeout.map(|t| act.last_sent + t);
        let read = loop {
            match read_response_head(&mut conn, fields, &mut act, head_deadline).await {
                Ok(h) if is_interim(h.status) => {
                    let started = Instant::now();
                    let sent =
                        forward_interim(w, client, &mut conn.buf, &h, fields, &mut interim).await;
                    if let Err(e) = sent {
                        return client_gone(w, e);
                    }
                    act.pause(started.elapsed());
                }
                r => break r,
            }
        };
        match read {
            Ok(head) => break (conn, head, act),
            Err(e) if retryable && !stream_body && e.retry_safe => {
                attempt += 1;
                w.metrics.upstream_retries.increment(1);
                continue;
            }
            Err(e) => {
                if e.kind == UpstreamErrorKind::Zombie {
                    log_zombie(w, &conn, up, &act, req.request_timeout);
                }
                // After an early answer the client's body was not read: the connection must close.
                return Outcome::Failed {
                    failure: Failure::Upstream(e),
                    body_done: !early,
                };
            }
        }
    };

    let bad_response = Outcome::Failed {
        failure: Failure::Upstream(UpstreamError::new(UpstreamErrorKind::BadResponse)),
        body_done: !early,
    };
    let status = head.status;
    if status == 101 {
        // A switch needs a request that asked for it (edge forwards Upgrade only then) and whose body
        // went out whole: bytes after it belong to the new protocol.
        if !req.info.upgrade || early {
            return bad_response;
        }
        out.0.clear();
        forward::switching_head(&mut out.0, conn.buf.data(), &head, fields);
        conn.buf.consume(head.len);
        if let Err(e) = flush_client(client, &mut out, w.send_timeout()).await {
            return client_gone(w, e);
        }
        return Outcome::Upgraded { conn };
    }

    // Response head: decide framing both ways, rewrite, send with the first body bytes.
    let ubuf = conn.buf.data();
    let upstream_body = match response_body(ubuf, &head, fields, req.is_head) {
        Ok(b) => b,
        Err(_) => return bad_response,
    };
    let client_10 = req.head.minor == 0;
    let framing = match (upstream_body, client_10) {
        (Body::None, _) => OutFraming::None,
        (Body::Length(n), _) => OutFraming::Length(n),
        (Body::Chunked | Body::CloseDelimited, false) => OutFraming::Chunked,
        (Body::Chunked | Body::CloseDelimited, true) => OutFraming::Close,
    };
    // Draining may have started while the upstream worked on this request.
    let close = req.close
        || early
        || framing == OutFraming::Close
        || w.shared.draining.load(std::sync::atomic::Ordering::Relaxed);
    let reusable = !early
        && response_keeps_alive(ubuf, &head, fields)
        && upstream_body != Body::CloseDelimited;
    let ka = keep_alive_timeout(ubuf, fields);
    out.0.clear();
    forward::response_head(
        &mut out.0,
        ubuf,
        &head,
        fields,
        framing,
        close,
        client_10 && !close,
    );
    conn.buf.consume(head.len);

    let mut relay = ResponseBody::new(upstream_body, framing);
    // Body bytes that came with the head (the head is read into a 64 KiB buffer, so a 16 KiB response
    // usually arrives whole in one read) go out in the head's write, in a pooled large buffer when they
    // do not fit the small one: one send per response. When even that would not hold them, pass-through
    // bytes are written from the receive buffer instead of copied (a second send). Either way they are
    // scanned before the head goes, so malformed framing there is still a 502.
    let inline = !relay.passthrough() || out.0.len() + conn.buf.len() <= LARGE_BUF_SIZE;
    if inline {
        out.reserve_pooled(conn.buf.len());
    }
    let first = match inline {
        true => relay
            .take_available(&mut conn.buf, &mut out.0)
            .map(|c| (c, 0)),
        false => relay.scan(conn.buf.data()).map(|n| (relay.done(), n)),
    };
    let Ok((complete, direct)) = first else {
        return bad_response;
    };
    let write_started = Instant::now();
    if let Err(e) = flush_client(client, &mut out, w.send_timeout()).await {
        return client_gone(w, e);
    }
    if direct > 0 {
        if let Err(e) = within_send(w.send_timeout(), conn.buf.write_prefix(client, direct)).await {
            return client_gone(w, e);
        }
    }
    act.pause(write_started.elapsed());
    let mut complete = complete;
    while !complete {
        // Pass-through bodies read up to 64 KiB at a time (one read and one write per 64 KiB); re-framed
        // ones 16 KiB, so what they build in `out` stays within a pooled buffer.
        let read = async {
            match relay.passthrough() {
                true => conn.buf.fill_large(&mut conn.stream).await,
                false => conn.buf.fill(&mut conn.stream).await,
            }
        };
        let r = match timeout_at(act.deadline(), read).await {
            Err(_) => {
                w.metrics
                    .upstream_timeout(edge_core::metrics::UpstreamPhase::Zombie)
                    .increment(1);
                log_zombie(w, &conn, up, &act, req.request_timeout);
                return truncated(w, status, "upstream connection went silent (zombie)");
            }
            Ok(r) => r,
        };
        match r {
            Ok(0) if upstream_body == Body::CloseDelimited => {
                relay.finish(&mut out.0);
                complete = true;
            }
            Ok(0) => {
                return upstream_failed_mid_body(
                    w,
                    status,
                    edge_core::metrics::UpstreamErrorKind::ClosedEarly,
                    "upstream closed before the end of the body",
                );
            }
            Err(_) => {
                return upstream_failed_mid_body(
                    w,
                    status,
                    edge_core::metrics::UpstreamErrorKind::Reset,
                    "upstream reset during the body",
                );
            }
            Ok(_) => {
                act.last_received = Some(Instant::now());
                let started = Instant::now();
                let res = if relay.passthrough() {
                    let n = match relay.scan(conn.buf.data()) {
                        Ok(n) => n,
                        Err(BadBody) => return bad_body(w, status),
                    };
                    complete = relay.done();
                    within_send(w.send_timeout(), conn.buf.write_prefix(client, n)).await
                } else {
                    match relay.take_available(&mut conn.buf, &mut out.0) {
                        Ok(c) => complete = c,
                        Err(BadBody) => return bad_body(w, status),
                    }
                    flush_client(client, &mut out, w.send_timeout()).await
                };
                if let Err(e) = res {
                    return client_gone(w, e);
                }
                act.pause(started.elapsed());
            }
        }
    }
    if complete && !out.0.is_empty() {
        if let Err(e) = flush_client(client, &mut out, w.send_timeout()).await {
            return client_gone(w, e);
        }
    }
    if reusable && conn.buf.is_empty() {
        up.checkin(conn, ka);
    }
    Outcome::Done {
        status,
        keep: !close,
        unread_body: early,
    }
}

/// `edge_upstream_connections{state="active"}` for the duration of one exchange.
struct ActiveGauge<'a>(&'a metrics::Gauge);

impl<'a> ActiveGauge<'a> {
    fn new(g: &'a metrics::Gauge) -> Self {
        g.increment(1.0);
        ActiveGauge(g)
    }
}

impl Drop for ActiveGauge<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

async fn flush_client(
    client: &mut TcpStream,
    out: &mut SendBuf,
    send: Duration,
) -> Result<(), SendFailure> {
    within_send(send, out.flush(client)).await
}

/// Malformed chunked framing in the upstream's body after the head went out: counted and truncated.
fn bad_body(w: &Worker, status: u16) -> Outcome {
    upstream_failed_mid_body(
        w,
        status,
        edge_core::metrics::UpstreamErrorKind::BadResponse,
        "malformed chunked body from upstream",
    )
}

/// The upstream failed after the response head went out: `edge_upstream_errors_total{kind}` with its
/// `upstream.error` line, and the truncation with its `response.truncated` line (each counter moved has
/// its log line, DESIGN.md "Status codes").
fn upstream_failed_mid_body(
    w: &Worker,
    status: u16,
    kind: edge_core::metrics::UpstreamErrorKind,
    cause: &'static str,
) -> Outcome {
    w.metrics.upstream_error(kind).increment(1);
    if w.log_limit.allow() {
        tracing::warn!(
            event = "upstream.error",
            worker = w.id,
            status,
            kind = kind.as_str(),
            cause
        );
    }
    truncated(w, status, cause)
}

fn client_gone(w: &Worker, e: SendFailure) -> Outcome {
    match e {
        SendFailure::Timeout => {
            w.metrics.inbound_timeout(InboundPhase::Send).increment(1);
            w.metrics.truncated.increment(1);
            if w.log_limit.allow() {
                tracing::warn!(
                    event = "response.truncated",
                    worker = w.id,
                    cause = "client stopped reading (send deadline)"
                );
            }
        }
        SendFailure::Closed => {
            tracing::debug!(
                event = "response.undelivered",
                worker = w.id,
                cause = "client closed the connection"
            );
        }
    }
    Outcome::ClientGone
}

fn truncated(w: &Worker, status: u16, cause: &'static str) -> Outcome {
    w.metrics.truncated.increment(1);
    if w.log_limit.allow() {
        tracing::warn!(event = "response.truncated", worker = w.id, status, cause);
    }
    Outcome::Truncated { status }
}

fn log_zombie(
    w: &Worker,
    conn: &UpstreamConn,
    up: &Upstream,
    act: &Activity,
    rt: Option<Duration>,
) {
    let now = Instant::now();
    tracing::warn!(
        event = "upstream.zombie",
        worker = w.id,
        endpoint = %up.endpoints[conn.endpoint].addr,
        inactive_duration_threshold_ms = act.threshold.as_millis() as u64,
        last_request_sent_at = format!("{}ms ago", now.saturating_duration_since(act.last_sent).as_millis()),
        last_received_at = act.last_received.map_or("never".to_string(), |r| format!("{}ms ago", now.saturating_duration_since(r).as_millis())),
        max_request_timeout_ms = rt.map_or(-1, |d| d.as_millis() as i64),
    );
}

/// Sends the buffered head (and body prefix) upstream under `write_timeout`; `out` keeps its bytes so a
/// retry can send them again.
async fn send_upstream(
    conn: &mut UpstreamConn,
    out: &mut Vec<u8>,
    write_timeout: Duration,
) -> Result<(), UpstreamError> {
    let bytes = std::mem::take(out);
    match timeout(write_timeout, conn.stream.write_all(bytes)).await {
        Ok((Ok(_), b)) => {
            *out = b;
            Ok(())
        }
        Ok((Err(e), b)) => {
            *out = b;
            let mut err = UpstreamError::from_io(&e);
            err.retry_safe = true;
            Err(err)
        }
        Err(_) => Err(UpstreamError::new(UpstreamErrorKind::WriteTimeout)),
    }
}

enum BodyFailure {
    Client(Failure),
    ClientGone,
    Upstream(UpstreamError),
}

/// How the request-body phase ended.
enum BodyEnd {
    /// The whole body was sent.
    Sent,
    /// The upstream started its response before the whole body was sent (e.g. a 413 or 401 without
    /// reading the upload): sending stops, the response bytes are in the connection's buffer.
    Early,
}

/// Streams the rest of the request body upstream while watching the upstream for an early response.
/// The socket is split into halves for this phase (one `Rc` per request whose body outlives its first
/// read); interim 1xx responses that arrive meanwhile stay buffered (the response-head read forwards them
/// once the body is sent) and sending goes on.
///
/// # Cancel safety
/// The response watch is a cancelable read: when the body finishes first it is cancelled and awaited, so
/// response bytes that won the race stay in the buffer. When the response wins, the body future is
/// dropped: the client's connection then closes and the upstream's is not reused, so bytes it held do
/// not matter.
#[allow(clippy::too_many_arguments)]
async fn send_body_watching_response(
    w: &Worker,
    client: &mut TcpStream,
    rb: &mut RecvBuf,
    conn: UpstreamConn,
    fields: &mut Fields,
    body: &mut RequestBody,
    write_timeout: Duration,
    deadline: Instant,
) -> (UpstreamConn, Result<BodyEnd, BodyFailure>) {
    use std::{future::Future, pin::pin, task::Poll};
    enum First {
        Sent(Result<(), BodyFailure>),
        Received(std::io::Result<usize>),
    }
    let (stream, mut parts) = conn.into_parts();
    let (mut rd, mut wr) = monoio::io::Splitable::into_split(stream);
    let end = {
        let mut send = pin!(stream_request_body(
            w,
            client,
            rb,
            &mut wr,
            body,
            write_timeout,
            deadline
        ));
        loop {
            let canceller = monoio::io::Canceller::new();
            let first = {
                let mut watch = pin!(parts.buf.fill_cancelable(&mut rd, canceller.handle()));
                let first = std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = send.as_mut().poll(cx) {
                        return Poll::Ready(First::Sent(r));
                    }
                    watch.as_mut().poll(cx).map(First::Received)
                })
                .await;
                if matches!(first, First::Sent(_)) {
                    canceller.cancel();
                    // Bytes that won the race stay buffered; ECANCELED or EOF show up again on the
                    // response-head read.
                    let _ = watch.await;
                }
                first
            };
            match first {
                First::Sent(r) => break r.map(|()| BodyEnd::Sent),
                First::Received(Ok(0)) => {
                    break Err(BodyFailure::Upstream(UpstreamError::new(
                        UpstreamErrorKind::ClosedEarly,
                    )))
                }
                First::Received(Err(e)) => {
                    break Err(BodyFailure::Upstream(UpstreamError::from_io(&e)))
                }
                First::Received(Ok(_)) if only_interim(&parts.buf, fields) => continue,
                First::Received(Ok(_)) => break Ok(BodyEnd::Early),
            }
        }
    };
    let stream = rd
        .reunite(wr)
        .unwrap_or_else(|_| unreachable!("both halves come from one stream"));
    (parts.join(stream), end)
}

/// Whether `buf` holds nothing but complete interim (1xx other than 101) response heads, within
/// [`MAX_RESPONSE_HEAD`] (a partial head counts as the response having started).
fn only_interim(buf: &RecvBuf, fields: &mut Fields) -> bool {
    let data = buf.data();
    if data.len() > MAX_RESPONSE_HEAD {
        return false;
    }
    let mut at = 0;
    while at < data.len() {
        match parse_response(&data[at..], fields) {
            Ok(Some(h)) if is_interim(h.status) => at += h.len,
            _ => return false,
        }
    }
    true
}

/// Consumes the interim head `h` at the start of `buf` and forwards it to the client, except to an
/// HTTP/1.0 client and except a second `100 Continue`.
///
/// # Errors
/// The client could not be written to within `send`.
async fn forward_interim(
    w: &Worker,
    client: &mut TcpStream,
    buf: &mut RecvBuf,
    h: &ResponseHead,
    fields: &Fields,
    st: &mut Interim,
) -> Result<(), SendFailure> {
    if st.client_10 || (h.status == 100 && st.sent_100) {
        buf.consume(h.len);
        return Ok(());
    }
    let mut out = SendBuf::take();
    forward::interim_head(&mut out.0, buf.data(), h, fields);
    buf.consume(h.len);
    st.sent_100 |= h.status == 100;
    within_send(w.send_timeout(), out.flush(client)).await
}

/// How waiting for the upstream's answer to `Expect: 100-continue` ended.
enum ContinueEnd {
    /// The upstream said 100 (relayed), or stayed silent for [`CONTINUE_WAIT`] (edge sent its own 100):
    /// send the body.
    SendBody,
    /// The upstream's response (a final status, or a head judged by the response-head read) is buffered:
    /// the body is not sent.
    Final,
}

enum ContinueFailure {
    Client(SendFailure),
    Upstream(UpstreamError),
}

/// Waits (at most [`CONTINUE_WAIT`]) for the upstream's answer to a request head sent with
/// `Expect: 100-continue`, relaying interim responses as they come.
///
/// # Cancel safety
/// The read is cancelled at the deadline and awaited, so bytes that won the race stay buffered.
async fn await_continue(
    w: &Worker,
    client: &mut TcpStream,
    conn: &mut UpstreamConn,
    fields: &mut Fields,
    st: &mut Interim,
) -> Result<ContinueEnd, ContinueFailure> {
    let until = Instant::now() + CONTINUE_WAIT;
    let mut received = false;
    loop {
        loop {
            match parse_response(conn.buf.data(), fields) {
                Ok(Some(h)) if is_interim(h.status) => {
                    forward_interim(w, client, &mut conn.buf, &h, fields, st)
                        .await
                        .map_err(ContinueFailure::Client)?;
                    if h.status == 100 {
                        return Ok(ContinueEnd::SendBody);
                    }
                }
                Ok(None) if conn.buf.len() < MAX_RESPONSE_HEAD => break,
                _ => return Ok(ContinueEnd::Final),
            }
        }
        let canceller = Canceller::new();
        let r = {
            let mut read = std::pin::pin!(conn
                .buf
                .fill_cancelable(&mut conn.stream, canceller.handle()));
            match timeout_at(until, read.as_mut()).await {
                Ok(r) => r,
                Err(_) => {
                    canceller.cancel();
                    read.await
                }
            }
        };
        let failed = |mut e: UpstreamError| {
            e.retry_safe = !received;
            ContinueFailure::Upstream(e)
        };
        match r {
            Ok(0) => return Err(failed(UpstreamError::new(UpstreamErrorKind::ClosedEarly))),
            Ok(_) => received = true,
            Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => {
                if !conn.buf.is_empty() {
                    // Part of a head at the deadline: the response has begun.
                    return Ok(ContinueEnd::Final);
                }
                // Silence: edge gives the go-ahead itself.
                let write = async {
                    client
                        .write_all(&b"HTTP/1.1 100 Continue\r\n\r\n"[..])
                        .await
                        .0
                };
                within_send(w.send_timeout(), write)
                    .await
                    .map_err(ContinueFailure::Client)?;
                st.sent_100 = true;
                return Ok(ContinueEnd::SendBody);
            }
            Err(e) => return Err(failed(UpstreamError::from_io(&e))),
        }
    }
}

/// Streams the rest of the request body: client reads under the `request` deadline, upstream writes
/// under `write_timeout`.
async fn stream_request_body(
    w: &Worker,
    client: &mut TcpStream,
    rb: &mut RecvBuf,
    upstream: &mut TcpOwnedWriteHalf,
    body: &mut RequestBody,
    write_timeout: Duration,
    deadline: Instant,
) -> Result<(), BodyFailure> {
    while !body.done() {
        if rb.is_empty() {
            match timeout_at(deadline, rb.fill_large(client)).await {
                Err(_) => return Err(BodyFailure::Client(Failure::RequestTimeout)),
                Ok(Ok(0)) | Ok(Err(_)) => {
                    tracing::debug!(
                        event = "request.aborted",
                        worker = w.id,
                        cause = "client closed during the request body"
                    );
                    return Err(BodyFailure::ClientGone);
                }
                Ok(Ok(_)) => {}
            }
        }
        let n = body.scan(rb.data()).map_err(BodyFailure::Client)?;
        match timeout(write_timeout, rb.write_prefix(upstream, n)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(BodyFailure::Upstream(UpstreamError::from_io(&e))),
            Err(_) => {
                return Err(BodyFailure::Upstream(UpstreamError::new(
                    UpstreamErrorKind::WriteTimeout,
                )))
            }
        }
    }
    Ok(())
}

/// Reads until a complete response head (interim or final) is buffered at the start of `conn.buf`, with
/// its fields in `fields`. A failure is safe to retry only while no response byte arrived in this attempt
/// (`act.last_received`).
async fn read_response_head(
    conn: &mut UpstreamConn,
    fields: &mut Fields,
    act: &mut Activity,
    head_deadline: Option<Instant>,
) -> Result<ResponseHead, UpstreamError> {
    loop {
        let received_any = act.last_received.is_some();
        match parse_response(conn.buf.data(), fields) {
            Ok(Some(h)) => return Ok(h),
            Ok(None) if conn.buf.len() < MAX_RESPONSE_HEAD => {}
            Ok(None) | Err(_) => return Err(UpstreamError::new(UpstreamErrorKind::BadResponse)),
        }
        let zombie_at = act.deadline();
        let (until, kind) = match head_deadline {
            Some(d) if d <= zombie_at => (d, UpstreamErrorKind::RequestTimeout),
            _ => (zombie_at, UpstreamErrorKind::Zombie),
        };
        // A large buffer: the body bytes behind the head usually come in the same read.
        match timeout_at(until, conn.buf.fill_large(&mut conn.stream)).await {
            Err(_) => return Err(UpstreamError::new(kind)),
            Ok(Ok(0)) => {
                return Err(UpstreamError {
                    kind: UpstreamErrorKind::ClosedEarly,
                    retry_safe: !received_any,
                });
            }
            Ok(Err(e)) => {
                let mut err = UpstreamError::from_io(&e);
                err.retry_safe = !received_any;
                return Err(err);
            }
            Ok(Ok(_)) => act.last_received = Some(Instant::now()),
        }
    }
}

impl Worker {
    /// The client `send` deadline.
    pub fn send_timeout(&self) -> Duration {
        self.current().cfg.config.server.timeouts.send.0
    }
}
