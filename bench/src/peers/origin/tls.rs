//! The origin in TLS mode (`edge-bench origin --tls-cert PEM --tls-key PEM`, or `--tls` with a
//! generated CA and leaf): every behaviour of the plain origin (fixed sizes, delays, chunked,
//! request bodies discarded, keep-alive) over HTTP/1.1 on rustls, AES-128-GCM, TLS 1.2 and 1.3,
//! ALPN `http/1.1`, session tickets; `--tls-client-ca PEM` requires a client certificate.

use std::io::{self, Write};
use std::sync::Arc;

use monoio::net::TcpStream;

use super::{serve_conn, Args, Worker};
use crate::peers::tls_stream::TlsStream;
use crate::peers::wire::ReadBuf;
use crate::support::certs::{server_config, write_test_certs};

/// The server config the origin's TLS options ask for; `None` for plain HTTP. With `--tls`, the
/// certificates are written to a temp directory and `origin CA: PATH` is printed.
///
/// # Errors
/// Certificate generation, unreadable or bad PEM files, a key that does not match.
pub fn server_config_of(args: &Args) -> io::Result<Option<Arc<rustls::ServerConfig>>> {
    let (cert, key) = match (&args.tls_cert, &args.tls_key, args.tls) {
        (Some(c), Some(k), _) => (c.clone(), k.clone()),
        (_, _, true) => {
            let dir = std::env::temp_dir()
                .join(format!("edge-bench-origin-{}-certs", std::process::id()));
            let files = write_test_certs(&dir, "edge-bench origin CA", 1)?;
            println!("origin CA: {}", files.ca.display());
            io::stdout().flush()?;
            (files.chain, files.key)
        }
        _ => {
            if args.tls_client_ca.is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "--tls-client-ca needs --tls or --tls-cert/--tls-key",
                ));
            }
            return Ok(None);
        }
    };
    server_config(&cert, &key, args.tls_client_ca.as_deref()).map(Some)
}

/// One TLS connection: the handshake, then the plain origin's HTTP/1.1 loop over it, then
/// close_notify.
pub(super) async fn serve_tls(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    rb: &mut ReadBuf,
    worker: &Worker,
) -> io::Result<()> {
    let conn = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
    let mut tls = TlsStream::new(stream, conn);
    tls.handshake().await?;
    serve_conn(&mut tls, rb, worker).await?;
    tls.close().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{spawn_origin, OriginOptions, DEFAULT_BODY};
    use crate::support::certs::{client_config, server_config, write_test_certs};
    use crate::support::tls_probe::tls_get;

    #[test]
    fn serves_every_size_over_tls_1_2_and_1_3() {
        let dir =
            std::env::temp_dir().join(format!("edge-bench-origin-tls-{}", std::process::id()));
        let certs = write_test_certs(&dir, "t", 7).unwrap();
        let origin = spawn_origin(OriginOptions {
            tls: Some(server_config(&certs.chain, &certs.key, None).unwrap()),
            ..Default::default()
        })
        .unwrap();
        let t = Duration::from_secs(5);
        for tls12 in [false, true] {
            let c = client_config(&certs.ca, tls12, false).unwrap();
            let a = tls_get(origin.addr(), &c, "localhost", "/fast", t).unwrap();
            assert_eq!((a.status, a.body.as_slice()), (200, DEFAULT_BODY));
            assert_eq!(a.serial, vec![7]);
            let want = if tls12 { "TLSv1_2" } else { "TLSv1_3" };
            assert_eq!(a.protocol, want);
            assert!(a.suite.contains("AES_128_GCM"), "{}", a.suite);
        }
        let c = client_config(&certs.ca, false, false).unwrap();
        let big = tls_get(origin.addr(), &c, "127.0.0.1", "/size/1m", t).unwrap();
        assert_eq!(big.body.len(), 1024 * 1024);
        origin.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mutual_tls_refuses_a_client_without_a_certificate() {
        let dir =
            std::env::temp_dir().join(format!("edge-bench-origin-mtls-{}", std::process::id()));
        let certs = write_test_certs(&dir, "t", 8).unwrap();
        let origin = spawn_origin(OriginOptions {
            tls: Some(server_config(&certs.chain, &certs.key, Some(&certs.ca)).unwrap()),
            ..Default::default()
        })
        .unwrap();
        let c = client_config(&certs.ca, false, false).unwrap();
        let r = tls_get(
            origin.addr(),
            &c,
            "localhost",
            "/fast",
            Duration::from_secs(5),
        );
        assert!(r.is_err(), "answered without a client certificate: {r:?}");
        origin.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
