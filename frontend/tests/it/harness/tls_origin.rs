//! [`TlsOrigin`]: a scripted HTTP/1.1 origin over TLS (blocking rustls on std threads, one per
//! connection) that records each handshake: the SNI it got, whether it resumed, whether a client
//! certificate came, or why it failed.

use std::{
    io::Write,
    net::{SocketAddr, TcpListener},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread,
    time::Duration,
};

use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    HandshakeKind, RootCertStore, ServerConfig, ServerConnection, StreamOwned,
};

use super::{read_request, tls_client::provider, Ca, Pem, Reply, Seen};

/// One handshake as the origin saw it.
#[derive(Clone, Debug, Default)]
pub struct Handshake {
    pub sni: Option<String>,
    pub version: Option<rustls::ProtocolVersion>,
    pub resumed: bool,
    pub client_cert: bool,
    /// The client's leaf certificate (DER), when it sent one.
    pub client_cert_der: Option<Vec<u8>>,
    /// `Some(reason)` when the handshake failed.
    pub failed: Option<String>,
}

type Handler = dyn Fn(&Seen) -> Reply + Send + Sync;

/// An HTTP/1.1 origin over TLS: keep-alive, a handler per request.
pub struct TlsOrigin {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub handshakes: Arc<Mutex<Vec<Handshake>>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl TlsOrigin {
    /// Serves `cert` (chain + key); with `client_ca`, requires a client certificate it issued.
    pub fn start(
        cert: &Pem,
        client_ca: Option<&Ca>,
        handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> TlsOrigin {
        Self::start_versions(cert, client_ca, false, handler)
    }

    /// Like [`TlsOrigin::start`]; `tls12_only` refuses TLS 1.3.
    pub fn start_versions(
        cert: &Pem,
        client_ca: Option<&Ca>,
        tls12_only: bool,
        handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> TlsOrigin {
        let chain = CertificateDer::pem_slice_iter(cert.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(cert.key.as_bytes()).unwrap();
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = if tls12_only {
            vec![&rustls::version::TLS12]
        } else {
            vec![&rustls::version::TLS13, &rustls::version::TLS12]
        };
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .unwrap();
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                roots.add(ca.cert_der()).unwrap();
                let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                    .build()
                    .unwrap();
                builder.with_client_cert_verifier(v)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let handshakes = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (acc, hs, sn) = (accepted.clone(), handshakes.clone(), seen.clone());
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut sock) = s else { continue };
                let id = acc.fetch_add(1, Ordering::SeqCst) + 1;
                let (config, hs, sn, h) = (config.clone(), hs.clone(), sn.clone(), handler.clone());
                thread::spawn(move || {
                    let _ = sock.set_read_timeout(Some(Duration::from_secs(30)));
                    let mut conn = ServerConnection::new(config).unwrap();
                    while conn.is_handshaking() {
                        if let Err(e) = conn.complete_io(&mut sock) {
                            hs.lock().unwrap().push(Handshake {
                                failed: Some(e.to_string()),
                                ..Handshake::default()
                            });
                            return;
                        }
                    }
                    hs.lock().unwrap().push(Handshake {
                        sni: conn.server_name().map(str::to_string),
                        version: conn.protocol_version(),
                        resumed: conn.handshake_kind() == Some(HandshakeKind::Resumed),
                        client_cert: conn.peer_certificates().is_some_and(|c| !c.is_empty()),
                        client_cert_der: conn
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(|c| c.to_vec()),
                        failed: None,
                    });
                    let mut s = StreamOwned::new(conn, sock);
                    let mut buf = Vec::new();
                    while let Some((mut req, used)) = read_request(&mut s, &mut buf) {
                        buf.drain(..used);
                        req.conn_id = id;
                        sn.lock().unwrap().push(req.clone());
                        let reply = h(&req);
                        if !reply.delay.is_zero() {
                            thread::sleep(reply.delay);
                        }
                        if s.write_all(&reply.bytes).and_then(|()| s.flush()).is_err() {
                            return;
                        }
                        if reply.close {
                            s.conn.send_close_notify();
                            let _ = s.flush();
                            return;
                        }
                    }
                });
            }
        });
        TlsOrigin {
            addr,
            accepted,
            handshakes,
            seen,
        }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn handshakes(&self) -> Vec<Handshake> {
        self.handshakes.lock().unwrap().clone()
    }

    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("origin saw no request")
    }
}
