//! `edge-bench matrix` group e, the HTTP/2 cases (DESIGN.md "Fault matrix" e, "HTTP/2"), written
//! frame by frame with the raw client [`crate::peers::h2_frames`] over h2c (`server.h2c = true`):
//!
//! - rapid reset: for [`RAPID_RESET_FOR`], connections that open and reset streams as fast as the
//!   client can write (HEADERS + RST_STREAM), reconnecting after each GOAWAY; every connection must
//!   get GOAWAY ENHANCE_YOUR_CALM, and the p99 of health probes on other connections during the
//!   attack must stay within [`P99_SLACK`] of its value just before (twice it, plus the slack);
//! - one stream not read: a client that never grants its first stream more window (the connection
//!   window is opened wide) while ten more streams on the connection must all be answered within a
//!   second each; the stuck stream is reset at `send`;
//! - HEADERS followed by endless CONTINUATION frames: GOAWAY ENHANCE_YOUR_CALM and the connection
//!   closed.
//!
//! The runner's invariants hold around each case (health, slots, fds, memory, counters logged).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::base_config;
use super::invariants::Prober;
use super::origin::{ok, ScriptOrigin};
use super::runner::{run_case, secs, Check, Edge, HealthRule, Row, SEC};
use crate::peers::h2_frames::{
    code, frame, hpack_block, kind, open_and_reset, request_fields, Frame, H2Frames,
};
use crate::support::table::{ms, Quantiles};

/// How long the rapid-reset case attacks.
pub const RAPID_RESET_FOR: Duration = Duration::from_secs(2);

/// Health p99 during the rapid-reset attack may be at most twice the p99 before it plus this.
pub const P99_SLACK: Duration = Duration::from_millis(5);

/// Body size of `/big`, the stream the client stops reading: far over the 64 KiB stream window.
const BIG: usize = 4 << 20;

/// Group e, HTTP/2 cases.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_e_h2(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let origin = ScriptOrigin::serve(|path| match path {
        "/big" => ok(&vec![b'b'; BIG]),
        p => ok(p.as_bytes()),
    })?;
    let toml = format!(
        "{}
[[upstreams]]
name = \"origin\"
endpoints = [\"{}\"]

[[routes]]
path_prefix = \"/\"
upstream = \"origin\"
",
        base_config("h2c = true"),
        origin.addr()
    );
    let edge = Edge::start(bin, "matrix-e-h2", &toml, driver, &[])?;
    let s = HealthRule::Strict;
    let rows = vec![
        run_case(
            &edge,
            "e",
            "h2 rapid reset (open + reset streams as fast as possible)",
            "GOAWAY ENHANCE_YOUR_CALM per connection, health p99 unchanged",
            s,
            |e| rapid_reset(e.traffic),
        ),
        run_case(
            &edge,
            "e",
            "h2 client stops reading one stream",
            "10 other streams answered < 1 s each, stuck one reset at send",
            s,
            |e| one_stream_not_read(e.traffic),
        ),
        run_case(
            &edge,
            "e",
            "h2 HEADERS then endless CONTINUATION",
            "GOAWAY ENHANCE_YOUR_CALM, closed",
            s,
            |e| endless_continuation(e.traffic),
        ),
    ];
    edge.stop();
    drop(origin);
    Ok(rows)
}

/// p99 of the health samples (`None` when there are none).
fn p99(samples: &super::invariants::Samples) -> Option<Duration> {
    let lat: Vec<Duration> = samples.iter().map(|(d, _)| *d).collect();
    Quantiles::of(&lat).map(|q| q.p99)
}

/// Rapid reset on successive connections for [`RAPID_RESET_FOR`] (see the module docs).
fn rapid_reset(addr: SocketAddr) -> io::Result<Check> {
    let before = Prober::start(addr)?;
    std::thread::sleep(SEC);
    let before = p99(&before.finish());
    let during = Prober::start(addr)?;
    let authority = addr.to_string();
    let block = hpack_block(&request_fields("GET", "/reset", &authority));
    let end = Instant::now() + RAPID_RESET_FOR;
    let (mut conns, mut calm, mut resets, mut other) = (0, 0, 0u64, Vec::new());
    while Instant::now() < end {
        let mut c = H2Frames::connect(addr, &[])?;
        conns += 1;
        let (goaway, sent) = c.flood_until_goaway(
            64,
            SEC,
            |_| Instant::now() < end,
            |i, out| open_and_reset(out, i, &block),
        );
        resets += u64::from(sent);
        match goaway.as_ref().and_then(Frame::goaway_code) {
            Some(code::ENHANCE_YOUR_CALM) => calm += 1,
            // The attack's time ran out mid-connection: not a verdict on edge.
            None if Instant::now() >= end => conns -= 1,
            got => other.push(format!("{got:?}")),
        }
    }
    let during = p99(&during.finish());
    let mut k = Check::seen(format!(
        "{conns} connections, {calm} got GOAWAY ENHANCE_YOUR_CALM, {resets} resets sent; \
         other health p99 {} before, {} during",
        before.map_or("-".into(), ms),
        during.map_or("-".into(), ms),
    ));
    k.expect(conns > 0 && calm == conns, || {
        format!("connections without GOAWAY ENHANCE_YOUR_CALM: {other:?}")
    });
    if let (Some(b), Some(d)) = (before, during) {
        k.expect(d <= 2 * b + P99_SLACK, || {
            format!("health p99 {} during the attack, {} before", ms(d), ms(b))
        });
    }
    Ok(k)
}

/// One stream never granted window beyond the initial 64 KiB while ten more go through.
fn one_stream_not_read(addr: SocketAddr) -> io::Result<Check> {
    let mut c = H2Frames::handshake(addr, &[], 2 * SEC)?;
    let authority = addr.to_string();
    c.window_update(0, 1 << 30)?;
    c.headers(1, &request_fields("GET", "/big", &authority), true, true)?;
    c.wait_for(2 * SEC, |f| f.stream == 1 && f.kind == kind::DATA)?;
    let t0 = Instant::now();
    let mut answered = 0;
    let mut slowest = Duration::ZERO;
    let mut failures = Vec::new();
    for i in 0..10u32 {
        let stream = 3 + 2 * i;
        let path = format!("/s{i}");
        let t = Instant::now();
        c.headers(
            stream,
            &request_fields("GET", &path, &authority),
            true,
            true,
        )?;
        match c.response(stream, 2 * SEC) {
            Ok((Some(200), body)) if body == path.as_bytes() => answered += 1,
            r => failures.push(format!("{path}: {:?}", r.map(|(s, b)| (s, b.len())))),
        }
        slowest = slowest.max(t.elapsed());
    }
    let others = t0.elapsed();
    // The stuck stream: edge resets it at `send` (2 s in this group) after its window ran out.
    let reset = c.wait_for(5 * SEC, |f| f.stream == 1 && f.kind == kind::RST_STREAM);
    let reset_at = t0.elapsed();
    let mut k = Check::seen(format!(
        "{answered}/10 other streams in {} (slowest {}), stuck stream {}",
        secs(others),
        ms(slowest),
        match &reset {
            Ok(f) => format!("reset (code {:?}) at {}", f.rst_code(), secs(reset_at)),
            Err(e) => format!("not reset ({e})"),
        }
    ));
    k.expect(answered == 10, || format!("other streams: {failures:?}"))
        .expect(slowest < SEC, || format!("a stream took {}", ms(slowest)))
        .expect(reset.is_ok(), || "the stuck stream was never reset".into());
    Ok(k)
}

/// HEADERS without END_HEADERS, then CONTINUATION frames until edge says GOAWAY.
fn endless_continuation(addr: SocketAddr) -> io::Result<Check> {
    let mut c = H2Frames::handshake(addr, &[], 2 * SEC)?;
    let authority = addr.to_string();
    c.headers(1, &request_fields("GET", "/cont", &authority), true, false)?;
    let more = hpack_block(&[("x-more", "continuation")]);
    let until = Instant::now() + 5 * SEC;
    let (goaway, sent) = c.flood_until_goaway(
        64,
        SEC,
        |_| Instant::now() < until,
        |_, out| {
            frame(out, kind::CONTINUATION, 0, 1, &more);
        },
    );
    let closed = c.closed_within(3 * SEC);
    let code = goaway.as_ref().and_then(Frame::goaway_code);
    let mut k = Check::seen(format!(
        "GOAWAY code {code:?} after {sent} CONTINUATION frames, closed {closed}"
    ));
    k.expect(code == Some(code::ENHANCE_YOUR_CALM), || {
        format!("expected GOAWAY ENHANCE_YOUR_CALM, got {goaway:?}")
    })
    .expect(closed, || "the connection stayed open".into());
    Ok(k)
}
