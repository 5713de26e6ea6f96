//! Reading the response: heads (interim and final) under `request_timeout` and the zombie clock, the
//! wait for an answer to `Expect: 100-continue`, and body reads under the zombie clock. The bytes stay
//! in the connection's receive buffer as they came: HTTP/1.1 is the neutral form ([`crate::received`]).

use edge_core::{
    clock::timeout_at,
    http::head::{parse_response, Fields, ResponseHead},
    io::Transport,
};
use monoio::{io::Canceller, time::Instant};

use crate::{
    received::MAX_RESPONSE_HEAD,
    session::{BodyRead, HeadBuffer, Waited},
    zombie::ActivityClock,
    UpstreamConn, UpstreamError, UpstreamErrorKind,
};

/// Reads until a complete response head (interim or final) is buffered at the start of `conn.buf`, with
/// its fields in `fields`. The read stops at `head_deadline` (`request_timeout`, 504 `RequestTimeout`)
/// or at the zombie deadline (504 `Zombie`), whichever is first. `buffer` sizes the reads
/// ([`HeadBuffer`]).
///
/// # Errors
/// `BadResponse` for a malformed head or one over [`MAX_RESPONSE_HEAD`]; the deadlines' kinds; a close
/// or reset, retry-safe only while no response byte arrived in this attempt (`clock.last_received`).
pub(crate) async fn read_head<T: Transport>(
    conn: &mut UpstreamConn<T>,
    fields: &mut Fields,
    clock: &mut ActivityClock,
    head_deadline: Option<Instant>,
    buffer: HeadBuffer,
) -> Result<ResponseHead, UpstreamError> {
    loop {
        let received_any = clock.last_received.is_some();
        match parse_response(conn.buf.data(), fields) {
            // A head that came whole in one read is held to the same bound as one still arriving.
            Ok(Some(h)) if h.len > MAX_RESPONSE_HEAD => {
                return Err(UpstreamError::new(UpstreamErrorKind::BadResponse))
            }
            Ok(Some(h)) => return Ok(h),
            Ok(None) if conn.buf.len() < MAX_RESPONSE_HEAD => {}
            Ok(None) | Err(_) => return Err(UpstreamError::new(UpstreamErrorKind::BadResponse)),
        }
        let zombie_at = clock.deadline();
        let (until, kind) = match head_deadline {
            Some(d) if d <= zombie_at => (d, UpstreamErrorKind::RequestTimeout),
            _ => (zombie_at, UpstreamErrorKind::Zombie),
        };
        // A large buffer: the body bytes behind the head usually come in the same read
        // (a small one under a burst: [`HEAD_WAITS_WITH_BUFFER`]).
        let failed = |kind| UpstreamError {
            retry_safe: !received_any,
            ..UpstreamError::new(kind)
        };
        let (buf, stream) = conn.buf_and_stream();
        let read = async {
            if buffer == HeadBuffer::Head {
                // A head buffer held while waiting (`edge_core::buf::HEAD_BUF_SIZE`): not counted
                // among the waits with a large buffer.
                return buf.fill_head(stream).await;
            }
            let waiting = HeadWait::start();
            match waiting.many() {
                true => {
                    stream.readable(true).await?;
                    buf.fill(stream).await
                }
                false => buf.fill_large(stream).await,
            }
        };
        match timeout_at(until, read).await {
            Err(_) => return Err(UpstreamError::new(kind)),
            Ok(Ok(0)) => return Err(failed(UpstreamErrorKind::ClosedEarly)),
            Ok(Err(e)) => return Err(failed(UpstreamError::from_io(&e).kind)),
            Ok(Ok(_)) => clock.received(),
        }
    }
}

/// Response-head reads of this worker waiting at once beyond which a head read first waits for its
/// socket to be readable, holding no buffer, and then reads into a small buffer (DESIGN.md "Memory
/// under slow readers and large bodies": memory follows the work in flight). Below it the read goes
/// straight into a large buffer (one io operation per head, and a 16 KiB response comes whole with
/// its head); above it a burst of requests waiting for their upstreams holds no 64 KiB buffer each
/// (4 MiB of them at most), and the body bytes that come with each head, which the client takes
/// first, are at most 16 KiB.
const HEAD_WAITS_WITH_BUFFER: usize = 64;

thread_local! {
    /// Response-head reads of this worker waiting now.
    static HEAD_WAITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One response-head read counted in [`HEAD_WAITS`] while it lives.
struct HeadWait(usize);

impl HeadWait {
    fn start() -> Self {
        HeadWait(HEAD_WAITS.with(|n| n.replace(n.get() + 1)))
    }

    /// Whether [`HEAD_WAITS_WITH_BUFFER`] reads were already waiting when this one started.
    fn many(&self) -> bool {
        self.0 >= HEAD_WAITS_WITH_BUFFER
    }
}

impl Drop for HeadWait {
    fn drop(&mut self) {
        HEAD_WAITS.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Waits until `until` for more response bytes (the `Expect: 100-continue` wait).
///
/// # Errors
/// A close (`ClosedEarly`) or reset; retry-safe when `received_before` is false (no response byte
/// arrived in this attempt).
///
/// # Cancel safety
/// The read is cancelled at the deadline and awaited, so bytes that won the race stay buffered.
pub(crate) async fn wait_more<T: Transport>(
    conn: &mut UpstreamConn<T>,
    until: Instant,
    received_before: bool,
) -> Result<Waited, UpstreamError> {
    let canceller = Canceller::new();
    let r = {
        let (buf, stream) = conn.buf_and_stream();
        let mut read = std::pin::pin!(buf.fill_cancelable(stream, canceller.handle()));
        match timeout_at(until, read.as_mut()).await {
            Ok(r) => r,
            Err(_) => {
                canceller.cancel();
                read.await
            }
        }
    };
    let failed = |kind| UpstreamError {
        retry_safe: !received_before,
        ..UpstreamError::new(kind)
    };
    match r {
        Ok(0) => Err(failed(UpstreamErrorKind::ClosedEarly)),
        Ok(_) => Ok(Waited::Bytes),
        Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => Ok(Waited::Deadline),
        Err(e) => Err(failed(UpstreamError::from_io(&e).kind)),
    }
}

/// Reads more of the response body into `conn.buf` under the zombie deadline; a `size` above 0 reads
/// into a pooled buffer of that size class ([`edge_core::buf::RecvBuf::fill_sized`]: pass-through
/// relays, sized by the client's pace), 0 into the buffer as it is.
///
/// # Errors
/// `Zombie` when the clock's deadline passes, `Reset` for a failed read.
///
/// # Cancel safety
/// Not cancel safe; on any error the connection is dropped, never pooled.
pub(crate) async fn read_body<T: Transport>(
    conn: &mut UpstreamConn<T>,
    clock: &mut ActivityClock,
    size: usize,
) -> Result<BodyRead, UpstreamError> {
    let read = async {
        let (buf, stream) = conn.buf_and_stream();
        match size {
            0 => buf.fill(stream).await,
            size => buf.fill_sized(stream, size).await,
        }
    };
    match timeout_at(clock.deadline(), read).await {
        Err(_) => Err(UpstreamError::new(UpstreamErrorKind::Zombie)),
        Ok(Ok(0)) => Ok(BodyRead::Eof),
        Ok(Ok(_)) => {
            clock.received();
            Ok(BodyRead::Data)
        }
        Ok(Err(_)) => Err(UpstreamError::new(UpstreamErrorKind::Reset)),
    }
}

/// Waits until the connection's socket has body bytes or its end to read, under the zombie `clock`
/// ([`crate::session::UpstreamSession::body_readable`]).
pub(crate) async fn body_readable<T: Transport>(
    conn: &mut UpstreamConn<T>,
    clock: &ActivityClock,
) -> Result<(), UpstreamError> {
    let (_, stream) = conn.buf_and_stream();
    match timeout_at(clock.deadline(), stream.readable(false)).await {
        Err(_) => Err(UpstreamError::new(UpstreamErrorKind::Zombie)),
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(UpstreamError::new(UpstreamErrorKind::Reset)),
    }
}
