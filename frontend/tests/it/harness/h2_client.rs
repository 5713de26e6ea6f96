//! A test HTTP/2 client: hyperium's `h2` client driven on a monoio runtime of its own (epoll, with a
//! timer) through edge's own adapter (`edge_core::io::PollIo`), so the test binary needs no tokio
//! runtime. Plain TCP (h2c, prior knowledge); every wait is bounded by the caller's timeouts.

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
    let io = PollIo::new(tcp, &[], Duration::from_secs(10));
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
