//! The client `send` deadline (DESIGN.md "Inbound deadlines": no progress writing to the client) around
//! one write, for every protocol's session and for answers written before a session exists.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use edge_core::clock::Deadline;

use crate::respond::SendFailure;

/// Runs one write to the client under the `send` deadline (DESIGN.md "Inbound deadlines": no progress
/// writing to the client), mapping the outcome to [`SendFailure`]. Every write to a client goes through
/// here. A plain future rather than an `async fn`, so that the write's future is not copied into one
/// more state machine on its way (bench/README.md "Future moves").
#[inline]
pub fn within_send<T, F: Future<Output = std::io::Result<T>>>(
    send: Duration,
    write: F,
) -> WithinSend<F> {
    WithinSend(edge_core::clock::timeout(send, write))
}

/// The future of [`within_send`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct WithinSend<F>(Deadline<F>);

impl<T, F: Future<Output = std::io::Result<T>>> Future for WithinSend<F> {
    type Output = Result<T, SendFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of the only field, which is never moved out.
        let deadline = unsafe { self.map_unchecked_mut(|s| &mut s.0) };
        deadline.poll(cx).map(|r| match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(SendFailure::Closed),
            Err(_) => Err(SendFailure::Timeout),
        })
    }
}
