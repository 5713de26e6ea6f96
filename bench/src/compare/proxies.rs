//! How `edge-bench compare` runs each proxy: its default executable, its command line and its
//! configuration file (DESIGN.md, Benchmark method):
//! - edge: `edge --listen L --admin-listen "" --upstream O --workers 1 --io-driver X` (with a
//!   one-CPU mask and one worker, edge's `pin_workers = "auto"` pins the worker to that CPU);
//! - nginx: `nginx -p DIR -e DIR/error.log -c DIR/nginx.conf`, one worker, `daemon off`,
//!   upstream `keepalive 64`, `proxy_http_version 1.1`, `Connection ""`, access log off, every
//!   pid/temp path in DIR; bodies are streamed both ways like edge and HAProxy do
//!   (`proxy_request_buffering off`, `proxy_max_temp_file_size 0`: no spooling of a 1 MiB body to
//!   a temp file) and `client_max_body_size 0` (no limit; the default 1m is at the POST size);
//! - HAProxy: `haproxy -db -f DIR/haproxy.cfg`, `nbthread 1`, `maxconn 4000`, `mode http`,
//!   `option http-keep-alive`, `http-reuse always`.
//!
//! The nginx origin (workloads `NAME@nginx`, DESIGN.md "Benchmark method", Origins and heads): nginx
//! itself as the server behind every target, one worker pinned with the load, `return 200` on `/fast`
//! (13 bytes, with nginx's own Server, Date, Content-Type, Content-Length and Connection fields) and on
//! `/app` the application-like fields of [`crate::peers::origin::APP_FIELDS`]; keep-alive without a
//! request cap, so no proxy's upstream connections are closed under it.
//!
//! Other settings stay at each server's defaults (nginx and edge both end a client connection
//! after 1000 requests; HAProxy has no such limit).
//!
//! The HTTP/2 workloads ([`H2_SETTINGS`]) get proxies of their own: the TLS listener offers ALPN
//! `h2,http/1.1` (edge's default `alpn`; nginx `listen … ssl http2` before 1.25.1, `http2 on`
//! from it; HAProxy `alpn h2,http/1.1`), every proxy keeps up to [`H2_POOL`] idle upstream
//! connections (64 connections × 10 streams = 640 requests in flight, each on its own HTTP/1.1
//! upstream connection; with 64 the pools churn), and a client connection is never ended for its
//! request count ([`H2_MAX_REQUESTS`]: h2load does not reconnect after a GOAWAY).

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::target::{Binaries, TargetKind};
use super::tls::{
    edge_h2_toml, edge_tls_toml, haproxy_tls_bind, nginx_tls_lines, HAPROXY_TLS_GLOBAL,
};
use crate::support::certs::CertFiles;

/// Idle upstream connections every proxy keeps for the HTTP/2 workloads (edge `pool_max_idle`,
/// nginx upstream `keepalive`, HAProxy `pool-max-conn`).
pub const H2_POOL: usize = 1024;

/// Requests per client connection for the HTTP/2 workloads (edge `max_requests_per_connection`,
/// nginx `keepalive_requests`; HAProxy has no such limit).
pub const H2_MAX_REQUESTS: u64 = 100_000_000;

/// The proxies' settings of the HTTP/2 workloads, for the results' headers.
pub const H2_SETTINGS: &str = "every proxy: TLS listener with ALPN h2,http/1.1; upstream pool 1024 idle \
     connections (edge pool_max_idle, nginx keepalive, HAProxy pool-max-conn); 100000000 requests per \
     client connection (edge max_requests_per_connection, nginx keepalive_requests; HAProxy: no limit)";

/// A TLS listener for a proxy: its address and the certificate it serves (see [`super::tls`]).
pub type TlsListen<'a> = Option<(SocketAddr, &'a CertFiles)>;

/// Default nginx executable (Debian package).
pub const NGINX_BIN: &str = "/usr/sbin/nginx";
/// Default HAProxy executable (Debian package).
pub const HAPROXY_BIN: &str = "/usr/sbin/haproxy";

/// The executable and arguments that run proxy `kind` on `listen` (and on `tls`'s listener) in
/// front of `origin`, with the HTTP/2 settings when `h2`; nginx and HAProxy get their
/// configuration file written into `dir` first, edge a `--config` file for its TLS listener (for
/// `h2`, with its upstream: [`super::tls::edge_h2_toml`]).
///
/// # Errors
/// Config-writing failures.
///
/// # Panics
/// For [`TargetKind::Direct`], which runs no proxy.
pub fn proxy_command(
    kind: TargetKind,
    bins: &Binaries,
    dir: &Path,
    listen: SocketAddr,
    origin: SocketAddr,
    tls: TlsListen<'_>,
    h2: bool,
) -> io::Result<(PathBuf, Vec<String>)> {
    Ok(match kind {
        k @ (TargetKind::EdgeUring
        | TargetKind::EdgeEpoll
        | TargetKind::BaselineUring
        | TargetKind::BaselineEpoll) => {
            let driver = k.edge_driver().unwrap_or("epoll");
            let mut args = [
                "--listen",
                &listen.to_string(),
                "--admin-listen",
                "",
                "--workers",
                "1",
                "--io-driver",
                driver,
            ]
            .map(String::from)
            .to_vec();
            match tls {
                Some((tls_listen, certs)) if h2 => {
                    let conf = dir.join("edge-h2.toml");
                    fs::write(&conf, edge_h2_toml(tls_listen, certs, origin))?;
                    args.extend(["--config".to_string(), conf.display().to_string()]);
                }
                tls => {
                    // An edge config naming `{origin}` has its own upstreams and routes (the origin's
                    // address put in); any other gets the origin by `--upstream`.
                    let own = match (tls, k.is_baseline(), &bins.edge_config) {
                        (None, false, Some(conf)) => Some(fs::read_to_string(conf)?),
                        _ => None,
                    };
                    if !own.as_ref().is_some_and(|t| t.contains("{origin}")) {
                        args.extend(["--upstream".to_string(), origin.to_string()]);
                    }
                    if let Some((tls_listen, certs)) = tls {
                        let conf = dir.join("edge-tls.toml");
                        fs::write(&conf, edge_tls_toml(tls_listen, certs))?;
                        args.extend(["--config".to_string(), conf.display().to_string()]);
                    } else if let Some(text) = own {
                        let conf = dir.join("edge-extra.toml");
                        fs::write(&conf, text.replace("{origin}", &origin.to_string()))?;
                        args.extend(["--config".to_string(), conf.display().to_string()]);
                    }
                }
            }
            let bin = match (k.is_baseline(), &bins.baseline) {
                (true, Some(b)) => b.clone(),
                _ => bins.edge.clone(),
            };
            (bin, args)
        }
        TargetKind::Nginx => {
            let h2 = h2.then(|| nginx_h2_style(&bins.nginx));
            let args = nginx_args(dir, &nginx_config(dir, listen, origin, tls, h2))?;
            (bins.nginx.clone(), args)
        }
        TargetKind::Haproxy => {
            let conf = dir.join("haproxy.cfg");
            fs::write(&conf, haproxy_config(listen, origin, tls, h2))?;
            let args = vec![
                "-db".to_string(),
                "-f".to_string(),
                conf.display().to_string(),
            ];
            (bins.haproxy.clone(), args)
        }
        TargetKind::Direct => unreachable!("direct runs no proxy"),
    })
}

/// Starts the nginx origin on a free loopback port, pinned to `cpus`, its files in a scratch directory.
///
/// # Errors
/// Config-writing failures; nginx not answering `/fast` within `timeout`.
pub fn start_nginx_origin(
    nginx: &Path,
    cpus: &str,
    timeout: std::time::Duration,
) -> io::Result<(crate::support::edge_proc::EdgeProcess, SocketAddr)> {
    let listen = crate::support::stack::free_port()?;
    let dir = std::env::temp_dir().join(format!(
        "edge-bench-compare-{}-nginx-origin",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let args = nginx_args(&dir, &nginx_origin_config(&dir, listen))?;
    let p = crate::support::edge_proc::start_pinned_proxy(
        "nginx origin",
        nginx,
        args,
        cpus,
        listen,
        &dir,
        timeout,
    )?;
    Ok((p, listen))
}

/// Writes `config` to `dir/nginx.conf` and returns the arguments that run nginx on it with every path
/// under `dir` (`-p DIR/ -e DIR/error.log -c DIR/nginx.conf`).
///
/// # Errors
/// The config file cannot be written.
pub(crate) fn nginx_args(dir: &Path, config: &str) -> io::Result<Vec<String>> {
    let conf = dir.join("nginx.conf");
    fs::write(&conf, config)?;
    let d = dir.display();
    Ok(vec![
        "-p".to_string(),
        format!("{d}/"),
        "-e".to_string(),
        format!("{d}/error.log"),
        "-c".to_string(),
        conf.display().to_string(),
    ])
}

/// What every nginx of compare shares: one worker in the foreground, pid, logs and temp paths under `dir`,
/// the access log off; it ends inside the `http` block (no newline after its last line).
pub(crate) fn nginx_preamble(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "worker_processes 1;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;"
    )
}

/// The nginx origin's configuration (see the module docs).
pub fn nginx_origin_config(dir: &Path, listen: SocketAddr) -> String {
    let preamble = nginx_preamble(dir);
    let body = String::from_utf8_lossy(crate::peers::origin::APP_BODY)
        .trim_end()
        .to_string();
    let fields: String = crate::peers::origin::APP_FIELDS
        .iter()
        .filter(|(n, _)| !matches!(*n, "Content-Type" | "Date"))
        .map(|(n, v)| format!("            add_header {n} '{v}' always;\n"))
        .collect();
    format!(
        "# written by edge-bench compare: the nginx origin
{preamble}
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    default_type text/plain;
    server {{
        listen {listen} backlog=4096;
        location /fast {{
            return 200 \"hello, world\\n\";
        }}
        location = /app {{
            default_type 'application/json; charset=utf-8';
{fields}            return 200 '{body}\\n';
        }}
    }}
}}
"
    )
}

/// How an nginx enables HTTP/2 on a TLS listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NginxH2 {
    /// `listen … ssl http2;` (before 1.25.1).
    ListenParameter,
    /// `http2 on;` (1.25.1 and later; the listen parameter is deprecated there).
    Directive,
}

/// The HTTP/2 style of the nginx at `bin`, from `nginx -v` (`nginx version: nginx/1.22.1`); the
/// listen parameter when the version cannot be read.
pub fn nginx_h2_style(bin: &Path) -> NginxH2 {
    let line = crate::support::host::version_of(bin, "-v");
    let version: Vec<u32> = line
        .rsplit('/')
        .next()
        .unwrap_or("")
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    if version.len() == 3 && version >= vec![1, 25, 1] {
        NginxH2::Directive
    } else {
        NginxH2::ListenParameter
    }
}

/// The nginx configuration: one worker, upstream keepalive, everything under `dir`; with `tls`, a
/// second listener with TLS; with `h2`, HTTP/2 on that listener and the HTTP/2 settings
/// ([`H2_POOL`], [`H2_MAX_REQUESTS`]).
pub fn nginx_config(
    dir: &Path,
    listen: SocketAddr,
    origin: SocketAddr,
    tls: TlsListen<'_>,
    h2: Option<NginxH2>,
) -> String {
    let preamble = nginx_preamble(dir);
    let mut tls_lines = tls.map_or(String::new(), |(l, c)| nginx_tls_lines(l, c));
    let (pool, mut extra) = (if h2.is_some() { H2_POOL } else { 64 }, String::new());
    if let (Some(style), Some((l, _))) = (h2, tls) {
        extra = format!("    keepalive_requests {H2_MAX_REQUESTS};\n");
        tls_lines = match style {
            NginxH2::ListenParameter => tls_lines.replace(
                &format!("listen {l} ssl;"),
                &format!("listen {l} ssl http2;"),
            ),
            NginxH2::Directive => format!("{tls_lines}        http2 on;\n"),
        };
    }
    format!(
        "# written by edge-bench compare
{preamble}
    client_max_body_size 0;
{extra}    upstream origin {{
        server {origin};
        keepalive {pool};
    }}
    server {{
        listen {listen};
{tls_lines}        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_request_buffering off;
            proxy_max_temp_file_size 0;
        }}
    }}
}}
"
    )
}

/// The HAProxy configuration: one thread, connection reuse always, keep-alive both sides; with
/// `tls`, a second `bind` with TLS; with `h2`, ALPN h2 on it and [`H2_POOL`] idle server
/// connections.
pub fn haproxy_config(
    listen: SocketAddr,
    origin: SocketAddr,
    tls: TlsListen<'_>,
    h2: bool,
) -> String {
    let (global, mut bind) = tls.map_or((String::new(), String::new()), |(l, c)| {
        (HAPROXY_TLS_GLOBAL.to_string(), haproxy_tls_bind(l, c))
    });
    let mut server = String::new();
    if h2 {
        bind = bind.replace("alpn http/1.1", "alpn h2,http/1.1");
        server = format!(" pool-max-conn {H2_POOL}");
    }
    format!(
        "# written by edge-bench compare
global
    nbthread 1
    maxconn 4000
{global}
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend bench
    bind {listen}
{bind}    default_backend origin

backend origin
    server origin {origin}{server}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_name_origin_and_listener() {
        let l: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let o: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let n = nginx_config(Path::new("/tmp/x"), l, o, None, None);
        assert!(n.contains("listen 127.0.0.1:1000;") && n.contains("server 127.0.0.1:2000;"));
        assert!(n.contains("keepalive 64;") && n.contains("pid /tmp/x/nginx.pid;"));
        assert!(n.contains("worker_processes 1;") && n.contains("daemon off;"));
        assert!(
            n.contains("proxy_http_version 1.1;")
                && n.contains("proxy_set_header Connection \"\";")
        );
        assert!(
            n.contains("proxy_request_buffering off;") && n.contains("client_max_body_size 0;")
        );
        assert!(n.contains("proxy_temp_path /tmp/x/proxy;"));
        // Balanced braces: every block the template opens, it closes.
        assert_eq!(n.matches('{').count(), n.matches('}').count());
        let h = haproxy_config(l, o, None, false);
        assert!(h.contains("bind 127.0.0.1:1000") && h.contains("server origin 127.0.0.1:2000"));
        assert!(h.contains("nbthread 1") && h.contains("http-reuse always"));
        assert!(h.contains("mode http") && h.contains("option http-keep-alive"));
        assert!(h.contains("default_backend origin") && h.contains("\nbackend origin\n"));
    }

    #[test]
    fn h2_configs() {
        let dir = std::env::temp_dir().join(format!("edge-bench-h2-cfg-{}", std::process::id()));
        let setup = super::super::tls::TlsSetup::create(&dir).unwrap();
        let (l, o): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:2000".parse().unwrap(),
        );
        let t: SocketAddr = "127.0.0.1:1443".parse().unwrap();
        let tls = Some((t, &setup.certs));
        let p = Path::new("/tmp/x");
        let old = nginx_config(p, l, o, tls, Some(NginxH2::ListenParameter));
        assert!(old.contains("listen 127.0.0.1:1443 ssl http2;") && !old.contains("http2 on;"));
        assert!(old.contains("keepalive 1024;") && old.contains("keepalive_requests 100000000;"));
        let new = nginx_config(p, l, o, tls, Some(NginxH2::Directive));
        assert!(new.contains("listen 127.0.0.1:1443 ssl;") && new.contains("        http2 on;"));
        assert_eq!(new.matches('{').count(), new.matches('}').count());
        let plain_tls = nginx_config(p, l, o, tls, None);
        assert!(plain_tls.contains("keepalive 64;") && !plain_tls.contains("http2"));
        let h = haproxy_config(l, o, tls, true);
        assert!(
            h.contains("alpn h2,http/1.1")
                && h.contains("server origin 127.0.0.1:2000 pool-max-conn 1024")
        );
        assert!(!haproxy_config(l, o, tls, false).contains("alpn h2"));
        let (_, args) =
            proxy_command(TargetKind::EdgeEpoll, &bins(), &dir, l, o, tls, true).unwrap();
        assert!(!args.contains(&"--upstream".to_string()), "{args:?}");
        let toml = fs::read_to_string(dir.join("edge-h2.toml")).unwrap();
        assert!(
            toml.contains("pool_max_idle = 1024")
                && toml.contains("endpoints = [\"127.0.0.1:2000\"]")
        );
        let (_, args) =
            proxy_command(TargetKind::EdgeEpoll, &bins(), &dir, l, o, tls, false).unwrap();
        assert!(args.contains(&"--upstream".to_string()), "{args:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn edge_config_goes_to_the_edge_targets_only() {
        let (l, o) = (
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:2000".parse().unwrap(),
        );
        let dir = std::env::temp_dir().join(format!("edge-bench-cfg-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let access = dir.join("access.toml");
        fs::write(&access, "[log]\naccess = true\n").unwrap();
        let bins = Binaries {
            baseline: Some("edge-old".into()),
            edge_config: Some(access.clone()),
            ..bins()
        };
        let config_of = |kind| {
            let (_, args) = proxy_command(kind, &bins, &dir, l, o, None, false).unwrap();
            let at = args.iter().position(|a| a == "--config");
            (
                at.map(|i| args[i + 1].clone()),
                args.contains(&"--upstream".to_string()),
            )
        };
        let extra = dir.join("edge-extra.toml").display().to_string();
        assert_eq!(
            config_of(TargetKind::EdgeUring),
            (Some(extra.clone()), true)
        );
        assert_eq!(
            config_of(TargetKind::EdgeEpoll),
            (Some(extra.clone()), true)
        );
        assert_eq!(config_of(TargetKind::BaselineUring), (None, true));
        assert_eq!(config_of(TargetKind::BaselineEpoll), (None, true));
        // A config with its own upstreams and routes: the origin's address put in, no --upstream.
        fs::write(
            &access,
            "[[upstreams]]\nname = \"o\"\nendpoints = [\"{origin}\"]\n",
        )
        .unwrap();
        assert_eq!(
            config_of(TargetKind::EdgeUring),
            (Some(extra.clone()), false)
        );
        let written = fs::read_to_string(&extra).unwrap();
        assert!(
            written.contains("endpoints = [\"127.0.0.1:2000\"]"),
            "{written}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    fn bins() -> Binaries {
        Binaries {
            edge: "edge".into(),
            baseline: None,
            edge_config: None,
            nginx: NGINX_BIN.into(),
            haproxy: HAPROXY_BIN.into(),
        }
    }
}
