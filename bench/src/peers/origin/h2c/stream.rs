//! One stream of the h2c origin: which answer its path and content-type ask for (see the module docs
//! of [`super`]), sent with h2's flow control, and the peer's reset of it recorded whenever it comes:
//! while the answer waits (a delay), while the request body is read, or while the answer is sent.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response};

use super::{H2cWorker, ECHO_PATH, TRAILERS_PATH};
use crate::peers::grpc;
use crate::peers::origin::{delay_for, sized_index, APP_BODY, APP_FIELDS, APP_PATH};

/// The body of [`TRAILERS_PATH`].
pub const TRAILERS_BODY: &[u8] = b"body before trailers\n";

/// FNV-1a, 32 bits: the `x-checksum` trailer of [`TRAILERS_PATH`] (as 8 lowercase hex digits).
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Why a stream's answer stopped early.
enum Stop {
    /// The peer reset the stream (or the connection ended under it with this reason).
    Reset(h2::Reason),
    /// Anything else (the connection went away without a reason, a local error).
    Gone,
}

impl From<h2::Error> for Stop {
    fn from(e: h2::Error) -> Self {
        match e.reason() {
            Some(r) if e.is_remote() || e.is_reset() => Stop::Reset(r),
            _ => Stop::Gone,
        }
    }
}

/// Serves one stream to its end and records a reset by the peer.
pub(super) async fn serve_stream(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    w: &H2cWorker,
) {
    let path = req.uri().path().to_string();
    let r = answer(req, &mut respond, w).await;
    match r {
        Ok(()) => {
            w.records
                .completed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Err(Stop::Reset(reason)) => w.records.reset_by_peer(&path, reason),
        Err(Stop::Gone) => {}
    }
}

/// Picks and sends the answer.
async fn answer(
    req: Request<RecvStream>,
    respond: &mut SendResponse<Bytes>,
    w: &H2cWorker,
) -> Result<(), Stop> {
    let path = req.uri().path().to_string();
    let grpc_call = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(grpc::is_grpc);
    if path == ECHO_PATH {
        return echo(req, respond, grpc_call).await;
    }
    let (_, mut body) = req.into_parts();
    if grpc_call {
        let request = read_body(&mut body, respond).await?;
        wait(respond, delay_for(&path, w.delay)).await?;
        return grpc_answer(respond, &path, &request, w.opts.stream_messages).await;
    }
    // The request body is read and dropped (its window given back), as the HTTP/1.1 origin does.
    read_body(&mut body, respond).await?;
    if path == TRAILERS_PATH {
        let mut t = HeaderMap::new();
        t.insert("x-checksum", hv(&format!("{:08x}", fnv1a32(TRAILERS_BODY))));
        t.insert("grpc-status", HeaderValue::from_static("0"));
        let mut send = respond.send_response(head("text/plain", None), false)?;
        send_all(&mut send, Bytes::from_static(TRAILERS_BODY), false).await?;
        send.send_trailers(t)?;
        return Ok(());
    }
    let app = path == APP_PATH;
    let (content_type, bytes) = match sized_index(&path) {
        _ if app => (
            "application/json; charset=utf-8",
            Bytes::from_static(APP_BODY),
        ),
        Some(i) => ("text/plain", w.sized[i].clone()),
        None => {
            wait(respond, delay_for(&path, w.delay)).await?;
            ("text/plain", w.body.clone())
        }
    };
    let mut resp = head(content_type, Some(bytes.len()));
    if app {
        for (name, value) in APP_FIELDS.iter().filter(|(n, _)| *n != "Content-Type") {
            if let Ok(name) = http::HeaderName::from_bytes(name.as_bytes()) {
                resp.headers_mut().append(name, hv(value));
            }
        }
    }
    let end = bytes.is_empty();
    let mut send = respond.send_response(resp, end)?;
    if !end {
        send_all(&mut send, bytes, true).await?;
    }
    Ok(())
}

/// `/echo`: the head at once, then every DATA chunk back as it arrives, then the request's trailers
/// (a gRPC call without trailers: `grpc-status: 0`), or END_STREAM.
async fn echo(
    req: Request<RecvStream>,
    respond: &mut SendResponse<Bytes>,
    grpc_call: bool,
) -> Result<(), Stop> {
    let (parts, mut body) = req.into_parts();
    let ct = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_string();
    let mut send = respond.send_response(head(&ct, None), false)?;
    while let Some(chunk) = recv_or_reset(&mut body, &mut send).await? {
        let n = chunk.len();
        send_all(&mut send, chunk, false).await?;
        // The window comes back only now: the client cannot run ahead of the echoes.
        let _ = body.flow_control().release_capacity(n);
    }
    let trailers = poll_fn(|cx| body.poll_trailers(cx)).await?;
    match (trailers, grpc_call) {
        (Some(t), _) => send.send_trailers(t)?,
        (None, true) => send.send_trailers(grpc_ok())?,
        (None, false) => send.send_data(Bytes::new(), true)?,
    }
    Ok(())
}

/// The gRPC answer: one message echoing the request's first one, or N of them when the path's last
/// segment is `Stream[N]`; then `grpc-status: 0`.
async fn grpc_answer(
    respond: &mut SendResponse<Bytes>,
    path: &str,
    request: &[u8],
    default_messages: usize,
) -> Result<(), Stop> {
    let message = match grpc::split(request) {
        grpc::Next::Message(m, _) => m,
        grpc::Next::Partial => &[][..],
    };
    let count = stream_count(path, default_messages);
    let mut send = respond.send_response(head(grpc::CONTENT_TYPE, None), false)?;
    let one = Bytes::from(grpc::frame(message));
    for _ in 0..count {
        send_all(&mut send, one.clone(), false).await?;
    }
    send.send_trailers(grpc_ok())?;
    Ok(())
}

/// Messages a gRPC call to `path` is answered with: N for a last segment `StreamN`, `default` for
/// `Stream`, else 1 (unary).
pub(crate) fn stream_count(path: &str, default: usize) -> usize {
    let method = path.rsplit('/').next().unwrap_or("");
    match method.strip_prefix("Stream") {
        Some("") => default,
        Some(n) => n.parse().unwrap_or(default),
        None => 1,
    }
}

fn grpc_ok() -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("0"));
    t
}

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// A 200 head with `content-type` and, when known, `content-length`.
fn head(content_type: &str, len: Option<usize>) -> Response<()> {
    let mut r = Response::new(());
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, hv(content_type));
    if let Some(n) = len {
        r.headers_mut()
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    r
}

/// Reads the whole request body (giving its window back as it goes), watching for a reset.
async fn read_body(
    body: &mut RecvStream,
    respond: &mut SendResponse<Bytes>,
) -> Result<Vec<u8>, Stop> {
    let mut out = Vec::new();
    loop {
        let next = poll_fn(|cx| {
            if let Poll::Ready(Ok(r)) = respond.poll_reset(cx) {
                return Poll::Ready(Err(Stop::Reset(r)));
            }
            body.poll_data(cx).map(|d| Ok(d.transpose()))
        })
        .await?;
        match next.map_err(Stop::from)? {
            Some(d) => {
                let _ = body.flow_control().release_capacity(d.len());
                out.extend_from_slice(&d);
            }
            None => return Ok(out),
        }
    }
}

/// The next request chunk of `/echo`, or the peer's reset of the stream.
async fn recv_or_reset(
    body: &mut RecvStream,
    send: &mut SendStream<Bytes>,
) -> Result<Option<Bytes>, Stop> {
    let next = poll_fn(|cx| {
        if let Poll::Ready(Ok(r)) = send.poll_reset(cx) {
            return Poll::Ready(Err(Stop::Reset(r)));
        }
        body.poll_data(cx).map(Ok)
    })
    .await?;
    next.transpose().map_err(Stop::from)
}

/// Waits `delay` (if any) before answering, ending early when the peer resets the stream.
async fn wait(respond: &mut SendResponse<Bytes>, delay: Option<Duration>) -> Result<(), Stop> {
    let Some(d) = delay else {
        return Ok(());
    };
    let mut sleep = pin!(monoio::time::sleep(d));
    poll_fn(|cx| {
        match respond.poll_reset(cx) {
            Poll::Ready(Ok(r)) => return Poll::Ready(Err(Stop::Reset(r))),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Stop::from(e))),
            Poll::Pending => {}
        }
        sleep.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// Sends `bytes` as window allows (never more than h2 grants, so the peer's reading paces it).
async fn send_all(send: &mut SendStream<Bytes>, mut bytes: Bytes, end: bool) -> Result<(), Stop> {
    if bytes.is_empty() {
        return send.send_data(bytes, end).map_err(Stop::from);
    }
    while !bytes.is_empty() {
        send.reserve_capacity(bytes.len());
        let cap = poll_fn(|cx| {
            if let Poll::Ready(Ok(r)) = send.poll_reset(cx) {
                return Poll::Ready(Some(Err(Stop::Reset(r))));
            }
            send.poll_capacity(cx)
                .map(|c| c.map(|c| c.map_err(Stop::from)))
        })
        .await
        .ok_or(Stop::Gone)??;
        if cap == 0 {
            continue;
        }
        let piece = bytes.split_to(cap.min(bytes.len()));
        send.send_data(piece, end && bytes.is_empty())?;
    }
    Ok(())
}

/// A `BytesMut` of `n` copies of `message` framed (the shape of a server-streaming answer), for
/// tests and the compare setup.
pub fn stream_body(message: &[u8], n: usize) -> Bytes {
    let mut out = BytesMut::new();
    for _ in 0..n {
        out.extend_from_slice(&grpc::frame(message));
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_counts() {
        assert_eq!(stream_count("/bench.Echo/Unary", 100), 1);
        assert_eq!(stream_count("/bench.Echo/Stream", 100), 100);
        assert_eq!(stream_count("/bench.Echo/Stream7", 100), 7);
        assert_eq!(stream_count("/x/Streamx", 5), 5);
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        let b = stream_body(b"hi", 3);
        assert_eq!(grpc::messages(&b).0.len(), 3);
    }
}
