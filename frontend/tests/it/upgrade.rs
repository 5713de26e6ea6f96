//! Zero-downtime binary upgrade (DESIGN.md "Drain and upgrade"): `edge --upgrade` takes every
//! listening socket over from the running process through `server.upgrade_socket`; with keep-alive and
//! new-connection load running across the handover, no request fails, the old process exits 0 and the
//! new one serves.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread,
    time::Duration,
};

use crate::harness::{wait_until, Cfg, Client, Driver, Edge, Origin, TempDir};

/// Counts of a load loop.
#[derive(Default)]
struct Load {
    ok: AtomicUsize,
    failures: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// Sends GET / until stopped: on one keep-alive connection (a new one after `Connection: close`), or on
/// a new connection per request.
fn load_loop(addr: std::net::SocketAddr, load: Arc<Load>, keep_alive: bool) {
    let fail = |why: String| load.failures.lock().unwrap().push(why);
    let mut conn: Option<Client> = None;
    while !load.stop.load(Ordering::Relaxed) {
        let c = match conn.take() {
            Some(c) => c,
            None => match Client::try_connect(addr) {
                Ok(c) => c,
                Err(e) => {
                    fail(format!("connect: {e}"));
                    continue;
                }
            },
        };
        let mut c = c;
        match c.try_get("/") {
            Some(r) if r.status == 200 && r.body == b"fine" => {
                load.ok.fetch_add(1, Ordering::Relaxed);
                if keep_alive && r.header("connection") != Some("close") {
                    conn = Some(c);
                }
            }
            Some(r) => fail(format!("status {} body {:?}", r.status, r.text())),
            None => fail(format!(
                "no response ({} connection)",
                if keep_alive { "keep-alive" } else { "new" }
            )),
        }
    }
}

fn upgrade_config(d: Driver, origin: std::net::SocketAddr, sock: &std::path::Path) -> Cfg {
    Cfg::new(d, origin)
        .workers(2)
        .server("upgrade_socket", sock.display().to_string())
        .timeout("drain", "10s")
}

both_drivers!(upgrade_under_load_fails_no_request, |d| {
    let origin = Origin::fixed(b"fine");
    let dir = TempDir::new();
    let sock = dir.0.join("upgrade.sock");
    let cfg = upgrade_config(d, origin.addr, &sock);
    let mut old = Edge::start(&cfg);

    let load = Arc::new(Load::default());
    let threads: Vec<_> = [true, true, false, false]
        .into_iter()
        .map(|keep_alive| {
            let (addr, load) = (old.addr, load.clone());
            thread::spawn(move || load_loop(addr, load, keep_alive))
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || load
        .ok
        .load(Ordering::Relaxed)
        > 200));

    let new = Edge::start_args(&cfg, &["--upgrade"]);
    assert_eq!(new.addr, old.addr, "the new process serves the same port");
    assert!(new
        .wait_log("upgrade.done", Duration::from_secs(5))
        .is_some());
    let line = old
        .wait_log("server.draining", Duration::from_secs(5))
        .expect("the old process drains");
    assert!(line.contains("upgrade"), "{line}");
    assert_eq!(
        old.wait_exit(Duration::from_secs(10)),
        Some(0),
        "the old process exits 0"
    );
    // Load goes on against the new process alone.
    let after_exit = load.ok.load(Ordering::Relaxed);
    assert!(wait_until(Duration::from_secs(5), || load
        .ok
        .load(Ordering::Relaxed)
        > after_exit + 200));
    load.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let failures = load.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed requests of {}: {:?}",
        failures.len(),
        load.ok.load(Ordering::Relaxed),
        &failures[..failures.len().min(10)]
    );
    // The new process serves, answers on admin, and can itself be upgraded later (it owns the socket).
    assert_eq!(Client::connect(new.addr).get("/").status, 200);
    assert!(new.metric("edge_requests_total", &[]) > 0.0);
    assert!(sock.exists());
});

both_drivers!(upgrade_without_a_running_edge_fails_cleanly, |d| {
    let origin = Origin::fixed(b"fine");
    let dir = TempDir::new();
    let cfg = upgrade_config(d, origin.addr, &dir.0.join("nobody.sock"));
    let path = dir.0.join("edge.toml");
    std::fs::write(&path, cfg.render()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edge"))
        .arg("--config")
        .arg(&path)
        .arg("--upgrade")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect to the running edge"), "{err}");
});
