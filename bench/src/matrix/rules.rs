//! `edge-bench matrix` group h, traffic rules (DESIGN.md "Fault matrix"): a client over its rate limit
//! on 64 connections spread over two workers gets 429s, its admitted requests stay within 5 % of
//! `rate × time + burst` (the limit is exact for the process, not per core), while another client
//! address and the health probes (the runner's invariants) are unaffected.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config_with_send;
use super::origin::{ok, Conn, ScriptOrigin};
use super::runner::{run_case, Check, Edge, HealthRule, Row};

/// The limit: requests per second and burst.
const RATE: f64 = 200.0;
const BURST: f64 = 50.0;

/// How long the limited client sends.
const SEND_FOR: Duration = Duration::from_secs(3);

/// Group h's rate-limit case: one edge with two workers, a per-client limit on every path.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_h_rate_limit(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let origin = ScriptOrigin::serve(|_| ok(b"ok"))?;
    let toml = format!(
        "{}\n[[upstreams]]\nname = \"origin\"\nendpoints = [\"{}\"]\n\n\
         [[rate_limits]]\nname = \"per-client\"\nrate = \"{RATE}/s\"\nburst = {BURST}\n\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"origin\"\nrate_limit = \"per-client\"\n",
        config_with_send("workers = 2\nmax_requests_per_connection = 1000000", "2s"),
        origin.addr()
    );
    let edge = Edge::start(bin, "matrix-h-limit", &toml, driver, &[])?;
    let rows = vec![run_case(
        &edge,
        "h",
        "a client over its rate limit on 64 connections over 2 workers",
        "429s; admitted within 5 % of rate × time + burst; another client and health unaffected",
        HealthRule::Strict,
        over_the_limit,
    )];
    edge.stop();
    drop(origin);
    Ok(rows)
}

/// 8 threads of 8 keep-alive connections from 127.0.0.1 send as fast as answered for [`SEND_FOR`];
/// meanwhile a client from 127.0.0.2 sends 20 requests a second.
fn over_the_limit(e: &Edge) -> io::Result<Check> {
    let addr = e.traffic;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let other = {
        let stop = stop.clone();
        std::thread::spawn(move || -> io::Result<(u64, u64)> {
            let mut c = Conn::from_stream(connect_from(addr, "127.0.0.2".parse().unwrap())?);
            let (mut ok, mut other) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                match get(&mut c)? {
                    200 => ok += 1,
                    _ => other += 1,
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok((ok, other))
        })
    };
    let hammers: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || -> io::Result<(u64, u64, u64)> {
                let mut conns = (0..8)
                    .map(|_| Conn::open(addr))
                    .collect::<io::Result<Vec<_>>>()?;
                let (mut ok, mut limited, mut other) = (0, 0, 0);
                let mut i = 0;
                while started.elapsed() < SEND_FOR {
                    match get(&mut conns[i % 8])? {
                        200 => ok += 1,
                        429 => limited += 1,
                        _ => other += 1,
                    }
                    i += 1;
                }
                Ok((ok, limited, other))
            })
        })
        .collect();
    let mut totals = (0u64, 0u64, 0u64);
    for h in hammers {
        let (a, b, c) = h
            .join()
            .map_err(|_| io::Error::other("a client thread panicked"))??;
        totals = (totals.0 + a, totals.1 + b, totals.2 + c);
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (other_ok, other_bad) = other
        .join()
        .map_err(|_| io::Error::other("the other client's thread panicked"))??;
    let (admitted, limited, unexpected) = totals;
    let expected = RATE * elapsed + BURST + 1.0;
    let mut k = Check::seen(format!(
        "{admitted} admitted ({expected:.0} expected), {limited} limited, {unexpected} other; \
         other client {other_ok} ok, {other_bad} not"
    ));
    k.expect(limited > admitted, || {
        "the client did not go over its limit".into()
    });
    k.expect(
        (admitted as f64 - expected).abs() <= 0.05 * expected,
        || format!("{admitted} admitted, not within 5 % of {expected:.0}"),
    );
    k.expect(unexpected == 0, || {
        format!("{unexpected} answers neither 200 nor 429")
    });
    k.expect(other_bad == 0 && other_ok > 0, || {
        "the other client was limited".into()
    });
    let counted = e.metric("edge_requests_limited_total", &[("limit", "per-client")]);
    k.expect(counted as u64 == limited, || {
        format!("edge_requests_limited_total says {counted}, the clients saw {limited}")
    });
    Ok(std::mem::take(&mut k))
}

/// A keep-alive GET of `/` on `c`: its status.
fn get(c: &mut Conn) -> io::Result<u16> {
    c.send(b"GET / HTTP/1.1\r\nHost: matrix\r\n\r\n")?;
    Ok(c.read_response(Instant::now() + Duration::from_secs(5))?
        .status)
}

/// A connection to `addr` from the loopback address `local` (a second client address).
fn connect_from(addr: SocketAddr, local: IpAddr) -> io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(local, 0).into())?;
    sock.connect_timeout(&addr.into(), Duration::from_secs(2))?;
    sock.set_tcp_nodelay(true)?;
    Ok(sock.into())
}
