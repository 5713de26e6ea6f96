//! The lingering close (DESIGN.md "Status codes"): before closing a connection with unread input, edge
//! shuts its write side and discards input for a while, so the client reads the response instead of a
//! reset.

use std::time::Duration;

use edge_core::io::Transport;
use monoio::{io::AsyncReadRent, time::Instant};

/// Lingering close (DESIGN.md "Status codes"): shut the write side, then discard input for up to 1 s or
/// 256 KiB so the client reads the response instead of a reset.
pub async fn linger_close<T: Transport>(stream: T) {
    const LIMIT: usize = 256 * 1024;
    let until = Instant::now() + Duration::from_secs(1);
    let (mut rd, mut wr) = stream.split();
    let _ = monoio::io::AsyncWriteRent::shutdown(&mut wr).await;
    let mut buf = edge_core::buf::take();
    let mut seen = 0;
    while seen < LIMIT {
        buf.clear();
        match edge_core::clock::timeout_at(until, rd.read(buf)).await {
            Ok((Ok(n), b)) if n > 0 => {
                seen += n;
                buf = b;
            }
            Ok((_, b)) => {
                buf = b;
                break;
            }
            Err(_) => return,
        }
    }
    edge_core::buf::give(buf);
}
