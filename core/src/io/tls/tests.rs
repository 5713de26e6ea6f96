//! The TLS transport between two real loopback sockets, rustls on both ends, on both drivers.

use std::sync::Arc;

use monoio::{
    io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Canceller},
    net::{TcpListener, TcpStream},
};
use rustls::{pki_types::PrivateKeyDer, ClientConnection, ServerConnection};

use super::{HandshakeError, Tls};
use crate::{io::Transport, runtime::IoDriver};

fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    (Arc::new(server), Arc::new(client))
}

fn both_drivers(f: impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>) {
    for driver in [IoDriver::IoUring, IoDriver::Epoll] {
        if let Ok(()) = crate::runtime::block_on(driver, f()) {
            continue;
        }
        assert_eq!(driver, IoDriver::IoUring, "epoll runtime must build");
    }
}

async fn pair() -> (
    Tls<TcpStream, ServerConnection>,
    Tls<TcpStream, ClientConnection>,
) {
    let (server_cfg, client_cfg) = configs();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = monoio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let conn = ServerConnection::new(server_cfg).unwrap();
        Tls::handshake(s, conn).await.map_err(|(e, _)| e).unwrap()
    });
    let c = TcpStream::connect(addr).await.unwrap();
    let name = "localhost".try_into().unwrap();
    let conn = ClientConnection::new(client_cfg, name).unwrap();
    let client = Tls::handshake(c, conn).await.map_err(|(e, _)| e).unwrap();
    (server.await, client)
}

async fn read_exact<T: AsyncReadRent>(io: &mut T, len: usize) -> Vec<u8> {
    let mut got = Vec::with_capacity(len);
    while got.len() < len {
        let (r, b) = io.read(Vec::with_capacity(64 * 1024)).await;
        let n = r.unwrap();
        assert!(n > 0, "EOF after {} of {len} bytes", got.len());
        got.extend_from_slice(&b[..n]);
    }
    got
}

#[test]
fn bytes_cross_both_ways_exactly_including_a_mebibyte() {
    both_drivers(|| {
        Box::pin(async {
            let (mut server, mut client) = pair().await;
            assert_eq!(
                server.with_conn(|c| c.alpn_protocol().map(<[u8]>::to_vec)),
                Some(b"http/1.1".to_vec())
            );
            let (r, _) = client.write_all(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await;
            r.unwrap();
            assert_eq!(read_exact(&mut server, 18).await, b"GET / HTTP/1.1\r\n\r\n");
            let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
            let expect = big.clone();
            let reader = monoio::spawn(async move {
                let got = read_exact(&mut client, 1024 * 1024).await;
                (got, client)
            });
            let (r, _) = server.write_all(big).await;
            r.unwrap();
            let (got, mut client) = reader.await;
            assert!(got == expect, "1 MiB arrived changed");
            // close_notify, then EOF on the other side.
            server.shutdown().await.unwrap();
            let (r, _) = client.read(Vec::with_capacity(100)).await;
            assert_eq!(r.unwrap(), 0);
        })
    });
}

#[test]
fn split_halves_work_at_once_and_join_again() {
    both_drivers(|| {
        Box::pin(async {
            let (server, mut client) = pair().await;
            let (mut r, mut w) = server.split();
            let echo = monoio::spawn(async move {
                let got = read_exact(&mut r, 5).await;
                let (res, _) = w.write_all(got).await;
                res.unwrap();
                <Tls<TcpStream, ServerConnection> as Transport>::unsplit(r, w)
            });
            let (res, _) = client.write_all(b"hello".to_vec()).await;
            res.unwrap();
            assert_eq!(read_exact(&mut client, 5).await, b"hello");
            let mut server = echo.await;
            assert!(server.is_quiet());
            let (res, _) = client.write_all(b"x".to_vec()).await;
            res.unwrap();
            server.readable(false).await.unwrap();
            assert_eq!(read_exact(&mut server, 1).await, b"x");
        })
    });
}

#[test]
fn a_cancelled_read_returns_and_loses_nothing() {
    both_drivers(|| {
        Box::pin(async {
            let (mut server, mut client) = pair().await;
            {
                let canceller = Canceller::new();
                let handle = canceller.handle();
                let read = monoio::io::CancelableAsyncReadRent::cancelable_read(
                    &mut server,
                    Vec::with_capacity(100),
                    handle,
                );
                let mut read = std::pin::pin!(read);
                // Poll once so the read is in flight, then cancel it and await its end.
                let polled = monoio::select! {
                    biased;
                    r = &mut read => Some(r),
                    () = monoio::time::sleep(std::time::Duration::from_millis(20)) => None,
                };
                assert!(polled.is_none(), "no data was sent yet");
                canceller.cancel();
                let (r, _) = read.await;
                assert!(r.is_err(), "a cancelled read with no data ends in an error");
            }
            let (res, _) = client.write_all(b"after".to_vec()).await;
            res.unwrap();
            assert_eq!(read_exact(&mut server, 5).await, b"after");
        })
    });
}

#[test]
fn plain_http_on_a_tls_socket_is_recognised() {
    both_drivers(|| {
        Box::pin(async {
            let (server_cfg, _) = configs();
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = monoio::spawn(async move {
                let (s, _) = listener.accept().await.unwrap();
                let conn = ServerConnection::new(server_cfg).unwrap();
                Tls::handshake(s, conn).await.err().map(|(e, _)| e)
            });
            let mut c = TcpStream::connect(addr).await.unwrap();
            let (r, _) = c
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec())
                .await;
            r.unwrap();
            assert!(matches!(server.await, Some(HandshakeError::PlainHttp)));
        })
    });
}

#[test]
fn garbage_fails_the_handshake_with_a_tls_error() {
    both_drivers(|| {
        Box::pin(async {
            let (server_cfg, _) = configs();
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = monoio::spawn(async move {
                let (s, _) = listener.accept().await.unwrap();
                let conn = ServerConnection::new(server_cfg).unwrap();
                Tls::handshake(s, conn).await.err().map(|(e, _)| e)
            });
            let mut c = TcpStream::connect(addr).await.unwrap();
            let (r, _) = c
                .write_all(vec![0x16, 3, 1, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff])
                .await;
            r.unwrap();
            let err = server.await;
            assert!(matches!(err, Some(HandshakeError::Tls(_))), "{err:?}");
        })
    });
}

/// [`crate::io::PollIo`] over a downstream TLS stream seals written bytes in rustls at once: with a
/// client that reads only once the socket and rustls' record queue are full, vectored (head,
/// payload) pairs arrive exactly and in order, and shutdown ends with close_notify.
#[test]
fn poll_io_seals_at_once_and_waits_when_the_client_does_not_read() {
    use std::{
        cell::{Cell, RefCell},
        future::poll_fn,
        io::IoSlice,
        pin::Pin,
        rc::Rc,
        task::{Poll, Waker},
    };

    use tokio::io::AsyncWrite;

    both_drivers(|| {
        Box::pin(async {
            let (server, mut client) = pair().await;
            let mut io = crate::io::PollIo::new(server, b"", std::time::Duration::from_secs(5));
            let payload: Vec<u8> = (0..16 * 1024).map(|i| (i % 241) as u8).collect();
            // Loopback socket buffers hold megabytes: write until the queue is full, then 64 rounds more.
            let max_rounds = 4096;
            let mut expect = Vec::new();
            for i in 0..max_rounds {
                expect.extend_from_slice(&[i as u8; 9]);
                expect.extend_from_slice(&payload);
            }
            let full = Rc::new((Cell::new(false), RefCell::new(None::<Waker>)));
            let reader = {
                let full = full.clone();
                monoio::spawn(async move {
                    // Reads nothing until the writer saw `Pending` (its queue full).
                    poll_fn(|cx| match full.0.get() {
                        true => Poll::Ready(()),
                        false => {
                            *full.1.borrow_mut() = Some(cx.waker().clone());
                            Poll::Pending
                        }
                    })
                    .await;
                    let mut got = Vec::new();
                    loop {
                        let (r, b) = client.read(Vec::with_capacity(64 * 1024)).await;
                        match r.unwrap() {
                            0 => return got,
                            n => got.extend_from_slice(&b[..n]),
                        }
                    }
                })
            };
            let mut rounds = max_rounds;
            let mut i = 0;
            while i < rounds {
                let head = [i as u8; 9];
                let (mut h, mut p) = (&head[..], &payload[..]);
                while !h.is_empty() || !p.is_empty() {
                    let n = poll_fn(|cx| {
                        let slices = [IoSlice::new(h), IoSlice::new(p)];
                        let r = Pin::new(&mut io).poll_write_vectored(cx, &slices);
                        if r.is_pending() {
                            full.0.set(true);
                            if let Some(w) = full.1.borrow_mut().take() {
                                w.wake();
                            }
                        }
                        r
                    })
                    .await
                    .unwrap();
                    let from_head = n.min(h.len());
                    h = &h[from_head..];
                    p = &p[n - from_head..];
                }
                i += 1;
                if full.0.get() && rounds == max_rounds {
                    rounds = (i + 64).min(max_rounds);
                }
            }
            assert!(
                full.0.get(),
                "64 MiB unread must fill the socket and the queue"
            );
            expect.truncate(rounds * (9 + payload.len()));
            poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx))
                .await
                .unwrap();
            let got = reader.await;
            assert!(got == expect, "the bytes arrived changed or out of order");
        })
    });
}
