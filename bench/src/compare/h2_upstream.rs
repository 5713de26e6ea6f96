//! The HTTP/2-upstream workloads of `edge-bench compare` (DESIGN.md "Benchmark method": gRPC and
//! HTTP/2 upstreams): `grpc-unary`, `grpc-stream` and `h1-to-h2`, their h2c origin, the proxies'
//! configurations and the count of upstream connections.
//!
//! The origin is one edge's authors did not write: nginx 1.22 as an h2c origin (`listen … http2` on
//! a plain port is HTTP/2 with prior knowledge only), `return 200` on `/fast`, and the gRPC answers
//! as static files whose bytes are length-prefixed messages ([`UNARY_PATH`]: one message,
//! [`STREAM_PATH`]: [`STREAM_MESSAGES`] of them) with `default_type application/grpc` and
//! `add_trailer grpc-status 0 always`; nginx's static module refuses POST with 405, so
//! `error_page 405 =200 $uri` serves the file for the POSTed call. It is checked with one h2c GET
//! before use; when nginx cannot serve it, `edge-bench origin --h2c` is the fallback (printed).
//!
//! The proxies, one worker each, every one with an HTTP/1.1 listener (the health check and
//! `h1-to-h2`) and an h2c listener (the gRPC workloads):
//! - edge: `server.h2c = true` (its plain listener takes both), an upstream with `protocol = "h2"`
//!   and `max_streams_per_connection = 100`; until edge has HTTP/2 upstreams this config does not
//!   load and the edge targets fail to start, which the run reports;
//! - nginx: `grpc_pass grpc://origin` with `upstream origin { …; keepalive 64; }` on a
//!   `listen … http2` server (h2c) and on a plain one for `h1-to-h2`: nginx 1.22's `proxy_pass`
//!   has no HTTP/2 (`proxy_http_version` stops at 1.1), so `grpc_pass`, which speaks HTTP/2 to the
//!   upstream for any request, stands in for it; nginx's gRPC proxy does not multiplex (one upstream
//!   connection per concurrent call);
//! - HAProxy: `bind … proto h2` (h2c in) and `server … proto h2` (h2c out), `http-reuse always`.
//!
//! Counting: h2load counts HTTP statuses only, not `grpc-status` (a call that ends with
//! `grpc-status: 14` under a 200 counts as a success): the tables count HTTP errors (non-2xx and
//! failed streams). `grpc-stream` reports messages/s = responses/s × [`STREAM_MESSAGES`] (every
//! answer carries that many messages: a server-streaming call measured by h2load, which has no
//! streaming-call mode; ghz or a gRPC client would measure the same shape with more CPU on the load
//! side). Upstream connections: the most connections in ESTABLISHED state to the origin's port seen
//! while the run lasts (sampled every [`CONN_SAMPLE`] from `/proc/net/tcp`, what
//! `ss -tn state established dst ORIGIN` lists); every proxy runs one worker, so that is per worker.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::peers::grpc;
use crate::peers::h2_client::{block_on, connect, request, within, H2Request};

/// The request message of the gRPC workloads (a small message: 64 bytes).
pub const MESSAGE: &[u8] = b"edge-bench grpc message: sixty-four bytes of payload, no more...";

/// The unary call's path.
pub const UNARY_PATH: &str = "/bench.Echo/Unary";

/// Messages of every server-streaming answer.
pub const STREAM_MESSAGES: usize = 100;

/// The server-streaming call's path (the h2c origin reads the count from it).
pub const STREAM_PATH: &str = "/bench.Echo/Stream100";

/// How often the upstream connections are counted during a run.
pub const CONN_SAMPLE: Duration = Duration::from_millis(500);

/// Upstream connections each proxy keeps idle (nginx `keepalive`).
pub const KEEPALIVE: usize = 64;

/// Concurrent streams per upstream connection for edge (`max_streams_per_connection`).
pub const MAX_STREAMS: usize = 100;

/// The proxies' settings of these workloads, for the results' headers.
pub const SETTINGS: &str = "h2c origin (nginx, else edge-bench origin --h2c); every proxy 1 worker: \
     edge protocol = \"h2\", max_streams_per_connection 100, h2c = true; nginx grpc_pass with upstream \
     keepalive 64 (no HTTP/2 proxy_pass in nginx 1.22); HAProxy server proto h2, bind proto h2, \
     http-reuse always. h2load counts HTTP status only, not grpc-status";

/// h2load's request body file of the gRPC workloads (one framed [`MESSAGE`]) under `dir`.
///
/// # Errors
/// The file cannot be written.
pub fn message_file(dir: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let path = dir.join("grpc-message.bin");
    fs::write(&path, grpc::frame(MESSAGE))?;
    Ok(path)
}

/// The nginx h2c origin's configuration, serving its gRPC answers from `www` (see the module docs).
pub fn nginx_h2c_origin_config(dir: &Path, listen: SocketAddr, www: &Path) -> String {
    let preamble = super::proxies::nginx_preamble(dir);
    format!(
        "# written by edge-bench compare: the nginx h2c origin
{preamble}
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    http2_max_concurrent_streams 1024;
    default_type text/plain;
    server {{
        listen {listen} http2 backlog=4096;
        location /fast {{
            return 200 \"hello, world\\n\";
        }}
        location /bench.Echo/ {{
            root {www};
            default_type application/grpc;
            add_trailer grpc-status 0 always;
            error_page 405 =200 $uri;
        }}
    }}
}}
",
        www = www.display()
    )
}

/// Writes the gRPC answers the nginx origin serves under `www/bench.Echo/`.
///
/// # Errors
/// The files cannot be written.
pub fn write_grpc_answers(www: &Path) -> io::Result<()> {
    let dir = www.join("bench.Echo");
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("Unary"), grpc::frame(MESSAGE))?;
    fs::write(
        dir.join(format!("Stream{STREAM_MESSAGES}")),
        crate::peers::origin::h2c::stream_body(MESSAGE, STREAM_MESSAGES),
    )?;
    Ok(())
}

/// One h2c `GET path` to `addr` answered 200 within `limit` (the h2c origin's health check).
///
/// # Errors
/// Connect, handshake or stream failures, a status other than 200, or the time running out.
pub fn h2c_get_ok(addr: SocketAddr, path: &str, limit: Duration) -> io::Result<()> {
    let path = path.to_string();
    let r = block_on(within(limit, async move {
        let c = connect(addr).await?;
        request(
            &c.send,
            H2Request {
                method: "GET",
                path: &path,
                ..Default::default()
            },
        )
        .await
    }));
    match r {
        Ok(r) if r.status == 200 => Ok(()),
        Ok(r) => Err(io::Error::other(format!("h2c GET answered {}", r.status))),
        Err(e) => Err(io::Error::other(format!("h2c GET: {e}"))),
    }
}

/// edge's config for these workloads: h2c on the plain listener, an h2 upstream.
pub fn edge_toml(origin: SocketAddr) -> String {
    format!(
        "# written by edge-bench compare: the HTTP/2-upstream workloads
[server]
h2c = true
max_requests_per_connection = {}
[[upstreams]]
name = \"origin\"
endpoints = [\"{origin}\"]
protocol = \"h2\"
max_streams_per_connection = {MAX_STREAMS}
pool_max_idle = {KEEPALIVE}
[[routes]]
path_prefix = \"/\"
upstream = \"origin\"
",
        super::proxies::H2_MAX_REQUESTS
    )
}

/// nginx as the gRPC / HTTP/2-upstream proxy: `grpc_pass` on an HTTP/1.1 and an h2c listener.
pub fn nginx_config(dir: &Path, listen: SocketAddr, h2c: SocketAddr, origin: SocketAddr) -> String {
    let preamble = super::proxies::nginx_preamble(dir);
    format!(
        "# written by edge-bench compare: the HTTP/2-upstream workloads
{preamble}
    client_max_body_size 0;
    keepalive_requests {};
    http2_max_concurrent_streams 1024;
    upstream origin {{
        server {origin};
        keepalive {KEEPALIVE};
    }}
    server {{
        listen {listen};
        location / {{
            grpc_pass grpc://origin;
        }}
    }}
    server {{
        listen {h2c} http2;
        location / {{
            grpc_pass grpc://origin;
        }}
    }}
}}
",
        super::proxies::H2_MAX_REQUESTS
    )
}

/// HAProxy as the HTTP/2-upstream proxy: an HTTP/1.1 and an h2c (`proto h2`) frontend, an h2c
/// server.
pub fn haproxy_config(listen: SocketAddr, h2c: SocketAddr, origin: SocketAddr) -> String {
    format!(
        "# written by edge-bench compare: the HTTP/2-upstream workloads
global
    nbthread 1
    maxconn 4000

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend bench
    bind {listen}
    default_backend origin

frontend bench_h2c
    bind {h2c} proto h2
    default_backend origin

backend origin
    server origin {origin} proto h2
"
    )
}

/// Connections in ESTABLISHED state whose remote end is `to`, in `/proc/net/tcp` text (IPv4).
pub fn count_established_to(proc_net_tcp: &str, to: SocketAddr) -> u64 {
    let SocketAddr::V4(to) = to else {
        return 0;
    };
    // The kernel prints the address as the u32 in host order, in hex, then the port.
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(to.ip().octets()),
        to.port()
    );
    proc_net_tcp
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.get(2) == Some(&want.as_str()) && cols.get(3) == Some(&"01")
        })
        .count() as u64
}

/// Counts the connections to `origin` every [`CONN_SAMPLE`] on a thread of its own while a run
/// lasts; [`ConnSampler::finish`] gives the peak.
pub struct ConnSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ConnSampler {
    /// Starts sampling.
    pub fn start(origin: SocketAddr) -> ConnSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(text) = fs::read_to_string("/proc/net/tcp") {
                    p.fetch_max(count_established_to(&text, origin), Ordering::Relaxed);
                }
                std::thread::sleep(CONN_SAMPLE);
            }
        });
        ConnSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the most connections seen.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_connections_to_a_port() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue
   0: 0100007F:9C40 0100007F:1F91 01 00000000:00000000 00:00000000 00000000     0
   1: 0100007F:9C41 0100007F:1F91 06 00000000:00000000 00:00000000 00000000     0
   2: 0100007F:1F91 0100007F:9C42 01 00000000:00000000 00:00000000 00000000     0
   3: 0100007F:9C43 0100007F:1F91 01 00000000:00000000 00:00000000 00000000     0
";
        let origin: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(count_established_to(text, origin), 2);
        // The live table: our connection is there (other processes' sockets may also name the port
        // as their remote end while tests run in parallel, so at least one).
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let live_after = fs::read_to_string("/proc/net/tcp").unwrap();
        assert!(count_established_to(&live_after, l.local_addr().unwrap()) >= 1);
    }

    #[test]
    fn the_message_is_64_bytes() {
        assert_eq!(MESSAGE.len(), 64);
        assert_eq!(grpc::frame(MESSAGE).len(), 69);
    }

    #[test]
    fn configs() {
        let (l, h, o): (SocketAddr, SocketAddr, SocketAddr) = (
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:1001".parse().unwrap(),
            "127.0.0.1:2000".parse().unwrap(),
        );
        let n = nginx_config(Path::new("/tmp/x"), l, h, o);
        assert!(n.contains("listen 127.0.0.1:1001 http2;") && n.contains("keepalive 64;"));
        assert_eq!(n.matches("grpc_pass grpc://origin;").count(), 2);
        assert_eq!(n.matches('{').count(), n.matches('}').count());
        let ha = haproxy_config(l, h, o);
        assert!(ha.contains("bind 127.0.0.1:1001 proto h2"));
        assert!(ha.contains("server origin 127.0.0.1:2000 proto h2"));
        let e = edge_toml(o);
        assert!(e.contains("protocol = \"h2\"") && e.contains("h2c = true"));
        let origin = nginx_h2c_origin_config(Path::new("/tmp/x"), o, Path::new("/tmp/w"));
        assert!(origin.contains("listen 127.0.0.1:2000 http2") && origin.contains("root /tmp/w;"));
        assert!(origin.contains("add_trailer grpc-status 0 always;"));
        assert_eq!(origin.matches('{').count(), origin.matches('}').count());
    }
}
