//! The PROXY protocol sent to upstreams (`send_proxy_protocol`, DESIGN.md "Observability"): every new
//! upstream connection starts with a v1 or v2 header carrying the client address edge uses (here the
//! inbound PROXY header's source) and edge's local address; a pooled connection is reused only for
//! requests of the client connection its header described; health checks send a LOCAL (v2) or
//! `UNKNOWN` (v1) header. The origin here parses the header with edge's own parser and answers each
//! request with what the header of its connection said.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
    time::Duration,
};

use edge_core::proxy_protocol::{parse, Parse, Source, Versions};

use crate::harness::{read_request, wait_until, Cfg, Client, Driver, Edge};

/// What the origin saw of one upstream connection: the header's source (`None`: LOCAL / UNKNOWN) and
/// destination (v1 and v2 TCP headers), and the targets requested on it.
#[derive(Clone, Debug, Default)]
struct Seen {
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
    targets: Vec<String>,
}

/// An origin whose every connection must start with a PROXY header.
struct ProxiedOrigin {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<Seen>>>,
}

impl ProxiedOrigin {
    fn start() -> ProxiedOrigin {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let all = conns.clone();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                let all = all.clone();
                thread::spawn(move || serve(s, &all));
            }
        });
        ProxiedOrigin { addr, conns }
    }

    fn conns(&self) -> Vec<Seen> {
        self.conns.lock().unwrap().clone()
    }
}

/// Reads the header (a connection without a valid one is closed unanswered), then answers each request
/// with `conn=N source=S destination=D`.
fn serve(mut s: TcpStream, all: &Mutex<Vec<Seen>>) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let header = loop {
        match parse(&buf, Versions::Any) {
            Ok(Parse::Done(h)) => break h,
            Ok(Parse::Incomplete) => {
                let mut chunk = [0u8; 512];
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            Err(_) => return,
        }
    };
    let seen = Seen {
        source: match header.source {
            Source::Client(a) => Some(a),
            Source::Peer => None,
        },
        destination: destination(&buf[..header.len]),
        targets: Vec::new(),
    };
    buf.drain(..header.len);
    let id = {
        let mut all = all.lock().unwrap();
        all.push(seen.clone());
        all.len() - 1
    };
    while let Some((req, used)) = read_request(&mut s, &mut buf) {
        buf.drain(..used);
        all.lock().unwrap()[id].targets.push(req.target.clone());
        let body = format!(
            "conn={id} source={} destination={}",
            seen.source.map_or("-".into(), |a| a.to_string()),
            seen.destination.map_or("-".into(), |a| a.to_string())
        );
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        if s.write_all(head.as_bytes())
            .and_then(|()| s.write_all(body.as_bytes()))
            .is_err()
        {
            return;
        }
    }
}

/// The destination address of a v1 `TCP4`/`TCP6` line or a v2 TCP over IPv4 header.
fn destination(h: &[u8]) -> Option<SocketAddr> {
    if let Some(line) = h.strip_prefix(b"PROXY ") {
        let line = std::str::from_utf8(line).ok()?.trim_end();
        let f: Vec<&str> = line.split(' ').collect();
        let ip: std::net::IpAddr = f.get(2)?.parse().ok()?;
        return Some(SocketAddr::new(ip, f.get(4)?.parse().ok()?));
    }
    // v2: signature (12), version/command, family, length (2), then the addresses.
    match h.get(13)? {
        0x11 => {
            let a = &h[16..28];
            let ip = std::net::Ipv4Addr::new(a[4], a[5], a[6], a[7]);
            Some(SocketAddr::from((ip, u16::from_be_bytes([a[10], a[11]]))))
        }
        _ => None,
    }
}

/// A v1 inbound header for a client at `client`, sent to edge's `dst`.
fn inbound(client: &str, dst: SocketAddr) -> Vec<u8> {
    let client: SocketAddr = client.parse().unwrap();
    format!(
        "PROXY TCP4 {} {} {} {}\r\n",
        client.ip(),
        dst.ip(),
        client.port(),
        dst.port()
    )
    .into_bytes()
}

/// GET `path` on `c`; the origin's answer.
fn get(c: &mut Client, path: &str) -> String {
    let r = c.get(path);
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

fn run(d: Driver, version: &str) {
    let origin = ProxiedOrigin::start();
    let cfg = Cfg::new(d, origin.addr)
        .server("proxy_protocol", "v1")
        .server("proxy_protocol_from", ["127.0.0.0/8"])
        .upstream_field("send_proxy_protocol", version)
        .health_check("path", "/healthz")
        .health_check("interval", "100ms");
    let edge = Edge::start(&cfg);

    // Client A, through a load balancer that says it is 203.0.113.7:40000: two requests on one
    // connection share one upstream connection whose header names A.
    let mut a = Client::connect(edge.addr);
    a.send(&inbound("203.0.113.7:40000", edge.addr));
    let first = get(&mut a, "/a1");
    let want_a = format!("source=203.0.113.7:40000 destination={}", edge.addr);
    assert!(first.ends_with(&want_a), "{first}");
    assert_eq!(
        get(&mut a, "/a2"),
        first,
        "not the same upstream connection"
    );

    // Client B: never the connection labelled with A, though it sits idle in the pool.
    let mut b = Client::connect(edge.addr);
    b.send(&inbound("203.0.113.8:40001", edge.addr));
    let second = get(&mut b, "/b1");
    let want_b = format!("source=203.0.113.8:40001 destination={}", edge.addr);
    assert!(second.ends_with(&want_b), "{second}");
    assert_ne!(conn_of(&second), conn_of(&first));
    // A's connection is still there for A.
    assert_eq!(get(&mut a, "/a3"), first);

    let traffic: Vec<Seen> = origin
        .conns()
        .into_iter()
        .filter(|c| c.targets.iter().any(|t| t != "/healthz"))
        .collect();
    assert_eq!(traffic.len(), 2, "{traffic:?}");
    for c in &traffic {
        let from_a = c.source == Some("203.0.113.7:40000".parse().unwrap());
        let from_b = c.source == Some("203.0.113.8:40001".parse().unwrap());
        assert!(from_a || from_b, "{c:?}");
        let want: &[&str] = if from_a {
            &["/a1", "/a2", "/a3"]
        } else {
            &["/b1"]
        };
        assert_eq!(c.targets, want, "{c:?}");
        assert_eq!(c.destination, Some(edge.addr));
    }

    // Health probes: edge's own connections, with a LOCAL (v2) / UNKNOWN (v1) header, and they pass.
    assert!(
        wait_until(Duration::from_secs(5), || origin
            .conns()
            .iter()
            .any(|c| c.targets == ["/healthz"])),
        "no probe reached the origin"
    );
    for c in origin.conns().iter().filter(|c| c.targets == ["/healthz"]) {
        assert_eq!(c.source, None, "a probe's header names a client: {c:?}");
    }
    assert!(
        edge.wait_metric_where(
            "edge_upstream_health_checks_total",
            &["result=\"pass\""],
            Duration::from_secs(5),
            |v| v >= 1.0
        ) >= 1.0
    );
}

/// The `conn=N` of an answer.
fn conn_of(answer: &str) -> &str {
    answer.split(' ').next().unwrap()
}

both_drivers!(v1_header_names_each_client_and_is_not_shared, |d| {
    run(d, "v1")
});

both_drivers!(v2_header_names_each_client_and_is_not_shared, |d| {
    run(d, "v2")
});
