//! [`WsOrigin`]: a WebSocket origin over HTTP/1.1 (RFC 6455 §4.2) for the upgrade tests. It checks the
//! opening handshake it got (GET, `Upgrade: websocket`, `Connection: upgrade`, `Sec-WebSocket-Version:
//! 13`, a 24-byte key) and answers `101` with the key's Sec-WebSocket-Accept, the first offered
//! subprotocol and the offered extensions; then it echoes bytes as they come (not WebSocket frames: the
//! tests check a byte tunnel) and, at EOF, sends `bye` and closes. By path:
//! - `/deny`: `403` with the body `denied`, keep-alive;
//! - `/bad-accept`: a `101` whose Sec-WebSocket-Accept answers another key;
//! - `/close`: after the `101`, sends `hi` and closes at once;
//! - a request without Upgrade: `200` with the body `plain`, keep-alive;
//! - a handshake that fails the checks: `400` with the reason.
//!
//! Every request goes to [`WsOrigin::heads`], every tunnel's end (`"eof"` or `"error"`, with its path)
//! to [`WsOrigin::ends`].

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{mpsc, Mutex},
};

use super::{read_request, Origin, Seen};

pub struct WsOrigin {
    pub origin: Origin,
    pub heads: Mutex<mpsc::Receiver<Seen>>,
    pub ends: Mutex<mpsc::Receiver<(String, &'static str)>>,
}

impl WsOrigin {
    pub fn start() -> WsOrigin {
        let (head_tx, heads) = mpsc::channel();
        let (end_tx, ends) = mpsc::channel();
        let (head_tx, end_tx) = (Mutex::new(head_tx), Mutex::new(end_tx));
        let origin = Origin::script(move |s, _| {
            let (heads, ends) = (
                head_tx.lock().unwrap().clone(),
                end_tx.lock().unwrap().clone(),
            );
            serve(s, &heads, &ends)
        });
        WsOrigin {
            origin,
            heads: Mutex::new(heads),
            ends: Mutex::new(ends),
        }
    }

    /// The next request head the origin got (5 s at most).
    pub fn next_head(&self) -> Seen {
        let timeout = std::time::Duration::from_secs(5);
        self.heads
            .lock()
            .unwrap()
            .recv_timeout(timeout)
            .expect("a request at the origin")
    }

    /// The next tunnel end at the origin (5 s at most): (path, `"eof"` or `"error"`).
    pub fn next_end(&self) -> (String, &'static str) {
        let timeout = std::time::Duration::from_secs(5);
        self.ends
            .lock()
            .unwrap()
            .recv_timeout(timeout)
            .expect("a tunnel end at the origin")
    }
}

/// What is wrong with `req` as a WebSocket opening handshake (RFC 6455 §4.2.1), if anything.
fn handshake_error(req: &Seen) -> Option<&'static str> {
    let has = |name, token: &str| {
        req.header(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if req.method != "GET" || req.minor != 1 {
        return Some("not GET HTTP/1.1");
    }
    if !has("upgrade", "websocket") || !has("connection", "upgrade") {
        return Some("no Upgrade: websocket with Connection: upgrade");
    }
    if req.header("sec-websocket-version") != Some("13") {
        return Some("Sec-WebSocket-Version is not 13");
    }
    if req.header("sec-websocket-key").map(str::len) != Some(24) {
        return Some("no 24-byte Sec-WebSocket-Key");
    }
    None
}

/// Serves one connection (see the module's text).
fn serve(
    mut s: TcpStream,
    heads: &mpsc::Sender<Seen>,
    ends: &mpsc::Sender<(String, &'static str)>,
) {
    let mut buf = Vec::new();
    while let Some((req, used)) = read_request(&mut s, &mut buf) {
        buf.drain(..used);
        let _ = heads.send(req.clone());
        let reply = |code: &str, body: &str| {
            format!(
                "HTTP/1.1 {code}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        let answer = match (req.header("upgrade"), req.target.as_str()) {
            (None, _) => reply("200 OK", "plain"),
            (Some(_), "/deny") => reply("403 Forbidden", "denied"),
            _ => match handshake_error(&req) {
                Some(why) => reply("400 Bad Request", why),
                None => return switched(s, &req, buf, ends),
            },
        };
        if s.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Answers the checked handshake `req` with `101`, then runs the tunnel (`buf`: bytes already read).
fn switched(
    mut s: TcpStream,
    req: &Seen,
    mut buf: Vec<u8>,
    ends: &mpsc::Sender<(String, &'static str)>,
) {
    let key = match req.target.as_str() {
        "/bad-accept" => "dGhlIHNhbXBsZSBub25jZQ==",
        _ => req.header("sec-websocket-key").unwrap(),
    };
    let accept = edge_core::websocket::accept(key.as_bytes());
    let mut head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nX-Origin: ws\r\n",
        String::from_utf8_lossy(&accept)
    );
    if let Some(p) = req.header("sec-websocket-protocol") {
        head.push_str(&format!(
            "Sec-WebSocket-Protocol: {}\r\n",
            p.split(',').next().unwrap().trim()
        ));
    }
    if let Some(e) = req.header("sec-websocket-extensions") {
        head.push_str(&format!("Sec-WebSocket-Extensions: {e}\r\n"));
    }
    head.push_str("\r\n");
    if s.write_all(head.as_bytes()).is_err() {
        return;
    }
    if req.target == "/close" {
        let _ = s.write_all(b"hi");
        let _ = ends.send((req.target.clone(), "eof"));
        return;
    }
    if !buf.is_empty() && s.write_all(&std::mem::take(&mut buf)).is_err() {
        let _ = ends.send((req.target.clone(), "error"));
        return;
    }
    let mut b = vec![0u8; 65536];
    let end = loop {
        match s.read(&mut b) {
            Ok(0) => break "eof",
            Ok(n) => {
                if s.write_all(&b[..n]).is_err() {
                    break "error";
                }
            }
            Err(_) => break "error",
        }
    };
    if end == "eof" {
        let _ = s.write_all(b"bye");
    }
    let _ = ends.send((req.target.clone(), end));
}
