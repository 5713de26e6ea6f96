//! Checks shared by many tests: bounded polling ([`wait_until`], and [`settle`] on a client's runtime),
//! a duration near its target ([`assert_about`]), the shape every error response shares
//! ([`assert_error_response`]) and a log file's lines once written ([`wait_lines`]).

use std::{
    path::Path,
    thread,
    time::{Duration, Instant},
};

use super::Response;

/// Polls `cond` every 5 ms for at most `limit`; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts `took` is within `slack` of `target` (and never below half the target: a deadline that fires
/// early is as wrong as one that fires late).
#[track_caller]
pub fn assert_about(what: &str, took: Duration, target: Duration, slack: Duration) {
    let low = target.saturating_sub(slack).max(target / 2);
    let high = target + slack;
    assert!(
        took >= low && took <= high,
        "{what}: took {took:?}, expected {target:?} (within {low:?}..={high:?})"
    );
}

/// Asserts the shape every error response shares (DESIGN.md "Status codes"): the status, a
/// `Content-Length` matching a non-empty text body, and `Connection: close` exactly when `close`.
#[track_caller]
pub fn assert_error_response(what: &str, r: &Response, status: u16, close: bool) {
    assert_eq!(r.status, status, "{what}: status (body {:?})", r.text());
    let cl = r
        .header("content-length")
        .unwrap_or_else(|| panic!("{what}: no Content-Length in {:?}", r.headers));
    assert_eq!(
        cl.parse::<usize>().ok(),
        Some(r.body.len()),
        "{what}: Content-Length"
    );
    assert!(!r.body.is_empty(), "{what}: empty error body");
    assert!(
        r.body
            .iter()
            .all(|b| b.is_ascii_graphic() || b" \t\r\n".contains(b)),
        "{what}: error body is not short text: {:?}",
        r.text()
    );
    let says_close = r
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    assert_eq!(
        says_close, close,
        "{what}: Connection: close expected {close}, headers {:?}",
        r.headers
    );
}

/// The lines of the file at `path` once it has at least `n` of them (5 s max).
pub fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let ok = wait_until(Duration::from_secs(5), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        lines = text.lines().map(str::to_string).collect();
        lines.len() >= n
    });
    assert!(
        ok,
        "{} has {} lines, want {n}: {lines:?}",
        path.display(),
        lines.len()
    );
    lines
}

/// Polls `done` every 10 ms on the client's runtime, so its HTTP/2 connection task goes on running
/// (a blocking wait would stall it), until it holds; fails with `what` after `limit`.
pub async fn settle(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "{what}");
        monoio::time::sleep(Duration::from_millis(10)).await;
    }
}
