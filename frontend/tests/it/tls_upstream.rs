//! Upstream TLS (DESIGN.md "TLS", origination; "Status codes", the upstream TLS row): an upstream with
//! `tls = true` verifies the origin against `tls_ca` and the server name (`tls_server_name`, else the
//! endpoint's host), sends that name as SNI, pools its TLS connections and resumes sessions per
//! endpoint; a certificate that does not verify is a 502 `kind="tls"` with `upstream.tls_failed`;
//! `tls_verify = false` accepts it with a warning; mutual TLS with `tls_client_cert`/`tls_client_key`.

use std::{path::PathBuf, time::Duration};

use crate::harness::{Ca, Cfg, Client, Driver, Edge, Pem, Reply, TempDir, TlsOrigin, Value};

const SEC: Duration = Duration::from_secs(1);
const UP_HANDSHAKES: &str = "edge_upstream_tls_handshakes_total";

/// An origin CA and a leaf for `origin.test`, `localhost` and `127.0.0.1`, files in a temp dir.
struct Origin {
    dir: TempDir,
    leaf: Pem,
    ca_file: PathBuf,
}

impl Origin {
    fn new() -> Origin {
        let dir = TempDir::new();
        let ca = Ca::new("origin CA");
        let leaf = ca.leaf("origin", &["origin.test", "localhost", "127.0.0.1"]);
        let ca_file = ca.write(&dir, "origin-ca");
        Origin { dir, leaf, ca_file }
    }
}

/// Answers `upstream:` + the target, keeping the connection open.
fn answer(req: &crate::harness::Seen) -> Reply {
    Reply::ok(format!("upstream:{}", req.target).as_bytes())
}

/// Like [`answer`], with `Connection: close`, and the origin closes (close_notify) after it: each
/// request needs a new TLS connection.
fn answer_and_close(req: &crate::harness::Seen) -> Reply {
    let body = format!("upstream:{}", req.target);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    Reply::raw(format!("{head}{body}").as_bytes(), true)
}

/// The harness config pointed at `tls` with `tls = true` and `tls_ca`.
fn tls_cfg(d: Driver, tls: &TlsOrigin, ca_file: &std::path::Path) -> Cfg {
    Cfg::new(d, tls.addr)
        .upstream_field("tls", true)
        .upstream_field("tls_ca", ca_file.display().to_string())
}

both_drivers!(a_verified_tls_upstream_is_proxied_and_pooled, |d| {
    let o = Origin::new();
    let tls = TlsOrigin::start(&o.leaf, None, answer);
    let edge =
        Edge::start(&tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"));
    let mut c = Client::connect(edge.addr);
    for path in ["/one", "/two?x=1"] {
        let r = c.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.text(), format!("upstream:{path}"));
    }
    // A new downstream connection reuses the pooled upstream TLS connection too.
    assert_eq!(
        Client::connect(edge.addr).get("/three").text(),
        "upstream:/three"
    );
    assert_eq!(
        tls.accepted(),
        1,
        "the pooled TLS connection was not reused"
    );
    let hs = tls.handshakes();
    assert_eq!(hs.len(), 1, "{hs:?}");
    assert_eq!(
        hs[0].sni.as_deref(),
        Some("origin.test"),
        "SNI is tls_server_name"
    );
    assert_eq!(tls.last().header("host"), Some("test"));
    assert_eq!(edge.metric(UP_HANDSHAKES, &["result=\"full\""]), 1.0);
});

both_drivers!(without_tls_server_name_the_endpoint_host_is_verified, |d| {
    let o = Origin::new();
    let tls = TlsOrigin::start(&o.leaf, None, answer);
    // The endpoint is 127.0.0.1:PORT: the name verified is the IP address (an IP SAN of the leaf),
    // and no SNI is sent (RFC 6066 §3: SNI carries host names only).
    let edge = Edge::start(&tls_cfg(d, &tls, &o.ca_file));
    let r = Client::connect(edge.addr).get("/ip");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "upstream:/ip");
    let hs = tls.handshakes();
    assert_eq!(hs.len(), 1, "{hs:?}");
    assert_eq!(hs[0].sni, None, "SNI sent for an IP endpoint");
    drop(edge);

    // A name endpoint (`localhost:PORT`): its host is the SNI.
    let edge = Edge::start(&tls_cfg(d, &tls, &o.ca_file).upstream_field(
        "endpoints",
        Value::Strs(vec![format!("localhost:{}", tls.addr.port())]),
    ));
    let r = Client::connect(edge.addr).get("/name");
    assert_eq!(r.status, 200, "{}", r.text());
    let hs = tls.handshakes();
    let last = hs.iter().rev().find(|h| h.failed.is_none()).unwrap();
    assert_eq!(last.sni.as_deref(), Some("localhost"), "{hs:?}");
});

both_drivers!(a_certificate_from_another_ca_is_a_502_kind_tls, |d| {
    let o = Origin::new();
    let tls = TlsOrigin::start(&o.leaf, None, answer);
    let other = Ca::new("some other CA");
    let wrong_ca = other.write(&o.dir, "wrong-ca");
    let edge =
        Edge::start(&tls_cfg(d, &tls, &wrong_ca).upstream_field("tls_server_name", "origin.test"));
    let mut c = Client::connect(edge.addr);
    let r = c.get("/x");
    crate::harness::assert_error_response("unverified upstream", &r, 502, false);
    assert_eq!(
        edge.wait_metric("edge_upstream_errors_total", &["kind=\"tls\""], 1.0),
        1.0
    );
    let line = edge
        .wait_log("upstream.tls_failed", 2 * SEC)
        .expect("an upstream.tls_failed line");
    assert!(
        line.to_lowercase().contains("issuer") || line.contains("Unknown"),
        "{line}"
    );
    assert!(
        tls.seen.lock().unwrap().is_empty(),
        "a request reached the origin"
    );
    assert_eq!(edge.metric(UP_HANDSHAKES, &["result=\"failed\""]), 1.0);
    // The keep-alive client connection goes on (keep*: nothing of the request was left unread).
    assert_eq!(c.get("/y").status, 502);
    // The right CA name but the wrong server name fails the same way.
    drop(edge);
    let edge =
        Edge::start(&tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "other.test"));
    let r = Client::connect(edge.addr).get("/x");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        edge.wait_metric("edge_upstream_errors_total", &["kind=\"tls\""], 1.0),
        1.0
    );
});

both_drivers!(
    tls_verify_false_accepts_any_certificate_with_a_warning,
    |d| {
        let o = Origin::new();
        let tls = TlsOrigin::start(&o.leaf, None, answer);
        let edge = Edge::start(
            &Cfg::new(d, tls.addr)
                .upstream_field("tls", true)
                .upstream_field("tls_verify", false)
                .upstream_field("tls_server_name", "not-the-name.test"),
        );
        let r = Client::connect(edge.addr).get("/lab");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "upstream:/lab");
        // DESIGN.md "Configuration": `tls_verify = false` logs a warning at start.
        let warned = edge
            .log()
            .into_iter()
            .find(|l| l.contains("WARN") && l.contains("tls_verify"));
        assert!(
            warned.is_some(),
            "no warning naming tls_verify at start; log:\n{}",
            edge.log().join("\n")
        );
    }
);

/// An origin requiring a client certificate issued by `clients`.
fn mutual_origin(o: &Origin, clients: &Ca) -> TlsOrigin {
    TlsOrigin::start(&o.leaf, Some(clients), answer)
}

both_drivers!(mutual_tls_sends_the_client_certificate, |d| {
    let o = Origin::new();
    let clients = Ca::new("client CA");
    let tls = mutual_origin(&o, &clients);
    let (cert, key) = clients.client("edge-client").write(&o.dir, "client");
    let edge = Edge::start(
        &tls_cfg(d, &tls, &o.ca_file)
            .upstream_field("tls_server_name", "origin.test")
            .upstream_field("tls_client_cert", cert.display().to_string())
            .upstream_field("tls_client_key", key.display().to_string()),
    );
    let r = Client::connect(edge.addr).get("/m");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "upstream:/m");
    let hs = tls.handshakes();
    assert!(hs.last().unwrap().client_cert, "{hs:?}");
});

// Regression for a classification bug: in TLS 1.3 the client's handshake is done before the server
// checks the client certificate, so the origin's certificate_required alert arrives on edge's first
// read of the response; it is a TLS failure (DESIGN.md "Status codes": upstream TLS handshake fails ->
// 502 kind="tls"), not a reset.
both_drivers!(
    mutual_tls_without_a_client_certificate_is_a_502_kind_tls,
    |d| {
        let o = Origin::new();
        let clients = Ca::new("client CA");
        let tls = mutual_origin(&o, &clients);
        let edge = Edge::start(
            &tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"),
        );
        let r = Client::connect(edge.addr).get("/m");
        crate::harness::assert_error_response("no client certificate", &r, 502, false);
        assert!(
            crate::harness::wait_until(2 * SEC, || tls
                .handshakes()
                .last()
                .is_some_and(|h| h.failed.is_some())),
            "the origin did not refuse the handshake: {:?}",
            tls.handshakes()
        );
        assert_eq!(
        edge.wait_metric("edge_upstream_errors_total", &["kind=\"tls\""], 1.0),
        1.0,
        "the origin's refusal of a missing client certificate must count as kind=\"tls\" (got {} as reset)",
        edge.metric("edge_upstream_errors_total", &["kind=\"reset\""])
    );
    }
);

both_drivers!(a_fresh_upstream_connection_resumes_the_session, |d| {
    let o = Origin::new();
    // Every response closes its connection, so each request needs a fresh TLS connection.
    let tls = TlsOrigin::start(&o.leaf, None, answer_and_close);
    let edge =
        Edge::start(&tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"));
    let mut c = Client::connect(edge.addr);
    for i in 0..3 {
        let r = c.get(&format!("/r{i}"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), format!("upstream:/r{i}"));
    }
    assert_eq!(tls.accepted(), 3);
    let hs = tls.handshakes();
    let resumed: Vec<bool> = hs.iter().map(|h| h.resumed).collect();
    assert_eq!(resumed, [false, true, true], "{hs:?}");
    assert_eq!(edge.metric(UP_HANDSHAKES, &["result=\"full\""]), 1.0);
    assert_eq!(edge.metric(UP_HANDSHAKES, &["result=\"resumed\""]), 2.0);
});

/// Answers `/healthz` with 200 `healthy`, everything else as [`answer`].
fn with_health(req: &crate::harness::Seen) -> Reply {
    match req.target.as_str() {
        "/healthz" => Reply::ok(b"healthy"),
        _ => answer(req),
    }
}

/// Checks every 100 ms on `/healthz`, 2 failures or passes to change state.
fn checked(cfg: Cfg) -> Cfg {
    cfg.health_check("path", "/healthz")
        .health_check("interval", "100ms")
        .health_check("timeout", "500ms")
        .health_check("unhealthy_threshold", 2)
        .health_check("healthy_threshold", 2)
}

both_drivers!(active_health_checks_speak_tls_to_a_tls_upstream, |d| {
    let o = Origin::new();
    let tls = TlsOrigin::start(&o.leaf, None, with_health);
    let edge = Edge::start(&checked(
        tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"),
    ));
    let passes = edge.wait_metric_where(
        "edge_upstream_health_checks_total",
        &["result=\"pass\""],
        5 * SEC,
        |v| v >= 2.0,
    );
    assert!(passes >= 2.0, "{passes} passing TLS probes");
    assert_eq!(
        edge.metric("edge_upstream_health_checks_total", &["result=\"fail\""]),
        0.0
    );
    let probe = tls
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.target == "/healthz")
        .cloned()
        .expect("the origin saw a probe");
    assert_eq!(
        probe.header("host"),
        Some("origin.test"),
        "Host = tls_server_name"
    );
    assert_eq!(probe.header("user-agent"), Some("edge-health"));
    assert!(
        tls.handshakes()
            .iter()
            .all(|h| h.failed.is_none() && h.sni.as_deref() == Some("origin.test")),
        "{:?}",
        tls.handshakes()
    );
    assert_eq!(Client::connect(edge.addr).get("/x").text(), "upstream:/x");
});

both_drivers!(a_tls_probe_that_does_not_verify_fails_the_endpoint, |d| {
    let o = Origin::new();
    let tls = TlsOrigin::start(&o.leaf, None, with_health);
    let wrong_ca = Ca::new("some other CA").write(&o.dir, "wrong-ca");
    let edge = Edge::start(&checked(
        tls_cfg(d, &tls, &wrong_ca).upstream_field("tls_server_name", "origin.test"),
    ));
    let label = format!("endpoint=\"{}\"", tls.addr);
    assert_eq!(
        edge.wait_metric_where("edge_upstream_endpoint_healthy", &[&label], 5 * SEC, |v| v
            == 0.0),
        0.0,
        "the endpoint stayed healthy though its certificate does not verify"
    );
    // The counter may trail the state change by a moment: waited on, not read once.
    let fails = edge.wait_metric_where(
        "edge_upstream_health_checks_total",
        &["result=\"fail\""],
        2 * SEC,
        |v| v >= 2.0,
    );
    assert!(fails >= 2.0, "{fails} failed probes counted");
    assert!(edge
        .wait_log_all(&["upstream.unhealthy", &tls.addr.to_string()], 2 * SEC)
        .is_some());
    assert!(
        tls.seen.lock().unwrap().is_empty(),
        "a probe got through an unverified handshake"
    );
});

both_drivers!(
    a_pooled_tls_connection_the_origin_closes_is_not_reused,
    |d| {
        let o = Origin::new();
        // Each answer keeps the connection open by its headers (so edge pools it), then the origin sends
        // close_notify and closes while it sits idle in the pool.
        let tls = TlsOrigin::start(&o.leaf, None, |req| {
            let mut r = answer(req);
            r.close = true;
            r
        });
        let edge = Edge::start(
            &tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"),
        );
        let mut c = Client::connect(edge.addr);
        assert_eq!(c.get("/1").text(), "upstream:/1");
        // The idle pooled connection is watched once it sat idle for a sweep period: the pool's sweep
        // counts it (1), the watch sees the origin's close and removes it, and the next sweep counts 0.
        let idle = ["state=\"idle\""];
        assert_eq!(
            edge.wait_metric("edge_upstream_connections", &idle, 1.0),
            1.0,
            "the connection was not pooled"
        );
        assert_eq!(
            edge.wait_metric("edge_upstream_connections", &idle, 0.0),
            0.0,
            "the closed TLS connection stayed in the pool"
        );
        assert_eq!(c.get("/2").text(), "upstream:/2");
        assert_eq!(tls.accepted(), 2);
        assert_eq!(
            edge.metric("edge_upstream_retries_total", &[]),
            0.0,
            "a closed pooled connection was handed out (and the request retried)"
        );
    }
);

both_drivers!(a_close_delimited_tls_response_is_forwarded_whole, |d| {
    let o = Origin::new();
    // No Content-Length: the body ends with the origin's close_notify and close.
    let tls = TlsOrigin::start(&o.leaf, None, |_| {
        Reply::raw(b"HTTP/1.1 200 OK\r\n\r\nuntil the close over tls", true)
    });
    let edge =
        Edge::start(&tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"));
    let mut c = Client::connect(edge.addr);
    let r = c.get("/cd");
    assert_eq!(r.status, 200);
    assert!(
        r.chunked,
        "forwarded chunked to an HTTP/1.1 client: {:?}",
        r.headers
    );
    assert_eq!(r.text(), "until the close over tls");
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
    assert_eq!(c.get("/again").text(), "until the close over tls");
});

both_drivers!(
    a_reload_drops_tls_pools_only_when_tls_settings_change,
    |d| {
        let o = Origin::new();
        let tls = TlsOrigin::start(&o.leaf, None, answer);
        let good = tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test");
        let edge = Edge::start(&good);
        let mut c = Client::connect(edge.addr);
        assert_eq!(c.get("/1").text(), "upstream:/1");

        // The same TLS settings: the pooled connection is kept.
        edge.rewrite_config(&good.clone().log("slow_request", "7s"));
        edge.signal(1);
        assert!(crate::harness::wait_until(5 * SEC, || edge
            .count_log("config.reloaded")
            >= 1));
        assert_eq!(c.get("/2").text(), "upstream:/2");
        assert_eq!(
            tls.accepted(),
            1,
            "the pool was dropped by a reload that kept the TLS settings"
        );

        // A CA that does not verify the origin: the verified pooled connection must not be reused.
        let wrong_ca = Ca::new("some other CA").write(&o.dir, "wrong-ca");
        edge.rewrite_config(
            &tls_cfg(d, &tls, &wrong_ca).upstream_field("tls_server_name", "origin.test"),
        );
        edge.signal(1);
        assert!(crate::harness::wait_until(5 * SEC, || edge
            .count_log("config.reloaded")
            >= 2));
        let r = c.get("/3");
        assert_eq!(
            r.status,
            502,
            "a pooled connection verified under the old CA was reused: {}",
            r.text()
        );
        assert_eq!(
            edge.wait_metric("edge_upstream_errors_total", &["kind=\"tls\""], 1.0),
            1.0
        );
    }
);

both_drivers!(
    a_rotated_tls_ca_file_applies_to_new_upstream_handshakes,
    |d| {
        let o = Origin::new();
        // Every response closes, so each request makes a new TLS handshake.
        let tls = TlsOrigin::start(&o.leaf, None, answer_and_close);
        let ca_file = o.dir.0.join("rotating-ca.pem");
        std::fs::copy(&o.ca_file, &ca_file).unwrap();
        let edge = Edge::start(
            &tls_cfg(d, &tls, &ca_file).upstream_field("tls_server_name", "origin.test"),
        );
        assert_eq!(Client::connect(edge.addr).get("/1").status, 200);

        // The CA file now holds a CA that did not issue the origin's certificate: after the reload, new
        // handshakes must verify against it and fail.
        let other = Ca::new("some other CA");
        let tmp = ca_file.with_extension("new");
        std::fs::write(&tmp, &other.pem).unwrap();
        std::fs::rename(&tmp, &ca_file).unwrap();
        edge.signal(1);
        assert!(crate::harness::wait_until(5 * SEC, || edge
            .count_log("config.reloaded")
            >= 1));
        let r = Client::connect(edge.addr).get("/2");
        assert_eq!(
            r.status,
            502,
            "a new upstream handshake still trusted the CA the file no longer holds: {}",
            r.text()
        );
    }
);

both_drivers!(a_tls12_only_origin_is_reached_and_resumed, |d| {
    let o = Origin::new();
    let tls = TlsOrigin::start_versions(&o.leaf, None, true, answer_and_close);
    let edge =
        Edge::start(&tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"));
    let mut c = Client::connect(edge.addr);
    for i in 0..2 {
        let r = c.get(&format!("/v{i}"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), format!("upstream:/v{i}"));
    }
    let hs = tls.handshakes();
    assert!(
        hs.iter()
            .all(|h| h.version == Some(rustls::ProtocolVersion::TLSv1_2)),
        "{hs:?}"
    );
    assert_eq!(
        hs.iter().map(|h| h.resumed).collect::<Vec<_>>(),
        [false, true],
        "{hs:?}"
    );
});

both_drivers!(
    a_1mib_upload_and_download_through_a_tls_upstream_are_byte_exact,
    |d| {
        const MIB: usize = 1 << 20;
        let o = Origin::new();
        // Echoes the request body, or answers 1 MiB for /big.
        let tls = TlsOrigin::start(&o.leaf, None, |req| match req.target.as_str() {
            "/big" => Reply::ok(&(0..MIB).map(|i| (i % 249) as u8).collect::<Vec<_>>()),
            _ => Reply::ok(&req.body),
        });
        let edge = Edge::start(
            &tls_cfg(d, &tls, &o.ca_file).upstream_field("tls_server_name", "origin.test"),
        );
        let mut c = Client::connect(edge.addr);
        let body: Vec<u8> = (0..MIB).map(|i| (i * 13 % 256) as u8).collect();
        let mut req = format!("POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: {MIB}\r\n\r\n")
            .into_bytes();
        req.extend_from_slice(&body);
        c.send(&req);
        let r = c.read_response(false).expect("upload response");
        assert_eq!(r.status, 200);
        assert!(
            r.body == body,
            "echoed body differs ({} bytes)",
            r.body.len()
        );
        assert!(tls.last().body == body, "the origin's body differs");
        let r = c.get("/big");
        assert_eq!(r.status, 200);
        assert!(
            r.body == (0..MIB).map(|i| (i % 249) as u8).collect::<Vec<_>>(),
            "downloaded body differs ({} bytes)",
            r.body.len()
        );
        assert_eq!(tls.accepted(), 1);
    }
);

both_drivers!(
    an_upstream_that_never_answers_the_client_hello_is_a_504_at_connect_timeout,
    |d| {
        let o = Origin::new();
        // Accepts TCP, reads the ClientHello, never answers.
        let silent = crate::harness::Origin::silent();
        let edge = Edge::start(
            &Cfg::new(d, silent.addr)
                .upstream_field("tls", true)
                .upstream_field("tls_ca", o.ca_file.display().to_string())
                .upstream_field("connect_timeout", "1s"),
        );
        let t = std::time::Instant::now();
        let r = Client::connect(edge.addr).get("/hang");
        crate::harness::assert_about("TLS connect timeout", t.elapsed(), SEC, SEC);
        crate::harness::assert_error_response("TLS handshake never answered", &r, 504, false);
        assert_eq!(
            edge.wait_metric("edge_upstream_timeouts_total", &["phase=\"connect\""], 1.0),
            1.0
        );
        assert_eq!(edge.metric(UP_HANDSHAKES, &["result=\"timeout\""]), 1.0);
    }
);

both_drivers!(
    a_rotated_client_certificate_is_sent_on_new_connections,
    |d| {
        let o = Origin::new();
        let clients = Ca::new("client CA");
        // Mutual TLS, and each response closes: every request is a new handshake.
        let tls = TlsOrigin::start(&o.leaf, Some(&clients), answer_and_close);
        let first = clients.client("edge-client-1");
        let (cert, key) = first.write(&o.dir, "client");
        let edge = Edge::start(
            &tls_cfg(d, &tls, &o.ca_file)
                .upstream_field("tls_server_name", "origin.test")
                .upstream_field("tls_client_cert", cert.display().to_string())
                .upstream_field("tls_client_key", key.display().to_string()),
        );
        assert_eq!(Client::connect(edge.addr).get("/1").status, 200);
        let sent =
            |hs: Vec<crate::harness::Handshake>| hs.last().and_then(|h| h.client_cert_der.clone());
        assert!(sent(tls.handshakes()) == Some(first.der.clone()));

        let second = clients.client("edge-client-2");
        for (path, text) in [(&key, &second.key), (&cert, &second.cert)] {
            let tmp = path.with_extension("new");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
        edge.signal(1);
        assert!(crate::harness::wait_until(5 * SEC, || edge
            .count_log("config.reloaded")
            >= 1));
        let r = Client::connect(edge.addr).get("/2");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            sent(tls.handshakes()) == Some(second.der.clone()),
            "a new upstream connection after the reload still sent the old client certificate"
        );
    }
);
