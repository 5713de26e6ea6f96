//! Cooperative yields for loops that move body bytes: a relay whose two sockets are always ready
//! (a fast client and a fast upstream on a LAN or loopback) completes every read and write at once,
//! so it would run a whole body, however large, without returning to its worker's loop; the worker's
//! other connections, its health answers and the upstream's early answer it watches beside an upload
//! would wait behind it (head-of-line blocking on the worker). [`Coop`] yields once per
//! [`YIELD_BYTES`] moved.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

/// Bytes a body loop moves between two yields to its worker's other tasks: 1 MiB, under a
/// millisecond of copying, and one extra task poll per MiB.
pub const YIELD_BYTES: usize = 1 << 20;

/// What a body loop has moved since its last yield.
#[derive(Debug, Default)]
pub struct Coop {
    moved: usize,
}

impl Coop {
    /// Counts `n` bytes moved; after [`YIELD_BYTES`] since the last yield, yields once: the task is
    /// woken at once and runs again after the worker's other ready tasks and its pending IO.
    ///
    /// # Cancel safety
    /// Cancel safe: the count is kept, and a dropped yield loses nothing.
    pub async fn moved(&mut self, n: usize) {
        self.moved += n;
        if self.moved >= YIELD_BYTES {
            self.moved = 0;
            YieldNow(false).await;
        }
    }
}

/// Pending once (having woken its task), then ready.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    #[test]
    fn yields_once_per_budget() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut c = Coop::default();
        {
            let mut f = std::pin::pin!(c.moved(YIELD_BYTES - 1));
            assert_eq!(
                f.as_mut().poll(&mut cx),
                Poll::Ready(()),
                "under the budget: no yield"
            );
        }
        {
            let mut f = std::pin::pin!(c.moved(1));
            assert_eq!(
                f.as_mut().poll(&mut cx),
                Poll::Pending,
                "the budget spent: one yield"
            );
            assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(()));
        }
        let mut f = std::pin::pin!(c.moved(1));
        assert_eq!(
            f.as_mut().poll(&mut cx),
            Poll::Ready(()),
            "the count starts again"
        );
    }
}
