//! The rustls configuration of an upstream with `tls = true` (DESIGN.md "TLS", origination): TLS 1.2+,
//! roots from `tls_ca` or the system trust store, ALPN `http/1.1` only, an optional client certificate,
//! and the server name per endpoint (`tls_server_name`, else the endpoint's host text). Resumption is
//! rustls' default in-memory client session cache, which keys sessions by server name.

use std::{path::Path, sync::Arc};

use rustls::{
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        ResolvesClientCert,
    },
    crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider},
    pki_types::{CertificateDer, ServerName, UnixTime},
    sign::CertifiedKey,
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::{
    certs::{load_cert_and_key, read_chain},
    provider,
};
use crate::config::Upstream;

/// The TLS side of one upstream: the client configuration and the server name of each endpoint.
#[derive(Clone, Debug)]
pub struct UpstreamTls {
    /// The rustls client configuration (shared by every worker).
    pub config: Arc<ClientConfig>,
    /// `tls_verify`: `false` accepts any certificate (labs only).
    pub verify: bool,
    /// `tls_server_name`, when set: the name of every endpoint.
    server_name: Option<ServerName<'static>>,
    /// The server name of each `endpoints` entry (indexed like `ResolvedEndpoint::spec`), from its host
    /// text; empty when `tls_server_name` is set.
    endpoint_names: Vec<ServerName<'static>>,
}

impl UpstreamTls {
    /// The SNI and verified name for the endpoint that came from `endpoints[spec]`
    /// (`ResolvedEndpoint::spec`): `tls_server_name`, else that entry's host. `None` only for a `spec`
    /// that is not an index of the upstream's `endpoints`.
    pub fn server_name(&self, spec: usize) -> Option<&ServerName<'static>> {
        self.server_name
            .as_ref()
            .or_else(|| self.endpoint_names.get(spec))
    }
}

/// The system trust store, loaded at most once per resolve (it reads every file of the system's
/// certificate directory) and only when an upstream needs it.
#[derive(Default)]
pub struct SystemRoots(Option<Result<Arc<RootCertStore>, String>>);

impl SystemRoots {
    /// The system's roots.
    ///
    /// # Errors
    /// The store holds no usable certificate. Certificates that fail to load are logged and skipped.
    pub fn get(&mut self) -> Result<Arc<RootCertStore>, String> {
        self.0.get_or_insert_with(load_system_roots).clone()
    }
}

fn load_system_roots() -> Result<Arc<RootCertStore>, String> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(event = "tls.system_roots", error = %e, "a system trust store certificate did not load");
    }
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(
            event = "tls.system_roots",
            ignored,
            "system trust store certificates that do not parse were skipped"
        );
    }
    match roots.is_empty() {
        true => Err("the system trust store has no usable certificate; set tls_ca".into()),
        false => Ok(Arc::new(roots)),
    }
}

/// Builds the TLS side of `upstreams[i]` = `u` (call it only when `u.tls`).
///
/// # Errors
/// Each problem as `(key, reason)`: an unreadable or empty `tls_ca` (the reason names the file), no
/// system roots, a client certificate without its key (or the reverse) or one that does not load, an
/// endpoint host that is not a valid server name (without `tls_server_name`), an invalid
/// `tls_server_name`.
pub fn upstream_tls(
    i: usize,
    u: &Upstream,
    system: &mut SystemRoots,
) -> Result<UpstreamTls, Vec<(String, String)>> {
    let key = |k: &str| format!("upstreams[{i}].{k}");
    let mut errors = Vec::new();
    let provider = provider();
    let roots = match &u.tls_ca {
        Some(ca) => ca_roots(Path::new(ca)).map_err(|r| (key("tls_ca"), r)),
        None if !u.tls_verify => Ok(Arc::new(RootCertStore::empty())),
        None => system.get().map_err(|r| (key("tls_ca"), r)),
    };
    let client_cert = match (&u.tls_client_cert, &u.tls_client_key) {
        (Some(c), Some(k)) => load_cert_and_key(Path::new(c), Path::new(k), &provider)
            .map(|l| Some(l.certified))
            .map_err(|e| {
                let which = if e.in_key { "key" } else { "cert" };
                (key(&format!("tls_client_{which}")), e.to_string())
            }),
        (Some(_), None) => Err((
            key("tls_client_key"),
            "must be set when tls_client_cert is (both or neither)".into(),
        )),
        (None, Some(_)) => Err((
            key("tls_client_cert"),
            "must be set when tls_client_key is (both or neither)".into(),
        )),
        (None, None) => Ok(None),
    };
    let (server_name, endpoint_names) = server_names(i, u, &mut errors);
    let (roots, client_cert) = match (roots, client_cert) {
        (Ok(r), Ok(c)) if errors.is_empty() => (r, c),
        (r, c) => {
            errors.extend(r.err());
            errors.extend(c.err());
            return Err(errors);
        }
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| vec![(key("tls"), e.to_string())])?;
    let builder = match u.tls_verify {
        true => builder.with_root_certificates(roots),
        false => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider))),
    };
    let mut config = match client_cert {
        Some(c) => builder.with_client_cert_resolver(Arc::new(ClientCert(c))),
        None => builder.with_no_client_auth(),
    };
    // What the upstream's `protocol` may speak; for "h2" a server that does not choose h2 fails the
    // handshake's ALPN check in the HTTP/2 session (DESIGN.md "HTTP/2 and gRPC upstreams").
    config.alpn_protocols = u.protocol.alpn();
    Ok(UpstreamTls {
        config: Arc::new(config),
        verify: u.tls_verify,
        server_name,
        endpoint_names,
    })
}

/// `tls_server_name` parsed, or each endpoint's host text parsed (problems recorded in `errors`).
fn server_names(
    i: usize,
    u: &Upstream,
    errors: &mut Vec<(String, String)>,
) -> (Option<ServerName<'static>>, Vec<ServerName<'static>>) {
    if let Some(name) = &u.tls_server_name {
        return match ServerName::try_from(name.as_str()) {
            Ok(n) => (Some(n.to_owned()), Vec::new()),
            Err(e) => {
                errors.push((
                    format!("upstreams[{i}].tls_server_name"),
                    format!("{name:?} is not a DNS name or IP address ({e})"),
                ));
                (None, Vec::new())
            }
        };
    }
    let mut names = Vec::new();
    for (j, e) in u.endpoints.iter().enumerate() {
        let host = host_of(e.address());
        match ServerName::try_from(host) {
            Ok(n) => names.push(n.to_owned()),
            Err(err) => errors.push((
                format!("upstreams[{i}].endpoints[{j}]"),
                format!(
                    "host {host:?} is not a valid TLS server name ({err}); set tls_server_name"
                ),
            )),
        }
    }
    (None, names)
}

/// The host of `host:port`, without the brackets of an IPv6 literal (`[::1]:443` → `::1`).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The roots in the PEM file at `path`.
///
/// # Errors
/// The file cannot be read, holds no certificate, or none of its certificates is a usable root (the
/// reason names the file).
fn ca_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let certs = read_chain(path).map_err(|e| e.to_string())?;
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        return Err(format!(
            "{}: none of its {ignored} certificates is a usable root",
            path.display()
        ));
    }
    Ok(Arc::new(roots))
}

/// Always offers the one configured client certificate (mutual TLS).
#[derive(Debug)]
struct ClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `tls_verify = false`: accepts any server certificate and any name, for labs only (self-signed test
/// origins). It still checks the handshake signatures with the provider's algorithms, so the peer must
/// hold the key of the certificate it sent, but nothing ties that certificate to a trusted root or to
/// the server name: anyone on the path can impersonate the upstream.
#[derive(Debug)]
pub struct AcceptAnyServerCert(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
