//! Unit tests of certificate loading and validation, SNI choice (directly and through an in-memory
//! rustls handshake), the server and upstream client configurations, and change polling.

use std::{error::Error, path::Path, sync::Arc};

use rustls::{pki_types::ServerName, ClientConfig, ClientConnection, ServerConnection};

use super::{testutil::*, *};
use crate::config::{Config, TlsServer, Upstream, DEFAULT_CONFIG};

type Res = Result<(), Box<dyn Error>>;

fn load(cert: &Path, key: &Path) -> Result<LoadedCert, CertError> {
    load_cert_and_key(cert, key, &provider())
}

/// Drives a handshake between `client` and `server` in memory.
fn handshake(client: &mut ClientConnection, server: &mut ServerConnection) -> Res {
    for _ in 0..32 {
        let mut buf = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut buf)?;
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            server.read_tls(&mut rd)?;
            server.process_new_packets()?;
        }
        buf.clear();
        while server.wants_write() {
            server.write_tls(&mut buf)?;
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            client.read_tls(&mut rd)?;
            client.process_new_packets()?;
        }
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
    }
    Err("handshake made no progress".into())
}

/// A client that accepts any certificate (to see which one the server picked).
fn any_cert_client(sni: bool) -> Arc<ClientConfig> {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider())))
        .with_no_client_auth();
    c.enable_sni = sni;
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(c)
}

/// Three certificates: a default, an exact name, a wildcard; and the `[server.tls]` serving them.
fn three_certs(dir: &TempDir) -> (TlsServer, Vec<String>) {
    let mut tls = TlsServer::with_certificate("127.0.0.1:0", "", "");
    tls.certificates.clear();
    let mut pems = Vec::new();
    for (stem, names) in [
        ("default", &["default.test"][..]),
        ("exact", &["a.example.com"][..]),
        ("wild", &["*.example.com"][..]),
    ] {
        let pem = self_signed(names);
        let (c, k) = pem.write(dir, stem);
        tls.certificates.push(crate::config::TlsCertificate {
            cert: c.display().to_string(),
            key: k.display().to_string(),
        });
        pems.push(pem.cert);
    }
    (tls, pems)
}

#[test]
fn sni_picks_exact_then_wildcard_then_the_first() {
    let dir = TempDir::new("sni");
    let (tls, _) = three_certs(&dir);
    let loaded: Vec<LoadedCert> = tls
        .certificates
        .iter()
        .map(|c| load(Path::new(&c.cert), Path::new(&c.key)).expect("loads"))
        .collect();
    let r = SniResolver::new(&loaded);
    assert_eq!(r.pick(Some("a.example.com")), Some(1));
    assert_eq!(r.pick(Some("A.Example.COM")), Some(1), "case-insensitive");
    assert_eq!(r.pick(Some("b.example.com")), Some(2), "wildcard");
    assert_eq!(r.pick(Some("x.b.example.com")), Some(0), "one label only");
    assert_eq!(r.pick(Some("example.com")), Some(0));
    assert_eq!(r.pick(Some("default.test")), Some(0));
    assert_eq!(r.pick(Some("other.test")), Some(0));
    assert_eq!(r.pick(None), Some(0), "no SNI: the default");
    assert_eq!(r.pick(Some(&"a".repeat(300))), Some(0));
    assert_eq!(SniResolver::new(&[]).pick(Some("a")), None);
}

#[test]
fn handshake_serves_the_certificate_sni_picks() -> Res {
    let dir = TempDir::new("sni-hs");
    let (tls, pems) = three_certs(&dir);
    let state = server_config(&tls, "t.toml").map_err(|e| format!("{e:?}"))?;
    assert_eq!(state.certificates[1].label, "a.example.com");
    let der = |pem: &str| read_chain_text(&dir, pem);
    for (sni, want) in [
        (Some("a.example.com"), 1),
        (Some("B.example.com"), 2),
        (Some("unknown.test"), 0),
        (None, 0),
    ] {
        let client_config = any_cert_client(sni.is_some());
        let name = ServerName::try_from(sni.unwrap_or("ignored.test"))?.to_owned();
        let mut client = ClientConnection::new(client_config, name)?;
        let mut server = ServerConnection::new(state.config.clone())?;
        handshake(&mut client, &mut server)?;
        let got = client.peer_certificates().ok_or("no certificate")?;
        assert_eq!(got[0], der(&pems[want]), "SNI {sni:?}");
        // Both offered: the server's order (`alpn`, h2 first) decides.
        assert_eq!(client.alpn_protocol(), Some(&b"h2"[..]));
    }
    Ok(())
}

fn read_chain_text(dir: &TempDir, pem: &str) -> rustls::pki_types::CertificateDer<'static> {
    let p = dir.write("one.pem", pem);
    read_chain(&p).expect("chain").remove(0)
}

#[test]
fn loaded_certificate_has_names_label_and_expiry() {
    let dir = TempDir::new("meta");
    let (c, k) = self_signed(&["Site.Example", "www.site.example"]).write(&dir, "s");
    let l = load(&c, &k).expect("loads");
    assert_eq!(l.names, ["site.example", "www.site.example"]);
    assert_eq!(l.label, "site.example");
    assert!(l.not_after > 1_700_000_000, "{}", l.not_after);
    assert_eq!(l.cert_file, c);
}

#[test]
fn a_key_that_does_not_match_names_the_key_file() {
    let dir = TempDir::new("mismatch");
    let (c, _) = self_signed(&["a.test"]).write(&dir, "a");
    let (_, other_key) = self_signed(&["b.test"]).write(&dir, "b");
    let e = load(&c, &other_key).expect_err("mismatch");
    assert_eq!(e.file, other_key);
    assert!(e.in_key);
    assert!(e.reason.contains("does not match the certificate"), "{e}");
    assert!(names_file(&e.to_string(), &other_key), "{e}");
}

#[test]
fn an_expired_certificate_names_the_cert_file() {
    let dir = TempDir::new("expired");
    let (c, k) = expired(&["old.test"]).write(&dir, "old");
    let e = load(&c, &k).expect_err("expired");
    assert_eq!(e.file, c);
    assert!(e.reason.contains("expired"), "{e}");
    assert!(names_file(&e.to_string(), &c), "{e}");
}

#[test]
fn a_chain_in_the_wrong_order_is_refused_and_the_right_order_loads() {
    let dir = TempDir::new("order");
    let ca = TestCa::new();
    let leaf = ca.leaf(&["leaf.test"]);
    let key = dir.write("leaf.key", &leaf.key);
    let right = dir.write("right.pem", &format!("{}{}", leaf.cert, ca.cert));
    let wrong = dir.write("wrong.pem", &format!("{}{}", ca.cert, leaf.cert));
    let l = load(&right, &key).expect("leaf first loads");
    assert_eq!(l.certified.cert.len(), 2);
    let e = load(&wrong, &key).expect_err("CA first");
    assert_eq!(e.file, wrong);
    assert!(e.reason.contains("wrong order"), "{e}");
}

#[test]
fn missing_or_empty_files_name_the_file() {
    let dir = TempDir::new("missing");
    let (c, k) = self_signed(&["a.test"]).write(&dir, "a");
    let nowhere = dir.path("nowhere.pem");
    let e = load(&nowhere, &k).expect_err("missing cert");
    assert_eq!(e.file, nowhere);
    assert!(e.reason.starts_with("cannot read"), "{e}");
    let e = load(&c, &nowhere).expect_err("missing key");
    assert!(e.in_key && e.file == nowhere, "{e}");
    let empty = dir.write("empty.pem", "");
    let e = load(&empty, &k).expect_err("no certificate");
    assert!(e.reason.contains("no certificate"), "{e}");
    let e = load(&c, &c).expect_err("no key");
    assert!(e.in_key && e.reason.contains("no private key"), "{e}");
}

#[test]
fn server_config_errors_name_the_config_key_and_the_pem_file() {
    let dir = TempDir::new("srv-err");
    let (c, _) = self_signed(&["a.test"]).write(&dir, "a");
    let missing = dir.path("missing.key");
    let tls = TlsServer::with_certificate(
        "127.0.0.1:0",
        &c.display().to_string(),
        &missing.display().to_string(),
    );
    let errs = server_config(&tls, "edge.toml").expect_err("missing key");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].file, "edge.toml");
    assert_eq!(errs[0].key, "server.tls.certificates[0].key");
    assert!(names_file(&errs[0].reason, &missing), "{}", errs[0]);
}

#[test]
fn resumption_off_has_no_ticketer_and_tls13_only_refuses_tls12() -> Res {
    let dir = TempDir::new("resume");
    let (c, k) = self_signed(&["a.test"]).write(&dir, "a");
    let mut tls = TlsServer::with_certificate(
        "127.0.0.1:0",
        c.to_str().ok_or("path")?,
        k.to_str().ok_or("path")?,
    );
    let on = server_config(&tls, "t").map_err(|e| format!("{e:?}"))?;
    assert!(on.config.ticketer.enabled());
    let again = server_config(&tls, "t").map_err(|e| format!("{e:?}"))?;
    assert!(
        Arc::ptr_eq(&on.config.ticketer, &again.config.ticketer),
        "one ticketer per process"
    );
    assert_eq!(on.config.max_early_data_size, 0);
    tls.session_resumption = false;
    tls.min_version = crate::config::TlsVersion::Tls13;
    let off = server_config(&tls, "t").map_err(|e| format!("{e:?}"))?;
    assert!(!off.config.ticketer.enabled());
    let tls12_client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS12])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider())))
        .with_no_client_auth();
    let mut client =
        ClientConnection::new(Arc::new(tls12_client), ServerName::try_from("a.test")?)?;
    let mut server = ServerConnection::new(off.config.clone())?;
    assert!(handshake(&mut client, &mut server).is_err());
    Ok(())
}

/// An upstream with `tls = true` to `endpoints`.
fn tls_upstream(endpoints: &[&str]) -> Upstream {
    let mut u = Upstream::with_endpoints("o", endpoints.iter().map(|e| e.to_string()).collect());
    u.tls = true;
    u
}

/// A server config serving `pem` (the chain text) with key `key`.
fn serving(dir: &TempDir, chain: &str, key: &str) -> Arc<rustls::ServerConfig> {
    let c = dir.write("srv.pem", chain);
    let k = dir.write("srv.key", key);
    let tls = TlsServer::with_certificate(
        "127.0.0.1:0",
        c.to_str().expect("utf-8"),
        k.to_str().expect("utf-8"),
    );
    server_config(&tls, "t").expect("server config").config
}

#[test]
fn client_config_trusts_tls_ca_and_verifies_the_name() -> Res {
    let dir = TempDir::new("client-ca");
    let ca = TestCa::new();
    let leaf = ca.leaf(&["api.internal"]);
    let server = serving(&dir, &format!("{}{}", leaf.cert, ca.cert), &leaf.key);
    let mut u = tls_upstream(&["127.0.0.1:443"]);
    u.tls_ca = Some(dir.write("ca.pem", &ca.cert).display().to_string());
    u.tls_server_name = Some("api.internal".into());
    let t = upstream_tls(0, &u, &mut SystemRoots::default()).map_err(|e| format!("{e:?}"))?;
    assert!(t.verify);
    assert_eq!(t.config.alpn_protocols, [b"http/1.1".to_vec()]);
    let name = t.server_name(0).ok_or("name")?.clone();
    assert_eq!(name, ServerName::try_from("api.internal")?);
    let mut client = ClientConnection::new(t.config.clone(), name)?;
    handshake(&mut client, &mut ServerConnection::new(server.clone())?)?;
    // Another name is refused.
    let mut client =
        ClientConnection::new(t.config.clone(), ServerName::try_from("other.internal")?)?;
    assert!(handshake(&mut client, &mut ServerConnection::new(server)?).is_err());
    Ok(())
}

#[test]
fn tls_verify_false_accepts_a_self_signed_upstream() -> Res {
    let dir = TempDir::new("client-noverify");
    let pem = self_signed(&["lab.test"]);
    let server = serving(&dir, &pem.cert, &pem.key);
    let mut u = tls_upstream(&["[::1]:8443", "origin.lab:443"]);
    u.tls_verify = false;
    let t = upstream_tls(0, &u, &mut SystemRoots::default()).map_err(|e| format!("{e:?}"))?;
    assert!(!t.verify);
    assert_eq!(
        t.server_name(0),
        Some(&ServerName::try_from("::1")?.to_owned())
    );
    assert_eq!(
        t.server_name(1),
        Some(&ServerName::try_from("origin.lab")?.to_owned())
    );
    assert_eq!(t.server_name(2), None);
    let mut client =
        ClientConnection::new(t.config.clone(), t.server_name(1).ok_or("name")?.clone())?;
    handshake(&mut client, &mut ServerConnection::new(server)?)
}

#[test]
fn client_errors_name_the_key_and_the_file() {
    let dir = TempDir::new("client-err");
    let mut u = tls_upstream(&["bad..name:443"]);
    let missing = dir.path("ca.pem");
    u.tls_ca = Some(missing.display().to_string());
    u.tls_client_cert = Some("/x/cert.pem".into());
    let errs = upstream_tls(3, &u, &mut SystemRoots::default()).expect_err("errors");
    let keys: Vec<&str> = errs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "upstreams[3].endpoints[0]",
            "upstreams[3].tls_ca",
            "upstreams[3].tls_client_key"
        ],
        "{errs:?}"
    );
    assert!(names_file(&errs[1].1, &missing), "{errs:?}");
}

#[test]
fn mutual_tls_client_certificate_loads_like_a_server_certificate() -> Res {
    let dir = TempDir::new("client-mtls");
    let (c, _) = self_signed(&["client.test"]).write(&dir, "c");
    let (_, wrong_key) = self_signed(&["x.test"]).write(&dir, "x");
    let mut u = tls_upstream(&["127.0.0.1:443"]);
    u.tls_verify = false;
    u.tls_client_cert = Some(c.display().to_string());
    u.tls_client_key = Some(wrong_key.display().to_string());
    let errs = upstream_tls(0, &u, &mut SystemRoots::default()).expect_err("mismatch");
    assert_eq!(errs[0].0, "upstreams[0].tls_client_key");
    assert!(errs[0].1.contains("does not match"), "{errs:?}");
    Ok(())
}

#[test]
fn watched_files_and_fingerprint_see_a_change() -> Res {
    let dir = TempDir::new("watch");
    let (c, k) = self_signed(&["a.test"]).write(&dir, "a");
    let mut cfg = Config::parse(DEFAULT_CONFIG, "d")?;
    cfg.server.tls = Some(TlsServer::with_certificate(
        "127.0.0.1:0",
        c.to_str().ok_or("path")?,
        k.to_str().ok_or("path")?,
    ));
    let mut u = tls_upstream(&["127.0.0.1:1"]);
    u.tls_ca = Some(c.display().to_string());
    u.tls_client_cert = Some("/etc/client.pem".into());
    cfg.upstreams.push(u);
    let files = watched_files(&cfg);
    assert_eq!(files, [c.clone(), k.clone(), "/etc/client.pem".into()]);
    let before = fingerprint(&files);
    assert!(before[0].is_some() && before[2].is_none());
    assert_eq!(fingerprint(&files), before);
    std::fs::write(&c, "changed, and of another size")?;
    assert_ne!(fingerprint(&files), before);
    Ok(())
}
