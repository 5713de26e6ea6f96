//! Unit tests of the TLS keys of the configuration: parse errors name the key, `[server.tls]` and the
//! upstream `tls*` keys resolve (certificates loaded), the listener rules, the CLI override.

use super::*;
use crate::tls::testutil::{names_file, self_signed, TempDir};

/// A config with a plain listener on 8080, a `[server.tls]` on 8443 serving a fresh self-signed
/// certificate for `site.test` written into `dir`, `extra` TOML lines inside `[server.tls]`, one upstream
/// and one route.
fn with_tls(dir: &TempDir, extra: &str) -> String {
    let (c, k) = self_signed(&["site.test"]).write(dir, "site");
    format!(
        "[server]\nlisten = \"127.0.0.1:8080\"\n[server.tls]\nlisten = \"127.0.0.1:8443\"\n\
         certificates = [{{ cert = {:?}, key = {:?} }}]\n{extra}\n\
         [[upstreams]]\nname = \"o\"\nendpoints = [\"127.0.0.1:1\"]\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"o\"\n",
        c.display().to_string(),
        k.display().to_string()
    )
}

#[test]
fn server_tls_resolves_with_its_defaults() {
    let dir = TempDir::new("cfg-ok");
    let c = Config::parse(&with_tls(&dir, ""), "t.toml").unwrap();
    let tls = c.server.tls.as_ref().unwrap();
    assert_eq!(tls.min_version, TlsVersion::Tls12);
    assert_eq!(tls.alpn, [AlpnProtocol::H2, AlpnProtocol::Http11]);
    assert_eq!(tls.handshake_timeout, Dur::secs(10));
    assert!(tls.session_resumption && !tls.redirect_plain);
    assert_eq!(
        tls.reload_check,
        Limit(Some(std::time::Duration::from_secs(10)))
    );
    let r = c.resolve("t.toml").unwrap();
    assert!(r.plain_listener);
    assert_eq!(r.tls_listen, Some("127.0.0.1:8443".parse().unwrap()));
    let state = r.tls.as_ref().unwrap();
    assert_eq!(state.certificates[0].label, "site.test");
    let again = Config::parse(&c.to_toml(), "printed").unwrap();
    assert_eq!(again.to_toml(), c.to_toml());
}

#[test]
fn tls_parse_errors_name_the_key() {
    let dir = TempDir::new("cfg-parse");
    let e = Config::parse(&with_tls(&dir, "min_version = \"1.1\""), "t.toml").unwrap_err();
    assert_eq!(e.key, "server.tls.min_version", "{e}");
    let e = Config::parse(&with_tls(&dir, "alpn = [\"http/1.1\", \"h3\"]"), "t.toml").unwrap_err();
    assert_eq!(e.key, "server.tls.alpn[1]", "{e}");
    let e = Config::parse(&with_tls(&dir, "reload_check = \"soon\""), "t.toml").unwrap_err();
    assert_eq!(e.key, "server.tls.reload_check", "{e}");
    let e = Config::parse(&with_tls(&dir, "bogus = 1"), "t.toml").unwrap_err();
    assert!(
        e.key.starts_with("server.tls") && e.reason.contains("bogus"),
        "{e}"
    );
    let none = Config::parse(&with_tls(&dir, "reload_check = \"none\""), "t").unwrap();
    assert_eq!(none.server.tls.unwrap().reload_check, Limit(None));
}

#[test]
fn plain_listener_rules() {
    let dir = TempDir::new("cfg-listen");
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.server.listen = String::new();
    let errs = c.resolve("d").unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].key, "server.listen");
    let text = with_tls(&dir, "").replace("listen = \"127.0.0.1:8080\"", "listen = \"\"");
    let c = Config::parse(&text, "t").unwrap();
    let r = c.resolve("t").unwrap();
    assert!(!r.plain_listener);
    assert_eq!(Some(r.listen), r.tls_listen);
    let c = Config::parse(
        &text.replace("[[upstreams]]", "redirect_plain = true\n[[upstreams]]"),
        "t",
    )
    .unwrap();
    let keys: Vec<String> = c
        .resolve("t")
        .unwrap_err()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["server.tls.redirect_plain"]);
    let same = with_tls(&dir, "").replace("127.0.0.1:8443", "127.0.0.1:8080");
    let keys: Vec<String> = Config::parse(&same, "t")
        .unwrap()
        .resolve("t")
        .unwrap_err()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["server.tls.listen"]);
}

#[test]
fn certificate_errors_name_the_config_file_the_key_and_the_pem_file() {
    let dir = TempDir::new("cfg-cert");
    let mut c = Config::parse(&with_tls(&dir, ""), "t.toml").unwrap();
    let missing = dir.path("gone.pem");
    c.server.tls.as_mut().unwrap().certificates[0].cert = missing.display().to_string();
    let errs = c.resolve("t.toml").unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].file, "t.toml");
    assert_eq!(errs[0].key, "server.tls.certificates[0].cert");
    assert!(names_file(&errs[0].reason, &missing), "{}", errs[0]);
    assert!(errs[0].reason.contains("cannot read"), "{}", errs[0]);
}

#[test]
fn upstream_tls_keys_resolve_and_are_checked() {
    let dir = TempDir::new("cfg-up");
    let (ca, _) = self_signed(&["ca.test"]).write(&dir, "ca");
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    let text = format!(
        "tls = true\ntls_ca = {:?}\ntls_server_name = \"api.internal\"\n",
        ca.display().to_string()
    );
    let up = Config::parse(&DEFAULT_CONFIG.replace("tls = false ", &text), "d").unwrap();
    assert!(up.upstreams[0].tls && up.upstreams[0].tls_verify);
    let r = up.resolve("d").unwrap();
    let t = r.upstreams[0].tls.as_ref().unwrap();
    assert!(t.verify && t.server_name(0).is_some());
    assert!(r.upstreams[0].tls.is_some());
    c.upstreams[0].tls = true;
    c.upstreams[0].tls_ca = Some(ca.display().to_string());
    c.upstreams[0].tls_client_cert = Some(ca.display().to_string());
    let keys: Vec<String> = c
        .resolve("d")
        .unwrap_err()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["upstreams[0].tls_client_key"]);
    c.upstreams[0].tls = false;
    let keys: Vec<String> = c
        .resolve("d")
        .unwrap_err()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        keys,
        ["upstreams[0].tls_ca", "upstreams[0].tls_client_cert"]
    );
    assert!(Config::parse(DEFAULT_CONFIG, "d")
        .unwrap()
        .resolve("d")
        .unwrap()
        .upstreams[0]
        .tls
        .is_none());
}

#[test]
fn cli_tls_flags_make_a_server_tls_block() {
    let dir = TempDir::new("cfg-cli");
    let (c, k) = self_signed(&["cli.test"]).write(&dir, "cli");
    let mut cfg = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    assert!(cfg.server.tls.is_none());
    let o = Overrides {
        tls: Some(TlsOverride {
            listen: "127.0.0.1:0".into(),
            cert: c.display().to_string(),
            key: k.display().to_string(),
        }),
        ..Overrides::default()
    };
    cfg.apply(&o);
    let tls = cfg.server.tls.clone().unwrap();
    assert_eq!(
        tls,
        TlsServer::with_certificate(
            "127.0.0.1:0",
            &tls.certificates[0].cert,
            &tls.certificates[0].key
        )
    );
    assert_eq!(tls.certificates.len(), 1);
    assert!(cfg.resolve("d").unwrap().tls.is_some());
    // A bad key file is reported against the flag.
    let mut bad = o.clone();
    bad.tls.as_mut().unwrap().key = dir.path("none.key").display().to_string();
    cfg.apply(&bad);
    let errs = bad.attribute(cfg.resolve("d").unwrap_err());
    assert_eq!(errs[0].file, "<command line>");
    assert_eq!(errs[0].key, "--tls-key (server.tls.certificates[0].key)");
}
