//! The test origin as a child process: `edge-bench origin` started by `compare` and `scale`,
//! pinned to the load CPUs with `taskset`, its address read from its first line of output.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::LOAD_PATH;
use crate::support::edge_proc::EdgeProcess;

/// Starts `edge-bench origin` (this executable) as a child pinned to `cpus` with `workers`
/// worker threads on a free loopback port, and waits until `GET /fast` answers 200.
///
/// A separate process rather than the in-process origin: the in-process origin's accepted
/// sockets are not close-on-exec, so every wrk and proxy started later would inherit the
/// origin's open connections (wrk then ran out of event-loop slots and counted connect errors,
/// and a connection the origin closed stayed open in the child).
///
/// # Errors
/// Spawn failures, the origin exiting, or not answering within `timeout`.
pub fn start_origin(
    cpus: &str,
    workers: usize,
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    start_origin_with(cpus, workers, None, timeout)
}

/// [`start_origin`], or with `tls` = (certificate chain, key) the origin in TLS mode; then the
/// health check is left to the caller (it needs the CA), and this returns once the address is printed.
///
/// # Errors
/// As [`start_origin`].
pub fn start_origin_with(
    cpus: &str,
    workers: usize,
    tls: Option<(&Path, &Path)>,
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    start_child(cpus, workers, tls, &[], timeout)
}

/// [`start_origin`] with every path but the fixed-size ones answered with `body_bytes` bytes
/// (`--body-bytes`; `/fast` too), e.g. the 4 MiB answer of `edge-bench slow-readers`.
///
/// # Errors
/// As [`start_origin`].
pub fn start_sized_origin(
    cpus: &str,
    workers: usize,
    body_bytes: u64,
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    let extra = ["--body-bytes".to_string(), body_bytes.to_string()];
    start_child(cpus, workers, None, &extra, timeout)
}

/// [`start_origin`] in h2c mode (`--h2c`): HTTP/2 with prior knowledge only, so the health check is
/// one h2c `GET /fast`.
///
/// # Errors
/// As [`start_origin`].
pub fn start_h2c_origin(
    cpus: &str,
    workers: usize,
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    let (mut p, addr) =
        start_child_unchecked(cpus, workers, None, &["--h2c".to_string()], timeout)?;
    if let Err(e) = crate::compare::h2_upstream::h2c_get_ok(addr, LOAD_PATH, timeout) {
        let _ = p.stop(Duration::from_secs(1));
        return Err(e);
    }
    Ok((p, addr))
}

/// Starts `edge-bench origin` with `extra` arguments (see [`start_origin_with`]).
fn start_child(
    cpus: &str,
    workers: usize,
    tls: Option<(&Path, &Path)>,
    extra: &[String],
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    let (mut p, addr) = start_child_unchecked(cpus, workers, tls, extra, timeout)?;
    if tls.is_none() {
        p.wait_healthy(addr, LOAD_PATH, timeout)?;
    }
    Ok((p, addr))
}

/// Starts `edge-bench origin` and waits for its address line only.
fn start_child_unchecked(
    cpus: &str,
    workers: usize,
    tls: Option<(&Path, &Path)>,
    extra: &[String],
    timeout: Duration,
) -> io::Result<(EdgeProcess, SocketAddr)> {
    let exe = std::env::current_exe()?;
    let mut args = [
        "-c",
        cpus,
        &exe.display().to_string(),
        "origin",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &workers.to_string(),
        "--cpus",
        cpus,
    ]
    .map(String::from)
    .to_vec();
    if let Some((cert, key)) = tls {
        args.extend([
            "--tls-cert".to_string(),
            cert.display().to_string(),
            "--tls-key".to_string(),
            key.display().to_string(),
        ]);
    }
    args.extend_from_slice(extra);
    let mut p = EdgeProcess::start(Path::new("taskset"), &args)?;
    let deadline = std::time::Instant::now() + timeout;
    let addr = loop {
        if let Some(addr) = listening_addr(&p.output()) {
            break addr;
        }
        if let Some(st) = p.exited()? {
            return Err(io::Error::other(format!(
                "origin exited during startup ({st}): {}",
                p.output()
            )));
        }
        if std::time::Instant::now() >= deadline {
            let _ = p.stop(Duration::from_secs(1));
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("origin printed no address: {}", p.output()),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((p, addr))
}

/// The address in the origin's `origin listening on ADDR` line.
pub fn listening_addr(output: &str) -> Option<SocketAddr> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("origin listening on "))
        .and_then(|a| a.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_line_is_parsed() {
        assert_eq!(
            listening_addr("x\norigin listening on 127.0.0.1:4000\n"),
            Some("127.0.0.1:4000".parse().unwrap())
        );
        assert_eq!(listening_addr("origin listening on\n"), None);
    }
}
