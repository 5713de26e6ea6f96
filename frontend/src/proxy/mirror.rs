//! `mirror` (DESIGN.md "Request pipeline and traffic rules", phase 5): a copy of the request head and
//! body goes to another upstream for the route's share of requests, on the same worker, in a task of
//! its own once the primary's body is read; its answer is read up to its head and dropped, its
//! outcome counted in `edge_mirror_requests_total{worker,result}`, and nothing of it touches the
//! primary exchange. A copy that would need more than [`MIRROR_BODY_MAX`] of body buffered, or whose
//! body has not arrived whole with the head, is dropped (`result="dropped"`), never queued.
//!
//! The mirror's upstream connection is closed after the response head: the body is not read, so the
//! connection is not reused (a shadow service sees the client side close, as with a client that
//! stops reading).

use std::rc::Rc;

use edge_core::{
    buf::SendBuf,
    clock::{coarse_now, timeout},
    http::head::Fields,
};
use edge_upstream::{
    error::UpstreamErrorKind,
    pool::Reuse,
    session::{ClientConn, Finish, HeadBuffer, Open, UpstreamSession},
    zombie::{self, ActivityClock},
};

use crate::context::{Live, Worker};

/// The most request body a mirror copy holds.
pub const MIRROR_BODY_MAX: usize = 64 << 10;

/// The `result` values of `edge_mirror_requests_total`, in registration order.
pub const RESULTS: [&str; 4] = ["ok", "error", "timeout", "dropped"];

/// How a mirror copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MirrorResult {
    /// A response head came back (any status).
    Ok = 0,
    /// Connect, write or read failed.
    Error = 1,
    /// No response head within the upstream's `request_timeout`.
    Timeout = 2,
    /// Not sent: its body was not whole with the head, or over [`MIRROR_BODY_MAX`].
    Dropped = 3,
}

/// Starts the mirror copy of a request whose upstream head and body bytes are `sent` (`whole`: the
/// body is complete in them), to upstream `upstream` of `live`.
pub fn start(
    w: &Worker,
    live: Rc<Live>,
    upstream: usize,
    sent: &[u8],
    head_len: usize,
    whole: bool,
    client: ClientConn,
) {
    let count = |r: MirrorResult| live.mirror_results[r as usize].increment(1);
    if !whole || sent.len() - head_len > MIRROR_BODY_MAX {
        count(MirrorResult::Dropped);
        return;
    }
    let mut copy = SendBuf::take();
    copy.0.extend_from_slice(sent);
    let worker = w.id;
    monoio::spawn(async move {
        let result = send(&live, upstream, copy, client).await;
        if result != MirrorResult::Ok {
            tracing::debug!(event = "mirror.failed", worker, upstream = %live.upstreams[upstream].config.name, result = RESULTS[result as usize]);
        }
        live.mirror_results[result as usize].increment(1);
    });
}

/// Sends the copy and reads the response head.
async fn send(live: &Live, upstream: usize, mut copy: SendBuf, client: ClientConn) -> MirrorResult {
    let up = &live.upstreams[upstream];
    let cfg = &up.config;
    let Ok(opened) = up.open(Reuse::Checked, client, None).await else {
        return MirrorResult::Error;
    };
    let mut session = opened.session;
    if session
        .send_head(&mut copy.0, cfg.write_timeout.0)
        .await
        .is_err()
    {
        return MirrorResult::Error;
    }
    let request_timeout = cfg.request_timeout.0;
    let threshold = zombie::threshold(cfg.max_inactive.0, cfg.max_inactive_cap.0, request_timeout);
    let now = coarse_now();
    let mut clock = ActivityClock::started(now, false, cfg.zombie_counts_received, threshold);
    let mut fields = Fields::new();
    let read = session.read_head(
        &mut fields,
        &mut clock,
        request_timeout.map(|t| now + t),
        HeadBuffer::Large,
    );
    // `read_head` stops at `request_timeout` itself; the outer bound covers `request_timeout = "none"`.
    let outcome = match timeout(
        request_timeout.unwrap_or(std::time::Duration::from_secs(60)),
        read,
    )
    .await
    {
        Ok(Ok(_)) => MirrorResult::Ok,
        Ok(Err(e))
            if matches!(
                e.kind,
                UpstreamErrorKind::RequestTimeout
                    | UpstreamErrorKind::Zombie
                    | UpstreamErrorKind::WriteTimeout
                    | UpstreamErrorKind::ConnectTimeout
            ) =>
        {
            MirrorResult::Timeout
        }
        Ok(Err(_)) => MirrorResult::Error,
        Err(_) => MirrorResult::Timeout,
    };
    session.finish(Finish::Close);
    outcome
}
