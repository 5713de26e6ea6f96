//! TLS for `edge-bench compare` (DESIGN.md "Benchmark method": TLS): one ECDSA P-256 leaf (made
//! with rcgen at the start of the run, [`crate::support::certs`]) served by every target, each
//! limited to AES-128-GCM (TLS 1.3 `TLS_AES_128_GCM_SHA256`, TLS 1.2
//! `ECDHE-ECDSA-AES128-GCM-SHA256`) with session resumption on:
//! - edge: `--config` with `[server.tls]` (listen, the leaf and key, `min_version = "1.2"`, `alpn =
//!   ["http/1.1"]`, `session_resumption = true`); edge has no cipher option, so the client's offer
//!   fixes the suite;
//! - nginx: a second `listen … ssl` in the proxy's server block, `ssl_protocols TLSv1.2 TLSv1.3`,
//!   `ssl_ciphers`, `ssl_conf_command Ciphersuites`, `ssl_session_cache shared:SSL:10m`,
//!   `ssl_session_tickets on`;
//! - HAProxy: a second `bind … ssl crt combined.pem alpn http/1.1` with
//!   `ssl-default-bind-ciphersuites` / `-ciphers` and `ssl-min-ver TLSv1.2`; tickets and its session
//!   cache are on by default;
//! - direct: a second origin process, `edge-bench origin --tls-cert … --tls-key …`.
//!
//! wrk has no TLS options; it gets an `OPENSSL_CONF` file ([`openssl_conf`]) that limits its
//! OpenSSL to the suites above and to TLS 1.3 (or to TLS 1.2 for `tls12-get-64`), so the
//! negotiated protocol and suite are the same on every target. wrk resumes the session when it
//! reconnects (it keeps the `SSL` object's session across `SSL_clear`; measured with nginx's
//! `$ssl_session_reused`: every reconnect resumed), so the connection-per-request workloads use
//! edge-bench's own loader ([`super::handshake`]).

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::support::certs::{write_test_certs, CertFiles};

/// The TLS material of one compare run.
#[derive(Debug, Clone)]
pub struct TlsSetup {
    /// CA, leaf and key (every target serves the leaf alone, `cert.pem`).
    pub certs: CertFiles,
    /// `OPENSSL_CONF` for wrk's TLS 1.3 runs.
    pub openssl13: PathBuf,
    /// `OPENSSL_CONF` for wrk's TLS 1.2 run.
    pub openssl12: PathBuf,
}

impl TlsSetup {
    /// Writes the certificates and the OpenSSL files into `dir`.
    ///
    /// # Errors
    /// Certificate generation and file-writing failures.
    pub fn create(dir: &Path) -> io::Result<TlsSetup> {
        let certs = write_test_certs(dir, "edge-bench compare CA", 1)?;
        let openssl13 = dir.join("openssl-tls13.cnf");
        let openssl12 = dir.join("openssl-tls12.cnf");
        fs::write(&openssl13, openssl_conf(false))?;
        fs::write(&openssl12, openssl_conf(true))?;
        Ok(TlsSetup {
            certs,
            openssl13,
            openssl12,
        })
    }

    /// The `OPENSSL_CONF` file for a workload's wrk runs.
    pub fn openssl_conf_for(&self, tls12: bool) -> &Path {
        if tls12 {
            &self.openssl12
        } else {
            &self.openssl13
        }
    }
}

/// An OpenSSL config whose system default limits every client to AES-128-GCM and to TLS 1.3, or
/// to TLS 1.2 with `tls12`.
pub fn openssl_conf(tls12: bool) -> String {
    let version = if tls12 {
        "MaxProtocol = TLSv1.2"
    } else {
        "MinProtocol = TLSv1.3"
    };
    format!(
        "# written by edge-bench compare: wrk's TLS settings
openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
Ciphersuites = TLS_AES_128_GCM_SHA256
CipherString = ECDHE-ECDSA-AES128-GCM-SHA256
{version}
"
    )
}

/// The TOML edge gets with `--config` for a TLS listener on `listen` (DESIGN.md "Configuration",
/// `[server.tls]`); the plain listener and the upstream stay on the command line.
pub fn edge_tls_toml(listen: SocketAddr, certs: &CertFiles) -> String {
    format!(
        "# written by edge-bench compare
[server.tls]
listen = \"{listen}\"
certificates = [{{ cert = \"{}\", key = \"{}\" }}]
min_version = \"1.2\"
alpn = [\"http/1.1\"]
session_resumption = true
",
        certs.cert.display(),
        certs.key.display()
    )
}

/// The TOML edge gets with `--config` for the HTTP/2 workloads: the TLS listener on `listen` with
/// edge's default ALPN (`h2` first), [`H2_MAX_REQUESTS`](super::proxies::H2_MAX_REQUESTS) per
/// client connection, and `origin` as upstream `origin` (route `/`) with
/// [`H2_POOL`](super::proxies::H2_POOL) idle connections (`--upstream` would reset the pool to
/// its default, so the upstream is here and not on the command line).
pub fn edge_h2_toml(listen: SocketAddr, certs: &CertFiles, origin: SocketAddr) -> String {
    format!(
        "# written by edge-bench compare: the HTTP/2 workloads
[server]
max_requests_per_connection = {}
[server.tls]
listen = \"{listen}\"
certificates = [{{ cert = \"{}\", key = \"{}\" }}]
min_version = \"1.2\"
alpn = [\"h2\", \"http/1.1\"]
session_resumption = true
[[upstreams]]
name = \"origin\"
endpoints = [\"{origin}\"]
pool_max_idle = {}
[[routes]]
path_prefix = \"/\"
upstream = \"origin\"
",
        super::proxies::H2_MAX_REQUESTS,
        certs.cert.display(),
        certs.key.display(),
        super::proxies::H2_POOL,
    )
}

/// The lines nginx's proxy server block gets for a TLS listener on `listen`.
pub fn nginx_tls_lines(listen: SocketAddr, certs: &CertFiles) -> String {
    format!(
        "        listen {listen} ssl;
        ssl_certificate {};
        ssl_certificate_key {};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;
        ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
        ssl_prefer_server_ciphers on;
        ssl_session_cache shared:SSL:10m;
        ssl_session_timeout 1h;
        ssl_session_tickets on;
",
        certs.cert.display(),
        certs.key.display()
    )
}

/// HAProxy's global lines for TLS (suites and minimum version of every `bind … ssl`).
pub const HAPROXY_TLS_GLOBAL: &str = "    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256
    ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256
    ssl-default-bind-options ssl-min-ver TLSv1.2
    tune.ssl.cachesize 100000
";

/// HAProxy's frontend line for a TLS listener on `listen`.
pub fn haproxy_tls_bind(listen: SocketAddr, certs: &CertFiles) -> String {
    format!(
        "    bind {listen} ssl crt {} alpn http/1.1\n",
        certs.combined.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_name_the_listener_and_the_files() {
        let dir =
            std::env::temp_dir().join(format!("edge-bench-compare-tls-{}", std::process::id()));
        let setup = TlsSetup::create(&dir).unwrap();
        let l: SocketAddr = "127.0.0.1:1443".parse().unwrap();
        let e = edge_tls_toml(l, &setup.certs);
        assert!(e.contains("[server.tls]\nlisten = \"127.0.0.1:1443\""));
        assert!(e.contains("alpn = [\"http/1.1\"]") && e.contains("cert.pem"));
        let n = nginx_tls_lines(l, &setup.certs);
        assert!(
            n.contains("listen 127.0.0.1:1443 ssl;")
                && n.contains("Ciphersuites TLS_AES_128_GCM_SHA256")
        );
        assert!(haproxy_tls_bind(l, &setup.certs).contains("combined.pem"));
        let o = fs::read_to_string(setup.openssl_conf_for(true)).unwrap();
        assert!(o.contains("MaxProtocol = TLSv1.2"));
        assert!(openssl_conf(false).contains("MinProtocol = TLSv1.3"));
        let _ = fs::remove_dir_all(&dir);
    }
}
