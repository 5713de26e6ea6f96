//! Config reload on SIGHUP (DESIGN.md "Configuration"): a changed route applies to the next
//! request, on new and kept-alive connections; a broken file or a listener change is rejected with a
//! `config.rejected` line naming file, key and reason, and traffic goes on with the old configuration.
//! With `server.config_check`, a changed file is reloaded without a signal, a ConfigMap-style symlink
//! swap included.

use std::{net::SocketAddr, time::Duration};

use crate::harness::{wait_until, Cfg, Client, Driver, Edge, Origin, Route, Upstream};

const SIGHUP: i32 = 1;

/// The harness config with origin `a`, plus an upstream "b" routed at `/b` when `b` is given.
fn with_b(d: Driver, a: SocketAddr, b: Option<SocketAddr>) -> Cfg {
    let cfg = Cfg::new(d, a);
    match b {
        Some(b) => cfg
            .add_upstream(Upstream::new("b", &[b]))
            .add_route(Route::new("/b", "b")),
        None => cfg,
    }
}

both_drivers!(
    sighup_with_a_changed_route_applies_to_the_next_request,
    |d| {
        let a = Origin::fixed(b"from-a");
        let b = Origin::fixed(b"from-b");
        let edge = Edge::start(&with_b(d, a.addr, None));
        let mut kept = Client::connect(edge.addr);
        assert_eq!(kept.get("/b/x").body, b"from-a");

        edge.rewrite_config(&with_b(d, a.addr, Some(b.addr)));
        edge.signal(SIGHUP);
        let line = edge
            .wait_log("config.reloaded", Duration::from_secs(5))
            .expect("config.reloaded logged");
        assert!(line.contains("generation=2"), "{line}");
        // The kept-alive connection's next request uses the new route, and so does a new connection.
        assert_eq!(kept.get("/b/x").body, b"from-b");
        assert_eq!(kept.get("/other").body, b"from-a");
        assert_eq!(Client::connect(edge.addr).get("/b/y").body, b"from-b");
        assert_eq!(edge.count_log("config.rejected"), 0);
    }
);

both_drivers!(a_broken_file_is_rejected_and_traffic_goes_on, |d| {
    let a = Origin::fixed(b"from-a");
    let b = Origin::fixed(b"from-b");
    let edge = Edge::start(&with_b(d, a.addr, None));
    let mut kept = Client::connect(edge.addr);
    assert_eq!(kept.get("/b/x").body, b"from-a");
    let file = edge.config_path().display().to_string();

    // A file that does not parse.
    edge.rewrite_config_text("[server\nlisten = ");
    edge.signal(SIGHUP);
    let line = edge
        .wait_log("config.rejected", Duration::from_secs(5))
        .expect("config.rejected logged");
    assert!(line.contains(&file), "names the file: {line}");
    assert_eq!(kept.get("/b/x").body, b"from-a");

    // A file that parses but does not validate: the key is named; the new route does not apply.
    let bad = with_b(d, a.addr, Some(b.addr)).add_route(Route::new("/c", "nope"));
    edge.rewrite_config(&bad);
    edge.signal(SIGHUP);
    let line = edge
        .wait_log_all(
            &["config.rejected", "routes[2].upstream"],
            Duration::from_secs(5),
        )
        .expect("config.rejected with the key");
    assert!(line.contains("nope"), "gives the reason: {line}");
    assert!(line.contains("(line "), "gives the line: {line}");
    assert_eq!(kept.get("/b/x").body, b"from-a");

    // A value refused after parsing (a zero idle timeout): file, key and line.
    edge.rewrite_config(&with_b(d, a.addr, None).timeout("idle", "0s"));
    edge.signal(SIGHUP);
    let line = edge
        .wait_log_all(
            &["config.rejected", "server.timeouts.idle"],
            Duration::from_secs(5),
        )
        .expect("config.rejected with the key");
    assert!(line.contains(&file), "names the file: {line}");
    assert!(line.contains("greater than zero (line "), "{line}");
    assert_eq!(kept.get("/b/x").body, b"from-a");
    assert_eq!(Client::connect(edge.addr).get("/b/x").body, b"from-a");
    assert_eq!(edge.count_log("config.reloaded"), 0);

    // A good file afterwards still reloads.
    edge.rewrite_config(&with_b(d, a.addr, Some(b.addr)));
    edge.signal(SIGHUP);
    assert!(edge
        .wait_log("config.reloaded", Duration::from_secs(5))
        .is_some());
    assert_eq!(kept.get("/b/x").body, b"from-b");
});

both_drivers!(a_listener_or_worker_change_is_refused, |d| {
    let a = Origin::fixed(b"from-a");
    let b = Origin::fixed(b"from-b");
    let edge = Edge::start(&with_b(d, a.addr, None));
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = held.local_addr().unwrap();
    let changed = with_b(d, a.addr, Some(b.addr)).listen(other).workers(2);
    edge.rewrite_config(&changed);
    edge.signal(SIGHUP);
    let line = edge
        .wait_log_all(
            &["config.rejected", "server.listen"],
            Duration::from_secs(5),
        )
        .expect("listener change refused");
    assert!(line.contains("restart"), "says why: {line}");
    assert!(edge
        .wait_log_all(
            &["config.rejected", "server.workers"],
            Duration::from_secs(5)
        )
        .is_some());
    // The old configuration stays whole: the route added in the same file does not apply.
    assert_eq!(Client::connect(edge.addr).get("/b/x").body, b"from-a");
    assert_eq!(edge.count_log("config.reloaded"), 0);
});

/// `with_b` with the file checked every 100 ms (`server.config_check`).
fn watched(d: Driver, a: SocketAddr, b: Option<SocketAddr>) -> Cfg {
    with_b(d, a, b).server("config_check", "100ms")
}

/// Waits (at most 5 s) until edge logged `n` lines containing `needle`.
fn wait_count(edge: &Edge, needle: &str, n: usize) -> bool {
    wait_until(Duration::from_secs(5), || edge.count_log(needle) >= n)
}

both_drivers!(a_changed_config_file_is_reloaded_without_a_signal, |d| {
    let a = Origin::fixed(b"from-a");
    let b = Origin::fixed(b"from-b");
    let edge = Edge::start(&watched(d, a.addr, None));
    let mut kept = Client::connect(edge.addr);
    assert_eq!(kept.get("/b/x").body, b"from-a");

    edge.rewrite_config(&watched(d, a.addr, Some(b.addr)));
    let line = edge
        .wait_log("config.reloaded", Duration::from_secs(5))
        .expect("the change is reloaded within config_check");
    assert!(line.contains("generation=2"), "{line}");
    assert_eq!(kept.get("/b/x").body, b"from-b");

    // A broken file is refused once (as at SIGHUP) and the running configuration stays.
    edge.rewrite_config_text("[server\nlisten = ");
    assert!(wait_count(&edge, "config.rejected", 1));
    assert_eq!(kept.get("/b/x").body, b"from-b");
    // Fixed again: reloaded.
    edge.rewrite_config(&watched(d, a.addr, None));
    assert!(wait_count(&edge, "config.reloaded", 2));
    assert_eq!(kept.get("/b/x").body, b"from-a");
    assert_eq!(
        edge.count_log("config.rejected"),
        1,
        "the broken file was read once"
    );
});

/// How a Kubernetes ConfigMap volume updates a file: `edge.toml` is a symlink to `..data/edge.toml`,
/// `..data` a symlink to a timestamped directory; an update writes a new directory and renames a new
/// `..data` symlink over the old one.
fn configmap_swap(dir: &std::path::Path, generation: &str, text: &str) {
    let version = dir.join(generation);
    std::fs::create_dir(&version).unwrap();
    std::fs::write(version.join("edge.toml"), text).unwrap();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(generation, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

both_drivers!(a_configmap_symlink_swap_is_reloaded, |d| {
    let a = Origin::fixed(b"from-a");
    let b = Origin::fixed(b"from-b");
    let edge = Edge::start(&watched(d, a.addr, None));
    let dir = edge.config_path().parent().unwrap().to_path_buf();
    // Turn the config file into a ConfigMap's symlinks (same content: one reload of it).
    configmap_swap(&dir, "..2026_01", &watched(d, a.addr, None).render());
    let link = dir.join("edge.toml.link");
    std::os::unix::fs::symlink("..data/edge.toml", &link).unwrap();
    std::fs::rename(&link, edge.config_path()).unwrap();
    assert!(wait_count(&edge, "config.reloaded", 1));
    assert_eq!(Client::connect(edge.addr).get("/b/x").body, b"from-a");

    // The update: the route to b appears within config_check.
    configmap_swap(
        &dir,
        "..2026_02",
        &watched(d, a.addr, Some(b.addr)).render(),
    );
    assert!(wait_count(&edge, "config.reloaded", 2));
    assert_eq!(Client::connect(edge.addr).get("/b/x").body, b"from-b");
    assert_eq!(edge.count_log("config.rejected"), 0);
});

both_drivers!(a_config_file_changed_under_load_fails_no_request, |d| {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};
    let a = Origin::fixed(b"from-a");
    let b = Origin::fixed(b"from-b");
    let edge = Edge::start(&watched(d, a.addr, None));
    let addr = edge.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let seen_b = Arc::new(Mutex::new(None::<std::time::Instant>));
    // Four keep-alive clients send back to back through the change: every answer must be a 200.
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, served, seen_b) = (stop.clone(), served.clone(), seen_b.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut failed = Vec::new();
                while !stop.load(Relaxed) {
                    match c.try_get("/b/x") {
                        Some(r) if r.status == 200 => {
                            served.fetch_add(1, Relaxed);
                            if r.body == b"from-b" {
                                seen_b
                                    .lock()
                                    .unwrap()
                                    .get_or_insert_with(std::time::Instant::now);
                            }
                            if r.header("connection") == Some("close") {
                                c = Client::connect(addr);
                            }
                        }
                        other => failed.push(format!("{:?}", other.map(|r| r.status))),
                    }
                }
                failed
            })
        })
        .collect();
    let under_load = |n: u64| wait_until(Duration::from_secs(10), || served.load(Relaxed) >= n);
    assert!(under_load(200), "load is running before the change");
    let changed = std::time::Instant::now();
    edge.rewrite_config(&watched(d, a.addr, Some(b.addr)));
    assert!(
        wait_until(Duration::from_secs(5), || seen_b.lock().unwrap().is_some()),
        "the new route answers"
    );
    let live_after = seen_b.lock().unwrap().unwrap() - changed;
    // config_check is 100 ms: live within it plus 1 s.
    assert!(
        live_after < Duration::from_millis(1100),
        "new route live after {live_after:?}"
    );
    let after = served.load(Relaxed);
    assert!(under_load(after + 200), "load goes on after the change");
    stop.store(true, Relaxed);
    let failed: Vec<String> = load.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert!(failed.is_empty(), "failed requests: {failed:?}");
});
