//! What `edge-bench slow-readers` runs: the origin on the load CPUs (nginx serving a static file
//! of the body size, or edge-bench's own origin with `--origin edge-bench`) and each proxy on the
//! proxy CPUs as `compare` starts it ([`proxy_command`]), edge with a config file holding only
//! `server.timeouts.send`.
//!
//! The nginx origin: one worker, `sendfile on`, keep-alive without a request cap, `/fast` answered
//! with `return 200` (what the proxies' start-up check asks for) and every other path from a
//! directory holding [`BODY_PATH`], whose bytes are the own origin's pattern, so one check on the
//! client side fits both origins.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use super::body::pattern_body;
use crate::compare::proxies::{nginx_args, nginx_preamble, proxy_command};
use crate::compare::target::{Binaries, Target, TargetKind};
use crate::peers::origin::child::start_sized_origin;
use crate::support::edge_config::toml_duration;
use crate::support::edge_proc::{start_pinned_proxy, EdgeProcess};
use crate::support::stack::free_port;

/// The path the slow readers ask for.
pub const BODY_PATH: &str = "/body";

/// Which origin serves the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginKind {
    /// nginx serving a static file (an origin edge's authors did not write).
    Nginx,
    /// `edge-bench origin --body-bytes SIZE`.
    Own,
}

impl OriginKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OriginKind::Nginx => "nginx",
            OriginKind::Own => "edge-bench",
        }
    }
}

impl FromStr for OriginKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "nginx" => Ok(OriginKind::Nginx),
            "edge-bench" => Ok(OriginKind::Own),
            other => Err(format!(
                "unknown origin {other:?} (expected nginx or edge-bench)"
            )),
        }
    }
}

/// A running origin; stopped, and its scratch directory removed, on drop.
#[derive(Debug)]
pub struct SlowOrigin {
    /// Where the proxies forward to.
    pub addr: SocketAddr,
    /// The origin process (stopped before its directory is removed).
    pub process: EdgeProcess,
    dir: Option<PathBuf>,
}

impl Drop for SlowOrigin {
    fn drop(&mut self) {
        let _ = self.process.stop(Duration::from_secs(2));
        if let Some(dir) = self.dir.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Starts the origin serving `size` bytes on [`BODY_PATH`], pinned to `cpus`.
///
/// # Errors
/// Scratch-file writes, spawn failures, the origin not answering `/fast` within `timeout`.
pub fn start_origin(
    kind: OriginKind,
    nginx: &Path,
    size: u64,
    cpus: &str,
    timeout: Duration,
) -> io::Result<SlowOrigin> {
    match kind {
        OriginKind::Own => {
            let (process, addr) = start_sized_origin(cpus, 1, size, timeout)?;
            Ok(SlowOrigin {
                addr,
                process,
                dir: None,
            })
        }
        OriginKind::Nginx => {
            let dir = scratch_dir("origin")?;
            let www = dir.join("www");
            fs::create_dir_all(&www)?;
            let len = usize::try_from(size).map_err(io::Error::other)?;
            fs::write(
                www.join(BODY_PATH.trim_start_matches('/')),
                pattern_body(len),
            )?;
            let listen = free_port()?;
            let args = nginx_args(&dir, &nginx_static_config(&dir, listen))?;
            let started =
                start_pinned_proxy("nginx origin", nginx, args, cpus, listen, &dir, timeout);
            match started {
                Ok(process) => Ok(SlowOrigin {
                    addr: listen,
                    process,
                    dir: Some(dir),
                }),
                Err(e) => {
                    let _ = fs::remove_dir_all(&dir);
                    Err(e)
                }
            }
        }
    }
}

/// The nginx origin's configuration (see the module docs).
pub fn nginx_static_config(dir: &Path, listen: SocketAddr) -> String {
    let preamble = nginx_preamble(dir);
    let www = dir.join("www");
    format!(
        "# written by edge-bench slow-readers: the nginx origin
{preamble}
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    sendfile on;
    default_type application/octet-stream;
    server {{
        listen {listen} backlog=4096;
        location /fast {{
            return 200 \"hello, world\\n\";
        }}
        location / {{
            root {};
        }}
    }}
}}
",
        www.display()
    )
}

/// Starts proxy `kind` as `compare` starts it, on a free loopback port in front of `origin`, pinned
/// to `cpus`; edge gets `--config` with `server.timeouts.send = send`. Waits until `GET /fast` through
/// it answers. The target stops the proxy and removes its directory on drop.
///
/// # Errors
/// Config writes, spawn failures, the proxy not answering within `timeout`.
pub fn start_target(
    kind: TargetKind,
    bins: &Binaries,
    origin: SocketAddr,
    cpus: &str,
    send: Duration,
    timeout: Duration,
) -> io::Result<Target> {
    let listen = free_port()?;
    let dir = scratch_dir(kind.name())?;
    let started = command(kind, bins, &dir, listen, origin, send).and_then(|(bin, args)| {
        start_pinned_proxy(kind.name(), &bin, args, cpus, listen, &dir, timeout)
    });
    match started {
        Ok(p) => Ok(Target::running(kind, listen, p, dir)),
        Err(e) => {
            let _ = fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// The executable and arguments of `kind` ([`proxy_command`]), edge's with `--config` for `send`
/// (written into `dir`).
fn command(
    kind: TargetKind,
    bins: &Binaries,
    dir: &Path,
    listen: SocketAddr,
    origin: SocketAddr,
    send: Duration,
) -> io::Result<(PathBuf, Vec<String>)> {
    let (bin, mut args) = proxy_command(kind, bins, dir, listen, origin, None, false)?;
    if kind.is_edge() {
        let conf = dir.join("edge-slow.toml");
        fs::write(&conf, edge_toml(send))?;
        args.extend(["--config".to_string(), conf.display().to_string()]);
    }
    Ok((bin, args))
}

/// edge's config file: only the send timeout (the rest is the embedded default).
pub fn edge_toml(send: Duration) -> String {
    format!("[server.timeouts]\nsend = {}\n", toml_duration(send))
}

/// A fresh scratch directory `$TMPDIR/edge-bench-slow-PID-NAME`.
fn scratch_dir(name: &str) -> io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("edge-bench-slow-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_config_serves_the_file() {
        let l: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let c = nginx_static_config(Path::new("/tmp/o"), l);
        assert!(
            c.contains("listen 127.0.0.1:1000 backlog=4096;") && c.contains("root /tmp/o/www;")
        );
        assert!(c.contains("location /fast") && c.contains("pid /tmp/o/nginx.pid;"));
        assert_eq!(c.matches('{').count(), c.matches('}').count());
        assert_eq!("edge-bench".parse::<OriginKind>(), Ok(OriginKind::Own));
        assert!("apache".parse::<OriginKind>().is_err());
    }

    #[test]
    fn edge_config_holds_send_only() {
        assert_eq!(
            edge_toml(Duration::from_secs(30)),
            "[server.timeouts]\nsend = \"30000ms\"\n"
        );
    }
}
