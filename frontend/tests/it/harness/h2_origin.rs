//! A scripted HTTP/2 origin (h2c, prior knowledge): hyperium's `h2` server on a monoio runtime of its
//! own thread, recording what it saw, with the faults the HTTP/2-upstream tests need. Paths:
//! - `/echo`: 200 without Content-Length, the request body back, then trailers `x-echo: done` and
//!   the request's own trailers;
//! - `/trailers`: 200 `content-type: application/grpc`, body `abc`, trailers `grpc-status: 0`,
//!   `grpc-message: fine`;
//! - `/slow/MS`: 200 `slow` after MS milliseconds (the connection keeps being served, PINGs answered);
//! - `/stream/N/MS`: N chunks of `tick\n`, MS milliseconds apart, no Content-Length;
//! - `/big/N`: N bytes of a repeating pattern, with Content-Length;
//! - `/reset`: 200 without Content-Length, 64 KiB of body, then RST_STREAM INTERNAL_ERROR;
//! - `/hold`: never answers; a reset of the stream by the client is counted ([`H2OriginState::resets`]);
//! - `/freeze`: the connection is no longer read or written at all (PINGs unanswered: a zombie);
//! - an extended CONNECT with `:protocol websocket` (RFC 8441; the origin offers
//!   SETTINGS_ENABLE_CONNECT_PROTOCOL): 200, then every DATA byte echoed, END_STREAM after the
//!   client's;
//! - anything else: 200 `h2 origin\n` with Content-Length.
//!
//! Faults for every path: the first [`H2OriginState::refuse_first`] streams are refused
//! (RST_STREAM REFUSED_STREAM), and with [`H2OriginState::goaway_after`] each connection sends a
//! graceful GOAWAY after that many streams.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use bytes::Bytes;
use edge_core::io::PollIo;
use h2::{server::SendResponse, Reason, RecvStream};

/// A request as the HTTP/2 origin saw it.
#[derive(Clone, Debug, Default)]
pub struct H2Seen {
    pub method: String,
    pub scheme: String,
    pub authority: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

impl H2Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the origin counted, and its fault settings.
#[derive(Default)]
pub struct H2OriginState {
    /// Connections accepted.
    pub connections: AtomicUsize,
    /// Streams accepted (refused ones included).
    pub streams: AtomicUsize,
    /// Streams open now, and the most ever open at once.
    pub active: AtomicUsize,
    pub max_active: AtomicUsize,
    /// `/hold` streams the client reset.
    pub resets: AtomicUsize,
    /// Streams still to refuse with REFUSED_STREAM.
    pub refuse_first: AtomicUsize,
    /// Streams refused so far.
    pub refused: AtomicUsize,
    /// Streams per connection before a graceful GOAWAY (0: never).
    pub goaway_after: AtomicUsize,
    /// Requests seen, in arrival order (refused ones excluded).
    pub seen: Mutex<Vec<H2Seen>>,
    /// Body bytes of `/big` answers that h2 took from the origin (the client's flow-control window
    /// allowed them).
    pub big_sent: AtomicUsize,
}

/// A running HTTP/2 origin.
pub struct H2Origin {
    pub addr: SocketAddr,
    pub state: Arc<H2OriginState>,
    stop: Arc<AtomicBool>,
}

impl Drop for H2Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

impl H2Origin {
    /// Starts the origin on 127.0.0.1 (port 0, read back).
    pub fn start() -> H2Origin {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(H2OriginState::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            super::h2_client::block_on(async move {
                let listener = monoio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    if sp.load(Ordering::SeqCst) {
                        return;
                    }
                    monoio::spawn(serve(tcp, st.clone()));
                }
            })
        });
        H2Origin { addr, state, stop }
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<H2Seen> {
        self.state.seen.lock().unwrap().clone()
    }
}

/// Serves one connection.
async fn serve(tcp: monoio::net::TcpStream, st: Arc<H2OriginState>) {
    st.connections.fetch_add(1, Ordering::SeqCst);
    let io = PollIo::new(tcp, &[], Duration::from_secs(30));
    let Ok(mut conn) = h2::server::Builder::new()
        .max_concurrent_streams(1000)
        .enable_connect_protocol()
        .handshake::<_, Bytes>(io)
        .await
    else {
        return;
    };
    let frozen = Arc::new(AtomicBool::new(false));
    let mut on_conn = 0;
    loop {
        if frozen.load(Ordering::SeqCst) {
            // Nothing read or written from now on; the socket stays open until the test ends.
            std::future::pending::<()>().await;
        }
        let next = std::future::poll_fn(|cx| {
            if frozen.load(Ordering::SeqCst) {
                return std::task::Poll::Ready(None);
            }
            conn.poll_accept(cx)
        });
        let Some(Ok((req, mut respond))) = next.await else {
            if frozen.load(Ordering::SeqCst) {
                continue;
            }
            return;
        };
        st.streams.fetch_add(1, Ordering::SeqCst);
        on_conn += 1;
        let goaway = st.goaway_after.load(Ordering::SeqCst);
        if goaway > 0 && on_conn == goaway {
            conn.graceful_shutdown();
        }
        if st
            .refuse_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            st.refused.fetch_add(1, Ordering::SeqCst);
            respond.send_reset(Reason::REFUSED_STREAM);
            continue;
        }
        if req.uri().path() == "/freeze" {
            frozen.store(true, Ordering::SeqCst);
            std::mem::forget(respond);
            continue;
        }
        monoio::spawn(stream(req, respond, st.clone()));
    }
}

/// Serves one stream.
async fn stream(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    st: Arc<H2OriginState>,
) {
    let n = st.active.fetch_add(1, Ordering::SeqCst) + 1;
    st.max_active.fetch_max(n, Ordering::SeqCst);
    let (parts, mut body) = req.into_parts();
    if parts.method == http::Method::CONNECT {
        st.seen.lock().unwrap().push(H2Seen {
            method: "CONNECT".into(),
            scheme: parts.uri.scheme_str().unwrap_or("").into(),
            authority: parts.uri.authority().map_or("", |a| a.as_str()).into(),
            path: parts.uri.path_and_query().map_or("", |p| p.as_str()).into(),
            headers: pairs(&parts.headers),
            ..H2Seen::default()
        });
        let protocol = parts.extensions.get::<h2::ext::Protocol>();
        if protocol.is_some_and(|p| p.as_str() == "websocket") {
            websocket_echo(&mut respond, &mut body).await;
        }
        st.active.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let mut data = Vec::new();
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
        data.extend_from_slice(&d);
    }
    let trailers = match body.trailers().await {
        Ok(Some(t)) => pairs(&t),
        _ => Vec::new(),
    };
    let path = parts.uri.path().to_string();
    st.seen.lock().unwrap().push(H2Seen {
        method: parts.method.to_string(),
        scheme: parts.uri.scheme_str().unwrap_or("").into(),
        authority: parts.uri.authority().map_or("", |a| a.as_str()).into(),
        path: parts.uri.path_and_query().map_or("", |p| p.as_str()).into(),
        headers: pairs(&parts.headers),
        body: data.clone(),
        trailers: trailers.clone(),
    });
    let seg: Vec<&str> = path.split('/').collect();
    match seg.get(1).copied() {
        Some("echo") => {
            let mut send = head(&mut respond, 200, &[]);
            if let Some(s) = send.as_mut() {
                let _ = s.send_data(Bytes::from(data), false);
                let mut t = http::HeaderMap::new();
                t.insert("x-echo", "done".parse().unwrap());
                for (k, v) in &trailers {
                    t.append(
                        http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                        v.parse().unwrap(),
                    );
                }
                let _ = s.send_trailers(t);
            }
        }
        Some("trailers") => {
            if let Some(mut s) = head(&mut respond, 200, &[("content-type", "application/grpc")]) {
                let _ = s.send_data(Bytes::from_static(b"abc"), false);
                let mut t = http::HeaderMap::new();
                t.insert("grpc-status", "0".parse().unwrap());
                t.insert("grpc-message", "fine".parse().unwrap());
                let _ = s.send_trailers(t);
            }
        }
        Some("slow") => {
            let ms = seg.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
            monoio::time::sleep(Duration::from_millis(ms)).await;
            whole(&mut respond, b"slow");
        }
        Some("stream") => {
            let n: usize = seg.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
            let ms = seg.get(3).and_then(|s| s.parse().ok()).unwrap_or(100);
            if let Some(mut s) = head(&mut respond, 200, &[]) {
                for i in 0..n {
                    monoio::time::sleep(Duration::from_millis(ms)).await;
                    let _ = s.send_data(Bytes::from_static(b"tick\n"), i + 1 == n);
                }
            }
        }
        Some("big") => {
            let n: usize = seg.get(2).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
            let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let len = n.to_string();
            if let Some(mut s) = head(&mut respond, 200, &[("content-length", &len)]) {
                send_all(&mut s, Bytes::from(body), &st.big_sent).await;
            }
        }
        Some("reset") => {
            if let Some(mut s) = head(&mut respond, 200, &[]) {
                let _ = s.send_data(Bytes::from(vec![b'r'; 64 * 1024]), false);
                // Let the DATA go out before the reset.
                monoio::time::sleep(Duration::from_millis(100)).await;
                s.send_reset(Reason::INTERNAL_ERROR);
            }
        }
        Some("hold") => {
            if std::future::poll_fn(|cx| respond.poll_reset(cx))
                .await
                .is_ok()
            {
                st.resets.fetch_add(1, Ordering::SeqCst);
            }
        }
        _ => whole(&mut respond, b"h2 origin\n"),
    }
    st.active.fetch_sub(1, Ordering::SeqCst);
}

fn pairs(h: &http::HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

fn head(
    respond: &mut SendResponse<Bytes>,
    status: u16,
    fields: &[(&str, &str)],
) -> Option<h2::SendStream<Bytes>> {
    let mut b = http::Response::builder().status(status);
    for (k, v) in fields {
        b = b.header(*k, *v);
    }
    respond.send_response(b.body(()).unwrap(), false).ok()
}

fn whole(respond: &mut SendResponse<Bytes>, body: &'static [u8]) {
    let len = body.len().to_string();
    if let Some(mut s) = head(respond, 200, &[("content-length", &len)]) {
        let _ = s.send_data(Bytes::from_static(body), true);
    }
}

/// Sends `body` within the stream's flow-control window, END_STREAM with the last bytes; `sent`
/// counts the bytes handed to h2.
async fn send_all(s: &mut h2::SendStream<Bytes>, mut body: Bytes, sent: &AtomicUsize) {
    while !body.is_empty() {
        s.reserve_capacity(body.len());
        let Some(Ok(n)) = std::future::poll_fn(|cx| s.poll_capacity(cx)).await else {
            return;
        };
        let piece = body.split_to(n.min(body.len()));
        sent.fetch_add(piece.len(), Ordering::SeqCst);
        if s.send_data(piece, body.is_empty()).is_err() {
            return;
        }
    }
}

/// A WebSocket stream (RFC 8441 §5): 200, then its DATA echoed back until the client's END_STREAM.
async fn websocket_echo(respond: &mut SendResponse<Bytes>, body: &mut RecvStream) {
    let Some(mut send) = head(respond, 200, &[("sec-websocket-protocol", "chat")]) else {
        return;
    };
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
        send_all_open(&mut send, d).await;
    }
    let _ = send.send_data(Bytes::new(), true);
}

/// Sends `body` within the stream's window, leaving the stream open.
async fn send_all_open(s: &mut h2::SendStream<Bytes>, mut body: Bytes) {
    while !body.is_empty() {
        s.reserve_capacity(body.len());
        let Some(Ok(n)) = std::future::poll_fn(|cx| s.poll_capacity(cx)).await else {
            return;
        };
        let piece = body.split_to(n.min(body.len()));
        if s.send_data(piece, false).is_err() {
            return;
        }
    }
}
