use std::future::poll_fn;

use monoio::{
    io::{AsyncReadRent, AsyncWriteRentExt},
    net::{TcpListener, TcpStream},
};

use super::*;
use crate::runtime::{block_on, IoDriver};

/// Runs `f` on both io drivers (io_uring skipped where the kernel refuses it).
fn both_drivers(f: impl Fn() -> Pin<Box<dyn std::future::Future<Output = ()>>>) {
    for driver in [IoDriver::IoUring, IoDriver::Epoll] {
        if block_on(driver, f()).is_err() {
            assert_eq!(driver, IoDriver::IoUring, "epoll runtime must build");
        }
    }
}

async fn write_all(io: &mut PollIo, mut data: &[u8]) {
    while !data.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, data))
            .await
            .unwrap();
        data = &data[n..];
    }
    poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx))
        .await
        .unwrap();
}

async fn read_to_end(io: &mut PollIo) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 7000];
    loop {
        let mut rb = ReadBuf::new(&mut chunk);
        poll_fn(|cx| Pin::new(&mut *io).poll_read(cx, &mut rb))
            .await
            .unwrap();
        if rb.filled().is_empty() {
            return out;
        }
        out.extend_from_slice(rb.filled());
    }
}

#[test]
fn a_mebibyte_crosses_both_ways_with_prefix_first_and_shutdown_is_eof() {
    both_drivers(|| {
        Box::pin(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
            let expect = data.clone();
            let peer = monoio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut got = Vec::new();
                while got.len() < expect.len() {
                    let (r, b) = s.read(Vec::with_capacity(65536)).await;
                    assert!(r.unwrap() > 0, "EOF before the whole upload");
                    got.extend_from_slice(&b);
                }
                assert!(got == expect, "upload differs");
                let (r, _) = s.write_all(got).await;
                r.unwrap();
                let (r, _) = s.read(Vec::with_capacity(16)).await;
                assert_eq!(r.unwrap(), 0, "shutdown reaches the peer as EOF");
            });
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut io = PollIo::new(tcp, b"pre", Duration::from_secs(5));
            let mut first = [0u8; 3];
            let mut rb = ReadBuf::new(&mut first);
            poll_fn(|cx| Pin::new(&mut io).poll_read(cx, &mut rb))
                .await
                .unwrap();
            assert_eq!(rb.filled(), b"pre", "the prefix is read first");
            write_all(&mut io, &data).await;
            let mut back = Vec::new();
            while back.len() < data.len() {
                let mut chunk = [0u8; 9000];
                let mut rb = ReadBuf::new(&mut chunk);
                poll_fn(|cx| Pin::new(&mut io).poll_read(cx, &mut rb))
                    .await
                    .unwrap();
                assert!(!rb.filled().is_empty(), "EOF before the whole download");
                back.extend_from_slice(rb.filled());
            }
            assert!(back == data, "download differs");
            poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx))
                .await
                .unwrap();
            peer.await;
            assert!(read_to_end(&mut io).await.is_empty(), "the peer closed");
        })
    });
}

#[test]
fn dropping_the_adapter_cancels_its_read_and_closes_the_socket() {
    both_drivers(|| {
        Box::pin(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = monoio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let (r, _) = s.read(Vec::with_capacity(16)).await;
                r.unwrap()
            });
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut io = PollIo::new(tcp, b"", Duration::from_secs(5));
            // A read is in flight (nothing arrives); dropping must end it and close the socket.
            let mut chunk = [0u8; 16];
            let mut rb = ReadBuf::new(&mut chunk);
            let pending =
                poll_fn(|cx| Poll::Ready(Pin::new(&mut io).poll_read(cx, &mut rb).is_pending()))
                    .await;
            assert!(pending);
            // Let the read pump arm its read, then drop with it in flight.
            let mut yielded = false;
            poll_fn(|cx| {
                if yielded {
                    return Poll::Ready(());
                }
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            })
            .await;
            drop(io);
            let n = monoio::time::timeout(Duration::from_secs(5), peer)
                .await
                .expect("the socket closed after the drop");
            assert_eq!(n, 0);
        })
    });
}
