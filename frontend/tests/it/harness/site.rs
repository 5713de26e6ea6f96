//! [`Site`]: what a TLS listener test serves: a CA and a leaf for `localhost` and `127.0.0.1`, their
//! files, the config serving them and a client configuration trusting the CA.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use super::{Ca, Cfg, Driver, Edge, Pem, TempDir, TlsOpts};

/// A CA, a leaf for `localhost` and `127.0.0.1` issued by it, written into a temp dir.
pub struct Site {
    pub dir: TempDir,
    pub ca: Ca,
    pub leaf: Pem,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca_file: PathBuf,
}

impl Site {
    pub fn new() -> Site {
        let dir = TempDir::new();
        let ca = Ca::new("edge test CA");
        let leaf = ca.leaf("edge-test-1", &["localhost", "127.0.0.1"]);
        let (cert, key) = leaf.write(&dir, "site");
        let ca_file = ca.write(&dir, "ca");
        Site {
            dir,
            ca,
            leaf,
            cert,
            key,
            ca_file,
        }
    }

    /// The harness config with `[server.tls]` serving this site's leaf.
    pub fn cfg(&self, d: Driver, origin: SocketAddr) -> Cfg {
        Cfg::new(d, origin).tls_certs(&[(&self.cert, &self.key)])
    }

    /// A client configuration trusting this site's CA (offering http/1.1, TLS 1.2 and 1.3).
    pub fn client(&self) -> Arc<rustls::ClientConfig> {
        TlsOpts::trusting(self.ca.cert_der()).build()
    }

    pub fn opts(&self) -> TlsOpts {
        TlsOpts::trusting(self.ca.cert_der())
    }
}

impl Edge {
    /// The TLS listener's address (panics when edge has none).
    pub fn tls_addr(&self) -> SocketAddr {
        self.tls.expect("a TLS listener")
    }
}
