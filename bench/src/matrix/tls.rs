//! `edge-bench matrix` group e, the TLS cases (DESIGN.md "Fault matrix" e, "TLS", "Capacity"):
//! 300 sockets that start a TLS handshake and never finish it at `max_connections = 256`; a
//! ClientHello dripped a byte a second; plain HTTP to the TLS port; a certificate rotated under
//! load (SIGHUP); an upstream whose certificate does not verify.
//!
//! The group runs only when the edge binary has TLS: `edge --check --config FILE` on a config with
//! `[server.tls]` must exit 0 (an edge without TLS rejects the unknown table); otherwise it prints
//! `skipped: edge has no TLS` and reports one skipped row. edge gets `handshake_timeout = "2000ms"`,
//! `reload_check = "none"` (rotation by SIGHUP only) and two upstreams: `/` to a plain origin and
//! `/badtls` to an origin in TLS mode whose certificate is signed by a CA other than `tls_ca`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::base_config;
use super::origin::Conn;
use super::runner::{run_case, secs, within, Check, Edge, HealthRule, Row, SEC};
use crate::peers::origin::{spawn_origin, OriginOptions};
use crate::support::certs::{root_store, server_config, write_test_certs, CertFiles};
use crate::support::stack::free_port;
use crate::support::tls_probe::tls_get;

/// The handshake deadline edge gets in this group.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the group's cases share.
struct Setup {
    tls: SocketAddr,
    certs: CertFiles,
    /// Trusts the CA of the served certificate and that of the rotated one.
    client: Arc<rustls::ClientConfig>,
}

/// Group e, TLS cases (skipped, with one row saying so, when edge has no TLS).
///
/// # Errors
/// Certificate, origin or edge start-up failures.
pub fn group_e_tls(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let dir = std::env::temp_dir().join(format!("edge-bench-matrix-tls-{}", std::process::id()));
    let certs = write_test_certs(&dir.join("served"), "matrix CA", 1)?;
    let rotated = write_test_certs(&dir.join("rotated"), "matrix rotation CA", 2)?;
    let other = write_test_certs(&dir.join("other"), "matrix other CA", 3)?;
    let plain = spawn_origin(OriginOptions::default())?;
    let bad = spawn_origin(OriginOptions {
        tls: Some(server_config(&other.chain, &other.key, None)?),
        ..Default::default()
    })?;
    let tls = free_port()?;
    let toml = e_config(tls, &certs, plain.addr(), bad.addr());
    if !edge_has_tls(bin, &dir, &toml) {
        println!("  skipped: edge has no TLS");
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(vec![Row::skipped(
            "e",
            "TLS cases",
            "edge --check accepts [server.tls]",
            "edge has no TLS",
        )]);
    }
    let edge = Edge::start(bin, "matrix-e", &toml, driver, &[])?;
    let mut roots = root_store(&certs.ca)?;
    roots.add_parsable_certificates(crate::support::certs::load_certs(&rotated.ca)?);
    let mut client =
        rustls::ClientConfig::builder_with_provider(crate::support::certs::aes128_provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
    // Full handshakes only: a resumed session carries the certificate it was made with, so the
    // rotation case could not see the new one.
    client.resumption = rustls::client::Resumption::disabled();
    let client = Arc::new(client);
    let setup = Setup { tls, certs, client };
    let s = HealthRule::Strict;
    let rows = vec![
        run_case(
            &edge,
            "e",
            "300 unfinished TLS handshakes at max_connections 256",
            "health over HTTP and TLS, closed at handshake_timeout",
            s,
            |e| unfinished(e, &setup),
        ),
        run_case(
            &edge,
            "e",
            "ClientHello dripped 1 byte/s",
            "closed at 2 s",
            s,
            |_| drip(&setup),
        ),
        run_case(
            &edge,
            "e",
            "plain HTTP to the TLS port",
            "400 in plain text + close",
            s,
            |_| plain_to_tls(&setup),
        ),
        run_case(
            &edge,
            "e",
            "certificate rotated under load (SIGHUP)",
            "no handshake fails, new ones get the new serial",
            s,
            |e| rotate(e, &setup, &rotated),
        ),
        run_case(
            &edge,
            "e",
            "upstream certificate does not verify",
            "502",
            s,
            |_| unverified_upstream(&edge.traffic),
        ),
    ];
    edge.stop();
    drop((plain, bad));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// The group's edge config (see the module docs).
fn e_config(tls: SocketAddr, certs: &CertFiles, plain: SocketAddr, bad: SocketAddr) -> String {
    format!(
        "{}
[server.tls]
listen = \"{tls}\"
certificates = [{{ cert = \"{}\", key = \"{}\" }}]
alpn = [\"http/1.1\"]
handshake_timeout = {}
reload_check = \"none\"

[[upstreams]]
name = \"origin\"
endpoints = [\"{plain}\"]

[[upstreams]]
name = \"badtls\"
endpoints = [\"{bad}\"]
connect_timeout = \"1s\"
tls = true
tls_server_name = \"localhost\"
tls_ca = \"{}\"

[[routes]]
path_prefix = \"/badtls\"
upstream = \"badtls\"

[[routes]]
path_prefix = \"/\"
upstream = \"origin\"
",
        base_config("max_connections = 256"),
        certs.cert.display(),
        certs.key.display(),
        crate::support::edge_config::toml_duration(HANDSHAKE_TIMEOUT),
        certs.ca.display(),
    )
}

/// Whether `edge --check` accepts the TLS config; when not, prints the first line of its complaint
/// (so a config mistake is not mistaken for a missing feature).
fn edge_has_tls(bin: &Path, dir: &Path, toml: &str) -> bool {
    let file = dir.join("check.toml");
    if std::fs::write(&file, toml).is_err() {
        return false;
    }
    match std::process::Command::new(bin)
        .arg("--check")
        .arg("--config")
        .arg(&file)
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            println!(
                "  edge --check: {}",
                err.lines().next().unwrap_or("(no output)")
            );
            false
        }
        Err(e) => {
            println!("  edge --check: {e}");
            false
        }
    }
}

/// The first flight of a TLS client (a ClientHello record) for `localhost`.
fn client_hello(config: &Arc<rustls::ClientConfig>) -> io::Result<Vec<u8>> {
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(io::Error::other)?;
    let mut c = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
    let mut out = Vec::new();
    c.write_tls(&mut out)?;
    Ok(out)
}

/// One HTTPS `GET path` on a fresh connection, trusting the served CA.
fn tls_status(s: &Setup, path: &str) -> io::Result<u16> {
    tls_get(s.tls, &s.client, "localhost", path, 2 * SEC).map(|a| a.status)
}

/// 300 sockets: even ones send half a ClientHello, odd ones nothing. While they are held, health
/// over TLS must answer; every socket must be closed by edge within handshake_timeout + 1.5 s.
fn unfinished(e: &Edge, s: &Setup) -> io::Result<Check> {
    let hello = client_hello(&s.client)?;
    let t0 = Instant::now();
    let mut socks = Vec::new();
    for i in 0..300 {
        let Ok(mut c) = TcpStream::connect(s.tls) else {
            continue;
        };
        if i % 2 == 0 {
            let _ = c.write_all(&hello[..hello.len() / 2]);
        }
        socks.push(c);
    }
    let active = e.metric("edge_connections_active", &[]);
    let health = tls_status(s, "/_health");
    let limit = HANDSHAKE_TIMEOUT + Duration::from_millis(1500);
    let mut open_after = 0;
    for c in &mut socks {
        let left = limit
            .saturating_sub(t0.elapsed())
            .max(Duration::from_millis(10));
        if !closed_within(c, left) {
            open_after += 1;
        }
    }
    let mut k = Check::seen(format!(
        "{} opened, active {active} while held, TLS health {:?}, {open_after} still open at {}",
        socks.len(),
        health.as_ref().map_err(|e| e.to_string()),
        secs(limit)
    ));
    k.expect(matches!(health, Ok(200)), || {
        format!("TLS health: {health:?}")
    })
    .expect(open_after == 0, || {
        format!("{open_after} handshakes outlived handshake_timeout")
    })
    .expect(active <= 256.0, || "active over max_connections".into());
    Ok(k)
}

/// Whether the peer closes `c` (EOF or reset) within `limit`; reads and drops anything it sends.
fn closed_within(c: &mut TcpStream, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut b = [0u8; 4096];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || c.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match c.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// A ClientHello written one byte a second: edge must close it at handshake_timeout (not
/// restarted per byte).
fn drip(s: &Setup) -> io::Result<Check> {
    let hello = client_hello(&s.client)?;
    let mut c = TcpStream::connect(s.tls)?;
    c.set_nonblocking(true)?;
    let t0 = Instant::now();
    let mut sent = 0;
    let closed_at = loop {
        let mut b = [0u8; 512];
        match c.read(&mut b) {
            Ok(0) => break Some(t0.elapsed()),
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => break Some(t0.elapsed()),
            _ => {}
        }
        if t0.elapsed() > 6 * SEC {
            break None;
        }
        if sent < hello.len() && t0.elapsed() >= Duration::from_secs(sent as u64) {
            if c.write_all(&hello[sent..=sent]).is_err() {
                break Some(t0.elapsed());
            }
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut k = Check::seen(format!(
        "{sent} of {} bytes sent, closed at {}",
        hello.len(),
        closed_at.map_or("never (6 s)".into(), secs)
    ));
    k.expect(
        closed_at.is_some_and(|d| {
            within(
                d,
                HANDSHAKE_TIMEOUT - Duration::from_millis(100),
                HANDSHAKE_TIMEOUT + Duration::from_millis(1500),
            )
        }),
        || "not closed at handshake_timeout".into(),
    );
    Ok(k)
}

/// A plain HTTP request to the TLS listener: a plain-text `HTTP/1.1 400`, then close.
fn plain_to_tls(s: &Setup) -> io::Result<Check> {
    let mut c = Conn::open(s.tls)?;
    c.send(b"GET /_health HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let r = c.read_head(Instant::now() + 3 * SEC);
    let closed = c.wait_closed(3 * SEC);
    let status = r.as_ref().map(|r| r.status).map_err(|e| e.to_string());
    let mut k = Check::seen(format!(
        "{status:?}, closed {}",
        closed.map_or("no".into(), secs)
    ));
    k.expect(status == Ok(400), || {
        format!("expected 400, got {status:?}")
    })
    .expect(closed.is_some(), || "left open".into());
    Ok(k)
}

/// Handshakes in a loop on two threads while the certificate files are replaced with the rotated
/// certificate and edge gets SIGHUP: none may fail, and within 3 s new ones must see serial 2.
fn rotate(e: &Edge, s: &Setup, rotated: &CertFiles) -> io::Result<Check> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let last_serial = Arc::new(Mutex::new(Vec::new()));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            let (serial, err, client, addr) = (
                last_serial.clone(),
                first_error.clone(),
                s.client.clone(),
                s.tls,
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match tls_get(addr, &client, "localhost", "/fast", 2 * SEC) {
                        Ok(a) if a.status == 200 => {
                            ok.fetch_add(1, Ordering::SeqCst);
                            *serial.lock().unwrap_or_else(|p| p.into_inner()) = a.serial;
                        }
                        r => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            let mut f = err.lock().unwrap_or_else(|p| p.into_inner());
                            f.get_or_insert_with(|| format!("{:?}", r.map(|a| a.status)));
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(SEC);
    let before = ok.load(Ordering::SeqCst);
    for (from, to) in [(&rotated.key, &s.certs.key), (&rotated.cert, &s.certs.cert)] {
        std::fs::copy(from, to.with_extension("new"))?;
        std::fs::rename(to.with_extension("new"), to)?;
    }
    // SAFETY: kill(2) on the pid of our own child.
    unsafe { libc::kill(e.proc.pid() as i32, libc::SIGHUP) };
    let t0 = Instant::now();
    let mut seen_new = None;
    while t0.elapsed() < 3 * SEC && seen_new.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        if *last_serial.lock().unwrap_or_else(|p| p.into_inner()) == rotated.serial {
            seen_new = Some(t0.elapsed());
        }
    }
    std::thread::sleep(SEC / 2);
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        let _ = w.join();
    }
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    let mut k = Check::seen(format!(
        "{ok} handshakes ({before} before SIGHUP), {failed} failed, new serial after {}",
        seen_new.map_or("never".into(), secs)
    ));
    let err = first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    k.expect(failed == 0, || format!("handshakes failed: {err:?}"))
        .expect(seen_new.is_some(), || {
            "new handshakes kept the old certificate".into()
        })
        .expect(before > 0, || "no handshake before the rotation".into());
    Ok(k)
}

/// `GET /badtls`: the upstream's certificate is signed by another CA than `tls_ca`: 502.
fn unverified_upstream(traffic: &SocketAddr) -> io::Result<Check> {
    let mut c = Conn::open(*traffic)?;
    c.send(b"GET /badtls HTTP/1.1\r\nHost: m\r\n\r\n")?;
    let r = c.read_response(Instant::now() + 5 * SEC)?;
    let mut k = Check::seen(format!("{}", r.status));
    k.expect(r.status == 502, || {
        format!("expected 502, got {}", r.status)
    });
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::certs::client_config;

    #[test]
    fn the_config_has_both_upstreams_and_the_tls_listener() {
        let dir = std::env::temp_dir().join(format!("edge-bench-matrix-e-{}", std::process::id()));
        let certs = write_test_certs(&dir, "t", 1).unwrap();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let t = e_config(a, &certs, a, a);
        assert!(t.contains("[server.tls]\nlisten = \"127.0.0.1:1\""));
        assert!(t.contains("handshake_timeout = \"2000ms\""), "{t}");
        assert!(t.contains("tls = true") && t.contains("path_prefix = \"/badtls\""));
        assert!(client_hello(&client_config(&certs.ca, true, false).unwrap()).unwrap()[0] == 0x16);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
