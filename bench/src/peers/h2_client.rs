//! A test HTTP/2 client for the h2c origin's tests and the fault matrix's group g: hyperium's `h2`
//! client on a monoio runtime of its own (epoll, timer on) through edge's poll adapter
//! (`edge_core::io::PollIo`), over plain TCP with prior knowledge, as the frontend's test harness
//! client is. Every wait is bounded by the caller's limit; errors come back in words.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use edge_core::io::PollIo;
use h2::client::SendRequest;
use h2::PingPong;
use http::HeaderMap;

/// Runs `fut` to completion on a fresh single-thread monoio runtime (epoll driver, timer on).
///
/// # Panics
/// When the runtime cannot be built.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("monoio runtime")
        .block_on(fut)
}

/// `fut`, or `Err("timed out after …")` once `limit` passes.
///
/// # Errors
/// `fut`'s own error, or the timeout.
pub async fn within<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    monoio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("timed out after {limit:?}"))?
}

/// One response as the client received it.
#[derive(Debug, Clone)]
pub struct H2Response {
    /// `:status`.
    pub status: u16,
    /// The response head's fields.
    pub headers: HeaderMap,
    /// The body, whole.
    pub body: Vec<u8>,
    /// Trailing HEADERS, when sent.
    pub trailers: Option<HeaderMap>,
}

impl H2Response {
    /// A field of the head, or else of the trailers, as text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .or_else(|| self.trailers.as_ref()?.get(name))
            .and_then(|v| v.to_str().ok())
    }
}

/// An h2c connection: the request handle and the connection's PING handle.
pub struct H2Conn {
    /// Opens streams.
    pub send: SendRequest<Bytes>,
    /// Sends PINGs and waits for their ACK (one at a time).
    pub ping: PingPong,
}

/// Opens an h2c connection (prior knowledge) to `addr`; the connection is driven by a spawned task
/// until it ends.
///
/// # Errors
/// Connect or handshake failure, in words.
pub async fn connect(addr: SocketAddr) -> Result<H2Conn, String> {
    let tcp = monoio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let io = PollIo::new(tcp, &[], Duration::from_secs(10));
    let (send, mut conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| format!("h2 handshake with {addr}: {e}"))?;
    let ping = conn.ping_pong().ok_or("no ping handle")?;
    monoio::spawn(async move {
        let _ = conn.await;
    });
    let send = send.ready().await.map_err(|e| e.to_string())?;
    Ok(H2Conn { send, ping })
}

/// Whether a PING is ACKed within `limit`.
pub async fn ping_acked(ping: &mut PingPong, limit: Duration) -> bool {
    let ack = ping.ping(h2::Ping::opaque());
    matches!(monoio::time::timeout(limit, ack).await, Ok(Ok(_)))
}

/// A request to send: method, path, extra fields, body and trailers.
#[derive(Debug, Clone, Default)]
pub struct H2Request<'a> {
    /// `:method` (GET when empty).
    pub method: &'a str,
    /// `:path`.
    pub path: &'a str,
    /// Extra fields.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body (END_STREAM on HEADERS when empty and there are no trailers).
    pub body: &'a [u8],
    /// Trailing HEADERS after the body.
    pub trailers: Option<HeaderMap>,
}

/// A GET of `path` with no fields.
pub fn get(path: &str) -> H2Request<'_> {
    H2Request {
        method: "GET",
        path,
        ..Default::default()
    }
}

/// Sends `req` on `send` (authority `origin`), waiting for flow-control window as needed, and
/// reads the whole response with its trailers.
///
/// # Errors
/// The stream's error (a reset with its reason, the connection gone), in words.
pub async fn request(send: &SendRequest<Bytes>, req: H2Request<'_>) -> Result<H2Response, String> {
    let (resp, stream) = open(send, &req)?.await?;
    // The body goes out while the answer is read: an echo of a body over the window needs both.
    let sending = monoio::spawn(send_body(
        stream,
        Bytes::copy_from_slice(req.body),
        req.trailers,
    ));
    let answer = read_response(resp).await;
    let sent = sending.await;
    let answer = answer?;
    sent.map(|()| answer)
}

/// Sends `rest` as the peer's window allows, then `trailers` (else END_STREAM with the last piece).
async fn send_body(
    mut stream: h2::SendStream<Bytes>,
    mut rest: Bytes,
    trailers: Option<HeaderMap>,
) -> Result<(), String> {
    let end_after_body = trailers.is_none();
    while !rest.is_empty() {
        stream.reserve_capacity(rest.len());
        let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .ok_or("stream closed while sending")?
            .map_err(|e| e.to_string())?;
        let piece = rest.split_to(cap.min(rest.len()));
        stream
            .send_data(piece, end_after_body && rest.is_empty())
            .map_err(|e| e.to_string())?;
    }
    if let Some(t) = trailers {
        stream.send_trailers(t).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The opened stream of [`open`]: the response future and the request body's sender.
type Opened = (h2::client::ResponseFuture, h2::SendStream<Bytes>);

/// Opens a stream for `req` (its head only; END_STREAM when it has no body and no trailers).
///
/// # Errors
/// The connection refusing new streams, in words.
pub fn open(
    send: &SendRequest<Bytes>,
    req: &H2Request<'_>,
) -> Result<impl Future<Output = Result<Opened, String>>, String> {
    let mut b = http::Request::builder()
        .method(if req.method.is_empty() {
            "GET"
        } else {
            req.method
        })
        .uri(format!("http://origin{}", req.path));
    for (n, v) in req.headers {
        b = b.header(*n, *v);
    }
    let head = b.body(()).map_err(|e| e.to_string())?;
    let end = req.body.is_empty() && req.trailers.is_none();
    let send = send.clone();
    Ok(async move {
        let mut send = send.ready().await.map_err(|e| e.to_string())?;
        send.send_request(head, end).map_err(|e| e.to_string())
    })
}

/// Reads a whole response (head, body, trailers), giving the window back as it goes.
///
/// # Errors
/// The stream's error in words (`stream error received: refused stream before processing any
/// application logic`, say).
pub async fn read_response(resp: h2::client::ResponseFuture) -> Result<H2Response, String> {
    let resp = resp.await.map_err(|e| e.to_string())?;
    let (parts, mut recv) = resp.into_parts();
    let mut body = Vec::new();
    while let Some(d) = recv.data().await {
        let d = d.map_err(|e| e.to_string())?;
        let _ = recv.flow_control().release_capacity(d.len());
        body.extend_from_slice(&d);
    }
    let trailers = recv.trailers().await.map_err(|e| e.to_string())?;
    Ok(H2Response {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
        trailers,
    })
}

/// A gRPC unary call to `path` with one message, `te: trailers`, content-type `application/grpc`.
///
/// # Errors
/// As [`request`].
pub async fn grpc_call(
    send: &SendRequest<Bytes>,
    path: &str,
    message: &[u8],
) -> Result<H2Response, String> {
    let body = crate::peers::grpc::frame(message);
    request(
        send,
        H2Request {
            method: "POST",
            path,
            headers: &[
                ("content-type", crate::peers::grpc::CONTENT_TYPE),
                ("te", "trailers"),
            ],
            body: &body,
            trailers: None,
        },
    )
    .await
}

/// What [`echo_session`] saw.
#[derive(Debug, Clone)]
pub struct EchoSession {
    /// `:status` of the answer.
    pub status: u16,
    /// Chunks whose echo came back byte-exact.
    pub echoed: usize,
    /// The stream's end (trailers or END_STREAM) arrived after the last chunk.
    pub ended: bool,
    /// Trailing HEADERS of the answer.
    pub trailers: Option<HeaderMap>,
}

/// A bidirectional stream on `path` (the origin's `/echo`, or through a proxy to it): `chunks`
/// DATA frames of `chunk` bytes, one every `every`, each one's echo read back before the next is
/// sent; then END_STREAM and the answer's end. Every read waits at most `limit`.
///
/// # Errors
/// The stream's error, an echo that differs, or a wait over `limit`, in words (with the chunks
/// echoed so far).
pub async fn echo_session(
    send: &SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    (chunks, chunk, every): (usize, usize, Duration),
    limit: Duration,
) -> Result<EchoSession, String> {
    let req = H2Request {
        method: "POST",
        path,
        headers,
        body: b"x",
        trailers: None,
    };
    let (resp, mut out) = open(send, &req)?.await?;
    let resp = within(limit, async { resp.await.map_err(|e| e.to_string()) }).await?;
    let status = resp.status().as_u16();
    let mut recv = resp.into_body();
    let mut echoed = 0;
    for i in 0..chunks {
        let data = Bytes::from(vec![b'a' + (i % 26) as u8; chunk]);
        out.reserve_capacity(chunk);
        out.send_data(data.clone(), false)
            .map_err(|e| format!("after {echoed} echoes: send: {e}"))?;
        let mut got = Vec::with_capacity(chunk);
        while got.len() < chunk {
            let d = within(limit, async {
                match recv.data().await {
                    Some(Ok(d)) => Ok(d),
                    Some(Err(e)) => Err(e.to_string()),
                    None => Err("the answer ended".into()),
                }
            })
            .await
            .map_err(|e| format!("after {echoed} echoes: {e}"))?;
            let _ = recv.flow_control().release_capacity(d.len());
            got.extend_from_slice(&d);
        }
        if got != data {
            return Err(format!("echo {i} differs ({} bytes)", got.len()));
        }
        echoed += 1;
        monoio::time::sleep(every).await;
    }
    out.send_data(Bytes::new(), true)
        .map_err(|e| format!("END_STREAM: {e}"))?;
    let ended = within(limit, async {
        while let Some(d) = recv.data().await {
            d.map_err(|e| e.to_string())?;
        }
        recv.trailers().await.map_err(|e| e.to_string())
    })
    .await;
    let (ended, trailers) = match ended {
        Ok(t) => (true, t),
        Err(_) => (false, None),
    };
    Ok(EchoSession {
        status,
        echoed,
        ended,
        trailers,
    })
}
