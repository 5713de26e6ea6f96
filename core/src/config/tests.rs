//! Unit tests of the configuration: the embedded default loads, resolves and prints back; errors name
//! the key; CIDR matching.

use std::time::Duration;

use super::*;

#[test]
fn default_config_loads_and_resolves() {
    let c = Config::parse(DEFAULT_CONFIG, "deploy/edge.toml").unwrap();
    let r = c.resolve("deploy/edge.toml").unwrap();
    assert_eq!(r.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.server.limits.max_head_bytes, Bytes(16384));
    assert_eq!(
        c.upstreams[0].request_timeout,
        Limit(Some(Duration::from_secs(30)))
    );
}

#[test]
fn printed_config_loads_again() {
    let c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    let again = Config::parse(&c.to_toml(), "printed").unwrap();
    assert_eq!(again.to_toml(), c.to_toml());
}

#[test]
fn unknown_key_is_named() {
    let e = Config::parse(
        "[server]\nlisten = \"127.0.0.1:1\"\nbogus_key = 1\n",
        "x.toml",
    )
    .unwrap_err();
    assert_eq!(e.file, "x.toml");
    assert!(e.reason.contains("bogus_key"), "{e}");
    assert!(e.key.starts_with("server"), "{e}");
}

#[test]
fn bad_duration_names_key() {
    let e = Config::parse("[server.timeouts]\nidle = \"soon\"\n", "x.toml").unwrap_err();
    assert_eq!(e.key, "server.timeouts.idle");
}

#[test]
fn route_to_missing_upstream_is_an_error() {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.routes[0].upstream = "nope".into();
    let errs = c.resolve("d").unwrap_err();
    assert!(
        errs.iter().any(|e| e.key == "routes[0].upstream"),
        "{errs:?}"
    );
}

#[test]
fn cidr_matching() {
    let c = Cidr::parse("10.0.0.0/8").unwrap();
    assert!(c.contains("10.1.2.3".parse().unwrap()));
    assert!(!c.contains("11.1.2.3".parse().unwrap()));
    assert!(c.contains("::ffff:10.0.0.1".parse().unwrap()));
    assert!(Cidr::parse("10.0.0.0/33").is_err());
    assert!(Cidr::parse("0.0.0.0/0")
        .unwrap()
        .contains("1.2.3.4".parse().unwrap()));
}

/// The embedded default with a wrong value for every check `resolve` makes.
fn broken_everywhere() -> Config {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.server.listen = "nope".into();
    c.admin.listen = "bad admin".into();
    c.server.max_connections = 0;
    c.server.max_requests_per_connection = 0;
    c.server.health_path = "health".into();
    c.server.limits.max_head_bytes = Bytes(10);
    c.server.limits.max_headers = 0;
    c.server.limits.relay_buffer_budget = Bytes(64 << 10);
    c.server.timeouts.idle = Dur(Duration::ZERO);
    c.server.timeouts.send = Dur(Duration::ZERO);
    c.server.trusted_proxies = vec!["10.0.0.0/8".into(), "x/1".into(), "10.0.0.0/40".into()];
    c.server.upgrade_socket = "rel/sock".into();
    c.log.level = "edge=[".into();
    let mut u = c.upstreams[0].clone();
    u.endpoints = vec!["127.0.0.1:1".into(), "noport".into()];
    u.connect_timeout = Dur(Duration::ZERO);
    let mut unnamed = Upstream::with_endpoints("", vec![]);
    unnamed.connect_timeout = Dur(Duration::ZERO);
    c.upstreams = vec![u.clone(), u, unnamed];
    let mut r = c.routes[0].clone();
    r.path_prefix = Some("x".into());
    r.upstream = "missing".into();
    c.routes.push(r);
    c
}

/// A config that breaks every check, and the errors it gives, in order (keys and reasons are what
/// `edge --check` prints and what the integration tests compare).
#[test]
fn every_check_reports_in_file_order() {
    let c = broken_everywhere();
    let unresolvable =
        |t: &str| format!("{t:?} is not a host:port that resolves (invalid socket address)");
    let expected: Vec<(&str, String)> = vec![
        ("server.listen", unresolvable("nope")),
        ("admin.listen", unresolvable("bad admin")),
        ("server.max_connections", "must be at least 1".into()),
        (
            "server.max_requests_per_connection",
            "must be at least 1".into(),
        ),
        ("server.health_path", "must start with '/'".into()),
        (
            "server.limits.max_head_bytes",
            "must be at least 256 bytes".into(),
        ),
        ("server.limits.max_headers", "must be at least 1".into()),
        (
            "server.limits.relay_buffer_budget",
            "must be at least 256KiB (one relay buffer at its largest)".into(),
        ),
        ("server.timeouts.idle", "must be greater than zero".into()),
        ("server.timeouts.send", "must be greater than zero".into()),
        (
            "server.trusted_proxies[1]",
            "invalid CIDR \"x/1\": bad address".into(),
        ),
        (
            "server.trusted_proxies[2]",
            "invalid CIDR \"10.0.0.0/40\": prefix over 32".into(),
        ),
        (
            "server.upgrade_socket",
            "must be an absolute path (or \"\" to disable upgrades)".into(),
        ),
        ("log.level", "invalid filter \"edge=[\": ".into()),
        ("upstreams[0].endpoints[1]", unresolvable("noport")),
        (
            "upstreams[0].connect_timeout",
            "must be greater than zero".into(),
        ),
        (
            "upstreams[1].name",
            "duplicate upstream name \"origin\"".into(),
        ),
        ("upstreams[1].endpoints[1]", unresolvable("noport")),
        (
            "upstreams[1].connect_timeout",
            "must be greater than zero".into(),
        ),
        ("upstreams[2].name", "must not be empty".into()),
        (
            "upstreams[2].endpoints",
            "needs at least one host:port".into(),
        ),
        (
            "upstreams[2].connect_timeout",
            "must be greater than zero".into(),
        ),
        ("routes[1].path_prefix", "must start with '/'".into()),
        (
            "routes[1].upstream",
            "no [[upstreams]] entry is named \"missing\"".into(),
        ),
    ];
    let errs = c.resolve("f.toml").unwrap_err();
    let got: Vec<(&str, &str)> = errs
        .iter()
        .map(|e| (e.key.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for ((key, reason), (want_key, want)) in got.iter().zip(&expected) {
        assert_eq!(key, want_key, "{got:#?}");
        // The filter's own reason is tracing-subscriber's wording; only the prefix is edge's.
        if *key == "log.level" {
            assert!(reason.starts_with(want.as_str()), "{reason}");
        } else {
            assert_eq!(reason, want);
        }
    }
    assert!(errs.iter().all(|e| e.file == "f.toml"));
}

#[test]
fn no_routes_is_an_error() {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.routes.clear();
    let errs = c.resolve("d").unwrap_err();
    let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["routes"]);
    assert_eq!(errs[0].reason, "at least one [[routes]] entry is needed");
}

#[test]
fn max_headers_over_what_the_parser_holds_is_an_error() {
    let mut c = Config::parse(crate::config::DEFAULT_CONFIG, "d").unwrap();
    c.server.limits.max_headers = 257;
    let errors = c.resolve("d").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].key, "server.limits.max_headers");
    assert!(
        errors[0].reason.contains("at most 256"),
        "{}",
        errors[0].reason
    );
}

#[test]
fn http2_keys_parse_with_defaults_and_errors_name_file_and_key() {
    let c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    assert!(!c.server.h2c);
    assert_eq!(c.server.http2, super::Http2::default());
    let c = Config::parse(
        "[server]\nh2c = true\n[server.http2]\nmax_concurrent_streams = 7\ninitial_window = \"64KiB\"\n",
        "x.toml",
    )
    .unwrap();
    assert!(c.server.h2c);
    assert_eq!(c.server.http2.max_concurrent_streams, 7);
    assert_eq!(c.server.http2.initial_window.0, 64 << 10);
    let e = Config::parse("[server.http2]\nmax_frame_size = \"big\"\n", "x.toml").unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.key.as_str()),
        ("x.toml", "server.http2.max_frame_size")
    );
    let e = Config::parse("[server.http2]\nmax_streams = 1\n", "x.toml").unwrap_err();
    assert!(e.reason.contains("max_streams"), "{e}");
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.server.http2.max_frame_size.0 = 1000;
    let errors = c.resolve("x.toml").unwrap_err();
    assert_eq!(errors[0].key, "server.http2.max_frame_size");
    assert_eq!(errors[0].file, "x.toml");
}

#[test]
fn log_access_keys_parse_and_errors_name_file_and_key() {
    let base = format!("{DEFAULT_CONFIG}\n");
    let with = |log: &str| base.replace("[log]\n", &format!("[log]\n{log}\n"));
    let c = Config::parse(&base, "e.toml").unwrap();
    assert_eq!(c.log.access_format, AccessFormat::Json);
    assert_eq!(c.log.traceparent, TraceMode::Propagate);
    assert_eq!(c.log.access_path, "");
    let c = Config::parse(
        &with("access_format = \"combined\"\ntraceparent = \"off\""),
        "e.toml",
    )
    .unwrap();
    assert_eq!(
        (c.log.access_format, c.log.traceparent),
        (AccessFormat::Combined, TraceMode::Off)
    );
    let e = Config::parse(&with("access_format = \"xml\""), "e.toml").unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.key.as_str()),
        ("e.toml", "log.access_format")
    );
    let e = Config::parse(&with("traceparent = \"always\""), "e.toml").unwrap_err();
    assert_eq!(e.key, "log.traceparent");
    let resolve_errors = |log: &str| {
        Config::parse(&with(log), "e.toml")
            .unwrap()
            .resolve("e.toml")
            .unwrap_err()
    };
    let dir = std::env::temp_dir();
    for (path, why) in [
        ("logs/a.log".to_string(), "absolute"),
        ("/nonexistent-edge-dir/a.log".to_string(), "does not exist"),
        (dir.to_string_lossy().into_owned(), "directory"),
    ] {
        let errors = resolve_errors(&format!("access_path = {path:?}"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].key, "log.access_path");
        assert_eq!(errors[0].file, "e.toml");
        assert!(errors[0].reason.contains(why), "{}", errors[0].reason);
    }
    let ok = dir.join("edge-access-config-test.log");
    let c = Config::parse(&with(&format!("access_path = {ok:?}")), "e.toml").unwrap();
    assert!(c.resolve("e.toml").is_ok());
}

#[test]
fn relay_buffer_budget_defaults_to_64mib_and_is_checked() {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    assert_eq!(c.server.limits.relay_buffer_budget, Bytes(64 << 20));
    let parsed = Config::parse(
        "[server.limits]\nrelay_buffer_budget = \"16MiB\"\n",
        "x.toml",
    )
    .unwrap();
    assert_eq!(parsed.server.limits.relay_buffer_budget, Bytes(16 << 20));
    c.server.limits.relay_buffer_budget = Bytes(256 << 10);
    assert!(
        c.resolve("d").is_ok(),
        "one relay buffer at its largest is enough"
    );
    c.server.limits.relay_buffer_budget = Bytes(100 << 10);
    let errors = c.resolve("d").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file, "d");
    assert_eq!(errors[0].key, "server.limits.relay_buffer_budget");
    assert!(errors[0].reason.contains("at least 256KiB"), "{errors:?}");
    let e = Config::parse(
        "[server.limits]\nrelay_buffer_budget = \"lots\"\n",
        "x.toml",
    )
    .unwrap_err();
    assert_eq!(e.key, "server.limits.relay_buffer_budget");
}

#[test]
fn grpc_service_needs_an_http2_upstream() {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.upstreams[0].health_check = Some(HealthCheck {
        grpc_service: Some(String::new()),
        ..HealthCheck::default()
    });
    let key = "upstreams[0].health_check.grpc_service";
    let errors = c.clone().resolve("g.toml").unwrap_err();
    let e = errors.iter().find(|e| e.key == key).expect("named");
    assert!(e.reason.contains("needs HTTP/2"), "{e}");
    assert_eq!(e.file, "g.toml");
    c.upstreams[0].protocol = UpstreamProtocol::Auto;
    let errors = c.clone().resolve("g.toml").unwrap_err();
    let e = errors.iter().find(|e| e.key == key).expect("plain auto");
    assert!(e.reason.contains("without tls"), "{e}");
    c.upstreams[0].protocol = UpstreamProtocol::H2;
    assert!(c.resolve("g.toml").is_ok());
}

#[test]
fn splice_request_bodies_is_off_by_default_and_needs_a_plain_http1_upstream() {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    assert!(!c.upstreams[0].splice_request_bodies);
    c.upstreams[0].splice_request_bodies = true;
    assert!(c.clone().resolve("s.toml").is_ok());
    c.upstreams[0].protocol = UpstreamProtocol::Auto;
    assert!(
        c.clone().resolve("s.toml").is_ok(),
        "plain auto is HTTP/1.1"
    );
    let key = "upstreams[0].splice_request_bodies";
    for (tls, protocol) in [
        (false, UpstreamProtocol::H2),
        (true, UpstreamProtocol::Http1),
    ] {
        let mut c = c.clone();
        c.upstreams[0].tls = tls;
        c.upstreams[0].protocol = protocol;
        let errors = c.resolve("s.toml").unwrap_err();
        let e = errors.iter().find(|e| e.key == key).expect("named");
        assert!(e.reason.contains("plain HTTP/1.1"), "{e}");
        assert_eq!(e.file, "s.toml");
    }
}
