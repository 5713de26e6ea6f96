//! `edge-bench matrix` group f, the PROXY protocol (DESIGN.md "Fault matrix", "Upstream health,
//! discovery and balancing"): a v2 header from an allowed peer (its source address reaches the origin in
//! X-Forwarded-For) and from another peer (closed, counted). The allowed peer is 127.0.0.2 (the client
//! binds it before connecting); the health prober connects from 127.0.0.1 without a header.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use super::base_config;
use super::origin::{ok, Conn, ScriptOrigin};
use super::runner::{run_case, Check, Edge, HealthRule, Row};

/// The source address the headers claim.
const CLAIMED: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);

/// A PROXY v2 header (PROXY command, TCP over IPv4) from `src` to `dst` (haproxy's proxy-protocol.txt
/// §2.2).
fn v2_header(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0x00, 12]);
    for a in [src, dst] {
        if let std::net::IpAddr::V4(ip) = a.ip() {
            h.extend_from_slice(&ip.octets());
        }
    }
    h.extend_from_slice(&src.port().to_be_bytes());
    h.extend_from_slice(&dst.port().to_be_bytes());
    h
}

/// A connection to `to` from `from` (port 0).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::from((from, 0)).into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(2))?;
    Ok(s.into())
}

/// An origin answering every request with the X-Forwarded-For it received.
fn xff_origin() -> io::Result<ScriptOrigin> {
    ScriptOrigin::start(|mut s, _| {
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(n) if n > 0 => buf.extend_from_slice(&b[..n]),
                    _ => return,
                }
            }
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            buf.drain(..end);
            let xff = head
                .lines()
                .find_map(|l| l.strip_prefix("X-Forwarded-For: "))
                .unwrap_or("-")
                .to_string();
            if s.write_all(&ok(xff.as_bytes())).is_err() {
                return;
            }
        }
    })
}

/// The two PROXY protocol cases on one edge with `proxy_protocol = "v2"` from 127.0.0.2 only.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn proxy_cases(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let origin = xff_origin()?;
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let cfg = base_config("proxy_protocol = \"v2\"\nproxy_protocol_from = [\"127.0.0.2/32\"]");
    let edge = Edge::start(bin, "matrix-f-proxy", &cfg, &extra, &[])?;
    let mut rows = vec![run_case(
        &edge,
        "f",
        "PROXY v2 from an allowed peer",
        "200, its source in X-Forwarded-For",
        HealthRule::Strict,
        |e| {
            let s = connect_from(Ipv4Addr::new(127, 0, 0, 2), e.traffic)?;
            let mut c = Conn::from_stream(s);
            let mut bytes = v2_header(SocketAddr::from((CLAIMED, 40000)), e.traffic);
            bytes.extend_from_slice(b"GET /xff HTTP/1.1\r\nHost: x\r\n\r\n");
            c.send(&bytes)?;
            let r = c.read_response(Instant::now() + Duration::from_secs(2))?;
            let body = String::from_utf8_lossy(&r.body).to_string();
            let mut k = Check::seen(format!("{} X-Forwarded-For {body:?}", r.status));
            k.expect(r.status == 200, || format!("status {}", r.status))
                .expect(body == CLAIMED.to_string(), || {
                    format!("origin saw X-Forwarded-For {body:?}")
                });
            Ok(k)
        },
    )];
    rows.push(run_case(
        &edge,
        "f",
        "PROXY v2 from another peer",
        "closed, counted",
        HealthRule::Strict,
        |e| {
            let shed0 = e.metric(
                "edge_connections_shed_total",
                &[("reason", "proxy_protocol")],
            );
            let mut c = Conn::open(e.traffic)?;
            let mut bytes = v2_header(SocketAddr::from((CLAIMED, 40000)), e.traffic);
            bytes.extend_from_slice(b"GET /xff HTTP/1.1\r\nHost: x\r\n\r\n");
            c.send(&bytes)?;
            let closed = c.wait_closed(Duration::from_secs(2));
            let shed = e.metric(
                "edge_connections_shed_total",
                &[("reason", "proxy_protocol")],
            ) - shed0;
            let mut k = Check::seen(format!("closed after {closed:?}, shed +{shed}"));
            k.expect(closed.is_some(), || "not closed within 2 s".into())
                .expect(shed == 1.0, || {
                    format!("edge_connections_shed_total{{reason=\"proxy_protocol\"}} +{shed}")
                });
            Ok(k)
        },
    ));
    edge.stop();
    Ok(rows)
}
