//! [`Client`]: a raw HTTP/1.1 client over one TCP connection (bytes in, parsed [`Response`]s out), with
//! the close and timing reads the deadline and drop tests need.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use super::wire::{fill, find_header, owned_headers, read_body, read_chunked};

/// A response as the client saw it.
#[derive(Debug, Default)]
pub struct Response {
    pub status: u16,
    pub minor: u8,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub chunked: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw HTTP/1.1 client over one TCP connection.
pub struct Client {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        Client::try_connect(addr).unwrap()
    }

    /// Like [`Client::connect`], returning the connect error instead of panicking (load loops count it).
    pub fn try_connect(addr: SocketAddr) -> std::io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(15)))?;
        Ok(Client { s, buf: Vec::new() })
    }

    /// Connects from `local` (another loopback address, e.g. 127.0.0.2: a second client address).
    pub fn connect_from(addr: SocketAddr, local: std::net::IpAddr) -> Client {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddr::new(local, 0).into()).unwrap();
        sock.connect(&addr.into()).unwrap();
        let s: TcpStream = sock.into();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        Client { s, buf: Vec::new() }
    }

    /// Connects with a custom read timeout.
    pub fn connect_timeout(addr: SocketAddr, read_timeout: Duration) -> Client {
        let c = Client::connect(addr);
        c.s.set_read_timeout(Some(read_timeout)).unwrap();
        c
    }

    /// Sets the read timeout of later reads.
    pub fn set_timeout(&mut self, d: Duration) {
        self.s.set_read_timeout(Some(d)).unwrap();
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        self.read_response(false).expect("response")
    }

    /// Like [`Client::get`], with `None` for a failed write or a connection closed before a response.
    pub fn try_get(&mut self, path: &str) -> Option<Response> {
        self.s
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .ok()?;
        self.read_response(false)
    }

    /// Reads one response; `head_request` means no body follows. `None` on EOF before a head.
    pub fn read_response(&mut self, head_request: bool) -> Option<Response> {
        let mut r = self.read_head()?;
        if head_request || r.status == 204 || r.status == 304 {
            return Some(r);
        }
        read_body(&mut self.s, &mut self.buf, &mut r)?;
        Some(r)
    }

    /// Reads only a response head (1xx skipped); its body stays buffered. `None` on EOF before a head.
    pub fn read_head(&mut self) -> Option<Response> {
        loop {
            let r = self.read_any_head()?;
            if !(100..200).contains(&r.status) {
                return Some(r);
            }
        }
    }

    /// Reads the next response head, interim (1xx) ones included. `None` on EOF before a head.
    pub fn read_any_head(&mut self) -> Option<Response> {
        super::wire::read_any_head(&mut self.s, &mut self.buf)
    }

    /// Bytes received but not consumed by a parsed response yet.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the bytes received but not consumed by a parsed response yet.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Reads (buffered bytes first) until the peer closes, at most `limit`. Returns the bytes and when the
    /// connection ended (`None`: still open at `limit`). A reset counts as closed.
    pub fn read_until_closed(&mut self, limit: Duration) -> (Vec<u8>, Option<Duration>) {
        let start = Instant::now();
        let mut out = std::mem::take(&mut self.buf);
        let mut tmp = vec![0u8; 65536];
        loop {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return (out, None);
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            match self.s.read(&mut tmp) {
                Ok(0) => return (out, Some(start.elapsed())),
                Ok(n) => out.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return (out, Some(start.elapsed())),
            }
        }
    }

    /// How long until the server closes the connection (reading and discarding), at most `limit`;
    /// `None` when it is still open then.
    pub fn time_until_closed(&mut self, limit: Duration) -> Option<Duration> {
        self.read_until_closed(limit).1
    }

    /// Whether the server closed the connection (EOF within the read timeout).
    pub fn closed_by_peer(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}
