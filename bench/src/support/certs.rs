//! Test certificates made at run time (DESIGN.md "Benchmark method": one ECDSA P-256 certificate
//! for every proxy): a CA and a leaf for `localhost` and `127.0.0.1` signed by it, written as PEM
//! files into a directory, plus the rustls configurations the bench's own TLS peers build from
//! them (aws-lc-rs provider, chosen explicitly: rustls has no default provider in this build).
//!
//! Self-contained on purpose (rcgen and rustls only), so other crates' tests can copy it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The names every leaf is valid for (subject alternative names).
pub const LEAF_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// PEM files of one CA and one leaf signed by it.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The directory holding them.
    pub dir: PathBuf,
    /// The CA certificate (`ca.pem`): the root a client trusts.
    pub ca: PathBuf,
    /// The leaf alone (`cert.pem`).
    pub cert: PathBuf,
    /// Leaf then CA (`chain.pem`).
    pub chain: PathBuf,
    /// The leaf's private key, PKCS#8 (`key.pem`).
    pub key: PathBuf,
    /// Leaf then key in one file (`combined.pem`, HAProxy's `crt`).
    pub combined: PathBuf,
    /// The leaf's serial number (big-endian bytes), to tell certificates apart after a rotation.
    pub serial: Vec<u8>,
}

/// Writes a fresh CA (common name `ca_name`) and an ECDSA P-256 leaf for [`LEAF_NAMES`] with
/// serial `serial` into `dir` (created if missing; existing files are replaced).
///
/// # Errors
/// Key generation or signing failures (as `Other`) and file-writing failures.
pub fn write_test_certs(dir: &Path, ca_name: &str, serial: u64) -> io::Result<CertFiles> {
    let (ca_key, ca_params) = ca_params(ca_name)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(io::Error::other)?;
    let issuer = Issuer::new(ca_params, ca_key);
    write_leaf(dir, &ca_cert.pem(), &issuer, serial)
}

/// A CA's key and parameters (ECDSA P-256, may sign certificates).
fn ca_params(name: &str) -> io::Result<(KeyPair, CertificateParams)> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(io::Error::other)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok((key, params))
}

/// Signs a leaf for [`LEAF_NAMES`] with `issuer` and writes every file of [`CertFiles`].
fn write_leaf(
    dir: &Path,
    ca_pem: &str,
    issuer: &Issuer<'_, KeyPair>,
    serial: u64,
) -> io::Result<CertFiles> {
    fs::create_dir_all(dir)?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(io::Error::other)?;
    let names: Vec<String> = LEAF_NAMES.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(names).map_err(io::Error::other)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    // Minimal big-endian bytes (DER integers have no leading zero bytes), as `serial_of` reads them back.
    let full = serial.to_be_bytes();
    let first = full.iter().position(|&b| b != 0).unwrap_or(full.len() - 1);
    let serial_bytes = full[first..].to_vec();
    params.serial_number = Some(SerialNumber::from_slice(&serial_bytes));
    let leaf = params.signed_by(&key, issuer).map_err(io::Error::other)?;
    let files = CertFiles {
        dir: dir.to_path_buf(),
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        chain: dir.join("chain.pem"),
        key: dir.join("key.pem"),
        combined: dir.join("combined.pem"),
        serial: serial_bytes,
    };
    let (leaf_pem, key_pem) = (leaf.pem(), key.serialize_pem());
    // Key before certificate: a reader that sees a new certificate also finds its key.
    replace(&files.key, &key_pem)?;
    replace(&files.ca, ca_pem)?;
    replace(&files.cert, &leaf_pem)?;
    replace(&files.chain, &format!("{leaf_pem}{ca_pem}"))?;
    replace(&files.combined, &format!("{leaf_pem}{key_pem}"))?;
    Ok(files)
}

/// Writes `text` to a temp file beside `path` and renames it over `path` (readers never see half a file).
fn replace(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("pem.tmp");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path)
}

/// The certificates in a PEM file, in file order.
///
/// # Errors
/// Unreadable files, bad PEM, or no certificate in the file.
pub fn load_certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: no certificate", path.display()),
        ));
    }
    Ok(certs)
}

/// The first private key in a PEM file.
///
/// # Errors
/// Unreadable files or no key in the file.
pub fn load_key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error(path, e))
}

fn pem_error(path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {e}", path.display()),
    )
}

/// The aws-lc-rs provider limited to AES-128-GCM (TLS 1.3 `TLS_AES_128_GCM_SHA256`, TLS 1.2
/// `ECDHE-ECDSA-AES128-GCM-SHA256`), the suites of DESIGN.md "Benchmark method".
pub fn aes128_provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::aws_lc_rs::{cipher_suite, default_provider};
    let mut p = default_provider();
    p.cipher_suites = vec![
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ];
    Arc::new(p)
}

static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
static TLS12_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];

/// The one protocol version a client config offers.
fn client_versions(tls12: bool) -> &'static [&'static rustls::SupportedProtocolVersion] {
    if tls12 {
        TLS12_ONLY
    } else {
        TLS13_ONLY
    }
}

/// A server config for `cert` (PEM chain, leaf first) and `key`: AES-128-GCM only, TLS 1.2 and
/// 1.3, ALPN `http/1.1`, session tickets and a 16k-entry session cache; with `client_ca`, a client
/// certificate signed by that CA is required (mutual TLS).
///
/// # Errors
/// Unreadable or bad PEM, or a key that does not match the certificate.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> io::Result<Arc<rustls::ServerConfig>> {
    let provider = aes128_provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(io::Error::other)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(root_store(ca)?);
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(io::Error::other)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(load_certs(cert)?, load_key(key)?)
        .map_err(io::Error::other)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(16 * 1024);
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(io::Error::other)?;
    Ok(Arc::new(config))
}

/// The roots in a PEM file.
///
/// # Errors
/// Unreadable or bad PEM, or a certificate rustls does not accept as a root.
pub fn root_store(ca: &Path) -> io::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in load_certs(ca)? {
        roots.add(c).map_err(io::Error::other)?;
    }
    Ok(roots)
}

/// A client config trusting `ca`: AES-128-GCM only, TLS 1.3 only, or TLS 1.2 only with `tls12`; `resume` keeps a
/// session cache (tickets) shared by every connection made with this config, else none (every
/// handshake is a full one).
///
/// # Errors
/// Unreadable or bad CA PEM.
pub fn client_config(
    ca: &Path,
    tls12: bool,
    resume: bool,
) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut config = rustls::ClientConfig::builder_with_provider(aes128_provider())
        .with_protocol_versions(client_versions(tls12))
        .map_err(io::Error::other)?
        .with_root_certificates(root_store(ca)?)
        .with_no_client_auth();
    config.resumption = if resume {
        rustls::client::Resumption::in_memory_sessions(4096)
    } else {
        rustls::client::Resumption::disabled()
    };
    Ok(Arc::new(config))
}

/// The serial number of a DER certificate (big-endian, leading zero bytes stripped), or `None`
/// when the DER cannot be walked (a tiny reader: SEQUENCE, SEQUENCE, optional `[0]` version, INTEGER).
pub fn serial_of(der: &[u8]) -> Option<Vec<u8>> {
    fn header(b: &[u8]) -> Option<(u8, usize, usize)> {
        let (&tag, rest) = b.split_first()?;
        let (&first, rest) = rest.split_first()?;
        if first < 0x80 {
            return Some((tag, 2, usize::from(first)));
        }
        let n = usize::from(first & 0x7f);
        let len = rest
            .get(..n)?
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        Some((tag, 2 + n, len))
    }
    let (_, h, _) = header(der)?; // Certificate
    let tbs = der.get(h..)?;
    let (_, h, _) = header(tbs)?; // TBSCertificate
    let mut field = tbs.get(h..)?;
    let (tag, h, len) = header(field)?;
    if tag == 0xa0 {
        field = field.get(h + len..)?; // version
    }
    let (tag, h, len) = header(field)?;
    (tag == 0x02).then(|| {
        let v = field.get(h..h + len)?;
        let start = v.iter().position(|&b| b != 0).unwrap_or(v.len());
        Some(v[start..].to_vec())
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_and_a_leaf_that_load() {
        let dir = std::env::temp_dir().join(format!("edge-bench-certs-{}", std::process::id()));
        let files = write_test_certs(&dir, "edge-bench test CA", 0x1234).unwrap();
        assert_eq!(load_certs(&files.cert).unwrap().len(), 1);
        let chain = load_certs(&files.chain).unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(serial_of(&chain[0]).unwrap(), vec![0x12, 0x34]);
        assert!(load_key(&files.key).is_ok());
        assert!(server_config(&files.chain, &files.key, None).is_ok());
        assert!(server_config(&files.cert, &files.key, Some(&files.ca)).is_ok());
        assert!(client_config(&files.ca, true, true).is_ok());
        let _ = fs::remove_dir_all(&dir);
    }
}
