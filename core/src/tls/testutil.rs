//! Test certificates generated at test time with rcgen (no private key is ever committed), written
//! into a unique directory under the system temp dir that is removed on drop.

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicUsize, Ordering},
};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A fresh directory under `std::env::temp_dir()`, removed with its files on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// A new, empty, uniquely named directory (process id, `tag`, a counter).
    pub(crate) fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("edge-tls-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// Writes `text` to `name` in the directory; returns its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write test file");
        p
    }

    /// A path in the directory (the file need not exist).
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate and its key as PEM text.
pub(crate) struct Pem {
    pub(crate) cert: String,
    pub(crate) key: String,
}

impl Pem {
    /// Writes `{stem}.pem` and `{stem}.key` into `dir`; returns (cert path, key path).
    pub(crate) fn write(&self, dir: &TempDir, stem: &str) -> (PathBuf, PathBuf) {
        (
            dir.write(&format!("{stem}.pem"), &self.cert),
            dir.write(&format!("{stem}.key"), &self.key),
        )
    }
}

/// A self-signed certificate for `names` (SAN dNSName entries), valid now.
pub(crate) fn self_signed(names: &[&str]) -> Pem {
    let params = params(names);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// A self-signed certificate for `names` that expired in 2001.
pub(crate) fn expired(names: &[&str]) -> Pem {
    let mut params = params(names);
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// A test certificate authority that signs leaves.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub(crate) cert: String,
}

impl TestCa {
    /// A new self-signed CA named "edge test CA".
    pub(crate) fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "edge test CA");
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("CA").pem();
        TestCa {
            issuer: Issuer::new(params, key),
            cert,
        }
    }

    /// A leaf for `names` signed by this CA (its PEM is the leaf alone, not the chain).
    pub(crate) fn leaf(&self, names: &[&str]) -> Pem {
        let mut params = params(names);
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

fn params(names: &[&str]) -> CertificateParams {
    CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params")
}

/// Whether `path` is named in `text` (an error's reason).
pub(crate) fn names_file(text: &str, path: &Path) -> bool {
    text.contains(&path.display().to_string())
}
