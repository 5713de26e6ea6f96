//! Connections in (DESIGN.md "Layout", `frontend/src/accept`): each worker's accept loop on its own
//! SO_REUSEPORT listeners, capacity ([`make_room`]: eviction of idle connections near `max_connections`,
//! DESIGN.md "Capacity"), the panic guard around each connection's task, the PROXY protocol header
//! ([`proxy_protocol`]) and the TLS handshake ([`tls`]); then the connection is handed to its protocol's
//! session in [`crate::server`].

pub mod clients;
pub mod proxy_protocol;
pub mod tls;

use std::{
    future::Future,
    net::SocketAddr,
    panic::AssertUnwindSafe,
    pin::Pin,
    rc::Rc,
    sync::atomic::Ordering,
    task::{Context, Poll},
    time::Duration,
};

use edge_core::{
    metrics::ShedReason,
    runtime::{ConnectionSlot, ListenerKind},
};
use monoio::net::TcpListener;

use crate::context::Worker;

/// Accepts connections on `listener` until the worker closes; each runs as its own guarded task.
pub async fn accept_loop(w: Rc<Worker>, listener: TcpListener, kind: ListenerKind) {
    // Stopping must not lose a connection the kernel already handed over: on io_uring an accept in flight
    // may complete while it is dropped, and after an upgrade the listening socket lives on in the new
    // process, so the pending accept is cancelled and awaited, and a connection it still returns is
    // served.
    let mut stop = std::pin::pin!(wait_closing(w.clone()));
    loop {
        if w.shared.closing.load(Ordering::Relaxed) || w.is_fatal() {
            return;
        }
        let canceller = monoio::io::Canceller::new();
        let mut accept = std::pin::pin!(listener.cancelable_accept(canceller.handle()));
        let res = monoio::select! {
            r = &mut accept => r,
            () = &mut stop => {
                canceller.cancel();
                accept.await
            }
        };
        match res {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                tracing::trace!(event = "connection.accepted", worker = w.id, %peer);
                let (slot, open) =
                    ConnectionSlot::take(&w.shared, std::os::fd::AsRawFd::as_raw_fd(&stream));
                let over = !make_room(&w, open);
                let local = local_address(&w, &stream);
                // Counted before the task first runs: the worker ends once `open` is 0, and a connection
                // accepted just before `closing` must not be dropped unserved with its task.
                w.open.set(w.open.get() + 1);
                match kind {
                    ListenerKind::Plain => {
                        let accepted = crate::server::h1::Accepted::plain(peer, local, over);
                        let serve = crate::server::h1::serve(w.clone(), stream, accepted);
                        monoio::spawn(guarded(w.clone(), peer, slot, Box::pin(serve)));
                    }
                    ListenerKind::Tls => {
                        let serve = crate::accept::tls::serve(w.clone(), stream, peer, local, over);
                        monoio::spawn(guarded(w.clone(), peer, slot, Box::pin(serve)));
                    }
                }
            }
            Err(_) if w.shared.closing.load(Ordering::Relaxed) => return,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                w.metrics.connection_shed(ShedReason::FdLimit).increment(1);
                if w.log_limit.allow() {
                    tracing::warn!(
                        event = "connection.shed",
                        worker = w.id,
                        reason = "fd_limit",
                        "out of file descriptors; pausing accept for 100 ms"
                    );
                }
                monoio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                tracing::debug!(event = "accept.error", worker = w.id, error = %e);
                // Transient (ECONNABORTED, ENOBUFS, ...): pause briefly instead of spinning.
                monoio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Resolves once the supervisor sets `closing` or a worker task failed (checked every 50 ms; one timer
/// per worker, not per accept).
async fn wait_closing(w: Rc<Worker>) {
    while !w.shared.closing.load(Ordering::Relaxed) && !w.is_fatal() {
        monoio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Near the limit (fewer than 1/16 free), evicts this worker's least recently active idle connection.
/// `false` when the process is at the limit and nothing here was evictable: the new connection is shed.
/// `open` is the count of open connections before this one, from the same atomic step that took its slot.
fn make_room(w: &Worker, open: usize) -> bool {
    let max = w.shared.max_connections;
    if open + max / 16 < max {
        return true;
    }
    // The evicted connection's task frees its slot as soon as it runs; the new one may briefly overshoot.
    w.idle.evict_oldest() || open < max
}

/// Runs one connection's future `serve`; a panic inside it closes only this connection and is counted.
/// `serve` comes boxed: taken by value, it would be stored in this task as well as in the box
/// [`CatchUnwind`] needs (an idle connection's memory twice over). An async block rather than an `async
/// fn`, whose arguments would stay in its state beside the locals they are moved into.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments in its state twice"
)]
fn guarded<F: Future<Output = ()>>(
    w: Rc<Worker>,
    peer: SocketAddr,
    slot: ConnectionSlot,
    serve: Pin<Box<F>>,
) -> impl Future<Output = ()> {
    async move {
        w.metrics.connections_active.increment(1.0);
        let res = CatchUnwind(serve).await;
        w.open.set(w.open.get() - 1);
        w.metrics.connections_active.decrement(1.0);
        drop(slot);
        if let Err(panic) = res {
            w.metrics.panics.increment(1);
            let msg = panic_message(&*panic);
            tracing::error!(event = "connection.panic", worker = w.id, %peer, panic = %msg, "a connection task panicked; closed that connection");
        }
    }
}

/// A future that turns a panic in the future it polls into `Err` (monoio does not catch task panics).
/// `F` is a pinned future (`Pin<Box<_>>`, or `Pin<&mut _>` pinned in place by its owner).
pub(crate) struct CatchUnwind<F>(pub(crate) F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = Pin::new(&mut self.0);
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// The text of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// The connection's local address (the address the client reached edge on), looked up (one
/// `getsockname`) only while an upstream sends the PROXY protocol, whose header carries it
/// (`send_proxy_protocol`); `None` otherwise.
fn local_address(w: &Worker, stream: &monoio::net::TcpStream) -> Option<SocketAddr> {
    let live = w.current();
    let wanted = live
        .cfg
        .upstreams
        .iter()
        .any(|u| u.config.send_proxy_protocol.version().is_some());
    wanted.then(|| stream.local_addr().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_connection_future_is_caught_and_the_runtime_goes_on() {
        let out = edge_core::runtime::block_on(edge_core::runtime::IoDriver::Epoll, async {
            let caught = CatchUnwind(Box::pin(async { panic!("boom in one connection") })).await;
            let survivor = monoio::spawn(async { 7 }).await;
            (caught.is_err(), survivor)
        })
        .unwrap();
        assert_eq!(out, (true, 7));
    }
}
