//! The command line of DESIGN.md "CLI" (clap). Flags override the file; the file overrides the embedded
//! default.

use std::sync::Arc;

use clap::{Parser, Subcommand};
use edge_core::config::{IoDriverSetting, LogFormat, Overrides, TlsOverride, Workers};

/// edge: a thread-per-core HTTP reverse proxy.
#[derive(Debug, Parser)]
#[command(
    name = "edge",
    version,
    about = "edge: a thread-per-core HTTP reverse proxy (HTTP/1.1 and HTTP/2 from clients, TLS both ways)"
)]
pub struct Cli {
    /// Configuration file (TOML); without it the embedded default (deploy/edge.toml) runs.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<String>,
    /// Traffic listener address (server.listen).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Upstream endpoint HOST:PORT (repeatable); replaces [[upstreams]] and [[routes]] with one upstream
    /// "default" and route "/".
    #[arg(long = "upstream", value_name = "HOST:PORT")]
    pub upstreams: Vec<String>,
    /// Worker threads: N or auto (server.workers).
    #[arg(long, value_name = "N|auto")]
    pub workers: Option<Workers>,
    /// Admin listener address; "" disables it (admin.listen).
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// io driver: auto, io_uring or epoll (server.io_driver).
    #[arg(long, value_name = "auto|io_uring|epoll")]
    pub io_driver: Option<IoDriverSetting>,
    /// Log format: text or json (log.format).
    #[arg(long, value_name = "text|json")]
    pub log_format: Option<LogFormat>,
    /// TLS listener address (server.tls.listen); needs --tls-cert and --tls-key: a [server.tls] with
    /// that one certificate.
    #[arg(long, value_name = "ADDR", requires_all = ["tls_cert", "tls_key"])]
    pub tls_listen: Option<String>,
    /// PEM certificate chain, leaf first, for --tls-listen.
    #[arg(long, value_name = "PEM", requires_all = ["tls_listen", "tls_key"])]
    pub tls_cert: Option<String>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires_all = ["tls_listen", "tls_cert"])]
    pub tls_key: Option<String>,
    /// Validate the configuration and print the effective config as TOML; exit 0, or 2 with errors.
    #[arg(long)]
    pub check: bool,
    /// Print the embedded default configuration (deploy/edge.toml).
    #[arg(long)]
    pub print_default_config: bool,
    /// Take the listening sockets over from the running edge at server.upgrade_socket; once this process
    /// serves, the old one drains and exits.
    #[arg(long)]
    pub upgrade: bool,
    /// Subcommands.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Exit 0 when the URL answers 200 (for containers without curl).
    /// Without --url, probes the configured traffic listener's health_path (from --config and --listen,
    /// else the embedded default: http://127.0.0.1:8080/_health); an unspecified address (0.0.0.0, ::)
    /// is probed on loopback.
    Healthcheck {
        /// URL to probe, http:// or https:// (the certificate is not verified: the check asks this edge
        /// whether it is ready); default: health_path on the traffic listener of the configuration.
        #[arg(long)]
        url: Option<String>,
    },
}

impl Cli {
    /// The overrides these flags make.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            upstreams: self.upstreams.clone(),
            workers: self.workers,
            admin_listen: self.admin_listen.clone(),
            io_driver: self.io_driver,
            log_format: self.log_format,
            tls: match (&self.tls_listen, &self.tls_cert, &self.tls_key) {
                (Some(listen), Some(cert), Some(key)) => Some(TlsOverride {
                    listen: listen.clone(),
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
        }
    }
}

/// The health URL of a configuration: its traffic listener (loopback when unspecified) and health_path.
pub fn health_url(r: &edge_core::config::Resolved) -> String {
    let (scheme, mut addr) = match (r.plain_listener, r.tls_listen) {
        (false, Some(tls)) => ("https", tls),
        _ => ("http", r.listen),
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    format!("{scheme}://{addr}{}", r.config.server.health_path)
}

/// `edge healthcheck`: GET the URL with a 2 s budget; `Ok(200)` or the status received. An `https://`
/// URL is fetched over TLS without verifying the certificate: the check asks whether this edge is
/// ready, usually at 127.0.0.1, where its certificate's names never match.
///
/// # Errors
/// An unsupported URL, or a connect/read/TLS failure, in words.
pub fn healthcheck(url: &str) -> Result<u16, String> {
    use std::{
        io::{Read, Write},
        net::{TcpStream, ToSocketAddrs},
        time::Duration,
    };
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(format!(
                "{url}: only http:// and https:// URLs are supported"
            ))
        }
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(2))).ok();
    tcp.set_write_timeout(Some(Duration::from_secs(2))).ok();
    let mut s: Box<dyn ReadWrite> = if tls {
        Box::new(unverified_tls(tcp, authority)?)
    } else {
        Box::new(tcp)
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{url}: {e}"))?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).map_err(|e| format!("{url}: {e}"))?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{url}: not an HTTP response"))
}

/// A blocking byte stream (`edge healthcheck` only, not the proxy path).
trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

/// A TLS client stream over `tcp` that accepts any certificate ([`healthcheck`]).
fn unverified_tls(
    tcp: std::net::TcpStream,
    authority: &str,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>, String> {
    let provider = edge_core::tls::provider();
    let verifier = Arc::new(edge_core::tls::AcceptAnyServerCert(provider.clone()));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{authority}: {e}"))?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn tls_flags_come_together_and_make_a_tls_override() {
        let cli = Cli::try_parse_from([
            "edge",
            "--tls-listen",
            "127.0.0.1:8443",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
        ])
        .expect("all three parse");
        let tls = cli.overrides().tls.expect("a TLS override");
        assert_eq!(
            (tls.listen.as_str(), tls.cert.as_str(), tls.key.as_str()),
            ("127.0.0.1:8443", "c.pem", "k.pem")
        );
        assert!(Cli::try_parse_from(["edge"])
            .expect("none")
            .overrides()
            .tls
            .is_none());
        for partial in [
            &["edge", "--tls-listen", "127.0.0.1:8443"][..],
            &["edge", "--tls-cert", "c.pem", "--tls-key", "k.pem"][..],
        ] {
            let e = Cli::try_parse_from(partial).expect_err("needs all three");
            assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        }
    }
}
