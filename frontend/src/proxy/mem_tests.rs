//! The orchestrator against both seams in memory: the downstream [`MemSession`] and the scripted
//! upstream [`MemUpstream`]. Each test checks what the client was sent, what the upstream saw (sessions
//! opened and with which `Reuse`, heads, bodies, how each session finished) and how the exchange
//! ended: the retry rule, early answers, `Expect: 100-continue`, `101` and the pool decision.

use std::time::Duration;

use edge_upstream::UpstreamErrorKind;

use super::{
    exchange, failed,
    mem_upstream::{MemTunnel, MemUpstream, Reply, Script},
    start,
    tests::{admitted, on_epoll, worker, MemSession, Rest, GET},
    Outcome,
};
use crate::{context::Worker, respond::Failure, server::Session};

const OK: Reply = Reply::Bytes("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");

/// Runs one exchange of `s` against `up` (`request_timeout` as given), as [`super::run`] does for a
/// route's upstream.
async fn run_on(
    w: &Worker,
    s: &mut MemSession,
    up: &MemUpstream,
    idempotent: bool,
    request_timeout: Option<Duration>,
) -> Outcome<MemTunnel> {
    let live = w.live();
    let req = admitted(&live, s, idempotent, request_timeout);
    let (out, wait_continue, _) = match start(s, &req) {
        Ok(started) => started,
        Err(f) => return failed(f, false),
    };
    let mut fields = s.take_fields();
    let outcome = exchange(w, s, &req, up, out, &mut fields, wait_continue).await;
    s.put_fields(fields);
    outcome
}

/// One exchange of `s` against a fresh upstream following `scripts`, on a worker with `request_timeout`
/// 5 s; the outcome and the upstream's events.
fn exchange_with(
    s: &mut MemSession,
    idempotent: bool,
    scripts: Vec<Script>,
) -> (Outcome<MemTunnel>, Vec<String>) {
    let w = worker("127.0.0.1:1".parse().unwrap());
    let up = MemUpstream::new(scripts);
    let out = on_epoll(run_on(&w, s, &up, idempotent, Some(Duration::from_secs(5))));
    (out, up.events())
}

/// The events that start with `prefix`.
fn starting(events: &[String], prefix: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.starts_with(prefix))
        .cloned()
        .collect()
}

fn failed_with(out: &Outcome<MemTunnel>) -> (u16, UpstreamErrorKind) {
    match out {
        Outcome::Failed {
            failure: Failure::Upstream(e),
            ..
        } => (Failure::Upstream(*e).status(), e.kind),
        _ => panic!("expected an upstream failure"),
    }
}

#[test]
fn a_reused_session_reset_before_any_response_byte_is_retried_once_on_a_fresh_one() {
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let scripts = vec![Script::reused(&[Reply::Reset]), Script::fresh(&[OK])];
    let (out, events) = exchange_with(&mut s, true, scripts);
    assert!(matches!(
        out,
        Outcome::Done {
            status: 200,
            keep: true,
            unread_body: false
        }
    ));
    assert_eq!(starting(&events, "open"), ["open RetrySafe", "open Fresh"]);
    assert_eq!(starting(&events, "head GET /a HTTP/1.1\r\n").len(), 2);
    assert_eq!(
        starting(&events, "finish"),
        ["finish Reuse { keep_alive_secs: None }"]
    );
    assert_eq!(s.events, ["head 200", "body ok"]);
}

#[test]
fn a_reused_session_failing_as_the_head_is_written_is_retried_but_not_after_write_timeout() {
    let failing = |kind| Script {
        head_fails: Some(kind),
        ..Script::reused(&[])
    };
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let (out, events) = exchange_with(
        &mut s,
        true,
        vec![failing(UpstreamErrorKind::Reset), Script::fresh(&[OK])],
    );
    assert!(matches!(out, Outcome::Done { status: 200, .. }));
    assert_eq!(starting(&events, "open").len(), 2);

    let mut s = MemSession::new(GET, "", Rest::Sent);
    let timeout = failing(UpstreamErrorKind::WriteTimeout);
    let (out, events) = exchange_with(&mut s, true, vec![timeout, Script::fresh(&[OK])]);
    assert_eq!(failed_with(&out), (504, UpstreamErrorKind::WriteTimeout));
    assert_eq!(starting(&events, "open"), ["open RetrySafe"]);
}

#[test]
fn a_non_idempotent_request_on_a_reused_session_is_not_retried_and_its_checkout_is_probed() {
    let post = "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
    let mut s = MemSession::new(post, "", Rest::Sent);
    let scripts = vec![Script::reused(&[Reply::Reset]), Script::fresh(&[OK])];
    let (out, events) = exchange_with(&mut s, false, scripts);
    assert_eq!(failed_with(&out), (502, UpstreamErrorKind::Reset));
    assert_eq!(starting(&events, "open"), ["open Checked"]);
    assert!(s.events.is_empty());
}

#[test]
fn no_retry_once_a_response_byte_arrived() {
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let partial = Script::reused(&[Reply::Bytes("HTTP/1.1 200 OK\r\n"), Reply::Close]);
    let (out, events) = exchange_with(&mut s, true, vec![partial, Script::fresh(&[OK])]);
    assert_eq!(failed_with(&out), (502, UpstreamErrorKind::ClosedEarly));
    assert_eq!(starting(&events, "open").len(), 1);
}

#[test]
fn a_refused_open_is_502_and_the_bodyless_request_was_read_whole() {
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let (out, _) = exchange_with(&mut s, true, vec![]);
    assert_eq!(failed_with(&out), (502, UpstreamErrorKind::Refused));
    assert!(matches!(
        out,
        Outcome::Failed {
            body_done: true,
            ..
        }
    ));
}

#[test]
fn silence_before_the_head_is_504_request_timeout_and_the_session_is_dropped() {
    let w = worker("127.0.0.1:1".parse().unwrap());
    let up = MemUpstream::new(vec![Script::fresh(&[Reply::Silent])]);
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let timeout = Some(Duration::from_millis(50));
    let out = on_epoll(run_on(&w, &mut s, &up, true, timeout));
    assert_eq!(failed_with(&out), (504, UpstreamErrorKind::RequestTimeout));
    assert!(starting(&up.events(), "finish").is_empty());
}

#[test]
fn an_early_answer_ends_the_body_phase_and_the_session_is_not_reused() {
    let post = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc";
    let mut s = MemSession::new(post, "", Rest::Stalls);
    let early = Script {
        answers_early: true,
        ..Script::fresh(&[Reply::Bytes(
            "HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nbig!",
        )])
    };
    let (out, events) = exchange_with(&mut s, false, vec![early]);
    assert!(matches!(
        out,
        Outcome::Done {
            status: 413,
            keep: false,
            unread_body: true
        }
    ));
    assert_eq!(s.events, ["head 413", "body big!"]);
    assert!(starting(&events, "head POST /up HTTP/1.1\r\n")[0].ends_with("\r\n\r\nabc"));
    assert_eq!(starting(&events, "finish"), ["finish Close"]);
}

/// A POST of "hello" whose client waits for `100 Continue`.
fn expecting() -> MemSession {
    let post = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    let mut s = MemSession::new(post, "hello", Rest::Sent);
    s.expects_continue = true;
    s
}

#[test]
fn expect_continue_relays_the_upstreams_100_then_streams_the_body() {
    let mut s = expecting();
    let continue_100 = Reply::Bytes("HTTP/1.1 100 Continue\r\n\r\n");
    let (out, events) = exchange_with(&mut s, false, vec![Script::fresh(&[continue_100, OK])]);
    assert!(matches!(
        out,
        Outcome::Done {
            status: 200,
            keep: true,
            ..
        }
    ));
    assert_eq!(s.events, ["interim 100", "head 200", "body ok"]);
    assert_eq!(starting(&events, "body"), ["body hello"]);
}

#[test]
fn expect_continue_answered_with_a_final_status_skips_the_body_and_closes() {
    let mut s = expecting();
    let refused = Reply::Bytes("HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n");
    let (out, events) = exchange_with(&mut s, false, vec![Script::fresh(&[refused])]);
    assert!(matches!(
        out,
        Outcome::Done {
            status: 417,
            keep: false,
            unread_body: true
        }
    ));
    assert_eq!(s.events, ["head 417"]);
    assert!(starting(&events, "body").is_empty());
    assert_eq!(starting(&events, "finish"), ["finish Close"]);
}

#[test]
fn expect_continue_without_an_answer_sends_edges_own_100_after_the_wait() {
    let mut s = expecting();
    let (out, events) = exchange_with(&mut s, false, vec![Script::fresh(&[Reply::Silent, OK])]);
    assert!(matches!(out, Outcome::Done { status: 200, .. }));
    assert_eq!(s.events, ["continue", "head 200", "body ok"]);
    assert_eq!(starting(&events, "body"), ["body hello"]);
}

const UPGRADE: &str =
    "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
const SWITCHING: Reply = Reply::Bytes(
    "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nhello",
);

#[test]
fn a_101_to_an_upgrade_request_becomes_a_tunnel_holding_the_bytes_after_it() {
    let mut s = MemSession::new(UPGRADE, "", Rest::Sent);
    let (out, events) = exchange_with(&mut s, true, vec![Script::fresh(&[SWITCHING])]);
    let Outcome::Upgraded { tunnel } = out else {
        panic!("expected Upgraded")
    };
    assert_eq!(tunnel.0.data(), b"hello");
    assert_eq!(s.events, ["switching"]);
    assert!(events.contains(&"tunnel".to_string()));
    assert!(starting(&events, "finish").is_empty());
}

#[test]
fn a_101_to_a_request_that_asked_for_no_upgrade_is_502() {
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let (out, _) = exchange_with(&mut s, true, vec![Script::fresh(&[SWITCHING])]);
    assert_eq!(failed_with(&out), (502, UpstreamErrorKind::BadResponse));
    assert!(s.events.is_empty());
}

#[test]
fn the_session_is_reused_with_the_upstreams_keep_alive_timeout_unless_it_closes() {
    let keep =
        Reply::Bytes("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n");
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let (_, events) = exchange_with(&mut s, true, vec![Script::fresh(&[keep])]);
    assert_eq!(
        starting(&events, "finish"),
        ["finish Reuse { keep_alive_secs: Some(5) }"]
    );

    let close = Reply::Bytes("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let (_, events) = exchange_with(&mut s, true, vec![Script::fresh(&[close])]);
    assert_eq!(starting(&events, "finish"), ["finish Close"]);
}

#[test]
fn an_upstream_reset_mid_body_truncates_the_response() {
    let head = Reply::Bytes("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let (out, events) = exchange_with(&mut s, true, vec![Script::fresh(&[head, Reply::Reset])]);
    assert!(matches!(out, Outcome::Truncated { status: 200 }));
    assert_eq!(s.events, ["head 200", "body abc"]);
    assert_eq!(starting(&events, "finish"), ["finish Close"]);
}

/// A relay starts at the small size, or where the session says its connection's client has shown it
/// keeps up (`Respond::relay_start`: an HTTP/1.1 keep-alive connection whose last relay ended at the
/// full pace), and tells the session the pace it ended at for the connection's next response.
#[test]
fn a_relay_starts_where_its_connection_left_off_and_reports_where_it_ended() {
    use edge_core::{buf::BUF_SIZE, pace::RelayPace};
    let head = Reply::Bytes("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nab");
    let rest = || vec![head, Reply::Bytes("cd"), Reply::Bytes("ef")];
    let first_read = |events: &[String]| starting(events, "read ").first().cloned();

    let mut fresh = MemSession::new(GET, "", Rest::Sent);
    let (out, events) = exchange_with(&mut fresh, true, vec![Script::fresh(&rest())]);
    assert!(matches!(out, Outcome::Done { status: 200, .. }));
    assert_eq!(first_read(&events), Some(format!("read {BUF_SIZE}")));
    // Short chunks prove nothing: the relay ended where it started, short of the full pace.
    assert_eq!(fresh.pace.1, Some(RelayPace::new()));

    let mut known = MemSession::new(GET, "", Rest::Sent);
    known.pace.0 = Some(RelayPace::carried());
    let (out, events) = exchange_with(&mut known, true, vec![Script::fresh(&rest())]);
    assert!(matches!(out, Outcome::Done { status: 200, .. }));
    let carried = RelayPace::carried().size();
    assert!(carried > BUF_SIZE);
    assert_eq!(first_read(&events), Some(format!("read {carried}")));
    assert_eq!(known.events, ["head 200", "body ab", "body cd", "body ef"]);
    assert!(known.pace.1.is_some_and(|p| !p.is_full()));
}
