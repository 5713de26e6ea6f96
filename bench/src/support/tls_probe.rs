//! A blocking HTTPS probe (rustls over a std TCP stream) for health checks of TLS listeners and
//! the TLS fault cases: one `GET` per connection, and what the handshake negotiated (protocol,
//! suite, whether it resumed, the server certificate's serial).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

use crate::peers::chunked::ChunkedSkipper;
use crate::peers::http::{parse_response, BodyLen};
use crate::support::certs::serial_of;

/// One HTTPS exchange.
#[derive(Debug, Clone)]
pub struct TlsAnswer {
    /// Response status.
    pub status: u16,
    /// Response body.
    pub body: Vec<u8>,
    /// `TLSv1_3` or `TLSv1_2`.
    pub protocol: String,
    /// The negotiated cipher suite, e.g. `TLS13_AES_128_GCM_SHA256`.
    pub suite: String,
    /// Whether the handshake resumed a session.
    pub resumed: bool,
    /// The server leaf certificate's serial number (big-endian, no leading zeros).
    pub serial: Vec<u8>,
    /// Handshake time (TCP connect to handshake done).
    pub handshake: Duration,
}

/// Connects to `addr`, handshakes with `config` for `name` (SNI and the name verified), sends
/// `GET path` with `Connection: close` and reads the answer, all before `timeout`.
///
/// # Errors
/// Connect and socket errors, `TimedOut`, TLS errors (`InvalidData`, e.g. an unknown issuer), and
/// an unparseable answer.
pub fn tls_get(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    name: &str,
    path: &str,
    timeout: Duration,
) -> io::Result<TlsAnswer> {
    tls_exchange(addr, config, (name, path), timeout, true).map(|(a, _)| a)
}

/// A TLS connection of the blocking probe.
pub type TlsConn = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// Like [`tls_get`] but keep-alive: the connection is returned open after the answer (for
/// holding idle TLS connections).
///
/// # Errors
/// As [`tls_get`].
pub fn tls_open(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    name: &str,
    path: &str,
    timeout: Duration,
) -> io::Result<(TlsAnswer, TlsConn)> {
    tls_exchange(addr, config, (name, path), timeout, false)
}

fn tls_exchange(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    (name, path): (&str, &str),
    timeout: Duration,
    close: bool,
) -> io::Result<(TlsAnswer, TlsConn)> {
    let deadline = Instant::now() + timeout;
    let started = Instant::now();
    let tcp = crate::support::probe::connect(addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    let server = ServerName::try_from(name.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let conn = rustls::ClientConnection::new(config.clone(), server).map_err(io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
    let handshake = started.elapsed();
    let protocol = tls
        .conn
        .protocol_version()
        .map_or("?".into(), |v| format!("{v:?}"));
    let suite = tls
        .conn
        .negotiated_cipher_suite()
        .map_or("?".into(), |s| format!("{:?}", s.suite()));
    let resumed = matches!(
        tls.conn.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    let serial = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| serial_of(c))
        .unwrap_or_default();
    let connection = if close { "close" } else { "keep-alive" };
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: {connection}\r\n\r\n"
    )?;
    tls.flush()?;
    let (status, body) = read_answer(&mut tls, deadline)?;
    let answer = TlsAnswer {
        status,
        body,
        protocol,
        suite,
        resumed,
        serial,
        handshake,
    };
    Ok((answer, tls))
}

/// Reads one response (Content-Length, chunked or until close) from `r` before `deadline`.
///
/// # Errors
/// Read errors, `TimedOut`, `UnexpectedEof` inside the message, `InvalidData` for a bad head.
pub fn read_answer(r: &mut impl Read, deadline: Instant) -> io::Result<(u16, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    let mut eof = false;
    let mut more = |buf: &mut Vec<u8>| -> io::Result<bool> {
        if Instant::now() >= deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "answer too slow"));
        }
        match r.read(&mut chunk) {
            Ok(0) => Ok(false),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            // A peer that closes without close_notify ends the message like EOF.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    };
    let info = loop {
        match parse_response(&buf, false) {
            Ok(Some(info)) => break info,
            Ok(None) if eof => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before a response head",
                ))
            }
            Ok(None) => eof = !more(&mut buf)?,
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    };
    let mut body = buf.split_off(info.head_len);
    match info.body {
        BodyLen::Empty => body.clear(),
        BodyLen::Length(n) => {
            let n = usize::try_from(n).map_err(io::Error::other)?;
            while body.len() < n {
                if eof || !more(&mut body)? {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short body"));
                }
            }
            body.truncate(n);
        }
        BodyLen::Chunked => {
            let mut skip = ChunkedSkipper::new();
            let mut seen = 0;
            loop {
                seen += skip
                    .feed(&body[seen..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if skip.is_done() {
                    break;
                }
                if eof || !more(&mut body)? {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short body"));
                }
            }
        }
        BodyLen::UntilClose => while !eof && more(&mut body)? {},
    }
    Ok((info.status, body))
}
