use super::*;

/// 2026-12-04T21:22:31.123Z
fn when() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_796_419_351_123)
}

fn line() -> AccessLine<'static> {
    AccessLine {
        time: when(),
        worker: 3,
        protocol: Protocol::Http1,
        client: "10.0.0.7:51234".parse().unwrap(),
        method: b"GET",
        target: b"/v1/users?a=b",
        query_len: 3,
        host: b"api.example.com",
        status: 200,
        request_bytes: 7,
        response_bytes: 512,
        duration: Duration::from_micros(1834),
        ttfb: Some(Duration::from_micros(1502)),
        route: "api",
        upstream: "origin",
        endpoint: Some("10.0.1.2:8080".parse().unwrap()),
        attempts: 2,
        request_id: b"1f3a9c2e-0-2a",
        trace_id: b"4bf92f3577b34da6a3ce929d0e0e4736",
        user_agent: b"curl/8.5.0 \"x\"",
        referer: b"",
        grpc_status: None,
    }
}

fn render(format: AccessFormat, l: &AccessLine<'_>) -> String {
    let mut out = Vec::new();
    write(&mut out, format, l);
    String::from_utf8(out).unwrap()
}

#[test]
fn json_has_every_field() {
    let text = render(AccessFormat::Json, &line());
    assert!(text.ends_with("}\n"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let want = serde_json::json!({
        "time": "2026-12-04T21:22:31.123Z", "event": "access", "worker": 3, "protocol": "http1",
        "client": "10.0.0.7:51234", "method": "GET", "host": "api.example.com", "path": "/v1/users",
        "query_len": 3, "status": 200, "request_bytes": 7, "response_bytes": 512,
        "duration_ms": 1.834, "upstream_ttfb_ms": 1.502, "route": "api", "upstream": "origin",
        "endpoint": "10.0.1.2:8080", "attempts": 2, "request_id": "1f3a9c2e-0-2a",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "user_agent": "curl/8.5.0 \"x\"",
    });
    assert_eq!(v, want);
}

#[test]
fn json_escapes_and_writes_null_for_what_is_missing() {
    let l = AccessLine {
        host: b"",
        upstream: "",
        endpoint: None,
        ttfb: None,
        trace_id: b"",
        user_agent: b"a\x01\\\xff",
        route: "-",
        ..line()
    };
    let v: serde_json::Value = serde_json::from_str(&render(AccessFormat::Json, &l)).unwrap();
    assert_eq!(v["host"], serde_json::Value::Null);
    assert_eq!(v["upstream"], serde_json::Value::Null);
    assert_eq!(v["endpoint"], serde_json::Value::Null);
    assert_eq!(v["upstream_ttfb_ms"], serde_json::Value::Null);
    assert_eq!(v["trace_id"], serde_json::Value::Null);
    assert_eq!(v["route"], "-");
    assert_eq!(v["user_agent"], "a\u{1}\\\u{fffd}");
}

#[test]
fn text_is_logfmt() {
    let text = render(AccessFormat::Text, &line());
    assert_eq!(
        text,
        "time=2026-12-04T21:22:31.123Z event=access worker=3 protocol=http1 client=10.0.0.7:51234 \
         method=GET host=api.example.com path=/v1/users query_len=3 status=200 request_bytes=7 \
         response_bytes=512 duration_ms=1.834 upstream_ttfb_ms=1.502 route=api upstream=origin \
         endpoint=10.0.1.2:8080 attempts=2 request_id=1f3a9c2e-0-2a \
         trace_id=4bf92f3577b34da6a3ce929d0e0e4736 user_agent=\"curl/8.5.0 \\\"x\\\"\"\n"
    );
    let l = AccessLine {
        upstream: "",
        endpoint: None,
        ttfb: None,
        ..line()
    };
    let text = render(AccessFormat::Text, &l);
    assert!(
        text.contains(" upstream_ttfb_ms=- route=api upstream=- endpoint=- "),
        "{text}"
    );
}

#[test]
fn a_grpc_call_ends_json_and_text_with_its_grpc_status() {
    let l = AccessLine {
        grpc_status: Some(14),
        ..line()
    };
    let v: serde_json::Value = serde_json::from_str(&render(AccessFormat::Json, &l)).unwrap();
    assert_eq!(v["grpc_status"], 14);
    let text = render(AccessFormat::Text, &l);
    assert!(text.ends_with(" grpc_status=14\n"), "{text}");
    let combined = render(AccessFormat::Combined, &l);
    assert!(!combined.contains("grpc"), "{combined}");
}

#[test]
fn combined_is_nginx_combined_with_duration_and_request_id() {
    let text = render(AccessFormat::Combined, &line());
    assert_eq!(
        text,
        "10.0.0.7 - - [04/Dec/2026:21:22:31 +0000] \"GET /v1/users?a=b HTTP/1.1\" 200 512 \"-\" \
         \"curl/8.5.0 \\\"x\\\"\" 0.001 1f3a9c2e-0-2a\n"
    );
    let h2 = AccessLine {
        protocol: Protocol::H2,
        duration: Duration::from_millis(12_345),
        referer: b"https://a/\x7f",
        ..line()
    };
    let text = render(AccessFormat::Combined, &h2);
    assert!(
        text.contains("\"GET /v1/users?a=b HTTP/2.0\" 200 512 \"https://a/\\x7f\""),
        "{text}"
    );
    assert!(text.ends_with(" 12.345 1f3a9c2e-0-2a\n"), "{text}");
}

#[test]
fn civil_dates_match_known_days() {
    let at = |secs: u64| civil(UNIX_EPOCH + Duration::from_secs(secs));
    assert_eq!(at(0), (1970, 1, 1, 0, 0, 0, 0));
    // 2000-02-29 12:34:56 (a leap day of a century leap year).
    assert_eq!(at(951_827_696), (2000, 2, 29, 12, 34, 56, 0));
    // 2024-12-31 23:59:59.
    assert_eq!(at(1_735_689_599), (2024, 12, 31, 23, 59, 59, 0));
}
