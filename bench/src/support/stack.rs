//! The system under test as the scenarios set it up: an in-process origin on a free loopback port
//! and the real `edge` binary in front of it, with traffic and admin listeners on two more free
//! loopback ports.
//!
//! Ports are picked by binding 127.0.0.1:0, reading the port and closing the socket; another
//! program could take the port in between, which the health wait then reports. Field order makes
//! a dropped [`Stack`] stop edge before the origin.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::peers::origin::{spawn_origin, OriginHandle, OriginOptions};
use crate::support::edge_proc::EdgeProcess;
use crate::support::probe;
use crate::support::table::ms;

/// How long edge gets to answer its first health probe.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// edge's readiness path on the traffic listener (DESIGN.md, Inbound deadlines / Health).
pub const HEALTH_PATH: &str = "/_health";

/// A free loopback address (bound, read, closed).
///
/// # Errors
/// Bind failures.
pub fn free_port() -> io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// Origin plus edge, both running and healthy.
#[derive(Debug)]
pub struct Stack {
    /// The edge child (declared first: dropped, so stopped, before the origin).
    pub edge: EdgeProcess,
    /// The in-process origin edge forwards to.
    pub origin: OriginHandle,
    /// edge's traffic listener.
    pub traffic: SocketAddr,
    /// edge's admin listener.
    pub admin: SocketAddr,
}

impl Stack {
    /// Starts the origin, then `edge_bin --listen … --admin-listen … --upstream ORIGIN extra…`,
    /// and waits until `/_health` on the traffic port answers 200. Progress goes to stdout; when
    /// edge fails to come up, its captured output goes to stderr.
    ///
    /// # Errors
    /// Origin bind failures, edge spawn failures, edge exiting or not becoming healthy within
    /// [`HEALTH_TIMEOUT`].
    pub fn start(
        edge_bin: &Path,
        origin: OriginOptions,
        extra_args: &[String],
    ) -> io::Result<Stack> {
        let origin = spawn_origin(origin)?;
        println!("origin listening on {}", origin.addr());
        let traffic = free_port()?;
        let admin = free_port()?;
        let mut args = vec![
            "--listen".to_string(),
            traffic.to_string(),
            "--admin-listen".to_string(),
            admin.to_string(),
            "--upstream".to_string(),
            origin.addr().to_string(),
        ];
        args.extend_from_slice(extra_args);
        println!("starting {} {}", edge_bin.display(), args.join(" "));
        let _ = io::stdout().flush();
        let started = Instant::now();
        let mut edge = EdgeProcess::start(edge_bin, &args)?;
        if let Err(e) = edge.wait_healthy(traffic, HEALTH_PATH, HEALTH_TIMEOUT) {
            print_output(&edge);
            return Err(e);
        }
        println!(
            "edge (pid {}) healthy on {traffic} after {}, admin on {admin}",
            edge.pid(),
            ms(started.elapsed())
        );
        Ok(Stack {
            edge,
            origin,
            traffic,
            admin,
        })
    }

    /// Fails, printing edge's output, when edge is no longer running.
    ///
    /// # Errors
    /// `Other` naming the exit status when edge has exited.
    pub fn check_alive(&mut self) -> io::Result<()> {
        match self.edge.exited()? {
            None => Ok(()),
            Some(st) => {
                print_output(&self.edge);
                Err(io::Error::other(format!("edge exited unexpectedly ({st})")))
            }
        }
    }

    /// The `io_driver` label of `edge_build_info` from `GET http://ADMIN/metrics`.
    ///
    /// # Errors
    /// Request failures, a non-200 answer, or metrics without the label.
    pub fn io_driver(&self) -> io::Result<String> {
        let resp = probe::get(self.admin, "/metrics", Duration::from_secs(2))?;
        if resp.status != 200 {
            return Err(io::Error::other(format!(
                "GET /metrics answered {}",
                resp.status
            )));
        }
        let text = String::from_utf8_lossy(&resp.body);
        io_driver_from_metrics(&text)
            .ok_or_else(|| io::Error::other("no edge_build_info{io_driver=…} in /metrics"))
    }
}

/// Prints edge's captured output to stderr, framed.
pub fn print_output(edge: &EdgeProcess) {
    let out = edge.output();
    eprintln!("--- edge output (pid {}) ---", edge.pid());
    if out.is_empty() {
        eprintln!("(no output)");
    } else if out.ends_with('\n') {
        eprint!("{out}");
    } else {
        eprintln!("{out}");
    }
    eprintln!("--- end of edge output ---");
}

/// Extracts the `io_driver` label value of the `edge_build_info` sample from Prometheus text.
pub fn io_driver_from_metrics(text: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with("edge_build_info{"))
        .find_map(|l| label_value(l, "io_driver"))
}

/// The value of label `name` in one sample line `metric{a="x",b="y"} 1`.
fn label_value(line: &str, name: &str) -> Option<String> {
    let labels = &line[line.find('{')? + 1..line.rfind('}')?];
    let mut rest = labels;
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().trim_start_matches(',').trim();
        let after = rest[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut end = None;
        let mut chars = after.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.push(chars.next()?.1),
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        if key == name {
            return Some(value);
        }
        rest = &after[end? + 1..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_label_is_found() {
        let text = "# HELP edge_build_info build\n# TYPE edge_build_info gauge\n\
                    edge_requests_total{worker=\"0\",status=\"200\"} 5\n\
                    edge_build_info{version=\"0.1.0\",io_driver=\"io_uring\"} 1\n";
        assert_eq!(io_driver_from_metrics(text).as_deref(), Some("io_uring"));
        let text = "edge_build_info{io_driver=\"epoll\", version=\"a\\\"b\"} 1\n";
        assert_eq!(io_driver_from_metrics(text).as_deref(), Some("epoll"));
        assert_eq!(
            io_driver_from_metrics("edge_build_info{version=\"1\"} 1\n"),
            None
        );
        assert_eq!(io_driver_from_metrics(""), None);
    }

    #[test]
    fn free_ports_are_loopback() {
        let a = free_port().unwrap();
        assert!(a.ip().is_loopback() && a.port() != 0);
    }
}
