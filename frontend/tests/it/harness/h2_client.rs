//! A test HTTP/2 client: hyperium's `h2` client driven on a monoio runtime of its own (epoll, with a
//! timer) through edge's own adapter (`edge_core::io::PollIo`), so the test binary needs no tokio
//! runtime. Plain TCP (h2c, prior knowledge) or edge's TLS stream with ALPN h2; WebSocket streams
//! (RFC 8441 extended CONNECT, [`websocket`]); every wait is bounded by the caller's timeouts.

use std::{future::Future, net::SocketAddr, time::Duration};

use bytes::Bytes;
use edge_core::io::PollIo;
use h2::client::SendRequest;

/// Runs `fut` to completion on a fresh single-thread monoio runtime (epoll driver, timer on).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("monoio runtime")
        .block_on(fut)
}

/// One HTTP/2 response as the client received it.
#[derive(Debug)]
pub struct H2Response {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    /// The response's HEADERS frame ended the stream (no DATA, no trailers: a trailers-only gRPC
    /// answer).
    pub headers_ended_stream: bool,
}

/// Opens an h2c connection (prior knowledge) to `addr`; the connection is driven by a spawned task.
pub async fn connect(addr: SocketAddr) -> SendRequest<Bytes> {
    connect_after(addr, &[]).await
}

/// [`connect`], writing `prefix` (a PROXY protocol header, say) on the TCP connection before the
/// HTTP/2 connection preface.
pub async fn connect_after(addr: SocketAddr, prefix: &[u8]) -> SendRequest<Bytes> {
    use monoio::io::AsyncWriteRentExt;
    let mut tcp = monoio::net::TcpStream::connect(addr)
        .await
        .expect("connect");
    if !prefix.is_empty() {
        let (res, _) = tcp.write_all(prefix.to_vec()).await;
        res.expect("write the prefix");
    }
    handshake(tcp).await
}

/// Opens an HTTP/2 connection over TLS to `addr` (SNI `name`; `cfg` must offer ALPN `h2`), as
/// [`connect`] does over plain TCP.
pub async fn connect_tls(
    addr: SocketAddr,
    cfg: std::sync::Arc<rustls::ClientConfig>,
    name: &str,
) -> SendRequest<Bytes> {
    let tcp = monoio::net::TcpStream::connect(addr)
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("server name");
    let conn = rustls::ClientConnection::new(cfg, name).expect("TLS client");
    let tls = edge_core::io::tls::Tls::handshake(tcp, conn)
        .await
        .map_err(|(e, _)| e)
        .expect("TLS handshake");
    let alpn = tls.with_conn(|c| c.alpn_protocol().map(<[u8]>::to_vec));
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "ALPN h2 negotiated");
    handshake(tls).await
}

/// The client's HTTP/2 handshake over `io`; the connection is driven by a spawned task.
async fn handshake<T: edge_core::io::Transport>(io: T) -> SendRequest<Bytes> {
    let io = PollIo::new(io, &[], Duration::from_secs(10));
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, Bytes>(io)
        .await
        .expect("h2 handshake");
    monoio::spawn(async move {
        let _ = conn.await;
    });
    send.ready().await.expect("connection ready")
}

/// Sends `method path` with `authority` and `body` (END_STREAM on HEADERS when empty), waiting for
/// flow-control window as needed, and reads the whole response.
///
/// # Errors
/// The stream's error (reset, connection gone) in words.
pub async fn request(
    send: &SendRequest<Bytes>,
    method: &str,
    path: &str,
    authority: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<H2Response, String> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://{authority}{path}"));
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    let req = b.body(()).map_err(|e| e.to_string())?;
    let mut send = send.clone().ready().await.map_err(|e| e.to_string())?;
    let (resp, mut stream) = send
        .send_request(req, body.is_empty())
        .map_err(|e| e.to_string())?;
    let mut rest = Bytes::copy_from_slice(body);
    while !rest.is_empty() {
        stream.reserve_capacity(rest.len());
        let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .ok_or("stream closed while sending")?
            .map_err(|e| e.to_string())?;
        let piece = rest.split_to(cap.min(rest.len()));
        stream
            .send_data(piece, rest.is_empty())
            .map_err(|e| e.to_string())?;
    }
    let resp = resp.await.map_err(|e| e.to_string())?;
    let (parts, mut recv) = resp.into_parts();
    let headers_ended_stream = recv.is_end_stream();
    let mut out = Vec::new();
    while let Some(d) = recv.data().await {
        let d = d.map_err(|e| e.to_string())?;
        let _ = recv.flow_control().release_capacity(d.len());
        out.extend_from_slice(&d);
    }
    Ok(H2Response {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: out,
        headers_ended_stream,
    })
}

/// An extended CONNECT stream (RFC 8441) as the client holds it: the response head, and the stream's
/// two sides.
pub struct H2Tunnel {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub send: h2::SendStream<Bytes>,
    pub recv: h2::RecvStream,
}

/// Opens a WebSocket stream: `:method CONNECT`, `:protocol websocket`, `:scheme http`, `:path path`,
/// `:authority authority`, with `headers`, and waits for the response head.
///
/// # Errors
/// The stream's error in words (h2 refuses to send before the server's SETTINGS allowed extended
/// CONNECT).
pub async fn websocket(
    send: &SendRequest<Bytes>,
    path: &str,
    authority: &str,
    headers: &[(&str, &str)],
) -> Result<H2Tunnel, String> {
    let mut b = http::Request::builder()
        .method("CONNECT")
        .uri(format!("http://{authority}{path}"));
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    let mut req = b.body(()).map_err(|e| e.to_string())?;
    req.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let mut send = send.clone().ready().await.map_err(|e| e.to_string())?;
    let (resp, stream) = send.send_request(req, false).map_err(|e| e.to_string())?;
    let resp = resp.await.map_err(|e| e.to_string())?;
    let (parts, recv) = resp.into_parts();
    Ok(H2Tunnel {
        status: parts.status.as_u16(),
        headers: parts.headers,
        send: stream,
        recv,
    })
}

/// Sends `bytes` on `stream` as the window allows; `end` sets END_STREAM after them.
///
/// # Errors
/// The stream's error in words.
pub async fn send_all(
    stream: &mut h2::SendStream<Bytes>,
    bytes: &[u8],
    end: bool,
) -> Result<(), String> {
    let mut rest = Bytes::copy_from_slice(bytes);
    while !rest.is_empty() {
        stream.reserve_capacity(rest.len());
        let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .ok_or("stream closed while sending")?
            .map_err(|e| e.to_string())?;
        let piece = rest.split_to(cap.min(rest.len()));
        stream.send_data(piece, false).map_err(|e| e.to_string())?;
    }
    if end {
        stream
            .send_data(Bytes::new(), true)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Reads DATA from `recv` into `got` until it holds at least `n` bytes, releasing the window as it
/// goes; `Ok(false)` when the stream ended (END_STREAM) first.
///
/// # Errors
/// The stream's error (a reset) in words.
pub async fn read_at_least(
    recv: &mut h2::RecvStream,
    got: &mut Vec<u8>,
    n: usize,
) -> Result<bool, String> {
    while got.len() < n {
        match recv.data().await {
            None => return Ok(false),
            Some(d) => {
                let d = d.map_err(|e| e.to_string())?;
                let _ = recv.flow_control().release_capacity(d.len());
                got.extend_from_slice(&d);
            }
        }
    }
    Ok(true)
}

/// Reads DATA from `recv` until END_STREAM.
///
/// # Errors
/// The stream's error (a reset) in words.
pub async fn read_to_end(recv: &mut h2::RecvStream) -> Result<Vec<u8>, String> {
    let mut got = Vec::new();
    read_at_least(recv, &mut got, usize::MAX).await?;
    Ok(got)
}
