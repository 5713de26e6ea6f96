//! The `idle` part of `edge-bench scale`: resident memory against idle keep-alive connection
//! count, from a fresh proxy per target: (VmRSS with N idle − VmRSS before) / N, the counts opened
//! incrementally and clamped to what the fd limits hold.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::report::{
    clamp_count, client_capacity, edge_capacity, edge_max_connections_for, idle_table,
    nginx_idle_capacity, rss_per_conn, IdleRow, ScaleReport,
};
use super::target::{Proxy, ScaleTarget};
use super::{first_line, Setup};
use crate::peers::origin::LOAD_PATH;
use crate::support::probe;
use crate::support::tls_probe::{tls_open, TlsConn};
use std::sync::Arc;

/// Runs the part over every target and prints its table; a target that fails is recorded in
/// `failures` and the others still run.
pub(super) fn part(setup: &Setup, report: &mut ScaleReport, failures: &mut Vec<String>) {
    let mut counts = setup.args.idle.clone();
    counts.sort_unstable();
    counts.dedup();
    let modes: &[bool] = if setup.tls.is_some() {
        &[false, true]
    } else {
        &[false]
    };
    for &t in &setup.targets {
        for &tls in modes {
            match idle_run(setup, t, &counts, tls) {
                Ok(rows) => report.idle.extend(rows),
                Err(e) => {
                    eprintln!("{}: {e}", t.name());
                    failures.push(format!("{} idle: {}", t.name(), first_line(&e.to_string())));
                }
            }
        }
    }
    println!("\n### Resident memory against idle keep-alive connections\n");
    print!("{}", idle_table(&report.idle).render_markdown_numeric());
    println!(
        "\nper connection = (VmRSS held − VmRSS before) / connections; nginx = master + worker"
    );
}

/// Idle connections to use for `requested` on `target`, and why when it is fewer.
fn idle_count(
    target: ScaleTarget,
    requested: u64,
    max_conns: u64,
    hard: u64,
) -> (u64, Option<String>) {
    let client = (
        client_capacity(hard),
        "edge-bench holds one fd per connection under the fd hard limit",
    );
    let own = if target.is_edge() {
        (
            edge_capacity(max_conns, hard),
            "edge fits max_connections to its fd limit (2 x max + 256 fds) and evicts below 1/16 free",
        )
    } else {
        (
            nginx_idle_capacity(hard),
            "nginx's fd limit (the hard limit)",
        )
    };
    clamp_count(requested, &[client, own])
}

/// Opens one keep-alive connection that has served `GET path`.
fn open_one(addr: SocketAddr, host: &str, path: &str) -> io::Result<TcpStream> {
    let mut s = probe::connect(addr, Duration::from_secs(2))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    probe::send_get(&mut s, host, path, false)?;
    let resp = probe::read_response(&mut s, Instant::now() + Duration::from_secs(5))?;
    if resp.status != 200 {
        return Err(io::Error::other(format!("status {}", resp.status)));
    }
    Ok(s)
}

/// An idle connection edge-bench holds (never read: holding it keeps the socket open).
enum Held {
    Plain(#[allow(dead_code)] TcpStream),
    Tls(#[allow(dead_code)] Box<TlsConn>),
}

/// Opens one keep-alive TLS 1.3 connection that has served `GET path` (a full handshake).
fn open_one_tls(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    path: &str,
) -> io::Result<TlsConn> {
    let (answer, conn) = tls_open(addr, config, "localhost", path, Duration::from_secs(5))?;
    if answer.status != 200 {
        return Err(io::Error::other(format!("status {}", answer.status)));
    }
    Ok(conn)
}

/// A fresh proxy; RSS before, then with each count of idle connections held (opened
/// incrementally, each having served `GET /fast` through to the origin); with `tls`, over the
/// proxy's TLS listener (rows named `TARGET tls`).
fn idle_run(setup: &Setup, t: ScaleTarget, counts: &[u64], tls: bool) -> io::Result<Vec<IdleRow>> {
    let (args, hard) = (setup.args, setup.hard);
    let most = counts.iter().copied().max().unwrap_or(0);
    let max_conns = edge_max_connections_for(most);
    let mut p = Proxy::start(
        t,
        &setup.bin_of(t),
        setup.origin,
        &setup.proxy_list,
        (max_conns, hard),
        setup.tls.as_ref().filter(|_| tls),
    )?;
    let client = match (&setup.tls, tls) {
        (Some(c), true) => Some(crate::support::certs::client_config(&c.ca, false, false)?),
        _ => None,
    };
    let name = if tls {
        format!("{} tls", t.name())
    } else {
        t.name().to_string()
    };
    // Let start-up settle (first request served by wait_healthy, timers) before the baseline.
    std::thread::sleep(Duration::from_secs(1));
    let baseline = p.rss()?;
    let host = p.addr.to_string();
    let mut held: Vec<Held> = Vec::new();
    let mut rows = Vec::new();
    for &requested in counts {
        let (n, mut note) = idle_count(t, requested, max_conns, hard);
        let t0 = Instant::now();
        let mut first_err = None;
        while (held.len() as u64) < n {
            let opened = match (&client, p.tls_addr) {
                (Some(c), Some(a)) => open_one_tls(a, c, LOAD_PATH).map(|s| Held::Tls(Box::new(s))),
                _ => open_one(p.addr, &host, LOAD_PATH).map(Held::Plain),
            };
            match opened {
                Ok(s) => held.push(s),
                Err(e) => {
                    first_err = Some(e.to_string());
                    break;
                }
            }
        }
        if let Some(e) = first_err {
            note = Some(format!(
                "{requested} requested, {} reached: opening the next failed ({e})",
                held.len()
            ));
        }
        std::thread::sleep(args.settle);
        p.check_alive()?;
        let rss = p.rss()?;
        let reached = held.len() as u64;
        println!(
            "idle {:<18} {reached:>6} connections (opened in {:.1} s): VmRSS {} -> {} bytes",
            name,
            t0.elapsed().as_secs_f64(),
            baseline,
            rss
        );
        let _ = io::stdout().flush();
        rows.push(IdleRow {
            target: name.clone(),
            requested,
            reached,
            note: note.clone(),
            baseline_rss: baseline,
            rss,
            per_conn: rss_per_conn(baseline, rss, reached),
        });
        if note.is_some() && reached < requested {
            // Larger counts cannot get further.
            for &more in counts.iter().filter(|&&c| c > requested) {
                rows.push(IdleRow {
                    requested: more,
                    note: Some(format!(
                        "{more} requested, {reached} reached: {}",
                        note.as_deref().unwrap_or("")
                    )),
                    ..rows.last().cloned().expect("just pushed")
                });
            }
            break;
        }
    }
    drop(held);
    p.stop(Duration::from_secs(2));
    Ok(rows)
}
