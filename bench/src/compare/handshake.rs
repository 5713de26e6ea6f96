//! The handshake loader of `edge-bench compare` (workloads `tls-handshake` and `tls-resume`): a
//! new TLS 1.3 connection per request, closed loop, one monoio thread like wrk `-t1`, in
//! edge-bench's own process (pinned to the load CPUs).
//!
//! wrk cannot make a full handshake per request: it keeps the session across reconnects and
//! resumes it. This loader does, with rustls (aws-lc-rs, AES-128-GCM only, the chain verified
//! against the run's CA): every one of N connections in turn connects, handshakes, sends `GET
//! PATH` with `Connection: close`, reads the answer to EOF and closes. `tls-handshake` uses no
//! session cache (every handshake is full: ECDHE plus the server's ECDSA signature);
//! `tls-resume` gives each connection a ticket cache of its own, so each resumes its previous
//! session as a wrk connection does (PSK with ECDHE, no signature).
//! Latency is from the connect to the answer's last byte, in an HDR histogram; the result has
//! wrk's shape ([`WrkResult`]), so the rest of compare treats both alike.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use rustls::pki_types::ServerName;

use super::workload::PERCENTILES;
use super::wrk::{WrkResult, WrkRun};
use crate::peers::tls_stream::TlsStream;

/// Longest one exchange (connect to EOF) may take; then it counts as a timeout.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one loader run does.
#[derive(Debug, Clone)]
pub struct HandshakeSpec<'a> {
    /// Concurrent connections.
    pub connections: usize,
    /// No exchange starts after this.
    pub duration: Duration,
    /// Resume sessions (shared ticket cache) instead of full handshakes.
    pub resume: bool,
    /// The CA the targets' certificate is signed by.
    pub ca: &'a Path,
}

/// Counts of one run.
struct Tally {
    hist: Histogram<u64>,
    resumed: u64,
    errors: [u64; 3],
    non_200: u64,
}

/// Runs the loader against `addr` (`GET path`); `before` runs right before the load starts.
/// Prints how many handshakes resumed.
///
/// # Errors
/// Bad CA file, runtime or thread failures, and a run where no exchange succeeded.
pub fn run_handshakes(
    spec: &HandshakeSpec<'_>,
    addr: SocketAddr,
    path: &str,
    before: impl FnOnce(),
) -> io::Result<WrkRun> {
    let config = crate::support::certs::client_config(spec.ca, false, spec.resume)?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").into_bytes();
    let shape = (spec.connections, spec.duration, spec.resume);
    let duration = spec.duration;
    before();
    let started = Instant::now();
    let tally = std::thread::scope(|s| {
        s.spawn(move || {
            let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .enable_timer()
                .build()?;
            rt.block_on(load(config, addr, request, shape))
        })
        .join()
        .map_err(|_| io::Error::other("handshake loader thread panicked"))?
    })?;
    let wall = started.elapsed();
    let result = to_result(&tally, duration)?;
    println!(
        "  loader: {} of {} handshakes resumed, errors connect {} tls/io {} timeout {}",
        tally.resumed, result.requests, tally.errors[0], tally.errors[1], tally.errors[2]
    );
    Ok(WrkRun { result, wall })
}

/// The closed loop: `connections` tasks, each exchanging until `duration` has passed.
async fn load(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    request: Vec<u8>,
    (connections, duration, resume): (usize, Duration, bool),
) -> io::Result<Tally> {
    let request = Rc::new(request);
    let tally = Rc::new(RefCell::new(Tally {
        hist: Histogram::new_with_bounds(1, 60_000_000, 3).map_err(io::Error::other)?,
        resumed: 0,
        errors: [0; 3],
        non_200: 0,
    }));
    let end = Instant::now() + duration;
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (config, request, tally) =
                (own_cache(&config, resume), request.clone(), tally.clone());
            monoio::spawn(async move {
                while Instant::now() < end {
                    let t0 = Instant::now();
                    let r = monoio::time::timeout(
                        EXCHANGE_TIMEOUT,
                        exchange(&config, addr, request.clone()),
                    )
                    .await;
                    let mut t = tally.borrow_mut();
                    match r {
                        Ok(Ok((status_ok, resumed))) => {
                            let us = t0.elapsed().as_micros().max(1) as u64;
                            let _ = t.hist.record(us.min(60_000_000));
                            t.resumed += u64::from(resumed);
                            t.non_200 += u64::from(!status_ok);
                        }
                        Ok(Err((kind, _))) => t.errors[kind] += 1,
                        Err(_) => t.errors[2] += 1,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await;
    }
    Rc::try_unwrap(tally)
        .map(RefCell::into_inner)
        .map_err(|_| io::Error::other("loader tasks still hold the tally"))
}

/// A copy of `config` with a session cache of its own when it resumes: each connection resumes
/// its own last session, as each wrk connection does. (One cache shared by all connections runs
/// dry: rustls keeps 8 tickets per server, and 64 connections finishing together drop the rest,
/// so only about half of the handshakes resumed.)
fn own_cache(config: &Arc<rustls::ClientConfig>, resume: bool) -> Arc<rustls::ClientConfig> {
    if !resume {
        return config.clone();
    }
    let mut c = (**config).clone();
    c.resumption = rustls::client::Resumption::in_memory_sessions(8);
    Arc::new(c)
}

/// One connection: connect, handshake (inside the first write), request, answer to EOF.
/// `Ok((answered 200, resumed))`; `Err((0, _))` for a connect error, `Err((1, _))` for the rest.
async fn exchange(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    request: Rc<Vec<u8>>,
) -> Result<(bool, bool), (usize, io::Error)> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| (0, e))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from("localhost").map_err(|e| (1, io::Error::other(e)))?;
    let conn = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|e| (1, io::Error::other(e)))?;
    let mut tls = TlsStream::new(tcp, conn);
    let (res, _) = tls.write_all(request).await;
    res.map_err(|e| (1, e))?;
    let resumed = matches!(
        tls.conn().handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    let mut first: Option<bool> = None;
    let mut buf = Vec::with_capacity(16 * 1024);
    loop {
        let (res, b) = tls.read(buf).await;
        buf = b;
        match res.map_err(|e| (1, e))? {
            0 => break,
            n => {
                if first.is_none() {
                    first = Some(buf[..n].starts_with(b"HTTP/1.1 200"));
                }
            }
        }
    }
    match first {
        Some(ok) => Ok((ok, resumed)),
        None => Err((1, io::Error::new(io::ErrorKind::UnexpectedEof, "no answer"))),
    }
}

/// The tally in wrk's terms.
fn to_result(t: &Tally, duration: Duration) -> io::Result<WrkResult> {
    let requests = t.hist.len();
    if requests == 0 {
        return Err(io::Error::other(format!(
            "no exchange succeeded (errors connect {} tls/io {} timeout {})",
            t.errors[0], t.errors[1], t.errors[2]
        )));
    }
    let us = Duration::from_micros;
    let mut detail = Vec::new();
    for (name, n) in ["connect", "read", "timeout"].iter().zip(t.errors) {
        if n > 0 {
            detail.push(format!("{name} {n}"));
        }
    }
    Ok(WrkResult {
        requests,
        window: duration,
        req_per_sec: requests as f64 / duration.as_secs_f64(),
        p50: us(t.hist.value_at_quantile(0.5)),
        p99: us(t.hist.value_at_quantile(0.99)),
        socket_errors: t.errors.iter().sum(),
        socket_detail: detail.join(", "),
        non_2xx: t.non_200,
        percentiles: PERCENTILES
            .iter()
            .map(|&p| (p, us(t.hist.value_at_quantile(p / 100.0))))
            .collect(),
        max: Some(us(t.hist.max())),
        protocol: None,
    })
}
