//! TLS configuration and certificates (DESIGN.md "TLS"), no networking: loading and validating PEM
//! certificate chains and keys (`certs`), certificate choice by SNI (`sni`), the TLS listener's rustls
//! configuration with process-wide resumption keys (`server`), the upstream client configuration
//! (`client`), and the list and fingerprint of every certificate, key and CA file so the supervisor can
//! poll them for a change every `server.tls.reload_check`.
//!
//! Every configuration is built with the aws-lc-rs provider ([`provider`]), never a process default.

mod certs;
mod client;
mod server;
mod sni;
#[cfg(test)]
pub(crate) mod testutil;

use std::{
    path::PathBuf,
    sync::{Arc, OnceLock},
    time::SystemTime,
};

pub use certs::{load_cert_and_key, read_chain, CertError, LoadedCert};
pub use client::{upstream_tls, AcceptAnyServerCert, SystemRoots, UpstreamTls};
use rustls::crypto::CryptoProvider;
pub use server::{alpn_offer, server_config, TlsServerState};
pub use sni::SniResolver;

use crate::config::Config;

/// The crypto provider of every rustls configuration edge builds: aws-lc-rs with its default cipher
/// suites, key exchange groups and signature algorithms (ring instead in a build with the `tls-ring`
/// feature, which exists to measure the two side by side: bench/README.md "TLS"); one instance per
/// process.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            #[cfg(feature = "tls-ring")]
            let p = rustls::crypto::ring::default_provider();
            #[cfg(not(feature = "tls-ring"))]
            let p = rustls::crypto::aws_lc_rs::default_provider();
            Arc::new(p)
        })
        .clone()
}

/// Every certificate, key and CA file `config` names: `[server.tls]` certificates and keys, then each
/// TLS upstream's `tls_ca`, `tls_client_cert` and `tls_client_key`, in file order, without duplicates.
/// What the supervisor polls every `server.tls.reload_check`.
pub fn watched_files(config: &Config) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut add = |p: &str| {
        let p = PathBuf::from(p);
        if !files.contains(&p) {
            files.push(p);
        }
    };
    if let Some(tls) = &config.server.tls {
        for c in &tls.certificates {
            add(&c.cert);
            add(&c.key);
        }
    }
    for u in config.upstreams.iter().filter(|u| u.tls) {
        for p in [&u.tls_ca, &u.tls_client_cert, &u.tls_client_key]
            .into_iter()
            .flatten()
        {
            add(p);
        }
    }
    files
}

/// What identifies one file's content for change polling (DESIGN.md "TLS", certificate rotation: mtime
/// and size): `None` when the file cannot be read (missing, no permission), so appearing and
/// disappearing are changes too.
pub type FileStamp = Option<(SystemTime, u64)>;

/// The [`FileStamp`] of each of `paths`, in order. Compare two results with `==`: any difference means
/// a certificate, key or CA file changed and the TLS configuration should be reloaded. One `stat(2)`
/// per file.
pub fn fingerprint(paths: &[PathBuf]) -> Vec<FileStamp> {
    paths
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
