//! A small blocking HTTP/1.1 client (std sockets) for health probes, admin reads and the held-open
//! slow requests of the scenarios.
//!
//! Everything here is bounded by a deadline: connect uses `connect_timeout`, and every read sets
//! the socket read timeout to what is left of the deadline, so a stalled server turns into a
//! `TimedOut` error instead of a hang. Not for load: one allocation-happy request at a time.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::peers::chunked::ChunkedSkipper;
use crate::peers::http::{parse_response, BodyLen};

/// A complete response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// The decoded body (chunked framing removed).
    pub body: Vec<u8>,
}

/// Connects to `addr` within `timeout`, with Nagle off.
///
/// # Errors
/// Connect errors, `TimedOut` after `timeout`.
pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Writes `GET path HTTP/1.1` with `Host: host`, adding `Connection: close` when `close`.
///
/// # Errors
/// Write errors.
pub fn send_get(stream: &mut TcpStream, host: &str, path: &str, close: bool) -> io::Result<()> {
    let close = if close { "Connection: close\r\n" } else { "" };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{close}\r\n");
    stream.write_all(req.as_bytes())
}

/// `GET path` on a fresh connection with `Connection: close`, all within `timeout`.
///
/// # Errors
/// Connect, write and read errors; `TimedOut` when the deadline passes; `InvalidData` when the
/// response cannot be parsed.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> io::Result<Response> {
    let deadline = Instant::now() + timeout;
    let mut s = connect(addr, timeout)?;
    s.set_write_timeout(Some(timeout))?;
    send_get(&mut s, &addr.to_string(), path, true)?;
    read_response(&mut s, deadline)
}

/// Reads one complete response from `stream` before `deadline`.
///
/// # Errors
/// Read errors; `TimedOut` at the deadline; `UnexpectedEof` when the server closes early;
/// `InvalidData` for an unparseable head or chunked body.
pub fn read_response(stream: &mut TcpStream, deadline: Instant) -> io::Result<Response> {
    let mut buf = Vec::with_capacity(4096);
    let info = loop {
        match parse_response(&buf, false) {
            Ok(Some(info)) if (100..200).contains(&info.status) && info.status != 101 => {
                buf.drain(..info.head_len);
            }
            Ok(Some(info)) => break info,
            Ok(None) => {
                if read_some(stream, &mut buf, deadline)? == 0 {
                    return Err(eof());
                }
            }
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    };
    let mut rest = buf.split_off(info.head_len);
    let mut body = Vec::new();
    match info.body {
        BodyLen::Empty => {}
        BodyLen::Length(n) => {
            let n = usize::try_from(n).map_err(|_| io::Error::other("body too large"))?;
            while rest.len() < n {
                if read_some(stream, &mut rest, deadline)? == 0 {
                    return Err(eof());
                }
            }
            rest.truncate(n);
            body = rest;
        }
        BodyLen::Chunked => {
            let mut dec = ChunkedSkipper::new();
            loop {
                dec.feed_with(&rest, |d| body.extend_from_slice(d))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if dec.is_done() {
                    break;
                }
                rest.clear();
                if read_some(stream, &mut rest, deadline)? == 0 {
                    return Err(eof());
                }
            }
        }
        BodyLen::UntilClose => {
            while read_some(stream, &mut rest, deadline)? > 0 {}
            body = rest;
        }
    }
    Ok(Response {
        status: info.status,
        body,
    })
}

/// One read of up to 16 KiB appended to `buf`, bounded by `deadline`; returns 0 at EOF.
fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> io::Result<usize> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "response deadline passed",
        ));
    }
    stream.set_read_timeout(Some(left))?;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "response deadline passed",
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

fn eof() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "server closed before a complete response",
    )
}

/// One health probe's outcome.
#[derive(Debug, Clone)]
pub struct Probe {
    /// When the probe started, relative to the start of its series.
    pub at: Duration,
    /// Connect to last body byte.
    pub latency: Duration,
    /// The status, or the error text.
    pub result: Result<u16, String>,
}

impl Probe {
    /// A probe passed when it got a 200.
    pub fn ok(&self) -> bool {
        self.result == Ok(200)
    }
}

/// Probes `GET path` on a fresh connection every `interval` for `window`, each probe bounded by
/// `timeout`. A probe that overruns its slot delays the next one (they never overlap).
pub fn probe_series(
    addr: SocketAddr,
    path: &str,
    interval: Duration,
    window: Duration,
    timeout: Duration,
) -> Vec<Probe> {
    let start = Instant::now();
    let mut probes = Vec::new();
    let mut next = start;
    while next.saturating_duration_since(start) < window {
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t0 = Instant::now();
        let result = get(addr, path, timeout)
            .map(|r| r.status)
            .map_err(|e| e.to_string());
        probes.push(Probe {
            at: t0 - start,
            latency: t0.elapsed(),
            result,
        });
        next = (next + interval).max(Instant::now());
    }
    probes
}

/// Requests held open against a slow path: `k` connections, each with one `GET path` sent and
/// its response not yet read.
#[derive(Debug)]
pub struct HeldRequests {
    streams: Vec<Result<TcpStream, String>>,
}

/// Tally of [`HeldRequests::finish`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldOutcome {
    /// Responses with status 200.
    pub ok: u64,
    /// Connect or write failures, read failures, and non-200 responses.
    pub failed: u64,
    /// The first failure, as text.
    pub first_error: Option<String>,
}

impl HeldRequests {
    /// Opens `k` connections to `addr` and sends `GET path` on each (connect and write bounded by
    /// `timeout` each). Failures are kept and counted by [`finish`](Self::finish).
    pub fn open(addr: SocketAddr, path: &str, k: usize, timeout: Duration) -> Self {
        let host = addr.to_string();
        let streams = (0..k)
            .map(|_| {
                let mut s = connect(addr, timeout).map_err(|e| e.to_string())?;
                s.set_write_timeout(Some(timeout))
                    .map_err(|e| e.to_string())?;
                send_get(&mut s, &host, path, false).map_err(|e| e.to_string())?;
                Ok(s)
            })
            .collect();
        Self { streams }
    }

    /// Reads every response, all before `deadline`, and tallies them.
    pub fn finish(self, deadline: Instant) -> HeldOutcome {
        let mut out = HeldOutcome::default();
        for s in self.streams {
            let resp =
                s.and_then(|mut s| read_response(&mut s, deadline).map_err(|e| e.to_string()));
            let err = match resp {
                Ok(r) if r.status == 200 => {
                    out.ok += 1;
                    continue;
                }
                Ok(r) => format!("status {}", r.status),
                Err(e) => e,
            };
            out.failed += 1;
            out.first_error.get_or_insert(err);
        }
        out
    }
}
