//! The admin API's `GET /upstreams` (DESIGN.md "Observability"): per upstream and endpoint, the address,
//! weight, health by active checks, passive ejection, requests in flight and idle pooled connections
//! summed over workers, and the last resolution of endpoint names, against a known state: an endpoint
//! ejected after connect failures, one unhealthy by its active check, healthy ones, one request held in
//! flight, and a name that resolves.

use std::{net::SocketAddr, thread, time::Duration};

use serde_json::Value;

use crate::harness::{
    refused_addr, wait_until, Cfg, Client, Edge, Origin, Reply, Route, Upstream, Value as Toml,
};

const WAIT: Duration = Duration::from_secs(5);

/// `GET /upstreams` parsed.
fn upstreams(edge: &Edge) -> Value {
    let r = Client::connect(edge.admin).get("/upstreams");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).expect("GET /upstreams is JSON")
}

/// The endpoint with `address` of upstream `name`.
fn endpoint(doc: &Value, name: &str, address: SocketAddr) -> Value {
    let u = doc["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .unwrap_or_else(|| panic!("no upstream {name} in {doc}"));
    u["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["address"] == address.to_string())
        .unwrap_or_else(|| panic!("no endpoint {address} in {u}"))
        .clone()
}

/// Polls `GET /upstreams` until `pred` holds (the workers publish every 250 ms); the last answer.
fn wait_for(edge: &Edge, pred: impl Fn(&Value) -> bool) -> Value {
    let mut doc = upstreams(edge);
    wait_until(WAIT, || {
        doc = upstreams(edge);
        pred(&doc)
    });
    doc
}

both_drivers!(upstreams_shows_health_ejection_load_and_resolution, |d| {
    let good = Origin::start(|req| match req.target.as_str() {
        "/pool/slow" => Reply::ok(b"slow").delayed(Duration::from_millis(1500)),
        _ => Reply::ok(b"good"),
    });
    let dead = refused_addr();
    // Fails its active check, serves traffic.
    let sick = Origin::start(|req| match req.target.as_str() {
        "/healthz" => Reply::raw(b"HTTP/1.1 503 X\r\nContent-Length: 0\r\n\r\n", false),
        _ => Reply::ok(b"sick"),
    });
    let checked_ok = Origin::fixed(b"fine");
    let port = good.addr.port();
    let cfg = Cfg::new(d, good.addr)
        // "origin": no active checks; `dead` refuses and gets ejected, `good` serves.
        .endpoints(&[dead, good.addr])
        .add_upstream(
            Upstream::new("checked", &[])
                .set(
                    "endpoints",
                    Toml::Raw(format!(
                        "[\"{}\", {{ address = \"{}\", weight = 3 }}]",
                        sick.addr, checked_ok.addr
                    )),
                )
                .health_check("path", "/healthz")
                .health_check("interval", "100ms")
                .health_check("unhealthy_threshold", 1),
        )
        .add_route(Route::new("/checked", "checked"))
        // "named": an endpoint name, resolved at load.
        .add_upstream(
            Upstream::new("named", &[])
                .set("endpoints", Toml::Raw(format!("[\"localhost:{port}\"]"))),
        )
        .add_route(Route::new("/named", "named"));
    let edge = Edge::start(&cfg);

    thread::scope(|s| {
        let held = s.spawn(|| Client::connect(edge.addr).get("/pool/slow").status);
        let doc = wait_for(&edge, |doc| {
            endpoint(doc, "origin", good.addr)["in_flight"] == 1
        });
        assert_eq!(endpoint(&doc, "origin", good.addr)["in_flight"], 1, "{doc}");
        assert_eq!(held.join().unwrap(), 200);
    });

    // Round robin starts at `dead`: every other request fails to connect there and is retried on
    // `good`; after 5 failures `dead` is ejected.
    let mut c = Client::connect(edge.addr);
    for _ in 0..10 {
        assert_eq!(c.get("/pool/x").body, b"good");
    }
    assert!(edge.wait_log("upstream.ejected", WAIT).is_some());
    assert!(edge.wait_log("upstream.unhealthy", WAIT).is_some());

    // Read within the 1 s ejection backoff (the workers publish every 250 ms). Every connection the
    // origin holds open is idle in edge's pool (a connect retried on `good` opens a new one).
    let open = || (good.accepted() - good.closed()) as u64;
    let doc = wait_for(&edge, |doc| {
        let g = endpoint(doc, "origin", good.addr);
        endpoint(doc, "origin", dead)["ejected"] == true
            && g["in_flight"] == 0
            && g["idle"] == open()
    });
    assert_eq!(doc["workers"], 1);
    let dead_ep = endpoint(&doc, "origin", dead);
    assert_eq!(dead_ep["ejected"], true, "{dead_ep}");
    assert_eq!(dead_ep["ejected_workers"], 1);
    assert!(dead_ep["ejected_for_ms"].as_u64().unwrap() > 0);
    assert!(dead_ep["connect_failures"].as_u64().unwrap() >= 5);
    assert_eq!(dead_ep["health"], "unchecked");
    assert_eq!(dead_ep["in_flight"], 0);
    assert_eq!(dead_ep["idle"], 0);
    let good_ep = endpoint(&doc, "origin", good.addr);
    assert_eq!(good_ep["ejected"], false);
    assert_eq!(good_ep["connect_failures"], 0);
    assert_eq!(good_ep["weight"], 1);
    assert_eq!(good_ep["entry"], good.addr.to_string());
    assert!(open() >= 1);
    assert_eq!(good_ep["idle"], open(), "{good_ep}");

    let sick_ep = endpoint(&doc, "checked", sick.addr);
    assert_eq!(sick_ep["health"], "unhealthy", "{sick_ep}");
    assert_eq!(sick_ep["ejected"], false);
    let fine_ep = endpoint(&doc, "checked", checked_ok.addr);
    assert_eq!(fine_ep["health"], "healthy");
    assert_eq!(fine_ep["weight"], 3);

    let named = doc["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "named")
        .unwrap()
        .clone();
    let name = &named["names"][0];
    assert_eq!(name["entry"], format!("localhost:{port}"), "{named}");
    assert_eq!(name["result"], "ok", "{named}");
    assert!(name["resolved_at"].as_str().unwrap().ends_with('Z'));
    let addrs = name["addresses"].as_array().unwrap();
    assert!(!addrs.is_empty());
    for a in addrs {
        assert!(a.as_str().unwrap().ends_with(&format!(":{port}")), "{a}");
        assert!(named["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| &e["address"] == a));
    }
    assert_eq!(named["endpoints"][0]["entry"], format!("localhost:{port}"));
    assert!(doc["upstreams"][0]["names"].as_array().unwrap().is_empty());

    // HEAD answers like GET without the body.
    let mut admin = Client::connect(edge.admin);
    admin.send(b"HEAD /upstreams HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = admin.read_response(true).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
});
