//! The scripted origin of `edge-bench matrix` (DESIGN.md "Fault matrix" b) and the raw client its
//! cases share: plain std threads and blocking sockets on 127.0.0.1, one thread per connection,
//! each connection handed to a script. The logic follows frontend/tests/it/harness.rs
//! (`Origin::script`, `read_request`), which is a test harness and not a library.
//!
//! Every blocking call is bounded: accepted sockets get a read timeout ([`SCRIPT_READ_LIMIT`]), so
//! a script waiting for a peer that never speaks ends on its own; [`ScriptOrigin`] stops accepting
//! on drop (a wake-up connect unblocks its accept).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a script's read waits for the peer.
pub const SCRIPT_READ_LIMIT: Duration = Duration::from_secs(20);

/// A connection script: the accepted stream and its 1-based connection number.
pub type Script = dyn Fn(TcpStream, usize) + Send + Sync;

/// A listening origin running a script per accepted connection.
pub struct ScriptOrigin {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ScriptOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptOrigin")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ScriptOrigin {
    /// Binds 127.0.0.1:0 and runs `script` for every connection on a thread of its own.
    ///
    /// # Errors
    /// Bind or thread-spawn failures.
    pub fn start(script: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> io::Result<Self> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let (acc, flag) = (accepted.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("matrix-origin".into())
            .spawn(move || {
                for s in l.incoming() {
                    if flag.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(s) = s else { continue };
                    let _ = s.set_read_timeout(Some(SCRIPT_READ_LIMIT));
                    let _ = s.set_write_timeout(Some(SCRIPT_READ_LIMIT));
                    let id = acc.fetch_add(1, Ordering::SeqCst) + 1;
                    let f = script.clone();
                    let _ = std::thread::Builder::new()
                        .name("matrix-origin-conn".into())
                        .spawn(move || f(s, id));
                }
            })?;
        Ok(Self {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    /// A keep-alive origin answering every request with `reply(path)`.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn serve(reply: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> io::Result<Self> {
        Self::start(move |mut s, _| {
            let mut buf = Vec::new();
            while let Some((path, used)) = read_request(&mut s, &mut buf) {
                buf.drain(..used);
                if s.write_all(&reply(&path)).is_err() {
                    return;
                }
            }
        })
    }

    /// An origin that accepts, reads whatever arrives and never answers.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn silent() -> io::Result<Self> {
        Self::start(|mut s, _| {
            let mut b = [0u8; 65536];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `200 OK` with `body`, Content-Length framed.
pub fn ok(body: &[u8]) -> Vec<u8> {
    let mut b = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    b.extend_from_slice(body);
    b
}

/// Reads one request (head plus Content-Length body) from `s` into `buf`; returns its path and the
/// bytes it used, or `None` on EOF, error, timeout or an unparseable head.
pub fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                let path = req.path.unwrap_or("/").to_string();
                let cl = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .unwrap_or(0usize);
                while buf.len() < n + cl {
                    fill(s, buf)?;
                }
                return Some((path, n + cl));
            }
            Ok(httparse::Status::Partial) => fill(s, buf)?,
            Err(_) => return None,
        }
    }
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut tmp = [0u8; 65536];
    match s.read(&mut tmp) {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            Some(())
        }
    }
}

/// A response as a matrix client saw it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Status code.
    pub status: u16,
    /// Header fields, names as sent.
    pub headers: Vec<(String, String)>,
    /// Body bytes read (all of them for a complete response).
    pub body: Vec<u8>,
    /// Whether the body was complete by its framing.
    pub complete: bool,
}

impl Seen {
    /// The first field named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Connection: close` was sent.
    pub fn says_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// A blocking client connection with its own read buffer, every read bounded by a deadline.
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects (2 s limit), Nagle off.
    ///
    /// # Errors
    /// Connect failures.
    pub fn open(addr: SocketAddr) -> io::Result<Conn> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(Conn { s, buf: Vec::new() })
    }

    /// Wraps a connected stream.
    pub fn from_stream(s: TcpStream) -> Conn {
        Conn { s, buf: Vec::new() }
    }

    /// Writes all of `bytes`.
    ///
    /// # Errors
    /// Write failures.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.s.write_all(bytes)
    }

    /// One read before `deadline` appended to the buffer; `Ok(0)` at EOF.
    fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        self.s.set_read_timeout(Some(left))?;
        let mut tmp = [0u8; 65536];
        loop {
            match self.s.read(&mut tmp) {
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one response head (1xx skipped) before `deadline`.
    ///
    /// # Errors
    /// `UnexpectedEof` when the peer closes first, `TimedOut`, other read errors, `InvalidData`.
    pub fn read_head(&mut self, deadline: Instant) -> io::Result<Seen> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut res = httparse::Response::new(&mut headers);
            match res.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let seen = Seen {
                        status: res.code.unwrap_or(0),
                        headers: res
                            .headers
                            .iter()
                            .map(|h| {
                                let v = String::from_utf8_lossy(h.value).into_owned();
                                (h.name.to_string(), v)
                            })
                            .collect(),
                        ..Seen::default()
                    };
                    self.buf.drain(..n);
                    if (100..200).contains(&seen.status) {
                        continue;
                    }
                    return Ok(seen);
                }
                Ok(httparse::Status::Partial) => {
                    if self.fill(deadline)? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "closed before a response head",
                        ));
                    }
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
    }

    /// Reads one whole response (Content-Length, chunked, or until close) before `deadline`. A body
    /// cut short by the peer's close or reset returns with `complete = false`.
    ///
    /// # Errors
    /// As [`read_head`](Self::read_head); a timeout while reading the body.
    pub fn read_response(&mut self, deadline: Instant) -> io::Result<Seen> {
        let mut seen = self.read_head(deadline)?;
        let chunked = seen
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let length = seen
            .header("content-length")
            .and_then(|v| v.trim().parse::<usize>().ok());
        if seen.status == 204 || seen.status == 304 {
            seen.complete = true;
            return Ok(seen);
        }
        loop {
            let done = if chunked {
                chunked_end(&self.buf)
            } else if let Some(n) = length {
                (self.buf.len() >= n).then_some(n)
            } else {
                None
            };
            if let Some(end) = done {
                seen.body = self.buf.drain(..end).collect();
                seen.complete = true;
                return Ok(seen);
            }
            match self.fill(deadline) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_reset(&e) => break,
                Err(e) => return Err(e),
            }
        }
        seen.body = std::mem::take(&mut self.buf);
        seen.complete = !chunked && length.is_none();
        Ok(seen)
    }

    /// Reads and discards until EOF or reset (returns when, from now), or `None` at `limit`.
    pub fn wait_closed(&mut self, limit: Duration) -> Option<Duration> {
        let t = Instant::now();
        let deadline = t + limit;
        loop {
            match self.fill(deadline) {
                Ok(0) => return Some(t.elapsed()),
                Ok(_) => self.buf.clear(),
                Err(e) if is_reset(&e) => return Some(t.elapsed()),
                Err(_) => return None,
            }
        }
    }

    /// Half-closes the write side.
    ///
    /// # Errors
    /// shutdown(2) failures.
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.s.shutdown(Shutdown::Write)
    }
}

/// Whether `e` means the peer closed abruptly.
pub fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// The end offset of a complete chunked body (through the last-chunk and an empty trailer) at
/// the start of `b`, or `None` when it is incomplete or malformed.
pub fn chunked_end(b: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let line_end = pos + b[pos..].windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&b[pos..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            // Trailer fields until an empty line.
            loop {
                let end = pos + b[pos..].windows(2).position(|w| w == b"\r\n")?;
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Some(pos);
                }
            }
        }
        pos = pos.checked_add(size)?.checked_add(2)?;
        if pos > b.len() {
            return None;
        }
    }
}

/// A listener with a backlog of 0 that never accepts, plus filler connections that fill its
/// queue: further connects hang (SYNs dropped), as for an overloaded upstream (PLATFORM.md).
#[derive(Debug)]
pub struct HangingListener {
    /// The address whose connects hang.
    pub addr: SocketAddr,
    _socket: socket2::Socket,
    _fillers: Vec<TcpStream>,
}

impl HangingListener {
    /// Binds, listens with backlog 0 and connects up to four fillers (300 ms each).
    ///
    /// # Errors
    /// Socket, bind or listen failures; `Other` when no filler connected.
    pub fn start() -> io::Result<Self> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
        s.listen(0)?;
        let addr = s
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an inet socket"))?;
        let fillers: Vec<_> = (0..4)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok())
            .collect();
        if fillers.is_empty() {
            return Err(io::Error::other(
                "no filler connected to the backlog-0 listener",
            ));
        }
        Ok(Self {
            addr,
            _socket: s,
            _fillers: fillers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_end_finds_the_last_chunk() {
        let b = b"5\r\nhello\r\n0\r\n\r\nrest";
        assert_eq!(chunked_end(b), Some(b.len() - 4));
        assert_eq!(chunked_end(b"5\r\nhello\r\n"), None);
        assert_eq!(chunked_end(b"3\r\nab"), None);
        assert_eq!(chunked_end(b"0\r\nX: y\r\n\r\n"), Some(11));
    }

    #[test]
    fn serve_answers_keep_alive_requests() {
        let o = ScriptOrigin::serve(|p| ok(p.as_bytes())).unwrap();
        let mut c = Conn::open(o.addr()).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        for p in ["/a", "/bb"] {
            c.send(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                .unwrap();
            let r = c.read_response(until).unwrap();
            assert_eq!(
                (r.status, r.body.as_slice(), r.complete),
                (200, p.as_bytes(), true)
            );
        }
        assert_eq!(o.accepted(), 1);
    }
}
