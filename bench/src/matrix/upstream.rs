//! `edge-bench matrix` group b, the upstream misbehaves (DESIGN.md "Fault matrix", with the
//! outcomes of "Status codes" and "Upstream pools and retries"): one edge, and every case its own
//! scripted origin as an upstream with its own route (`/refused`, `/hang`, …), so a case's
//! connections never mix with another's in edge's pools. The scripts follow
//! frontend/tests/it/upstream.rs.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use super::base_config;
use super::origin::{ok, read_request, Conn, HangingListener, ScriptOrigin, Seen};
use super::runner::{run_case, secs, within, Check, Edge, HealthRule, Row, SEC};
use crate::support::table::ms;

/// The group-b origins, one per case, and the edge config routing `/NAME` to each.
struct Origins {
    slow: ScriptOrigin,
    others: Vec<(&'static str, ScriptOrigin)>,
    refused: SocketAddr,
    hang: HangingListener,
}

fn b_origins() -> io::Result<Origins> {
    let refused = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let until_eof = |s: &mut TcpStream| {
        let mut b = [0u8; 4096];
        while matches!(s.read(&mut b), Ok(n) if n > 0) {}
    };
    let stall = ScriptOrigin::start(move |mut s, _| {
        if read_request(&mut s, &mut Vec::new()).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf_");
            until_eof(&mut s);
        }
    })?;
    let stream = ScriptOrigin::start(|mut s, _| {
        if read_request(&mut s, &mut Vec::new()).is_none() {
            return;
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for i in 0..10 {
            std::thread::sleep(Duration::from_millis(300));
            if s.write_all(format!("6\r\nchunk{i}\r\n").as_bytes())
                .is_err()
            {
                return;
            }
        }
        let _ = s.write_all(b"0\r\n\r\n");
    })?;
    let midbody = ScriptOrigin::start(|mut s, _| {
        if read_request(&mut s, &mut Vec::new()).is_some() {
            let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
            b.extend_from_slice(&[b'h'; 500]);
            let _ = s.write_all(&b);
        }
    })?;
    // Answers a connection's first request, reads the next one whole, and closes unanswered.
    let reuse = ScriptOrigin::start(|mut s, _| {
        let mut buf = Vec::new();
        let Some((path, used)) = read_request(&mut s, &mut buf) else {
            return;
        };
        buf.drain(..used);
        let _ = s.write_all(&ok(format!("first {path}").as_bytes()));
        let _ = read_request(&mut s, &mut buf);
    })?;
    let early = ScriptOrigin::start(move |mut s, _| {
        let mut b = [0u8; 4096];
        if matches!(s.read(&mut b), Ok(n) if n > 0) {
            let _ = s.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied");
            until_eof(&mut s);
        }
    })?;
    let malformed = ScriptOrigin::start(|mut s, _| {
        if read_request(&mut s, &mut Vec::new()).is_some() {
            let _ = s.write_all(b"HTTP/1.1 2x0 Weird\r\nContent-Length: 2\r\n\r\nno");
        }
    })?;
    let slow = ScriptOrigin::start(|mut s, _| {
        let mut buf = Vec::new();
        while let Some((_, used)) = read_request(&mut s, &mut buf) {
            buf.drain(..used);
            std::thread::sleep(3 * SEC);
            if s.write_all(&ok(b"slow")).is_err() {
                return;
            }
        }
    })?;
    Ok(Origins {
        slow,
        others: vec![
            ("zombie", ScriptOrigin::silent()?),
            ("stall", stall),
            ("stream", stream),
            ("midbody", midbody),
            ("reuse", reuse),
            ("early", early),
            ("malformed", malformed),
        ],
        refused,
        hang: HangingListener::start()?,
    })
}

/// The group-b config: short zombie threshold (max_inactive 1 s, cap 2 s: 2 s) everywhere but
/// `/slow`, which keeps the defaults so 3 s answers are legitimate.
fn b_config(o: &Origins) -> String {
    let mut t = base_config("");
    let mut up = |name: &str, addr: SocketAddr, extra: &str| {
        t.push_str(&format!(
            "\n[[upstreams]]\nname = \"{name}\"\nendpoints = [\"{addr}\"]\nconnect_timeout = \"1s\"\n{extra}\
             \n[[routes]]\npath_prefix = \"/{name}\"\nupstream = \"{name}\"\n"
        ));
    };
    let zombie = "max_inactive = \"1s\"\nmax_inactive_cap = \"2s\"\n";
    up("refused", o.refused, "");
    up("hang", o.hang.addr, "");
    for (name, origin) in &o.others {
        up(name, origin.addr(), zombie);
    }
    up("slow", o.slow.addr(), "");
    t
}

/// `GET path` on a fresh connection: the response (possibly cut short) and its time.
fn timed_get(e: &Edge, path: &str) -> io::Result<(Seen, Duration, Conn)> {
    let mut c = Conn::open(e.traffic)?;
    let t0 = Instant::now();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: m\r\n\r\n").as_bytes())?;
    let r = c.read_response(t0 + 10 * SEC)?;
    Ok((r, t0.elapsed(), c))
}

/// An error answer: status, timing window, whether the connection is kept.
fn error_case(e: &Edge, path: &str, status: u16, lo: Duration, hi: Duration) -> io::Result<Check> {
    let (r, took, _c) = timed_get(e, path)?;
    let mut k = Check::seen(format!(
        "{} at {}, Connection: close {}",
        r.status,
        secs(took),
        r.says_close()
    ));
    k.expect(r.status == status, || format!("answered {}", r.status))
        .expect(within(took, lo, hi), || format!("after {}", ms(took)))
        .expect(!r.says_close(), || {
            "connection closed (keep* expected: no request body)".into()
        });
    Ok(k)
}

/// A 200 whose body is cut: head, some body, then the close.
fn truncated_case(
    e: &Edge,
    path: &str,
    want: &[u8],
    lo: Duration,
    hi: Duration,
) -> io::Result<Check> {
    let (r, took, _c) = timed_get(e, path)?;
    let mut k = Check::seen(format!(
        "{} head, {} body bytes, complete {}, closed at {}",
        r.status,
        r.body.len(),
        r.complete,
        secs(took)
    ));
    k.expect(r.status == 200 && !r.complete && r.body == want, || {
        "expected a 200 cut short".into()
    })
    .expect(within(took, lo, hi), || {
        format!("closed after {}", ms(took))
    });
    Ok(k)
}

/// Group b: one edge, one scripted origin per case.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_b(bin: &Path, driver: &[String], g: &str) -> io::Result<Vec<Row>> {
    let o = b_origins()?;
    let edge = Edge::start(bin, "matrix-b", &b_config(&o), driver, &[])?;
    let s = HealthRule::Strict;
    let ms_ = Duration::from_millis;
    let rows = vec![
        run_case(&edge, g, "refuses", "502 at once, kept", s, |e| {
            error_case(e, "/refused", 502, ms_(0), SEC)
        }),
        run_case(
            &edge,
            g,
            "never accepts (connect hangs)",
            "504 at connect 1 s",
            s,
            |e| error_case(e, "/hang", 504, ms_(900), ms_(3500)),
        ),
        run_case(
            &edge,
            g,
            "accepts and never answers",
            "504 zombie at 2 s",
            s,
            |e| error_case(e, "/zombie", 504, ms_(1900), ms_(3500)),
        ),
        run_case(
            &edge,
            g,
            "answers the head then stalls",
            "200 cut at 2 s (zombie)",
            s,
            |e| truncated_case(e, "/stall", b"half_", ms_(1900), ms_(3500)),
        ),
        run_case(
            &edge,
            g,
            "streams slowly longer than the cap",
            "200 whole (~3 s > cap 2 s)",
            s,
            slow_stream,
        ),
        run_case(
            &edge,
            g,
            "closes mid-body",
            "200 cut after 500 of 1000 B",
            s,
            |e| truncated_case(e, "/midbody", &[b'h'; 500], ms_(0), 3 * SEC),
        ),
        run_case(
            &edge,
            g,
            "closes a pooled connection on reuse",
            "GET retried once: 200, 200",
            s,
            pooled_close_retried,
        ),
        run_case(
            &edge,
            g,
            "answers before reading the body",
            "403 relayed + close",
            s,
            early_answer,
        ),
        run_case(
            &edge,
            g,
            "sends a malformed head",
            "502 bad_response, kept",
            s,
            |e| error_case(e, "/malformed", 502, ms_(0), SEC),
        ),
        run_case(
            &edge,
            g,
            "3 s slow responses",
            "4 x 200 in parallel, 3-5.5 s",
            s,
            parallel_slow,
        ),
    ];
    edge.stop();
    drop(o);
    Ok(rows)
}

/// A chunked response that takes about 3 s, longer than the zombie cap: delivered whole, since
/// bytes keep arriving.
fn slow_stream(e: &Edge) -> io::Result<Check> {
    let ms_ = Duration::from_millis;
    let (r, took, _c) = timed_get(e, "/stream")?;
    let want: String = (0..10).map(|i| format!("chunk{i}")).collect();
    let mut k = Check::seen(format!(
        "{} complete {} after {}",
        r.status,
        r.complete,
        secs(took)
    ));
    // The raw body still carries chunk framing; compare the decoded data.
    let data = decode_chunked(&r.body);
    k.expect(
        r.status == 200 && r.complete && data == want.as_bytes(),
        || "stream not delivered whole".into(),
    )
    .expect(took >= ms_(2500), || {
        "the stream was not slow: proves nothing".into()
    });
    Ok(k)
}

/// Two GETs on one connection; the origin closes its pooled connection as the second arrives:
/// the GET is retried once.
fn pooled_close_retried(e: &Edge) -> io::Result<Check> {
    let retries = e.metric("edge_upstream_retries_total", &[]);
    let mut c = Conn::open(e.traffic)?;
    let until = Instant::now() + 10 * SEC;
    c.send(b"GET /reuse/1 HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let a = c.read_response(until)?;
    c.send(b"GET /reuse/2 HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let b = c.read_response(until)?;
    let r = e.metric("edge_upstream_retries_total", &[]) - retries;
    let mut k = Check::seen(format!(
        "{} {:?}, {} {:?}, retries +{r}",
        a.status,
        String::from_utf8_lossy(&a.body),
        b.status,
        String::from_utf8_lossy(&b.body)
    ));
    k.expect(
        a.status == 200 && b.status == 200 && b.body == b"first /reuse/2",
        || "second GET not retried to 200".into(),
    )
    .expect(r == 1.0, || {
        "edge_upstream_retries_total did not move by 1".into()
    });
    Ok(k)
}

/// A POST the origin answers (403) before reading its body: relayed, then the client connection
/// closes.
fn early_answer(e: &Edge) -> io::Result<Check> {
    let mut c = Conn::open(e.traffic)?;
    c.send(b"POST /early HTTP/1.1\r\nHost: m\r\nContent-Length: 100\r\n\r\n0123456789")?;
    let r = c.read_response(Instant::now() + 5 * SEC)?;
    let closed = c.wait_closed(3 * SEC);
    let mut k = Check::seen(format!(
        "{} {:?}, Connection: close {}, closed {}",
        r.status,
        String::from_utf8_lossy(&r.body),
        r.says_close(),
        closed.is_some()
    ));
    k.expect(r.status == 403 && r.body == b"denied", || {
        "early answer not relayed".into()
    })
    .expect(r.says_close() && closed.is_some(), || {
        "client connection not closed".into()
    });
    Ok(k)
}

/// Four 3 s responses at once: all 200, in parallel (not serialised, not cut).
fn parallel_slow(e: &Edge) -> io::Result<Check> {
    let ms_ = Duration::from_millis;
    let t0 = Instant::now();
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let addr = e.traffic;
            std::thread::spawn(move || -> io::Result<u16> {
                let mut c = Conn::open(addr)?;
                c.send(format!("GET /slow/{i} HTTP/1.1\r\nHost: m\r\n\r\n").as_bytes())?;
                Ok(c.read_response(Instant::now() + 10 * SEC)?.status)
            })
        })
        .collect();
    let st: Vec<String> = hs
        .into_iter()
        .map(|h| match h.join() {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "panic".into(),
        })
        .collect();
    let took = t0.elapsed();
    let mut k = Check::seen(format!("{} after {}", st.join(","), secs(took)));
    k.expect(st.iter().all(|s| s == "200"), || "not all 200".into())
        .expect(within(took, ms_(2900), ms_(5500)), || {
            "serialised or cut".into()
        });
    Ok(k)
}

/// The data of a chunked body (best effort, for comparison only).
fn decode_chunked(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..i])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok());
        match size {
            Some(n) if n > 0 && b.len() >= i + 2 + n => {
                out.extend_from_slice(&b[i + 2..i + 2 + n]);
                b = &b[(i + 4 + n).min(b.len())..];
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_chunks() {
        assert_eq!(
            decode_chunked(b"6\r\nchunk0\r\n6\r\nchunk1\r\n0\r\n\r\n"),
            b"chunk0chunk1"
        );
        assert_eq!(decode_chunked(b""), b"");
    }
}
