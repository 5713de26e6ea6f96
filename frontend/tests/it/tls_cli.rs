//! TLS with outside tools and the CLI (DESIGN.md "TLS"): curl and `openssl s_client` verify edge's
//! certificate against the test CA and negotiate http/1.1; `edge --check` reports a key that does not
//! match its certificate, an expired certificate and a chain in the wrong order, naming the file;
//! `edge healthcheck` over https; P-384, Ed25519 and SEC1 (openssl-converted) keys load and serve.

use std::{path::Path, process::Command, time::Duration};

use crate::harness::{
    assert_exit, check_config, run_edge, Cfg, Driver, Edge, Origin, Site, TempDir,
};

const SEC: Duration = Duration::from_secs(1);

/// Whether `bin` runs here; prints why a test is skipped when it does not.
fn have(bin: &str) -> bool {
    let arg = if bin == "openssl" {
        "version"
    } else {
        "--version"
    };
    let ok = Command::new(bin).arg(arg).output().is_ok();
    if !ok {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("SKIP: {bin} is not installed\n").as_bytes(),
        );
    }
    ok
}

both_drivers!(curl_verifies_and_fetches_over_tls, |d| {
    if !have("curl") {
        return;
    }
    let origin = Origin::fixed(b"through curl");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let port = edge.tls_addr().port();
    let out = Command::new("curl")
        .args(["-sS", "--http1.1", "--max-time", "10", "--cacert"])
        .arg(&site.ca_file)
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .args(["-w", "\n%{http_code} %{http_version}"])
        .arg(format!("https://localhost:{port}/c"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "through curl\n200 1.1");
    assert_eq!(origin.last().header("x-forwarded-proto"), Some("https"));
});

both_drivers!(openssl_s_client_verifies_and_negotiates_http11, |d| {
    if !have("openssl") {
        return;
    }
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let edge = Edge::start(&site.cfg(d, origin.addr));
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(edge.tls_addr().to_string())
        .args(["-servername", "localhost", "-alpn", "http/1.1", "-CAfile"])
        .arg(&site.ca_file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A request with `Connection: close`; stdin stays open, so s_client exits when edge closes after
    // the response (bounded: killed after 15 s).
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(
        &mut stdin,
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let exited = crate::harness::wait_until(15 * SEC, || matches!(child.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = child.kill();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        exited,
        "s_client did not exit after edge's close: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(text.contains("ALPN protocol: http/1.1"), "{text}");
    assert!(text.contains("HTTP/1.1 200"), "{text}");
});

/// `edge --check` on `cfg`; (exit code, stderr).
fn check(cfg: &Cfg, dir: &TempDir) -> (Option<i32>, String) {
    let path = dir.0.join("check.toml");
    std::fs::write(&path, cfg.render()).unwrap();
    let out = check_config(&path);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_accepts_a_good_certificate_and_a_chain_leaf_first() {
    let site = Site::new();
    let chain = site.ca.chain("chained", &["localhost"]);
    let (c, k) = chain.write(&site.dir, "chain");
    let o = crate::harness::refused_addr();
    let cfg = Cfg::new(Driver::Epoll, o).tls_certs(&[(&site.cert, &site.key), (&c, &k)]);
    let (code, err) = check(&cfg, &site.dir);
    assert_eq!(code, Some(0), "{err}");
}

/// `edge --check` on a config serving `cert` with `key` exits 2, naming `named` (the bad file) and
/// saying `why`.
fn assert_check_refuses(site: &Site, cert: &Path, key: &Path, named: &Path, why: &str) {
    let o = crate::harness::refused_addr();
    let cfg = Cfg::new(Driver::Epoll, o).tls_certs(&[(cert, key)]);
    let (code, err) = check(&cfg, &site.dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&named.display().to_string()),
        "names {}: {err}",
        named.display()
    );
    assert!(err.contains(why), "{err}");
}

#[test]
fn check_reports_a_key_that_does_not_match_its_certificate() {
    let site = Site::new();
    let other = site.ca.leaf("other", &["localhost"]);
    let (_, other_key) = other.write(&site.dir, "other");
    assert_check_refuses(&site, &site.cert, &other_key, &other_key, "does not match");
}

#[test]
fn check_reports_an_expired_certificate() {
    let site = Site::new();
    let old = site.ca.expired_leaf("old", &["localhost"]);
    let (c, k) = old.write(&site.dir, "expired");
    assert_check_refuses(&site, &c, &k, &c, "expired");
}

#[test]
fn check_reports_a_chain_in_the_wrong_order() {
    let site = Site::new();
    let bad = site.ca.wrong_order_chain("reversed", &["localhost"]);
    let (c, k) = bad.write(&site.dir, "reversed");
    assert_check_refuses(&site, &c, &k, &c, "wrong order");
}

#[test]
fn healthcheck_subcommand_probes_a_tls_only_edge_over_https() {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let cfg = site.cfg(Driver::Epoll, origin.addr).server("listen", "");
    let edge = Edge::start(&cfg);
    let url = format!("https://{}/_health", edge.tls_addr());
    assert_exit(&run_edge(["healthcheck", "--url", &url]), 0);
    // Without --url: a config with no plain listener is probed on its TLS listener.
    let dir = TempDir::new();
    let path = dir.0.join("hc.toml");
    let fixed = cfg.tls("listen", edge.tls_addr());
    std::fs::write(&path, fixed.render()).unwrap();
    assert_exit(
        &run_edge([
            "healthcheck".as_ref(),
            "--config".as_ref(),
            path.as_os_str(),
        ]),
        0,
    );
}

both_drivers!(p384_ed25519_and_sec1_keys_are_served, |d| {
    let origin = Origin::fixed(b"ok");
    let site = Site::new();
    let p384 = site
        .ca
        .leaf_with("p384", &["p384.test"], &rcgen::PKCS_ECDSA_P384_SHA384);
    let ed = site.ca.leaf_with("ed", &["ed.test"], &rcgen::PKCS_ED25519);
    let (p_cert, p_key) = p384.write(&site.dir, "p384");
    let (e_cert, e_key) = ed.write(&site.dir, "ed");
    let mut certs = vec![
        (site.cert.clone(), site.key.clone()),
        (p_cert, p_key),
        (e_cert, e_key),
    ];
    // A leaf whose key is in SEC1 form ("EC PRIVATE KEY"), converted by openssl when it is here.
    if have("openssl") {
        let sec1_leaf = site.ca.leaf("sec1", &["sec1.test"]);
        let (c, k) = sec1_leaf.write(&site.dir, "sec1");
        let out = Command::new("openssl")
            .args(["ec", "-in"])
            .arg(&k)
            .arg("-out")
            .arg(&k)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&k).unwrap();
        assert!(text.contains("BEGIN EC PRIVATE KEY"), "not SEC1: {text}");
        certs.push((c, k));
        let edge = start_with(d, &origin, &certs);
        let any = crate::harness::TlsOpts::any_cert().build();
        let c = crate::harness::TlsConn::connect(edge.tls_addr(), &any, "sec1.test").unwrap();
        assert!(
            c.peer_cert() == sec1_leaf.der,
            "SEC1 key: its certificate is served"
        );
    }
    let edge = start_with(d, &origin, &certs);
    let verifying = site.client();
    for (name, want) in [("p384.test", &p384.der), ("ed.test", &ed.der)] {
        let mut c = crate::harness::TlsConn::connect(edge.tls_addr(), &verifying, name).unwrap();
        assert!(c.peer_cert() == *want, "{name}");
        assert_eq!(c.get("/").body, b"ok", "{name}");
    }
});

/// Edge serving `certs` (cert, key) in order.
fn start_with(
    d: Driver,
    origin: &Origin,
    certs: &[(std::path::PathBuf, std::path::PathBuf)],
) -> Edge {
    let pairs: Vec<(&std::path::Path, &std::path::Path)> = certs
        .iter()
        .map(|(c, k)| (c.as_path(), k.as_path()))
        .collect();
    Edge::start(&Cfg::new(d, origin.addr).tls_certs(&pairs))
}

#[test]
fn check_reports_a_missing_certificate_file_and_redirect_plain_without_a_plain_listener() {
    let site = Site::new();
    let missing = site.dir.0.join("nowhere.pem");
    let o = crate::harness::refused_addr();
    let cfg = Cfg::new(Driver::Epoll, o).tls_certs(&[(&missing, &site.key)]);
    let (code, err) = check(&cfg, &site.dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&missing.display().to_string()),
        "names the file: {err}"
    );
    assert!(
        err.contains("server.tls.certificates[0].cert"),
        "names the key: {err}"
    );

    let cfg = site
        .cfg(Driver::Epoll, o)
        .server("listen", "")
        .tls("redirect_plain", true);
    let (code, err) = check(&cfg, &site.dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("redirect_plain"), "{err}");

    // No [server.tls] and no plain listener: nothing to serve.
    let cfg = Cfg::new(Driver::Epoll, o).server("listen", "");
    let (code, err) = check(&cfg, &site.dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("server.listen"), "{err}");
}
