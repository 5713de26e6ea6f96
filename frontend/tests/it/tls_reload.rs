//! Certificate rotation (DESIGN.md "TLS"): at SIGHUP, and when `reload_check` sees a certificate or
//! key file change, new handshakes get the new certificate while open connections keep working; a
//! replacement that does not load keeps the old certificate and logs `tls.reload_failed`; a client
//! looping through rotations sees no failed request; a binary upgrade (`edge --upgrade`) hands the TLS
//! listener over with no failed TLS request; SIGTERM drains TLS connections like plain ones.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread,
    time::Duration,
};

use crate::harness::{wait_until, Edge, Origin, Pem, Site, TlsConn, TlsOpts};

const SEC: Duration = Duration::from_secs(1);
const SIGHUP: i32 = 1;

/// Replaces `path`'s contents with `text` atomically (a new file renamed over it).
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Replaces the site's certificate and key files with `pem` (key first, then certificate).
fn install(site: &Site, pem: &Pem) {
    replace(&site.key, &pem.key);
    replace(&site.cert, &pem.cert);
}

/// The leaf a new handshake with `localhost` is served.
fn served(edge: &Edge, site: &Site) -> Vec<u8> {
    TlsConn::connect(edge.tls_addr(), &site.client(), "localhost")
        .unwrap()
        .peer_cert()
}

/// Sends SIGHUP and waits for the `n`th `config.reloaded` line.
fn sighup_and_wait(edge: &Edge, n: usize) {
    edge.signal(SIGHUP);
    assert!(
        wait_until(5 * SEC, || edge.count_log("config.reloaded") >= n),
        "no reload #{n} after SIGHUP"
    );
}

both_drivers!(sighup_rotates_the_certificate_for_new_handshakes, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).tls("reload_check", "none"));
    let mut kept = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    assert_eq!(kept.get("/").body, b"ok");
    assert!(kept.peer_cert() == site.leaf.der);

    let next = site.ca.leaf("edge-test-2", &["localhost", "127.0.0.1"]);
    install(&site, &next);
    sighup_and_wait(&edge, 1);
    assert!(
        served(&edge, &site) == next.der,
        "a new handshake got the old certificate"
    );
    // The connection opened before the rotation keeps working, on its certificate.
    assert_eq!(kept.get("/after").body, b"ok");
    assert!(kept.peer_cert() == site.leaf.der);
    assert_eq!(edge.count_log("tls.reload_failed"), 0);
});

both_drivers!(
    reload_check_picks_up_a_changed_certificate_without_a_signal,
    |d| {
        let origin = Origin::fixed(b"ok");
        let site = Site::new();
        let edge = Edge::start(&site.cfg(d, origin.addr).tls("reload_check", "1s"));
        assert!(served(&edge, &site) == site.leaf.der);
        let next = site.ca.leaf("edge-test-2", &["localhost", "127.0.0.1"]);
        // The file stamps are taken before startup.ready, so this change is seen by a later poll.
        install(&site, &next);
        // Polled every second: within ~10 s a new handshake gets the new certificate.
        assert!(
            wait_until(10 * SEC, || served(&edge, &site) == next.der),
            "the changed files were not picked up; log:\n{}",
            edge.log().join("\n")
        );
        assert!(edge.wait_log("tls.files_changed", SEC).is_some());
    }
);

// Regression for a missed rotation: the watcher must compare against the files as they were when the
// running configuration was loaded. A change made after a SIGHUP reload but before the watcher's next
// poll was absorbed: the poll saw a new generation, re-read the stamps (already the changed files) and
// found "no change", so the new certificate was never loaded.
both_drivers!(
    a_change_soon_after_a_sighup_reload_is_still_picked_up,
    |d| {
        let origin = Origin::fixed(b"ok");
        let site = Site::new();
        let edge = Edge::start(&site.cfg(d, origin.addr).tls("reload_check", "5s"));
        sighup_and_wait(&edge, 1);
        let next = site.ca.leaf("edge-test-2", &["localhost", "127.0.0.1"]);
        install(&site, &next);
        // The next poll is at most 5 s away; allow two.
        assert!(
        wait_until(12 * SEC, || served(&edge, &site) == next.der),
        "a certificate changed right after a SIGHUP reload was never picked up (reload_check = 5s)"
    );
    }
);

both_drivers!(a_broken_replacement_keeps_the_old_certificate, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr).tls("reload_check", "none"));
    replace(
        &site.cert,
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n",
    );
    edge.signal(SIGHUP);
    let line = edge
        .wait_log("tls.reload_failed", 5 * SEC)
        .expect("a tls.reload_failed line");
    assert!(
        line.contains(&site.cert.display().to_string()),
        "names the file: {line}"
    );
    assert!(
        served(&edge, &site) == site.leaf.der,
        "the old certificate must stay"
    );

    // A key that does not match the new certificate is refused too.
    let next = site.ca.leaf("edge-test-2", &["localhost"]);
    let other = site.ca.leaf("edge-test-3", &["localhost"]);
    replace(&site.cert, &next.cert);
    replace(&site.key, &other.key);
    let before = edge.count_log("tls.reload_failed");
    edge.signal(SIGHUP);
    assert!(
        wait_until(5 * SEC, || edge.count_log("tls.reload_failed") > before),
        "no tls.reload_failed for a mismatched key"
    );
    assert!(
        served(&edge, &site) == site.leaf.der,
        "the old certificate must stay"
    );
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    assert_eq!(c.get("/").body, b"ok");
});

both_drivers!(rotations_under_load_fail_no_request, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Arc::new(Site::new());
    let edge = Edge::start(
        &site
            .cfg(d, origin.addr)
            .workers(2)
            .tls("reload_check", "none"),
    );
    let addr = edge.tls_addr();
    // Two loaders: one makes a new connection (full or resumed handshake) per request, one keeps a
    // connection alive and sends request after request on it.
    let load = TlsLoad::start(addr, &site, &[true, false]);
    assert!(
        wait_until(5 * SEC, || load.done() >= 20),
        "the loaders made no progress"
    );
    for i in 0..4 {
        let next = site
            .ca
            .leaf(&format!("rotated-{i}"), &["localhost", "127.0.0.1"]);
        install(&site, &next);
        sighup_and_wait(&edge, i + 1);
        let at = load.done();
        assert!(
            wait_until(5 * SEC, || load.done() >= at + 20),
            "requests stalled after rotation {i}"
        );
        assert!(served(&edge, &site) == next.der, "rotation {i} not served");
    }
    let (_, failures) = load.finish();
    assert!(
        failures.is_empty(),
        "{} failed requests during rotations: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert_eq!(edge.count_log("tls.reload_failed"), 0);
});

/// TLS load from client threads until [`TlsLoad::finish`]: one thread per entry of `fresh` (see
/// [`tls_load`]), all trusting the site's CA.
struct TlsLoad {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl TlsLoad {
    fn start(addr: std::net::SocketAddr, site: &Site, fresh: &[bool]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::<String>::new()));
        let threads = fresh
            .iter()
            .map(|&fresh| {
                let (stop, done, failures) = (stop.clone(), done.clone(), failures.clone());
                let cfg = TlsOpts::trusting(site.ca.cert_der()).build();
                thread::spawn(move || tls_load(addr, cfg, fresh, stop, done, failures))
            })
            .collect();
        TlsLoad {
            stop,
            done,
            failures,
            threads,
        }
    }

    /// Requests answered so far.
    fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    /// Stops and joins the threads: (requests answered, failures described).
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.threads) {
            t.join().unwrap();
        }
        let failures = std::mem::take(&mut *self.failures.lock().unwrap());
        (self.done(), failures)
    }
}

/// A TLS load loop until `stop`: a new connection per request (`fresh`) or one kept alive (a new one
/// after `Connection: close`); counts successes in `done` and describes failures in `failures`.
fn tls_load(
    addr: std::net::SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    fresh: bool,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
) {
    let mut kept: Option<TlsConn> = None;
    while !stop.load(Ordering::SeqCst) {
        let mut c = match kept.take() {
            Some(c) => c,
            None => match TlsConn::connect(addr, &cfg, "localhost") {
                Ok(c) => c,
                Err(e) => {
                    failures.lock().unwrap().push(format!("handshake: {e}"));
                    continue;
                }
            },
        };
        match c.try_get("/") {
            Some(r) if r.status == 200 && r.body == b"ok" => {
                done.fetch_add(1, Ordering::SeqCst);
                if !fresh && r.header("connection") != Some("close") {
                    kept = Some(c);
                }
            }
            other => failures.lock().unwrap().push(format!(
                "{} connection: {other:?}",
                if fresh { "new" } else { "kept-alive" }
            )),
        }
    }
}

both_drivers!(a_binary_upgrade_hands_the_tls_listener_over, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let sock = site.dir.0.join("upgrade.sock");
    let cfg = site
        .cfg(d, origin.addr)
        .workers(2)
        .server("upgrade_socket", sock.display().to_string())
        .timeout("drain", "10s");
    let mut old = Edge::start(&cfg);
    let addr = old.tls_addr();
    let load = TlsLoad::start(addr, &site, &[true, true, false, false]);
    assert!(wait_until(5 * SEC, || load.done() > 100));

    let new = Edge::start_args(&cfg, &["--upgrade"]);
    assert_eq!(new.tls, old.tls, "the new process serves the same TLS port");
    assert!(new.wait_log("upgrade.done", 5 * SEC).is_some());
    assert_eq!(old.wait_exit(10 * SEC), Some(0), "the old process exits 0");
    let after_exit = load.done();
    assert!(
        wait_until(5 * SEC, || load.done() > after_exit + 100),
        "TLS load made no progress against the new process"
    );
    let (done, failures) = load.finish();
    assert!(
        failures.is_empty(),
        "{} failed TLS requests of {}: {:?}",
        failures.len(),
        done,
        &failures[..failures.len().min(5)]
    );
    assert!(
        new.metric("edge_tls_handshakes_total", &[]) > 0.0,
        "the new process handshook nothing"
    );
});

both_drivers!(sigterm_drains_tls_connections_then_exits_0, |d| {
    let origin = Origin::start(|req| match req.target.as_str() {
        "/slow" => crate::harness::Reply::ok(b"slow").delayed(2 * SEC),
        _ => crate::harness::Reply::ok(b"fast"),
    });
    let site = Site::new();
    let mut edge = Edge::start(
        &site
            .cfg(d, origin.addr)
            .timeout("drain_delay", "1s")
            .timeout("drain", "10s"),
    );
    let addr = edge.tls_addr();
    let mut idle = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
    assert_eq!(idle.get("/fast").body, b"fast");
    let mut slow = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
    slow.send(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert!(origin.wait_until(5 * SEC, |o| o.seen_count() >= 2));
    edge.signal(15);
    assert!(edge.wait_log("server.draining", 2 * SEC).is_some());
    // During drain_delay: TLS health is 503, requests are served with Connection: close.
    let mut probe = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
    assert_eq!(probe.get("/_health").status, 503);
    let mut c = TlsConn::connect(addr, &site.client(), "localhost").unwrap();
    let r = c.get("/fast");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    // The in-flight request finishes; the idle kept-alive connection is closed.
    let r = slow.read_response().expect("the in-flight TLS response");
    assert_eq!(r.body, b"slow");
    assert!(
        idle.time_until_closed(5 * SEC).is_some(),
        "idle TLS connection left open"
    );
    assert_eq!(edge.wait_exit(10 * SEC), Some(0));
});

both_drivers!(a_reload_that_moves_the_tls_listener_is_rejected, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let cfg = site.cfg(d, origin.addr);
    let edge = Edge::start(&cfg);
    let elsewhere = crate::harness::refused_addr();
    edge.rewrite_config(&cfg.clone().tls("listen", elsewhere));
    edge.signal(SIGHUP);
    let line = edge
        .wait_log("config.rejected", 5 * SEC)
        .expect("config.rejected logged");
    assert!(line.contains("server.tls.listen"), "names the key: {line}");
    let mut c = TlsConn::connect(edge.tls_addr(), &site.client(), "localhost").unwrap();
    assert_eq!(c.get("/").body, b"ok", "the TLS listener keeps serving");
    assert!(
        std::net::TcpStream::connect(elsewhere).is_err(),
        "a listener moved to {elsewhere}"
    );
});
