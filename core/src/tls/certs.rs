//! Loading and validating one certificate chain and its key (DESIGN.md "TLS": `edge --check` reports a
//! key that does not match its certificate, an expired certificate and a chain in the wrong order).
//! Deterministic and cheap (two file reads and a parse), so it runs at every reload.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use rustls::{
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    sign::CertifiedKey,
    Error as TlsError, InconsistentKeys,
};
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

/// A certificate chain and key that loaded and passed every check.
#[derive(Clone, Debug)]
pub struct LoadedCert {
    /// The chain (leaf first) with its signing key, what rustls serves.
    pub certified: Arc<CertifiedKey>,
    /// The leaf's DNS names, lower-cased: its SAN dNSName entries, else its subject CN (may be empty).
    pub names: Vec<String>,
    /// The metrics label (`edge_tls_certificate_expiry_timestamp_seconds{certificate}`): the first DNS
    /// name, else the certificate file's path.
    pub label: String,
    /// The leaf's notAfter, unix seconds.
    pub not_after: i64,
    /// The certificate file it came from.
    pub cert_file: PathBuf,
}

/// Why a certificate or key file did not load: the file at fault and the reason, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertError {
    /// The file at fault (the certificate file or the key file).
    pub file: PathBuf,
    /// Whether the fault is in the key file (`false`: in the certificate file).
    pub in_key: bool,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for CertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.reason)
    }
}

impl std::error::Error for CertError {}

/// Loads the PEM chain at `cert` (leaf first) and the PEM key at `key`, and checks them: both readable,
/// at least one certificate, a key, the key matches the leaf, every certificate of the chain valid now,
/// and each certificate's issuer the next one's subject.
///
/// # Errors
/// The first problem found, naming the file and the reason.
pub fn load_cert_and_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<LoadedCert, CertError> {
    let chain = read_chain(cert)?;
    let key_der = read_key(key)?;
    let cert_err = |reason: String| CertError {
        file: cert.to_path_buf(),
        in_key: false,
        reason,
    };
    let parsed: Vec<X509Certificate<'_>> = chain
        .iter()
        .enumerate()
        .map(|(i, der)| {
            X509Certificate::from_der(der)
                .map(|(_, c)| c)
                .map_err(|e| cert_err(format!("certificate #{} does not parse: {e}", i + 1)))
        })
        .collect::<Result<_, _>>()?;
    check_validity(&parsed, unix_now()).map_err(cert_err)?;
    check_chain_order(&parsed).map_err(cert_err)?;
    let names = dns_names(&parsed[0]);
    let not_after = parsed[0].validity().not_after.timestamp();
    drop(parsed);
    let signing_key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| CertError {
            file: key.to_path_buf(),
            in_key: true,
            reason: format!("unsupported private key: {e}"),
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    check_keys_match(&certified, cert, key)?;
    let label = names
        .first()
        .cloned()
        .unwrap_or_else(|| cert.display().to_string());
    Ok(LoadedCert {
        certified: Arc::new(certified),
        names,
        label,
        not_after,
        cert_file: cert.to_path_buf(),
    })
}

/// Every certificate of the PEM file at `path`, in file order.
///
/// # Errors
/// The file cannot be read, holds a malformed PEM block, or holds no certificate.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let err = |reason: String| CertError {
        file: path.to_path_buf(),
        in_key: false,
        reason,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(pem_reason(&e)))?;
    if chain.is_empty() {
        return Err(err(
            "no certificate in it (no PEM \"CERTIFICATE\" block)".into()
        ));
    }
    Ok(chain)
}

/// The first private key of the PEM file at `path`.
///
/// # Errors
/// The file cannot be read or holds no private key.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, CertError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| CertError {
        file: path.to_path_buf(),
        in_key: true,
        reason: match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no private key in it (no PEM \"PRIVATE KEY\" block)".into()
            }
            e => pem_reason(&e),
        },
    })
}

/// A PEM reading error in words ("cannot read: No such file or directory (os error 2)").
fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => format!("cannot read: {io}"),
        e => format!("not valid PEM: {e:?}"),
    }
}

/// The key's public half must be the leaf's (rustls compares SubjectPublicKeyInfo bytes); a key type
/// whose public half rustls cannot derive is accepted, as rustls itself does.
fn check_keys_match(certified: &CertifiedKey, cert: &Path, key: &Path) -> Result<(), CertError> {
    match certified.keys_match() {
        Ok(()) | Err(TlsError::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(()),
        Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(CertError {
            file: key.to_path_buf(),
            in_key: true,
            reason: format!(
                "the key does not match the certificate in {}",
                cert.display()
            ),
        }),
        Err(e) => Err(CertError {
            file: cert.to_path_buf(),
            in_key: false,
            reason: format!("the leaf certificate is unusable: {e}"),
        }),
    }
}

/// Every certificate must be valid at `now` (unix seconds): not expired and not before its notBefore.
fn check_validity(chain: &[X509Certificate<'_>], now: i64) -> Result<(), String> {
    for (i, c) in chain.iter().enumerate() {
        let which = match i {
            0 => "the certificate".to_string(),
            _ => format!("certificate #{} of the chain", i + 1),
        };
        let v = c.validity();
        if now > v.not_after.timestamp() {
            return Err(format!("{which} expired (not after {})", v.not_after));
        }
        if now < v.not_before.timestamp() {
            return Err(format!(
                "{which} is not yet valid (not before {})",
                v.not_before
            ));
        }
    }
    Ok(())
}

/// Leaf first, then its issuer, and so on: certificate i's issuer must be certificate i+1's subject.
fn check_chain_order(chain: &[X509Certificate<'_>]) -> Result<(), String> {
    for (i, pair) in chain.windows(2).enumerate() {
        let (issuer, next) = (pair[0].issuer(), pair[1].subject());
        if issuer.as_raw() != next.as_raw() && issuer.to_string() != next.to_string() {
            return Err(format!(
                "chain in the wrong order: certificate #{} was issued by \"{issuer}\" but certificate \
                 #{} is \"{next}\" (put the leaf first, then each issuer)",
                i + 1,
                i + 2
            ));
        }
    }
    Ok(())
}

/// The SAN dNSName entries of `c`, else its subject CNs, lower-cased, in certificate order.
fn dns_names(c: &X509Certificate<'_>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                names.push(d.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        names = c
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .map(str::to_ascii_lowercase)
            .collect();
    }
    names
}

/// Seconds since the unix epoch (0 if the clock is before it).
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
