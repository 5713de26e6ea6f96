//! The proxies `edge-bench scale` measures: edge (io_uring, epoll) and nginx, one worker each,
//! pinned with `taskset` to the proxy CPUs, configured to hold many connections.
//!
//! Same placement and base settings as `compare` ([`crate::compare::target`]): one worker, upstream
//! keep-alive pool of 64, access log off, a client connection ended after 1000 requests. What
//! differs is capacity and idle time, so that the counts under test fit:
//! - edge: a `--config` file with `max_connections` above N (edge lowers it to what its fd limit
//!   holds, `2 × max + 256` fds; the caller clamps N accordingly), `idle = "600s"`, and
//!   `drain_delay = "0s"` so a stop is quick;
//! - nginx: `worker_rlimit_nofile` = the fd hard limit, `worker_connections` just under it,
//!   `keepalive_timeout 600s`.
//!
//! Processes are stopped by their own pid ([`EdgeProcess`]); the scratch directory (config,
//! pid, logs) is removed on drop.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::certs::CertFiles;
use crate::support::edge_proc::{start_pinned_proxy, EdgeProcess};
use crate::support::procfs::{children_of, proc_stat, read_rss};

/// How long a proxy gets to answer its first request through to the origin.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A proxy under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleTarget {
    /// edge, `io_driver = "io_uring"`.
    EdgeUring,
    /// edge, `io_driver = "epoll"`.
    EdgeEpoll,
    /// nginx, one worker.
    Nginx,
}

impl ScaleTarget {
    /// Every target, in the default order.
    pub const ALL: [ScaleTarget; 3] = [
        ScaleTarget::EdgeUring,
        ScaleTarget::EdgeEpoll,
        ScaleTarget::Nginx,
    ];

    /// The name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            ScaleTarget::EdgeUring => "edge-io_uring",
            ScaleTarget::EdgeEpoll => "edge-epoll",
            ScaleTarget::Nginx => "nginx",
        }
    }

    /// Whether this is edge.
    pub fn is_edge(self) -> bool {
        self != ScaleTarget::Nginx
    }
}

impl std::str::FromStr for ScaleTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScaleTarget::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                format!("unknown target {s:?} (expected edge-io_uring, edge-epoll or nginx)")
            })
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    /// Which.
    pub target: ScaleTarget,
    /// Its traffic listener.
    pub addr: SocketAddr,
    /// Its TLS listener (with `scale --tls`).
    pub tls_addr: Option<SocketAddr>,
    process: EdgeProcess,
    dir: PathBuf,
}

/// The edge config for `max_connections` (keys edge merges over its default).
pub fn edge_config(driver: &str, max_connections: u64) -> String {
    format!(
        "[server]\nworkers = 1\nmax_connections = {max_connections}\nio_driver = \"{driver}\"\n\n\
         [server.timeouts]\nidle = \"600s\"\ndrain_delay = \"0s\"\ndrain = \"2s\"\n"
    )
}

/// The nginx config: one worker, upstream keepalive 64, `worker_connections` for `fd_limit`.
pub fn nginx_config(dir: &Path, listen: SocketAddr, origin: SocketAddr, fd_limit: u64) -> String {
    let d = dir.display();
    let conns = fd_limit.saturating_sub(64).max(1024);
    format!(
        "# written by edge-bench scale
worker_processes 1;
worker_rlimit_nofile {fd_limit};
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections {conns};
}}
http {{
    access_log off;
    keepalive_timeout 600s;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream origin {{
        server {origin};
        keepalive 64;
    }}
    server {{
        listen {listen} backlog=4096;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}
"
    )
}

impl Proxy {
    /// Starts `target` on a free loopback port in front of `origin`, pinned to `cpus`, sized
    /// for `max_connections` (edge) or `fd_limit` (nginx), and waits until `GET /fast` answers.
    ///
    /// # Errors
    /// Config-writing and spawn failures; the proxy exiting or not answering in time (its
    /// output is in the message).
    pub fn start(
        target: ScaleTarget,
        bin: &Path,
        origin: SocketAddr,
        cpus: &str,
        (max_connections, fd_limit): (u64, u64),
        tls: Option<&CertFiles>,
    ) -> io::Result<Proxy> {
        let listen = crate::support::stack::free_port()?;
        let tls_listen = match tls {
            Some(c) => Some((crate::support::stack::free_port()?, c)),
            None => None,
        };
        let dir = std::env::temp_dir().join(format!(
            "edge-bench-scale-{}-{}",
            std::process::id(),
            target.name()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let args: Vec<String> = match target {
            ScaleTarget::EdgeUring | ScaleTarget::EdgeEpoll => {
                let driver = if target == ScaleTarget::EdgeUring {
                    "io_uring"
                } else {
                    "epoll"
                };
                let conf = dir.join("edge.toml");
                let tls_toml = tls_listen.map_or(String::new(), |(l, c)| {
                    crate::compare::tls::edge_tls_toml(l, c)
                });
                fs::write(&conf, edge_config(driver, max_connections) + &tls_toml)?;
                [
                    "--config",
                    &conf.display().to_string(),
                    "--listen",
                    &listen.to_string(),
                    "--admin-listen",
                    "",
                    "--upstream",
                    &origin.to_string(),
                ]
                .map(String::from)
                .to_vec()
            }
            ScaleTarget::Nginx => {
                let conf = dir.join("nginx.conf");
                let mut text = nginx_config(&dir, listen, origin, fd_limit);
                if let Some((l, c)) = tls_listen {
                    let lines = crate::compare::tls::nginx_tls_lines(l, c);
                    let at = format!("        listen {listen} backlog=4096;\n");
                    text = text.replace(&at, &format!("{at}{lines}"));
                }
                fs::write(&conf, text)?;
                let d = dir.display().to_string();
                vec![
                    "-p".into(),
                    format!("{d}/"),
                    "-e".into(),
                    format!("{d}/error.log"),
                    "-c".into(),
                    conf.display().to_string(),
                ]
            }
        };
        let started =
            start_pinned_proxy(target.name(), bin, args, cpus, listen, &dir, START_TIMEOUT);
        let process = match started {
            Ok(p) => p,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        Ok(Proxy {
            target,
            addr: listen,
            tls_addr: tls_listen.map(|(a, _)| a),
            process,
            dir,
        })
    }

    /// The proxy's pid and its direct children's (nginx: master, then worker).
    pub fn pids(&self) -> Vec<u32> {
        let pid = self.process.pid();
        let mut pids = vec![pid];
        pids.extend(children_of(pid));
        pids
    }

    /// VmRSS summed over [`pids`](Self::pids), bytes.
    ///
    /// # Errors
    /// /proc read failures for the proxy itself.
    pub fn rss(&self) -> io::Result<u64> {
        let mut total = 0;
        for (i, pid) in self.pids().into_iter().enumerate() {
            match read_rss(pid) {
                Ok(r) => total += r.total,
                Err(e) if i == 0 => return Err(e),
                Err(_) => {}
            }
        }
        Ok(total)
    }

    /// CPU ticks (utime + stime) used so far by the proxy and its children.
    pub fn cpu_ticks(&self) -> Option<u64> {
        let mut ticks = proc_stat(self.process.pid()).ok()?.cpu_ticks;
        for child in children_of(self.process.pid()) {
            ticks += proc_stat(child).map_or(0, |s| s.cpu_ticks);
        }
        Some(ticks)
    }

    /// Fails when the proxy has exited.
    ///
    /// # Errors
    /// `Other` with the exit status and the proxy's output.
    pub fn check_alive(&mut self) -> io::Result<()> {
        match self.process.exited()? {
            None => Ok(()),
            Some(st) => Err(io::Error::other(format!(
                "{} (pid {}) exited unexpectedly ({st}):\n{}",
                self.target.name(),
                self.process.pid(),
                self.process.output()
            ))),
        }
    }

    /// Stops the proxy (SIGTERM, SIGKILL after `grace`) and removes its directory.
    pub fn stop(mut self, grace: Duration) {
        let _ = self.process.stop(grace);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.process.stop(Duration::from_secs(2));
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in ScaleTarget::ALL {
            assert_eq!(t.name().parse::<ScaleTarget>(), Ok(t));
        }
        assert!("haproxy".parse::<ScaleTarget>().is_err());
    }

    #[test]
    fn configs_carry_the_capacity() {
        let e = edge_config("epoll", 10_731);
        assert!(e.contains("max_connections = 10731") && e.contains("io_driver = \"epoll\""));
        assert!(e.contains("workers = 1") && e.contains("idle = \"600s\""));
        let l: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let o: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let n = nginx_config(Path::new("/tmp/x"), l, o, 20_000);
        assert!(
            n.contains("worker_rlimit_nofile 20000;") && n.contains("worker_connections 19936;")
        );
        assert!(
            n.contains("listen 127.0.0.1:1000 backlog=4096;")
                && n.contains("server 127.0.0.1:2000;")
        );
        assert!(n.contains("keepalive 64;") && n.contains("keepalive_timeout 600s;"));
        assert!(n.contains("pid /tmp/x/nginx.pid;") && n.contains("worker_processes 1;"));
    }
}
