//! `edge-bench matrix` group a, the sender misbehaves (DESIGN.md "Fault matrix", with the outcomes
//! of "Status codes" and "Inbound deadlines"): one edge (request = 2 s, idle = 3 s, send = 2 s) in
//! front of a keep-alive origin; idle sockets, partial heads and bodies, a drip, a client that
//! stops reading, a half-close, a reset mid-body, garbage and pipelining. The scripts follow
//! frontend/tests/it/{faults,drops}.rs.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::base_config;
use super::origin::{ok, Conn, ScriptOrigin};
use super::runner::{run_case, secs, within, Check, Edge, HealthRule, Row, SEC};
use crate::support::table::ms;

/// Body size of the large response a client stops reading.
const BIG: usize = 32 << 20;

/// Group a: one edge in front of a keep-alive origin answering each path with its own name
/// (`/big` with 32 MiB).
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_a(bin: &Path, driver: &[String], g: &str) -> io::Result<Vec<Row>> {
    let origin = ScriptOrigin::serve(|p| {
        if p == "/big" {
            ok(&vec![b'b'; BIG])
        } else {
            ok(p.as_bytes())
        }
    })?;
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let edge = Edge::start(bin, "matrix-a", &base_config(""), &extra, &[])?;
    let e408 = "408 + close at request 2 s";
    let rows = vec![
        run_case(
            &edge,
            g,
            "idle sockets",
            "closed at idle 3 s",
            HealthRule::Strict,
            idle_sockets,
        ),
        run_case(&edge, g, "partial head", e408, HealthRule::Strict, |e| {
            expect_408(
                e,
                vec![b"GET /partial HTTP/1.1\r\nHost: m\r\n".to_vec()],
                SEC,
            )
        }),
        run_case(&edge, g, "partial body", e408, HealthRule::Strict, |e| {
            let mut b = b"POST /body HTTP/1.1\r\nHost: m\r\nContent-Length: 100\r\n\r\n".to_vec();
            b.extend_from_slice(&[b'x'; 10]);
            expect_408(e, vec![b], SEC)
        }),
        run_case(
            &edge,
            g,
            "one byte a second",
            e408,
            HealthRule::Strict,
            |e| {
                let head = b"GET /drip HTTP/1.1\r\nHost: m\r\n\r\n";
                expect_408(e, head.iter().map(|b| vec![*b]).collect(), SEC)
            },
        ),
        run_case(
            &edge,
            g,
            "stops reading a large response",
            "closed at send 2 s, truncated",
            HealthRule::Strict,
            stops_reading,
        ),
        run_case(
            &edge,
            g,
            "half-close after a full request",
            "200, then close",
            HealthRule::Strict,
            half_close,
        ),
        run_case(
            &edge,
            g,
            "reset mid-body",
            "no answer; slots released",
            HealthRule::Strict,
            reset_mid_body,
        ),
        run_case(
            &edge,
            g,
            "garbage bytes",
            "400 + close, request.invalid",
            HealthRule::Strict,
            garbage_bytes,
        ),
        run_case(
            &edge,
            g,
            "pipelined requests",
            "4 answers in order",
            HealthRule::Strict,
            pipelined,
        ),
    ];
    edge.stop();
    Ok(rows)
}

/// A full request, then a half-close: answered, then closed.
fn half_close(e: &Edge) -> io::Result<Check> {
    let mut c = Conn::open(e.traffic)?;
    c.send(b"GET /half HTTP/1.1\r\nHost: m\r\n\r\n")?;
    c.shutdown_write()?;
    let r = c.read_response(Instant::now() + 5 * SEC)?;
    let closed = c.wait_closed(3 * SEC);
    let mut k = Check::seen(format!(
        "{} {:?}, closed {}",
        r.status,
        String::from_utf8_lossy(&r.body),
        closed.is_some()
    ));
    k.expect(r.status == 200 && r.body == b"/half", || {
        "expected 200 /half".into()
    })
    .expect(closed.is_some(), || {
        "connection not closed after the response".into()
    });
    Ok(k)
}

/// TLS-looking garbage: 400, `Connection: close`, and the close.
fn garbage_bytes(e: &Edge) -> io::Result<Check> {
    let mut c = Conn::open(e.traffic)?;
    c.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfcgarbage\r\n\r\n")?;
    let r = c.read_response(Instant::now() + 5 * SEC)?;
    let closed = c.wait_closed(3 * SEC);
    let mut k = Check::seen(format!(
        "{}, Connection: close {}, closed {}",
        r.status,
        r.says_close(),
        closed.is_some()
    ));
    k.expect(r.status == 400, || format!("answered {}", r.status))
        .expect(r.says_close() && closed.is_some(), || {
            "not closed after 400".into()
        });
    Ok(k)
}

/// Four requests in one write (one with a body): four answers, in order.
fn pipelined(e: &Edge) -> io::Result<Check> {
    let mut c = Conn::open(e.traffic)?;
    c.send(b"GET /one HTTP/1.1\r\nHost: m\r\n\r\nGET /two HTTP/1.1\r\nHost: m\r\n\r\nPOST /three HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\n\r\nabcGET /four HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let until = Instant::now() + 5 * SEC;
    let mut got = Vec::new();
    for _ in 0..4 {
        let r = c.read_response(until)?;
        got.push(format!("{} {}", r.status, String::from_utf8_lossy(&r.body)));
    }
    let want = ["200 /one", "200 /two", "200 /three", "200 /four"];
    let mut k = Check::seen(got.join(", "));
    k.expect(got == want, || format!("expected {want:?}"));
    Ok(k)
}

/// 20 sockets that send nothing: edge closes each at the idle deadline.
fn idle_sockets(e: &Edge) -> io::Result<Check> {
    let t0 = Instant::now();
    let mut conns = (0..20)
        .map(|_| Conn::open(e.traffic))
        .collect::<io::Result<Vec<_>>>()?;
    let mut times = Vec::new();
    for c in &mut conns {
        let left = (t0 + 8 * SEC).saturating_duration_since(Instant::now());
        if c.wait_closed(left).is_some() {
            times.push(t0.elapsed());
        }
    }
    let (lo, hi) = (times.iter().min().copied(), times.iter().max().copied());
    let mut k = Check::seen(format!(
        "{}/20 closed in {}–{}",
        times.len(),
        lo.map_or("-".into(), secs),
        hi.map_or("-".into(), secs)
    ));
    k.expect(times.len() == 20, || {
        "not every idle socket was closed".into()
    })
    .expect(lo.is_some_and(|d| d >= Duration::from_millis(2900)), || {
        "closed before the idle deadline".into()
    })
    .expect(hi.is_some_and(|d| d <= Duration::from_millis(4500)), || {
        "closed later than idle + 1.5 s".into()
    });
    Ok(k)
}

/// Writes `chunks` `gap` apart (stopping once answered) and expects 408 + close in 2–3 s.
fn expect_408(e: &Edge, chunks: Vec<Vec<u8>>, gap: Duration) -> io::Result<Check> {
    let mut c = Conn::open(e.traffic)?;
    let mut w = c.s.try_clone()?;
    let answered = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let (flag, count) = (answered.clone(), written.clone());
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || {
        for (i, ch) in chunks.iter().enumerate() {
            if i > 0 {
                let until = Instant::now() + gap;
                while Instant::now() < until && !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            if flag.load(Ordering::SeqCst) || w.write_all(ch).is_err() {
                return;
            }
            count.fetch_add(ch.len(), Ordering::SeqCst);
        }
    });
    let r = c.read_response(t0 + 8 * SEC);
    let took = t0.elapsed();
    answered.store(true, Ordering::SeqCst);
    let _ = writer.join();
    let r = r?;
    let closed = c.wait_closed(3 * SEC);
    let mut k = Check::seen(format!(
        "{} at {} ({} B sent), closed {}",
        r.status,
        secs(took),
        written.load(Ordering::SeqCst),
        closed.is_some()
    ));
    k.expect(r.status == 408, || format!("answered {}", r.status))
        .expect(within(took, Duration::from_millis(1950), 3 * SEC), || {
            format!("408 after {}", ms(took))
        })
        .expect(r.says_close() && closed.is_some(), || {
            "connection not closed after 408".into()
        });
    Ok(k)
}

/// A client with a 4 KiB receive buffer asks for 32 MiB and reads nothing: edge gives up at the
/// send deadline, closes, and counts a truncated response.
fn stops_reading(e: &Edge) -> io::Result<Check> {
    let before = e.metric("edge_inbound_timeouts_total", &[("phase", "send")]);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.set_recv_buffer_size(4096)?;
    sock.connect_timeout(&e.traffic.into(), 2 * SEC)?;
    let mut c = Conn::from_stream(sock.into());
    let t0 = Instant::now();
    c.send(b"GET /big HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let v = e.wait_metric(
        "edge_inbound_timeouts_total",
        &[("phase", "send")],
        12 * SEC,
        |v| v > before,
    );
    let took = t0.elapsed();
    let mut got = 0usize;
    let mut b = vec![0u8; 1 << 16];
    c.s.set_read_timeout(Some(3 * SEC))?;
    let closed = loop {
        match c.s.read(&mut b) {
            Ok(0) => break true,
            Ok(n) => got += n,
            Err(e) if crate::matrix::origin::is_reset(&e) => break true,
            Err(_) => break false,
        }
    };
    let mut k = Check::seen(format!(
        "send timeout counted at {}, {} KiB received of {} MiB, closed {closed}",
        secs(took),
        got >> 10,
        BIG >> 20
    ));
    k.expect(v > before, || {
        "edge_inbound_timeouts_total{phase=send} did not move".into()
    })
    .expect(took <= 10 * SEC, || "send deadline fired late".into())
    .expect(closed && got < BIG, || {
        "connection not closed / response not truncated".into()
    });
    Ok(k)
}

/// A POST whose head reached the upstream, then a reset (SO_LINGER 0) mid-body.
fn reset_mid_body(e: &Edge) -> io::Result<Check> {
    let before = e.metric("edge_upstream_requests_total", &[]);
    let c = Conn::open(e.traffic)?;
    let mut s = c.s;
    s.write_all(b"POST /reset HTTP/1.1\r\nHost: m\r\nContent-Length: 1000\r\n\r\n")?;
    s.write_all(&[b'r'; 100])?;
    let up = e.wait_metric("edge_upstream_requests_total", &[], 3 * SEC, |v| v > before);
    socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
    drop(s);
    let mut k = Check::seen(format!(
        "reset after 100 of 1000 body bytes (head forwarded upstream: {})",
        up > before
    ));
    k.expect(up > before, || "the head never reached the upstream".into());
    Ok(k)
}
