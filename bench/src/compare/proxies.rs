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

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::target::{Binaries, TargetKind};
use super::tls::{edge_tls_toml, haproxy_tls_bind, nginx_tls_lines, HAPROXY_TLS_GLOBAL};
use crate::support::certs::CertFiles;

/// A TLS listener for a proxy: its address and the certificate it serves (see [`super::tls`]).
pub type TlsListen<'a> = Option<(SocketAddr, &'a CertFiles)>;

/// Default nginx executable (Debian package).
pub const NGINX_BIN: &str = "/usr/sbin/nginx";
/// Default HAProxy executable (Debian package).
pub const HAPROXY_BIN: &str = "/usr/sbin/haproxy";

/// The executable and arguments that run proxy `kind` on `listen` (and on `tls`'s listener) in
/// front of `origin`; nginx and HAProxy get their configuration file written into `dir` first,
/// edge a `--config` file for its TLS listener.
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
                "--upstream",
                &origin.to_string(),
                "--workers",
                "1",
                "--io-driver",
                driver,
            ]
            .map(String::from)
            .to_vec();
            if let Some((tls_listen, certs)) = tls {
                let conf = dir.join("edge-tls.toml");
                fs::write(&conf, edge_tls_toml(tls_listen, certs))?;
                args.extend(["--config".to_string(), conf.display().to_string()]);
            }
            let bin = match (k.is_baseline(), &bins.baseline) {
                (true, Some(b)) => b.clone(),
                _ => bins.edge.clone(),
            };
            (bin, args)
        }
        TargetKind::Nginx => {
            let args = nginx_args(dir, &nginx_config(dir, listen, origin, tls))?;
            (bins.nginx.clone(), args)
        }
        TargetKind::Haproxy => {
            let conf = dir.join("haproxy.cfg");
            fs::write(&conf, haproxy_config(listen, origin, tls))?;
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
fn nginx_args(dir: &Path, config: &str) -> io::Result<Vec<String>> {
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
fn nginx_preamble(dir: &Path) -> String {
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

/// The nginx configuration: one worker, upstream keepalive, everything under `dir`; with `tls`, a
/// second listener with TLS.
pub fn nginx_config(
    dir: &Path,
    listen: SocketAddr,
    origin: SocketAddr,
    tls: TlsListen<'_>,
) -> String {
    let preamble = nginx_preamble(dir);
    let tls_lines = tls.map_or(String::new(), |(l, c)| nginx_tls_lines(l, c));
    format!(
        "# written by edge-bench compare
{preamble}
    client_max_body_size 0;
    upstream origin {{
        server {origin};
        keepalive 64;
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
/// `tls`, a second `bind` with TLS.
pub fn haproxy_config(listen: SocketAddr, origin: SocketAddr, tls: TlsListen<'_>) -> String {
    let (global, bind) = tls.map_or((String::new(), String::new()), |(l, c)| {
        (HAPROXY_TLS_GLOBAL.to_string(), haproxy_tls_bind(l, c))
    });
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
    server origin {origin}
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
        let n = nginx_config(Path::new("/tmp/x"), l, o, None);
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
        let h = haproxy_config(l, o, None);
        assert!(h.contains("bind 127.0.0.1:1000") && h.contains("server origin 127.0.0.1:2000"));
        assert!(h.contains("nbthread 1") && h.contains("http-reuse always"));
        assert!(h.contains("mode http") && h.contains("option http-keep-alive"));
        assert!(h.contains("default_backend origin") && h.contains("\nbackend origin\n"));
    }
}
