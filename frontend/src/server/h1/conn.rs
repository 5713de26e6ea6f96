//! The per-connection keep-alive loop with inbound deadlines (DESIGN.md "Inbound deadlines"):
//!
//! - `idle`: armed when no request is in progress (before the first byte and between requests); while
//!   idle the connection holds no read buffer (it waits for readability, then takes a pooled buffer);
//! - `request`: armed by a request's first byte, covers head and body, never restarted by a read; a route's
//!   `client_request_timeout` replaces it once the route is known;
//! - `send`: bounds each write to the client.
//!
//! Every timeout closes the connection (after a 408 for `request`), so a dropped in-flight read never
//! loses bytes that matter.

use std::{net::SocketAddr, rc::Rc, sync::atomic::Ordering};

use edge_core::io::Transport;
use edge_core::{
    buf::{RecvBuf, SendBuf},
    http::framing::Body,
    metrics::{Protocol, ShedReason},
    slot::{self, Held},
};
use monoio::time::Instant;

use super::{
    head::{check_head, read_head, HeadRead},
    idle::{fast_wait, read_after_idle, wait_idle, FastWait, Vectors},
    local,
    session::H1Session,
};
use crate::{
    context::Worker,
    log::{RequestLog, UpstreamTag},
    proxy::{self, Outcome},
    request::{self, Admission},
    respond::{self, Failure, SendFailure},
};

/// Longest request-line copy kept for log lines, bytes.
const LOG_LINE_MAX: usize = 256;

/// What happens to the connection after a request.
pub(super) enum Next {
    /// Serve another request.
    Keep,
    /// Close now.
    Close,
    /// Close with a lingering close (there may be unread input).
    Linger,
    /// The upstream switched protocols (101): tunnel bytes, then close.
    Tunnel(proxy::Tunnel),
}

/// Per-connection state reused across its requests.
pub(super) struct Conn<T: Transport> {
    pub(super) stream: T,
    pub(super) peer: SocketAddr,
    /// The connection's local address, when an upstream needs it (`send_proxy_protocol`).
    pub(super) local: Option<SocketAddr>,
    pub(super) rb: RecvBuf,
    /// The request vectors (head fields, log line, request id, path, facts) while requests come.
    pub(super) v: Vectors,
    served: u64,
    /// Cancels the keep-alive fast-path read (see [`super::idle::fast_wait`]); taken from the worker's
    /// spares (or made) by the first fast wait after an idle period and spent when the connection goes
    /// idle again, so an idle connection holds none.
    pub(super) cancel: Option<monoio::io::Canceller>,
    /// A peer outside `proxy_protocol_from` while the PROXY protocol is on: its first request must not
    /// start with a PROXY header (`crate::accept::proxy_protocol::refuse_header`).
    pub(super) refuse_proxy_header: bool,
    /// The connection came over TLS (`X-Forwarded-Proto: https`).
    pub(super) https: bool,
    /// Its last response's relay ended at the full pace: the next starts at
    /// [`edge_core::pace::RelayPace::carried`].
    fast_reader: bool,
}

/// What a connection's active phase (run in its slot) ends with.
enum Step {
    Next(Next),
    /// No request arrived within the fast wait ([`super::idle::fast_wait`]): give the slot and the
    /// read buffer back and wait idle.
    Idle,
}

/// How a downstream connection reached its HTTP/1.1 session.
#[derive(Clone, Copy, Debug)]
pub struct Accepted {
    /// The client's address: the peer's, or the PROXY header's source.
    pub peer: SocketAddr,
    /// Shed (DESIGN.md "Capacity"; `max_connections_per_client`): only the first head is read (under
    /// 1 s): a health probe is answered, anything else gets 503 (`limit`) or 429 (`client_limit`).
    /// A plain connection's client limit is decided here, once the PROXY header told the client; a
    /// TLS connection's before its session was chosen ([`crate::accept::tls`]).
    pub shed: Option<ShedReason>,
    /// The connection's local address, when an upstream needs it (`send_proxy_protocol`).
    pub local: Option<SocketAddr>,
    /// It came over TLS (the handshake is done): `X-Forwarded-Proto: https`.
    pub https: bool,
    /// The PROXY protocol header, when one is expected, was already read (before the TLS handshake).
    pub proxy_header_read: bool,
}

impl Accepted {
    /// A plain connection as accepted, nothing read yet.
    pub fn plain(peer: SocketAddr, local: Option<SocketAddr>, over_capacity: bool) -> Self {
        Accepted {
            peer,
            shed: over_capacity.then_some(ShedReason::Limit),
            local,
            https: false,
            proxy_header_read: false,
        }
    }
}

/// Serves one downstream connection until it closes.
///
/// Memory: while idle the connection holds only this future's own state (the [`Conn`] and the
/// readiness wait, with no timer: the worker's idle sweep ends it at `idle`, `crate::context::idle`); each
/// request runs in a [`Slot`] taken from the worker's free list, kept while requests keep coming (the
/// keep-alive fast path, no allocation per request) and given back when the connection goes idle
/// (`edge_core::slot`). Everything larger that runs once per connection (the h2c sniff, closing) runs in
/// a slot too, so this future stays small (bench/README.md "Idle connections").
pub fn serve<T: Transport>(
    w: Rc<Worker>,
    stream: T,
    accepted: Accepted,
) -> impl std::future::Future<Output = ()> {
    let Accepted {
        peer,
        shed,
        local,
        https,
        proxy_header_read,
    } = accepted;
    let over_capacity = shed.is_some();
    let mut c = Conn {
        stream,
        peer,
        local,
        rb: RecvBuf::new(),
        v: Vectors::default(),
        served: 0,
        cancel: None,
        refuse_proxy_header: false,
        https,
        fast_reader: false,
    };
    // An async block, not an `async fn`: the arguments of an `async fn` stay in its state beside the
    // locals they are moved into, while a block's captures are used in place.
    async move {
        // Counted as HTTP/1 now unless h2c may make it HTTP/2 (then once its first bytes tell).
        let h2c = !https && !over_capacity && w.current().cfg.config.server.h2c;
        if !h2c {
            w.metrics.connection_opened(Protocol::Http1);
        }
        // PROXY protocol: the header comes before anything else; its source is the client from here
        // on. Boxed (one allocation per connection, only when on) so this future stays as small when it
        // is off.
        if let Some(versions) =
            crate::accept::proxy_protocol::expected(&w).filter(|_| !proxy_header_read)
        {
            let (stream, rb) = (&mut c.stream, &mut c.rb);
            let header = crate::accept::proxy_protocol::client_address(
                &w,
                stream,
                rb,
                c.peer,
                versions,
                over_capacity,
            );
            match Box::pin(header).await {
                crate::accept::proxy_protocol::Start::Client(client) => c.peer = client,
                crate::accept::proxy_protocol::Start::Direct => c.refuse_proxy_header = true,
                crate::accept::proxy_protocol::Start::Close => return,
            }
        }
        // The client is known: count it against `max_connections_per_client` (a TLS connection was
        // counted before its handshake's session was chosen). Held to the connection's end.
        // A connection over it is answered in the protocol it speaks: after the h2c sniff.
        let (_client, client_shed) = match shed.is_none() && !https {
            true => crate::accept::clients::enter(&w, c.peer),
            false => (None, None),
        };
        if let Some(reason) = shed {
            // Boxed rather than in a pooled slot: a burst of shed connections would otherwise leave its
            // peak number of slots in the worker's pool until the next trim. (One allocation per
            // connection shed.)
            return Box::pin(local::shed(&w, c, reason)).await;
        }
        let mut held = Held(None);
        if h2c && !slot::run_in(&mut held.0, super::sniff::stays_http1(&w, &mut c)).await {
            held.release();
            // Boxed (one allocation per HTTP/2 connection): inline, the h2 connection's state would
            // make every plain connection's future larger.
            return Box::pin(super::sniff::serve_h2(w, c, client_shed)).await;
        }
        if let Some(reason) = client_shed {
            held.release();
            return Box::pin(local::shed(&w, c, reason)).await;
        }
        loop {
            let mut woke = None;
            if held.0.is_none() && c.rb.is_empty() {
                match wait_idle(&w, &mut c).await {
                    Some(until) => woke = Some(until),
                    None => return slot::run_in(&mut held.0, close(&w, c.stream)).await,
                }
            }
            let next = match slot::run_in(&mut held.0, active(&w, &mut c, woke)).await {
                Step::Idle => {
                    c.rb.release();
                    c.give_vectors();
                    held.release();
                    continue;
                }
                // `active` serves kept-alive requests itself; it never ends with `Keep`.
                Step::Next(Next::Keep) => continue,
                Step::Next(next) => next,
            };
            // Matched in a future of its own, run in the slot: matched here, the `Next` would stay in
            // this future's state beside the idle wait's (bench/README.md "Idle connections").
            return slot::run_in(&mut held.0, end(&w, c, next)).await;
        }
    }
}

/// The connection's last phase after its requests: close, linger, or a tunnel. (`Keep` never gets
/// here; it closes.)
async fn end<T: Transport>(w: &Worker, c: Conn<T>, next: Next) {
    match next {
        Next::Keep | Next::Close => close(w, c.stream).await,
        Next::Linger => crate::server::h1::linger::linger_close(c.stream).await,
        Next::Tunnel(up) => proxy::tunnel::tunnel(w, c.stream, c.rb, up).await,
    }
}

/// Closes the connection; a transport that announces its close (TLS: close_notify) does so first,
/// within the `send` deadline.
pub(super) async fn close<T: Transport>(w: &Worker, mut stream: T) {
    if stream.announces_close() {
        let _ = edge_core::clock::timeout(
            w.send_timeout(),
            monoio::io::AsyncWriteRent::shutdown(&mut stream),
        )
        .await;
    }
}

/// The active phase, run in the connection's slot: after an idle wait (`woke`: its `idle` deadline) the
/// read of the bytes that made the connection readable; then requests for as long as they keep coming,
/// each after a short read for it when nothing is buffered (a keep-alive client usually sends its next
/// request within a round trip: one read instead of a readiness wait plus a read). It ends when that
/// read finds nothing ([`Step::Idle`]) or a request ends the connection.
///
/// Looping here rather than in [`serve`] writes this future (about 4 KiB) into the slot once per busy
/// period instead of once per request (bench/README.md "Per-request user time").
async fn active<T: Transport>(w: &Worker, c: &mut Conn<T>, woke: Option<Instant>) -> Step {
    if let Some(until) = woke {
        if !read_after_idle(w, c, until).await {
            return Step::Next(Next::Close);
        }
    }
    loop {
        if c.rb.is_empty() {
            match fast_wait(c).await {
                FastWait::Data => {}
                FastWait::Closed(why) => {
                    tracing::debug!(event = "connection.closed", worker = w.id, peer = %c.peer, why, "while idle");
                    return Step::Next(Next::Close);
                }
                FastWait::Idle => return Step::Idle,
            }
        }
        let next = request(w, c).await;
        if let Some(f) = c.v.get().facts.as_mut() {
            // The connection must not keep the request's configuration snapshot alive (a reload
            // frees the old one once its requests end).
            f.live = None;
        }
        match next {
            Next::Keep => {}
            next => return Step::Next(next),
        }
    }
}

/// Reads one request, admits it ([`request::admit`]) and answers or forwards it.
async fn request<T: Transport>(w: &Worker, c: &mut Conn<T>) -> Next {
    let started = Instant::now();
    // The connection's request vectors, from the worker's spares when it holds none.
    let v = c.v.get();
    v.log_line.clear();
    v.log_id.clear();
    v.facts.get_or_insert_with(Box::default).clear();
    // The configuration this request runs on to its end, even across a reload.
    let live = w.live();
    let server = &live.cfg.config.server;
    let deadline = started + server.timeouts.request.0;
    let head = match read_head(w, c, &server.limits, deadline).await {
        Ok(HeadRead::Head(h)) => h,
        Ok(HeadRead::Nothing) => return Next::Close,
        Ok(HeadRead::Left) => {
            left_mid_head(w, c, started);
            return Next::Close;
        }
        Err(f) => return fail(w, c, f, started).await,
    };
    let buf = c.rb.data();
    c.v.get().log_line.extend_from_slice(
        &buf[head.method.start..head.target.end.min(head.method.start + LOG_LINE_MAX)],
    );
    // A gRPC call gets gRPC answers from here on, to a head that fails its checks too.
    let v = c.v.get();
    if let Some(facts) = v.facts.as_mut() {
        facts.grpc = request::grpc::is_call(buf, &v.fields);
    }
    let info = match check_head(buf, &head, &v.fields, &server.limits) {
        Ok(i) => i,
        Err(f) => return fail(w, c, f, started).await,
    };
    c.served += 1;
    let draining = w.shared.draining.load(Ordering::Relaxed);
    let close = info.close || draining || c.served >= server.max_requests_per_connection;
    let is_head = &buf[head.method.clone()] == b"HEAD";
    let incoming = request::Incoming {
        buf,
        head: &head,
        fields: &v.fields,
        info,
        peer: c.peer,
        local: c.local,
        https: c.https,
        shed: None,
        close,
        started,
    };
    let facts = v.facts.get_or_insert_with(Box::default);
    let (line, id, path) = (&v.log_line, &mut v.log_id, &mut v.path);
    let req = match request::admit(w, &live, &incoming, line, id, path, facts) {
        Admission::Forward(req) => req,
        Admission::Local(local) => {
            let body = info.body;
            return local::answer(w, c, head.len, body, &local, is_head, close, started).await;
        }
        Admission::Refused(f) => {
            c.rb.consume(head.len);
            return fail_after_head(w, c, f, info.body, deadline, started).await;
        }
    };
    let limits = (server.limits.max_body_bytes.0, server.timeouts.send.0);
    w.metrics.in_flight.increment(1.0);
    let mut session = H1Session::new(
        &mut c.stream,
        &mut c.rb,
        &mut v.fields,
        &head,
        info,
        limits.0.unwrap_or(u64::MAX),
        limits.1,
        req.client_deadline,
        w.id,
    )
    .adding(req.response)
    .pacing(c.fast_reader);
    // The upstream's index, not a reference: the admitted request also borrows this connection's log
    // buffers, which the answer after the exchange needs mutably.
    let upstream = req.upstream_index;
    // Likewise where the route's response rules are in the connection's path buffer, for an error
    // answer.
    let rules = req.rewrite.response_span;
    let outcome = proxy::run(w, &mut session, req).await;
    c.fast_reader = session.fast_reader();
    drop(session);
    w.metrics.in_flight.decrement(1.0);
    let tag = live.upstreams.get(upstream).map(UpstreamTag::of);
    let exchange = Exchanged {
        upstream: tag,
        rules,
    };
    conclude(w, c, outcome, close, started, exchange).await
}

/// What the answer after an exchange needs of it: the upstream (for counters and log lines) and
/// where the route's `response_headers` lines are in the connection's path buffer.
struct Exchanged<'a> {
    upstream: Option<UpstreamTag<'a>>,
    rules: (usize, usize),
}

/// Counts the exchange's end and decides the connection's fate; a failure before the response head is
/// answered here.
async fn conclude<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    outcome: Outcome,
    close: bool,
    started: Instant,
    exchange: Exchanged<'_>,
) -> Next {
    match outcome {
        Outcome::Done {
            status,
            keep,
            unread_body,
        } => {
            finish(w, c, status, started);
            match (keep, unread_body) {
                (true, _) => Next::Keep,
                (false, false) => Next::Close,
                (false, true) => Next::Linger,
            }
        }
        Outcome::Truncated { status } => {
            finish(w, c, status, started);
            Next::Close
        }
        Outcome::ClientGone { status, closed } => {
            finish(
                w,
                c,
                crate::respond::client_left(w, status, closed),
                started,
            );
            Next::Close
        }
        Outcome::Upgraded { tunnel } => {
            finish(w, c, 101, started);
            Next::Tunnel(tunnel)
        }
        Outcome::Failed { failure, body_done } => {
            let close = !body_done || close;
            record_and_answer(w, c, failure, close, started, exchange).await
        }
    }
}

/// Counts a finished request and logs it ([`crate::log::finish_request`]).
pub(super) fn finish<T: Transport>(w: &Worker, c: &Conn<T>, status: u16, started: Instant) {
    crate::log::with_facts(c.v.facts(), |facts| {
        let log = RequestLog::new(c.v.log_line(), c.v.log_id()).traced(facts.trace_id());
        crate::log::finish_request(w, Protocol::Http1, &log, facts, c.peer, status, started);
    });
}

/// A client that closed with part of a request head sent ([`HeadRead::Left`]): logged and counted as a
/// request it left before an answer (499, `edge_requests_client_closed_total{phase="request"}`); nginx
/// logs the same connection with 400. Its access line has no method or path (none was read).
fn left_mid_head<T: Transport>(w: &Worker, c: &mut Conn<T>, started: Instant) {
    w.generate_request_id(&mut c.v.get().log_id);
    finish(w, c, respond::client_left(w, None, true), started);
}

/// A failure found while reading or checking the head, before any body was read: answer it and close.
async fn fail<T: Transport>(w: &Worker, c: &mut Conn<T>, f: Failure, started: Instant) -> Next {
    let before = Exchanged {
        upstream: None,
        rules: (0, 0),
    };
    record_and_answer(w, c, f, true, started, before).await
}

/// Counts and logs `f` (an upstream failure on `upstream`'s counters), answers it (a gRPC call with a
/// gRPC answer), and decides the connection's fate (`close`, or always for [`Failure::closes`]). The
/// request is counted and logged with the status of `f` even when a gRPC answer went out as 200, so a
/// failure counts the same for every client (its `grpc_status` is in the access line).
async fn record_and_answer<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    f: Failure,
    close: bool,
    started: Instant,
    exchange: Exchanged<'_>,
) -> Next {
    let close = close || f.closes();
    let upstream = exchange.upstream;
    let v = c.v.get();
    if v.log_id.is_empty() {
        // Refused before admission (the head could not be read or checked): the answer still gets an
        // id.
        w.generate_request_id(&mut v.log_id);
    }
    let facts = v.facts.as_deref();
    let trace = facts.map_or(&b""[..], |f| f.trace_id());
    let log = RequestLog {
        line: &v.log_line,
        id: &v.log_id,
        upstream,
        trace,
    };
    f.record(w, &log);
    let mut out = SendBuf::take();
    let lines = v
        .path
        .get(exchange.rules.0..exchange.rules.1)
        .unwrap_or_default();
    match facts.filter(|facts| facts.grpc) {
        Some(facts) => {
            let (code, message) = (f.grpc_code(), f.grpc_message().as_bytes());
            crate::server::h1::answer::grpc_answer(
                &mut out.0, code, message, None, close, &v.log_id, lines,
            );
            facts.grpc_status.set(Some(code.as_u16()));
        }
        None => {
            crate::server::h1::answer::error_response(&mut out.0, f, close, &v.log_id, lines);
            if let Some(facts) = facts {
                facts.response_bytes.set(f.text().len() as u64);
            }
        }
    }
    let r =
        crate::server::send::within_send(w.send_timeout(), c.stream.fd(), out.flush(&mut c.stream))
            .await;
    if let Err(e) = r {
        let cause = match e {
            SendFailure::Closed => "client closed before the error response",
            SendFailure::Timeout => "client did not read the error response within send",
        };
        respond::record_undelivered(w, &log, f.status(), cause);
        finish(w, c, f.status(), started);
        return Next::Close;
    }
    finish(w, c, f.status(), started);
    if close {
        // There may be unread input (a body edge did not read): a lingering close lets the client read
        // this response instead of a reset.
        Next::Linger
    } else {
        Next::Keep
    }
}

/// A failure after the head was consumed (no route): the connection is kept when the unread body (at
/// most 64 KiB) can be discarded.
async fn fail_after_head<T: Transport>(
    w: &Worker,
    c: &mut Conn<T>,
    f: Failure,
    body: Body,
    deadline: Instant,
    started: Instant,
) -> Next {
    let body_done = local::discard_body(c, body, deadline).await;
    let close = !body_done || w.shared.draining.load(Ordering::Relaxed);
    let before = Exchanged {
        upstream: None,
        rules: (0, 0),
    };
    record_and_answer(w, c, f, close, started, before).await
}
