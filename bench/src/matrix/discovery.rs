//! `edge-bench matrix` group f, upstream health and discovery (DESIGN.md "Fault matrix", "Upstream
//! health, discovery and balancing"): the health-check cases ([`super::health`]), an endpoint name whose
//! address changes under load (traffic moves, no request fails; names come from the debug build's test
//! resolver, `EDGE_TEST_HOSTS`, so this case runs on the `--faults-edge-bin` build), and the PROXY
//! protocol cases ([`super::proxy_header`]).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::base_config;
use super::runner::{run_case, Check, Edge, HealthRule, Row};
use crate::peers::origin::{spawn_origin, OriginHandle, OriginOptions};
use crate::support::probe;

/// Group f: upstream health and discovery.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_f(bin: &Path, faults_bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let mut rows = super::health::health_cases(bin, driver)?;
    rows.push(address_change(faults_bin, driver)?);
    rows.extend(super::proxy_header::proxy_cases(bin, driver)?);
    Ok(rows)
}

/// Two origins sharing one port, on 127.0.0.2 and 127.0.0.3.
fn two_origins() -> io::Result<(OriginHandle, OriginHandle)> {
    for _ in 0..50 {
        let a = spawn_origin(OriginOptions {
            listen: SocketAddr::from(([127, 0, 0, 2], 0)),
            ..OriginOptions::default()
        })?;
        let listen = SocketAddr::from(([127, 0, 0, 3], a.addr().port()));
        if let Ok(b) = spawn_origin(OriginOptions {
            listen,
            ..OriginOptions::default()
        }) {
            return Ok((a, b));
        }
    }
    Err(io::Error::other(
        "no port free on both 127.0.0.2 and 127.0.0.3",
    ))
}

/// Replaces the test resolver's file at once.
fn write_hosts(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// `app.matrix:PORT` resolves to 127.0.0.2, then to 127.0.0.3 while four clients keep sending; once
/// edge logs `upstream.resolved` the first origin stops: every request before and after gets 200.
fn address_change(bin: &Path, driver: &[String]) -> io::Result<Row> {
    let (a, b) = two_origins()?;
    let dir = std::env::temp_dir().join(format!("edge-matrix-f-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let hosts = dir.join("hosts");
    write_hosts(&hosts, "app.matrix 127.0.0.2\n")?;
    let port = a.addr().port();
    let cfg = format!(
        "{}\n[[upstreams]]\nname = \"app\"\nendpoints = [\"app.matrix:{port}\"]\nresolve = \"200ms\"\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"app\"\n",
        base_config("")
    );
    let envs = [("EDGE_TEST_HOSTS", hosts.to_str().unwrap_or_default())];
    let edge = Edge::start(bin, "matrix-f", &cfg, driver, &envs)?;
    let row = run_case(
        &edge,
        "f",
        "endpoint name whose address changes",
        "traffic moves, no request fails",
        HealthRule::Strict,
        |e| {
            let load = Load::start(e.traffic, 4);
            write_hosts(&hosts, "app.matrix 127.0.0.3\n")?;
            let until = Instant::now() + Duration::from_secs(10);
            while !e.proc.output().contains("upstream.resolved") && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let moved = e.proc.output().contains("upstream.resolved");
            let at_switch = load.ok();
            a.stop();
            // Requests after the old address is gone must reach the new one.
            while load.ok() < at_switch + 200 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let (ok, failed) = load.finish();
            let mut k = Check::seen(format!(
                "resolved: {moved}; {ok} ok ({} after the old origin stopped), {failed} failed",
                ok.saturating_sub(at_switch)
            ));
            k.expect(moved, || "no upstream.resolved within 10 s".into())
                .expect(failed == 0, || format!("{failed} requests failed"))
                .expect(ok >= at_switch + 200, || {
                    "too few requests after the switch".into()
                });
            Ok(k)
        },
    );
    edge.stop();
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(row)
}

/// Closed-loop clients, a fresh connection per request, counting answers.
pub(super) struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub(super) fn start(addr: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads = (0..clients)
            .map(|_| {
                let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match probe::get(addr, "/fast", Duration::from_secs(2)) {
                            Ok(r) if r.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                            _ => failed.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            threads,
        }
    }

    pub(super) fn ok(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    pub(super) fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}
