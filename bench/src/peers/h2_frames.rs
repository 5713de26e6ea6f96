//! [`H2Frames`]: a raw-frame HTTP/2 client over a blocking std `TcpStream`, for the cases a
//! well-behaved client library will not produce (floods, connection-specific fields, endless
//! CONTINUATION). h2c with prior knowledge only (RFC 9113 §3.3). Frames are written by hand
//! ([`frame`]) with a minimal HPACK encoder ([`hpack_block`]: literal fields without indexing, no
//! Huffman, RFC 7541 §6.2.2); a reader thread parses the frames the server sends into a channel, so a
//! writer may flood while frames are waited on with a timeout. Shared by edge's integration tests and
//! `edge-bench matrix`.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Flags (RFC 9113 §6).
pub mod flag {
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
}

/// Error codes (RFC 9113 §7).
pub mod code {
    /// NO_ERROR.
    pub const NO_ERROR: u32 = 0x0;
    /// PROTOCOL_ERROR.
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// CANCEL.
    pub const CANCEL: u32 = 0x8;
    /// ENHANCE_YOUR_CALM.
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// SETTINGS_INITIAL_WINDOW_SIZE (RFC 9113 §6.5.2).
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// One frame as the server sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Frame type ([`kind`]).
    pub kind: u8,
    /// Flags octet ([`flag`]).
    pub flags: u8,
    /// Stream identifier.
    pub stream: u32,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// GOAWAY's error code (RFC 9113 §6.8); `None` for other frames.
    pub fn goaway_code(&self) -> Option<u32> {
        (self.kind == kind::GOAWAY).then(|| be32(&self.payload, 4))?
    }

    /// GOAWAY's last stream id; `None` for other frames.
    pub fn goaway_last_stream(&self) -> Option<u32> {
        (self.kind == kind::GOAWAY).then(|| be32(&self.payload, 0).map(|v| v & 0x7fff_ffff))?
    }

    /// RST_STREAM's error code (RFC 9113 §6.4); `None` for other frames.
    pub fn rst_code(&self) -> Option<u32> {
        (self.kind == kind::RST_STREAM).then(|| be32(&self.payload, 0))?
    }

    /// Whether END_STREAM is set on a DATA or HEADERS frame.
    pub fn ends_stream(&self) -> bool {
        matches!(self.kind, kind::DATA | kind::HEADERS) && self.flags & flag::END_STREAM != 0
    }

    /// The `:status` of a HEADERS frame when the server sent it as the block's first field, indexed
    /// from the HPACK static table (200, 204, 206, 304, 400, 404, 500; RFC 7541 Appendix A) or as a
    /// literal without Huffman coding; `None` otherwise.
    pub fn status(&self) -> Option<u16> {
        if self.kind != kind::HEADERS {
            return None;
        }
        let mut b = self.payload.as_slice();
        if self.flags & 0x8 != 0 {
            let pad = *b.first()? as usize;
            b = b.get(1..b.len().checked_sub(pad)?)?;
        }
        if self.flags & 0x20 != 0 {
            b = b.get(5..)?;
        }
        const STATIC: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];
        let first = *b.first()?;
        if first & 0x80 != 0 {
            return STATIC
                .get(((first & 0x7f) as usize).checked_sub(8)?)
                .copied();
        }
        let name = first & if first & 0x40 != 0 { 0x3f } else { 0x0f };
        let len = *b.get(1)?;
        if !(8..=14).contains(&name) || len & 0x80 != 0 {
            return None;
        }
        std::str::from_utf8(b.get(2..2 + len as usize)?)
            .ok()?
            .parse()
            .ok()
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Appends one frame (RFC 9113 §4.1) to `out`.
///
/// # Panics
/// A payload over 2^24 - 1 bytes.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l < 1 << 24)
        .expect("frame payload over 2^24 - 1 bytes");
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Appends the `i`-th pair of a rapid-reset attack (CVE-2023-44487) to `out`: HEADERS of the request
/// `block` that open stream `2i + 1` (END_STREAM, END_HEADERS), then RST_STREAM CANCEL of it.
pub fn open_and_reset(out: &mut Vec<u8>, i: u32, block: &[u8]) {
    let stream = 2 * i + 1;
    frame(
        out,
        kind::HEADERS,
        flag::END_STREAM | flag::END_HEADERS,
        stream,
        block,
    );
    frame(
        out,
        kind::RST_STREAM,
        0,
        stream,
        &code::CANCEL.to_be_bytes(),
    );
}

/// Appends an HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the bits above it.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of `fields` (pseudo-headers first, as given), each a literal without indexing with
/// a literal name and no Huffman coding (RFC 7541 §6.2.2): no dynamic table state on either side.
pub fn hpack_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0x00);
        hpack_int(&mut out, 0, 7, name.len());
        out.extend_from_slice(name.as_bytes());
        hpack_int(&mut out, 0, 7, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// The pseudo-headers of a request: `:method`, `:scheme` http, `:path`, `:authority`.
pub fn request_fields<'a>(
    method: &'a str,
    path: &'a str,
    authority: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
    ]
}

/// What the reader thread hands over.
enum Arrival {
    Frame(Frame),
    /// The server closed the connection (EOF or an error).
    Closed,
}

/// A raw HTTP/2 client connection (see the module docs).
pub struct H2Frames {
    tcp: TcpStream,
    rx: Receiver<Arrival>,
    /// Frames received and not yet taken by a wait.
    backlog: VecDeque<Frame>,
    closed: bool,
}

/// Whether `f` is a GOAWAY.
pub fn is_goaway(f: &Frame) -> bool {
    f.kind == kind::GOAWAY
}

impl H2Frames {
    /// Connects to `addr`, writes the preface and a SETTINGS frame with `settings` (identifier,
    /// value), and starts the reader thread. Writes time out after 5 s.
    ///
    /// # Errors
    /// Connect and write failures.
    pub fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> io::Result<H2Frames> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        tcp.set_nodelay(true)?;
        tcp.set_write_timeout(Some(Duration::from_secs(5)))?;
        let reader = tcp.try_clone()?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_frames(reader, tx));
        let mut c = H2Frames {
            tcp,
            rx,
            backlog: VecDeque::new(),
            closed: false,
        };
        let mut out = PREFACE.to_vec();
        let mut payload = Vec::new();
        for (id, v) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&v.to_be_bytes());
        }
        frame(&mut out, kind::SETTINGS, 0, 0, &payload);
        c.send(&out)?;
        Ok(c)
    }

    /// [`connect`](Self::connect), then waits (at most `limit`) for the server's SETTINGS, acks it,
    /// and waits for the ACK of the client's.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); `TimedOut` or `ConnectionAborted` when the exchange does not
    /// complete.
    pub fn handshake(
        addr: SocketAddr,
        settings: &[(u16, u32)],
        limit: Duration,
    ) -> io::Result<H2Frames> {
        let mut c = Self::connect(addr, settings)?;
        c.wait_for(limit, |f| {
            f.kind == kind::SETTINGS && f.flags & flag::ACK == 0
        })?;
        c.settings_ack()?;
        c.wait_for(limit, |f| {
            f.kind == kind::SETTINGS && f.flags & flag::ACK != 0
        })?;
        Ok(c)
    }

    /// Writes `bytes` (one or more whole frames) at once.
    ///
    /// # Errors
    /// The write failed or timed out (the server closed or stopped reading).
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.tcp.write_all(bytes)
    }

    /// Writes one frame.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> io::Result<()> {
        let mut out = Vec::with_capacity(9 + payload.len());
        frame(&mut out, kind, flags, stream, payload);
        self.send(&out)
    }

    /// HEADERS on `stream` with `fields` ([`hpack_block`]); `end_headers` false leaves the block open
    /// for CONTINUATION.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn headers(
        &mut self,
        stream: u32,
        fields: &[(&str, &str)],
        end_stream: bool,
        end_headers: bool,
    ) -> io::Result<()> {
        let flags = if end_stream { flag::END_STREAM } else { 0 }
            | if end_headers { flag::END_HEADERS } else { 0 };
        self.send_frame(kind::HEADERS, flags, stream, &hpack_block(fields))
    }

    /// CONTINUATION on `stream` carrying `block`.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn continuation(&mut self, stream: u32, block: &[u8], end_headers: bool) -> io::Result<()> {
        let flags = if end_headers { flag::END_HEADERS } else { 0 };
        self.send_frame(kind::CONTINUATION, flags, stream, block)
    }

    /// DATA on `stream`.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> io::Result<()> {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        self.send_frame(kind::DATA, flags, stream, data)
    }

    /// RST_STREAM on `stream` with `code`.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn rst(&mut self, stream: u32, code: u32) -> io::Result<()> {
        self.send_frame(kind::RST_STREAM, 0, stream, &code.to_be_bytes())
    }

    /// PING with `payload` (ACK when `ack`).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn ping(&mut self, payload: [u8; 8], ack: bool) -> io::Result<()> {
        self.send_frame(kind::PING, if ack { flag::ACK } else { 0 }, 0, &payload)
    }

    /// SETTINGS with `settings` (identifier, value).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn settings(&mut self, settings: &[(u16, u32)]) -> io::Result<()> {
        let mut payload = Vec::new();
        for (id, v) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&v.to_be_bytes());
        }
        self.send_frame(kind::SETTINGS, 0, 0, &payload)
    }

    /// An empty SETTINGS with ACK.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn settings_ack(&mut self) -> io::Result<()> {
        self.send_frame(kind::SETTINGS, flag::ACK, 0, &[])
    }

    /// WINDOW_UPDATE on `stream` (0: the connection) by `increment` bytes.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn window_update(&mut self, stream: u32, increment: u32) -> io::Result<()> {
        self.send_frame(kind::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
    }

    /// PRIORITY on `stream`: depends on `on` (not exclusive) with `weight`.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn priority(&mut self, stream: u32, on: u32, weight: u8) -> io::Result<()> {
        let mut p = on.to_be_bytes().to_vec();
        p.push(weight);
        self.send_frame(kind::PRIORITY, 0, stream, &p)
    }

    /// Half-closes the write side (the reader goes on).
    ///
    /// # Errors
    /// The shutdown failed.
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.tcp.shutdown(Shutdown::Write)
    }

    /// Takes frames as they arrive (at most `limit` in all) until one satisfies `pred`; frames that
    /// do not stay queued for later waits.
    ///
    /// # Errors
    /// `TimedOut` past `limit`; `ConnectionAborted` when the server closed first.
    pub fn wait_for(
        &mut self,
        limit: Duration,
        pred: impl Fn(&Frame) -> bool,
    ) -> io::Result<Frame> {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return Ok(self.backlog.remove(i).expect("position is in range"));
        }
        let until = Instant::now() + limit;
        loop {
            match self.next_arrival(until)? {
                f if pred(&f) => return Ok(f),
                f => self.backlog.push_back(f),
            }
        }
    }

    /// A flood: writes `unit(i)` for i = 0.. in batches of `batch` while `go_on(i)` holds, until a GOAWAY
    /// arrives or the server stops taking bytes; then waits up to `wait` for the GOAWAY. Returns it (if
    /// any) and the units sent.
    pub fn flood_until_goaway(
        &mut self,
        batch: u32,
        wait: Duration,
        go_on: impl Fn(u32) -> bool,
        unit: impl Fn(u32, &mut Vec<u8>),
    ) -> (Option<Frame>, u32) {
        let mut i = 0;
        let mut out = Vec::new();
        while go_on(i) {
            out.clear();
            for _ in 0..batch {
                unit(i, &mut out);
                i += 1;
            }
            if self.send(&out).is_err() {
                break;
            }
            if let Ok(g) = self.wait_for(Duration::ZERO, is_goaway) {
                return (Some(g), i);
            }
        }
        (self.wait_for(wait, is_goaway).ok(), i)
    }

    /// Frames that arrived so far without blocking (queued ones first), draining them.
    pub fn drain(&mut self) -> Vec<Frame> {
        let mut out: Vec<Frame> = self.backlog.drain(..).collect();
        while let Ok(r) = self.rx.try_recv() {
            match r {
                Arrival::Frame(f) => out.push(f),
                Arrival::Closed => self.closed = true,
            }
        }
        out
    }

    /// Whether the server closed the connection within `limit` (frames until then are queued).
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            match self.next_arrival(until) {
                Ok(f) => self.backlog.push_back(f),
                Err(e) => return e.kind() == io::ErrorKind::ConnectionAborted,
            }
        }
    }

    /// Whether the server closed the connection (as seen so far).
    pub fn is_closed(&mut self) -> bool {
        let got = self.drain();
        self.backlog.extend(got);
        self.closed
    }

    /// The response on `stream`: its status ([`Frame::status`]) and body, once END_STREAM came.
    ///
    /// # Errors
    /// As [`wait_for`](Self::wait_for); `Other` when the stream was reset (with its code).
    pub fn response(&mut self, stream: u32, limit: Duration) -> io::Result<(Option<u16>, Vec<u8>)> {
        let until = Instant::now() + limit;
        let mut status = None;
        let mut body = Vec::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let f = self.wait_for(left, |f| f.stream == stream)?;
            match f.kind {
                kind::HEADERS => status = status.or(f.status()),
                kind::DATA => body.extend_from_slice(&f.payload),
                kind::RST_STREAM => {
                    return Err(io::Error::other(format!(
                        "stream {stream} reset: code {:?}",
                        f.rst_code()
                    )))
                }
                _ => {}
            }
            if f.ends_stream() {
                return Ok((status, body));
            }
        }
    }

    fn next_arrival(&mut self, until: Instant) -> io::Result<Frame> {
        if self.closed {
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        match self
            .rx
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(Arrival::Frame(f)) => Ok(f),
            Ok(Arrival::Closed) | Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                Err(io::ErrorKind::ConnectionAborted.into())
            }
            Err(RecvTimeoutError::Timeout) => Err(io::ErrorKind::TimedOut.into()),
        }
    }
}

impl Drop for H2Frames {
    fn drop(&mut self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }
}

/// The reader thread: frames from `tcp` into `tx` until EOF, an error, or the client is dropped.
fn read_frames(mut tcp: TcpStream, tx: mpsc::Sender<Arrival>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        while let Some((f, used)) = parse_frame(&buf) {
            buf.drain(..used);
            if tx.send(Arrival::Frame(f)).is_err() {
                return;
            }
        }
        match tcp.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = tx.send(Arrival::Closed);
}

/// The first whole frame in `b` and the bytes it took; `None` until one is whole.
pub fn parse_frame(b: &[u8]) -> Option<(Frame, usize)> {
    let head = b.get(..9)?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let payload = b.get(9..9 + len)?;
    let f = Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload: payload.to_vec(),
    };
    Some((f, 9 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_hpack_literals_have_the_rfc_7541_shape() {
        let mut out = Vec::new();
        frame(&mut out, kind::GOAWAY, 0, 0, &[0, 0, 0, 5, 0, 0, 0, 0xb]);
        frame(&mut out, kind::RST_STREAM, 0, 3, &8u32.to_be_bytes());
        let (g, n) = parse_frame(&out).unwrap();
        assert_eq!(
            (g.goaway_code(), g.goaway_last_stream()),
            (Some(0xb), Some(5))
        );
        let (r, _) = parse_frame(&out[n..]).unwrap();
        assert_eq!((r.stream, r.rst_code()), (3, Some(8)));
        assert!(parse_frame(&out[..n - 1]).is_none());
        // RFC 7541 C.2.2: literal without indexing, here with a literal name.
        assert_eq!(hpack_block(&[(":path", "/a")]), b"\x00\x05:path\x02/a");
        let long = "v".repeat(300);
        let b = hpack_block(&[("x", &long)]);
        assert_eq!(&b[..6], &[0x00, 0x01, b'x', 0x7f, 0x80 | 45, 1]);
    }

    #[test]
    fn status_is_read_from_static_indexes_and_plain_literals() {
        let h = |payload: &[u8]| Frame {
            kind: kind::HEADERS,
            flags: flag::END_HEADERS,
            stream: 1,
            payload: payload.to_vec(),
        };
        assert_eq!(h(&[0x88]).status(), Some(200));
        assert_eq!(h(&[0x8c]).status(), Some(400));
        assert_eq!(h(b"\x48\x03431").status(), Some(431));
        assert_eq!(h(b"\x48\x83\x00\x00\x00").status(), None, "Huffman");
    }
}
