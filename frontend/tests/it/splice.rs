//! Response bodies by splice (DESIGN.md "Memory under slow readers and large bodies"): a plain
//! `Content-Length` body to a client that keeps up goes from the upstream's socket to the client's
//! through a pipe (`edge_relay_spliced_total`). It arrives whole and byte-exact, both connections stay
//! usable afterwards, and its failures are answered as the copy's are: an upstream that closes early
//! truncates the response, a client that stops reading is cut off at `send`.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::Arc,
    thread,
    time::Duration,
};

use crate::harness::{Cfg, Edge, Origin, Reply};

/// A body of many relay chunks (256 KiB), so the relay reaches the full pace and splices the rest.
const BODY: usize = 8 << 20;

fn byte_at(i: usize) -> u8 {
    (i % 251) as u8
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(byte_at).collect()
}

/// Sends `GET /big` on `s` and reads the response head; returns its Content-Length and the body bytes
/// that came with it.
fn get_head(s: &mut TcpStream) -> (usize, Vec<u8>) {
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the head");
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Content-Length");
    (len, got.split_off(end))
}

/// Reads body bytes after `got` until `len` or the connection's end; returns how many matched the
/// pattern in a row from the start (all of them for a whole, byte-exact body).
fn read_body(s: &mut TcpStream, mut got: Vec<u8>, len: usize) -> usize {
    let mut buf = vec![0u8; 256 * 1024];
    while got.len() < len {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got.iter()
        .enumerate()
        .take_while(|&(i, b)| *b == byte_at(i))
        .count()
}

/// Runs `attempt` (its 1-based number, a connection that asked for `/big`, the Content-Length and the
/// body bytes that came with the head) until a body went by splice: the relay splices once its client
/// has kept up for a few chunks, and a loaded machine may keep an attempt on the copy, whose failures
/// are answered the same way. At most 5 attempts.
fn until_spliced(edge: &Edge, mut attempt: impl FnMut(usize, TcpStream, usize, Vec<u8>)) {
    let mut attempts = 0;
    while edge.metric("edge_relay_spliced_total", &[]) == 0.0 {
        attempts += 1;
        assert!(attempts <= 5, "no attempt went by splice");
        let mut s = connect(edge.addr);
        let (len, first) = get_head(&mut s);
        attempt(attempts, s, len, first);
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

both_drivers!(
    fast_clients_get_spliced_bodies_whole_on_kept_alive_connections,
    |d| {
        let body = Arc::new(pattern(BODY));
        let origin = Origin::start(move |_| Reply::ok(&body));
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let addr = edge.addr;
                thread::spawn(move || {
                    let mut s = connect(addr);
                    (0..2)
                        .map(|_| {
                            let (len, first) = get_head(&mut s);
                            assert_eq!(len, BODY);
                            read_body(&mut s, first, len)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for c in clients {
            assert_eq!(c.join().unwrap(), [BODY, BODY], "whole, byte-exact bodies");
        }
        assert!(
            edge.metric("edge_relay_spliced_total", &[]) >= 1.0,
            "no body went by splice"
        );
        // The second request of each client reused the upstream connection of its first: a spliced body
        // leaves nothing behind on it.
        assert_eq!(origin.accepted.load(std::sync::atomic::Ordering::SeqCst), 4);
        edge.assert_upstream_settled();
    }
);

both_drivers!(
    an_upstream_closing_mid_spliced_body_truncates_the_response,
    |d| {
        const SENT: usize = 4 << 20;
        let origin = Origin::script(|mut s, _| {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&pattern(SENT));
        });
        let edge = Edge::start(&Cfg::new(d, origin.addr));
        until_spliced(&edge, |attempts, mut s, len, first| {
            assert_eq!(len, BODY);
            assert_eq!(
                read_body(&mut s, first, len),
                SENT,
                "what the upstream sent, then the end"
            );
            edge.assert_counted_and_logged(
                "edge_responses_truncated_total",
                &[],
                attempts as f64,
                "upstream closed before the end of the body",
            );
        });
        edge.assert_upstream_settled();
    }
);

both_drivers!(
    a_client_that_stops_reading_a_spliced_body_is_cut_off_at_send,
    |d| {
        /// More than the socket buffers on both sides hold.
        const LARGE: usize = 64 << 20;
        let body = Arc::new(pattern(LARGE));
        let origin = Origin::start(move |_| Reply::ok(&body));
        let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("send", "1s"));
        until_spliced(&edge, |attempts, mut s, len, first| {
            assert_eq!(len, LARGE);
            // Read 2 MiB fast, then nothing.
            let mut seen = first.len();
            let mut buf = vec![0u8; 256 * 1024];
            while seen < 2 << 20 {
                seen += s.read(&mut buf).unwrap();
            }
            edge.assert_counted_and_logged(
                "edge_responses_truncated_total",
                &[],
                attempts as f64,
                "client stopped reading",
            );
        });
        // The worker goes on serving.
        let mut s = connect(edge.addr);
        let (len, first) = get_head(&mut s);
        assert_eq!(read_body(&mut s, first, len), LARGE);
        edge.assert_upstream_settled();
    }
);
