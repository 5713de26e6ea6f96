//! The TLS part of the schema (DESIGN.md "Configuration (TOML)" and "TLS"): `[server.tls]` (the TLS
//! listener, its certificates, versions, ALPN, resumption and certificate reload polling) and the checks
//! of `[server.tls]` and of the plain listener that do not need the certificate files. Loading and
//! validating the files themselves is `crate::tls`; the upstream `tls*` keys are on
//! [`Upstream`](super::Upstream).

use serde::{Deserialize, Serialize};

use super::{Dur, Limit};

/// `[server.tls]`: the TLS listener beside (or instead of) the plain one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServer {
    /// TLS listener address; one SO_REUSEPORT socket per worker, like `server.listen`.
    pub listen: String,
    /// Certificates chosen by SNI (exact name, then `*.` wildcard); the first is the default.
    pub certificates: Vec<TlsCertificate>,
    /// The lowest protocol version accepted.
    #[serde(default)]
    pub min_version: TlsVersion,
    /// ALPN protocols offered, in this order.
    #[serde(default = "alpn_default")]
    pub alpn: Vec<AlpnProtocol>,
    /// From accept to a finished handshake.
    #[serde(default = "handshake_timeout_default")]
    pub handshake_timeout: Dur,
    /// TLS 1.3 tickets and TLS 1.2 session ids, one key set for all workers.
    #[serde(default = "yes")]
    pub session_resumption: bool,
    /// How often the certificate and key files are checked for a change; `none`: SIGHUP only.
    #[serde(default = "reload_check_default")]
    pub reload_check: Limit,
    /// The plain listener answers 308 to `https://` for every path but `health_path`.
    #[serde(default)]
    pub redirect_plain: bool,
}

impl TlsServer {
    /// A `[server.tls]` with one certificate and every other key at its documented default (what the
    /// `--tls-listen --tls-cert --tls-key` flags make when the file has no `[server.tls]`).
    pub fn with_certificate(listen: &str, cert: &str, key: &str) -> Self {
        TlsServer {
            listen: listen.into(),
            certificates: vec![TlsCertificate {
                cert: cert.into(),
                key: key.into(),
            }],
            min_version: TlsVersion::default(),
            alpn: alpn_default(),
            handshake_timeout: handshake_timeout_default(),
            session_resumption: true,
            reload_check: reload_check_default(),
            redirect_plain: false,
        }
    }
}

/// One entry of `server.tls.certificates`: `{ cert = "chain.pem", key = "key.pem" }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertificate {
    /// PEM file with the certificate chain, leaf first.
    pub cert: String,
    /// PEM file with the leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
}

/// `server.tls.min_version`: `"1.2"` or `"1.3"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    Tls13,
}

/// One entry of `server.tls.alpn`: exactly `"h2"` or `"http/1.1"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AlpnProtocol {
    /// HTTP/2 (DESIGN.md "HTTP/2").
    #[serde(rename = "h2")]
    H2,
    /// HTTP/1.1.
    #[serde(rename = "http/1.1")]
    Http11,
}

impl AlpnProtocol {
    /// The protocol id sent on the wire (RFC 7301).
    pub fn id(self) -> &'static [u8] {
        match self {
            AlpnProtocol::H2 => b"h2",
            AlpnProtocol::Http11 => b"http/1.1",
        }
    }
}

fn alpn_default() -> Vec<AlpnProtocol> {
    vec![AlpnProtocol::H2, AlpnProtocol::Http11]
}
fn handshake_timeout_default() -> Dur {
    Dur::secs(10)
}
fn reload_check_default() -> Limit {
    Limit(Some(std::time::Duration::from_secs(10)))
}
fn yes() -> bool {
    true
}

/// The problems of `server.listen` and `[server.tls]` that need no file: `""` disables the plain
/// listener only beside a TLS one, `redirect_plain` needs a plain listener, at least one certificate,
/// non-zero timing, no ALPN protocol twice, two different listener addresses. Each problem is
/// `(key, reason)`.
pub(super) fn check_listeners(
    listen: &str,
    tls: Option<&TlsServer>,
    plain: Option<std::net::SocketAddr>,
    tls_listen: Option<std::net::SocketAddr>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |k: &str, r: &str| out.push((k.to_string(), r.to_string()));
    let Some(tls) = tls else {
        if listen.is_empty() {
            add(
                "server.listen",
                "\"\" disables the plain listener, which is allowed only with a [server.tls] listener",
            );
        }
        return out;
    };
    if tls.redirect_plain && listen.is_empty() {
        add(
            "server.tls.redirect_plain",
            "needs the plain listener (server.listen is \"\")",
        );
    }
    if tls.certificates.is_empty() {
        add(
            "server.tls.certificates",
            "needs at least one { cert, key }",
        );
    }
    if tls.handshake_timeout.0.is_zero() {
        add("server.tls.handshake_timeout", "must be greater than zero");
    }
    if tls.reload_check.0.is_some_and(|d| d.is_zero()) {
        add(
            "server.tls.reload_check",
            "must be greater than zero, or \"none\"",
        );
    }
    for (i, a) in tls.alpn.iter().enumerate() {
        if tls.alpn[..i].contains(a) {
            add(&format!("server.tls.alpn[{i}]"), "listed twice");
        }
    }
    if let (Some(p), Some(t)) = (plain, tls_listen) {
        if p == t && p.port() != 0 {
            add(
                "server.tls.listen",
                "must differ from server.listen (one port cannot serve plain and TLS)",
            );
        }
    }
    out
}

/// `server.listen` against `[server.tls]`, then the TLS listener's certificates (loaded and validated
/// here, so `edge --check` reports them). `plain` and `tls_listen` are the resolved listener addresses
/// (`None` when off or unresolvable).
pub(super) fn resolve_server_tls(
    server: &super::Server,
    plain: Option<std::net::SocketAddr>,
    tls_listen: Option<std::net::SocketAddr>,
    p: &mut super::problems::Problems<'_>,
) -> Option<std::sync::Arc<crate::tls::TlsServerState>> {
    let tls = server.tls.as_ref();
    for (key, reason) in check_listeners(&server.listen, tls, plain, tls_listen) {
        p.add(key, reason);
    }
    let tls = tls.filter(|t| !t.certificates.is_empty())?;
    match crate::tls::server_config(tls, p.file) {
        Ok(state) => Some(std::sync::Arc::new(state)),
        Err(errors) => {
            p.errors.extend(errors);
            None
        }
    }
}

/// `upstreams[i]`'s `tls*` keys: with `tls = true` the client configuration is built (roots, client
/// certificate, server names); without it, a `tls_*` key that is set is an error (it would do nothing).
pub(super) fn resolve_upstream_tls(
    i: usize,
    u: &super::Upstream,
    roots: &mut crate::tls::SystemRoots,
    p: &mut super::problems::Problems<'_>,
) -> Option<crate::tls::UpstreamTls> {
    if !u.tls {
        let set = [
            ("tls_server_name", u.tls_server_name.is_some()),
            ("tls_ca", u.tls_ca.is_some()),
            ("tls_verify", !u.tls_verify),
            ("tls_client_cert", u.tls_client_cert.is_some()),
            ("tls_client_key", u.tls_client_key.is_some()),
        ];
        for (name, _) in set.iter().filter(|(_, on)| *on) {
            p.add(
                format!("upstreams[{i}].{name}"),
                "has no effect without tls = true",
            );
        }
        return None;
    }
    match crate::tls::upstream_tls(i, u, roots) {
        Ok(t) => Some(t),
        Err(errors) => {
            for (key, reason) in errors {
                p.add(key, reason);
            }
            None
        }
    }
}
