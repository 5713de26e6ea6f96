//! The TLS listener's rustls configuration (DESIGN.md "TLS", termination): certificates by SNI, protocol
//! versions from `min_version`, ALPN from `alpn`, and session resumption whose keys are shared by every
//! worker and survive reloads (one process-wide ticketer and one process-wide session-id cache).

use std::{
    path::Path,
    sync::{Arc, OnceLock},
};

use rustls::{
    server::{NoServerSessionStorage, ProducesTickets, ServerSessionMemoryCache},
    ServerConfig,
};

use super::{
    certs::{load_cert_and_key, LoadedCert},
    provider,
    sni::SniResolver,
};
use crate::config::{AlpnProtocol, ConfigError, TlsServer, TlsVersion};

/// TLS 1.2 session ids kept for resumption, process-wide.
const SESSION_CACHE_ENTRIES: usize = 4096;

/// The TLS listener's state built from `[server.tls]`: what every worker's handshakes use, and what the
/// metrics export.
#[derive(Clone, Debug)]
pub struct TlsServerState {
    /// The rustls server configuration (shared by every worker; replaced whole at a reload).
    pub config: Arc<ServerConfig>,
    /// The loaded certificates, in `server.tls.certificates` order (names, expiry, label).
    pub certificates: Vec<LoadedCert>,
}

/// Builds the TLS listener's configuration: loads and validates every certificate and key, and sets up
/// versions, ALPN and resumption. Deterministic; cheap enough to run at every reload.
///
/// # Errors
/// Every certificate or key that does not load, each a [`ConfigError`] naming `file` (the config file),
/// the key (`server.tls.certificates[i].cert` or `.key`), and in its reason the PEM file and what is
/// wrong; a session ticketer that cannot be created (`server.tls.session_resumption`).
pub fn server_config(tls: &TlsServer, file: &str) -> Result<TlsServerState, Vec<ConfigError>> {
    let error = |key: String, reason: String| ConfigError {
        file: file.into(),
        key,
        reason,
    };
    let provider = provider();
    let mut errors = Vec::new();
    let mut certificates = Vec::new();
    for (i, c) in tls.certificates.iter().enumerate() {
        match load_cert_and_key(Path::new(&c.cert), Path::new(&c.key), &provider) {
            Ok(loaded) => certificates.push(loaded),
            Err(e) => {
                let which = if e.in_key { "key" } else { "cert" };
                errors.push(error(
                    format!("server.tls.certificates[{i}].{which}"),
                    e.to_string(),
                ));
            }
        }
    }
    if certificates.is_empty() && errors.is_empty() {
        errors.push(error(
            "server.tls.certificates".into(),
            "needs at least one { cert, key }".into(),
        ));
    }
    let versions: &[&'static rustls::SupportedProtocolVersion] = match tls.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| error("server.tls.min_version".into(), e.to_string()));
    let ticketer = match tls.session_resumption {
        true => ticketer()
            .map(Some)
            .map_err(|e| error("server.tls.session_resumption".into(), e)),
        false => Ok(None),
    };
    let (builder, ticketer) = match (builder, ticketer) {
        (Ok(b), Ok(t)) if errors.is_empty() => (b, t),
        (b, t) => {
            errors.extend(b.err());
            errors.extend(t.err());
            return Err(errors);
        }
    };
    let mut config = builder
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver::new(&certificates)));
    config.alpn_protocols = alpn_offer(&tls.alpn);
    config.max_early_data_size = 0;
    match ticketer {
        Some(t) => {
            config.ticketer = t;
            config.session_storage = session_cache();
        }
        None => config.session_storage = Arc::new(NoServerSessionStorage {}),
    }
    Ok(TlsServerState {
        config: Arc::new(config),
        certificates,
    })
}

/// The ALPN ids offered, in `alpn` order (rustls picks the first one the client also offers: the
/// server's preference, RFC 7301 §3.2); empty: no ALPN. A TLS connection that settles on `h2` is served
/// by the HTTP/2 server (DESIGN.md "HTTP/2"), any other by HTTP/1.1.
pub fn alpn_offer(alpn: &[AlpnProtocol]) -> Vec<Vec<u8>> {
    alpn.iter().map(|p| p.id().to_vec()).collect()
}

/// The process-wide TLS 1.3 ticketer: created once, then shared by every worker and every reload, so a
/// client resumes on whichever core accepts it. rustls' recommended ticketer (AES-256 + HMAC-SHA256,
/// RFC 5077 §4): a new key every 6 h, each key accepted for 12 h; rustls does not expose its key
/// generator, so the rotation period is rustls' own.
///
/// # Errors
/// The random key could not be generated (the reason, in words).
fn ticketer() -> Result<Arc<dyn ProducesTickets>, String> {
    static TICKETER: OnceLock<Arc<dyn ProducesTickets>> = OnceLock::new();
    if let Some(t) = TICKETER.get() {
        return Ok(t.clone());
    }
    let made = rustls::crypto::aws_lc_rs::Ticketer::new()
        .map_err(|e| format!("cannot create the session ticket keys: {e}"))?;
    Ok(TICKETER.get_or_init(|| made).clone())
}

/// The process-wide TLS 1.2 session-id cache ([`SESSION_CACHE_ENTRIES`] entries).
fn session_cache() -> Arc<ServerSessionMemoryCache> {
    static CACHE: OnceLock<Arc<ServerSessionMemoryCache>> = OnceLock::new();
    CACHE
        .get_or_init(|| ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES))
        .clone()
}
