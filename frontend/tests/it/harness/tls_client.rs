//! [`TlsConn`]: a blocking rustls client over one loopback TCP connection (SNI, ALPN, protocol
//! versions, a client configuration shared across connections so sessions resume), with what the
//! handshake negotiated read back, and HTTP/1.1 requests over it parsed into [`Response`]s.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    sync::Arc,
    time::Duration,
};

use rustls::{
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        ClientSessionMemoryCache, Resumption,
    },
    crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider},
    pki_types::{CertificateDer, ServerName, UnixTime},
    ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, ProtocolVersion,
    RootCertStore, SignatureScheme, StreamOwned, SupportedProtocolVersion,
};

use super::{
    wire::{fill, owned_headers, read_body, read_chunked},
    Response,
};

/// The provider every test configuration uses (never a process default).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Which protocol versions a client offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versions {
    Both,
    Tls12,
    Tls13,
}

impl Versions {
    fn list(self) -> Vec<&'static SupportedProtocolVersion> {
        match self {
            Versions::Both => vec![&rustls::version::TLS13, &rustls::version::TLS12],
            Versions::Tls12 => vec![&rustls::version::TLS12],
            Versions::Tls13 => vec![&rustls::version::TLS13],
        }
    }
}

/// How a client configuration is built: roots (`None`: accept any certificate), ALPN, versions and an
/// optional client certificate.
#[derive(Clone)]
pub struct TlsOpts {
    pub roots: Option<Vec<CertificateDer<'static>>>,
    pub alpn: Vec<Vec<u8>>,
    pub versions: Versions,
    /// (chain PEM, key PEM)
    pub client_cert: Option<(String, String)>,
    /// TLS 1.2 resumption by session id only (no tickets).
    pub session_id_only: bool,
}

impl TlsOpts {
    /// Trusting `ca`, offering `http/1.1`, TLS 1.2 and 1.3.
    pub fn trusting(ca: CertificateDer<'static>) -> TlsOpts {
        TlsOpts {
            roots: Some(vec![ca]),
            alpn: vec![b"http/1.1".to_vec()],
            versions: Versions::Both,
            client_cert: None,
            session_id_only: false,
        }
    }

    /// Accepting any certificate (the SNI tests look at which one is served, not whether it verifies).
    pub fn any_cert() -> TlsOpts {
        TlsOpts {
            roots: None,
            alpn: vec![b"http/1.1".to_vec()],
            versions: Versions::Both,
            client_cert: None,
            session_id_only: false,
        }
    }

    pub fn alpn(mut self, protos: &[&str]) -> TlsOpts {
        self.alpn = protos.iter().map(|p| p.as_bytes().to_vec()).collect();
        self
    }

    /// TLS 1.2 resumes by session id only, never by ticket.
    pub fn session_id_only(mut self) -> TlsOpts {
        self.session_id_only = true;
        self
    }

    pub fn versions(mut self, v: Versions) -> TlsOpts {
        self.versions = v;
        self
    }

    /// The configuration: one per client identity; connections made with the same `Arc` share a
    /// `ClientSessionMemoryCache` and so resume.
    pub fn build(&self) -> Arc<ClientConfig> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&self.versions.list())
            .unwrap();
        let builder = match &self.roots {
            Some(roots) => {
                let mut store = RootCertStore::empty();
                for r in roots {
                    store.add(r.clone()).unwrap();
                }
                builder.with_root_certificates(store)
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(edge_core::tls::AcceptAnyServerCert(
                    provider(),
                ))),
        };
        let mut cfg = match &self.client_cert {
            Some((chain, key)) => {
                use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
                let chain = CertificateDer::pem_slice_iter(chain.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        cfg.alpn_protocols = self.alpn.clone();
        cfg.resumption = Resumption::store(Arc::new(ClientSessionMemoryCache::new(64)));
        if self.session_id_only {
            cfg.resumption = cfg
                .resumption
                .clone()
                .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
        }
        Arc::new(cfg)
    }
}

/// One TLS connection whose handshake is done.
pub struct TlsConn {
    pub s: StreamOwned<ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

impl TlsConn {
    /// Connects to `addr` and runs the handshake to its end with server name `name` (an IP address
    /// sends no SNI). The error of a refused handshake is rustls' (as `InvalidData`).
    pub fn connect(addr: SocketAddr, cfg: &Arc<ClientConfig>, name: &str) -> io::Result<TlsConn> {
        let mut sock = TcpStream::connect(addr)?;
        sock.set_read_timeout(Some(Duration::from_secs(15)))?;
        let server_name = ServerName::try_from(name.to_string()).unwrap();
        let mut conn = ClientConnection::new(cfg.clone(), server_name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)?;
        }
        Ok(TlsConn {
            s: StreamOwned::new(conn, sock),
            buf: Vec::new(),
        })
    }

    /// The leaf certificate the server presented (DER).
    pub fn peer_cert(&self) -> Vec<u8> {
        self.s
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .expect("a peer certificate")
    }

    /// The negotiated ALPN protocol, if any.
    pub fn alpn(&self) -> Option<Vec<u8>> {
        self.s.conn.alpn_protocol().map(<[u8]>::to_vec)
    }

    pub fn version(&self) -> Option<ProtocolVersion> {
        self.s.conn.protocol_version()
    }

    /// Whether this handshake resumed a session.
    pub fn resumed(&self) -> bool {
        self.s.conn.handshake_kind() == Some(HandshakeKind::Resumed)
    }

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.s.write_all(bytes)?;
        self.s.flush()
    }

    /// `GET path` with `Host: localhost`; the response.
    pub fn get(&mut self, path: &str) -> Response {
        self.try_get(path).expect("response over TLS")
    }

    /// Like [`TlsConn::get`], `None` for a failed write or a close before a response.
    pub fn try_get(&mut self, path: &str) -> Option<Response> {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
            .ok()?;
        self.read_response()
    }

    /// Reads the next response head, interim (1xx) ones included; its body stays buffered. `None` on
    /// EOF before a head.
    pub fn read_any_head(&mut self) -> Option<Response> {
        super::wire::read_any_head(&mut self.s, &mut self.buf)
    }

    /// Takes the bytes received but not consumed by a parsed response yet.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Reads one response (1xx skipped; Content-Length, chunked or close-delimited body); `None` on
    /// EOF before a head.
    pub fn read_response(&mut self) -> Option<Response> {
        let mut r = loop {
            let r = self.read_any_head()?;
            if !(100..200).contains(&r.status) {
                break r;
            }
        };
        if r.status == 204 || r.status == 304 {
            return Some(r);
        }
        read_body(&mut self.s, &mut self.buf, &mut r)?;
        Some(r)
    }

    /// How long until the server ends the connection (EOF, close_notify, an error), reading and
    /// discarding, at most `limit`; `None` when it is still open then.
    pub fn time_until_closed(&mut self, limit: Duration) -> Option<Duration> {
        let start = std::time::Instant::now();
        let mut tmp = [0u8; 16384];
        loop {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return None;
            }
            self.s.sock.set_read_timeout(Some(left)).unwrap();
            match self.s.read(&mut tmp) {
                Ok(0) => return Some(start.elapsed()),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return Some(start.elapsed()),
            }
        }
    }

    /// Whether the server ended the connection (EOF, close_notify or an error) within the read timeout.
    pub fn closed_by_peer(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}
