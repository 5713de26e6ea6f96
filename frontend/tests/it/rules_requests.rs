//! Traffic rules that act on a request's way (DESIGN.md "Request pipeline and traffic rules"), end to
//! end over HTTP/1.1 and h2c on both drivers: `redirect` and `respond` with variables, the request
//! rewrites the origin sees (prefixes with the query kept, `host_rewrite`, `request_headers`
//! set/add/remove overriding edge's own X-Forwarded-Proto), `response_headers` on forwarded and edge's
//! own answers, a weighted split over 3 000 requests, a mirror (its share, a dead one), and consistent
//! hashing (a key stays, few move when an endpoint goes). The limits are in `rules`.

use std::time::Duration;

use super::rules::get;
use crate::harness::{
    block_on, h2_connect, h2_request, Cfg, Client, Driver, Edge, Origin, Reply, Route, Upstream,
    Value,
};

both_drivers!(
    redirect_and_respond_answer_locally_with_variables,
    |d: Driver| {
        let origin = Origin::fixed(b"origin");
        let redirect =
            Value::Raw(r#"{ to = "https://${host}/new${path}${query}", status = 301 }"#.into());
        let respond = Value::Raw(
            r#"{ status = 403, body = "blocked ${client_ip} ${request_id} ${header:x-why}\n" }"#
                .into(),
        );
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .add_route(Route::at("/old").set("redirect", redirect))
            .add_route(Route::at("/blocked").set("respond", respond));
        let edge = Edge::start(&cfg);
        let mut c = Client::connect(edge.addr);
        c.send(b"GET /old/a?x=1 HTTP/1.1\r\nHost: test:8080\r\n\r\n");
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 301);
        assert_eq!(
            r.header("location"),
            Some("https://test:8080/new/old/a?x=1")
        );
        c.send(
            b"GET /blocked HTTP/1.1\r\nHost: test\r\nX-Request-Id: req-7\r\nX-Why: policy\r\n\r\n",
        );
        let r = c.read_response(false).unwrap();
        assert_eq!(
            (r.status, r.text()),
            (403, "blocked 127.0.0.1 req-7 policy\n".to_string())
        );
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        let authority = edge.addr.to_string();
        let (redirected, blocked) = block_on(async {
            let c = h2_connect(edge.addr).await;
            let a = h2_request(&c, "GET", "/old/b", &authority, &[], b"")
                .await
                .unwrap();
            let b = h2_request(
                &c,
                "GET",
                "/blocked",
                &authority,
                &[("x-request-id", "req-8")],
                b"",
            )
            .await
            .unwrap();
            (a, b)
        });
        assert_eq!(redirected.status, 301);
        let location = redirected
            .headers
            .get("location")
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(location, format!("https://{authority}/new/old/b"));
        assert_eq!(blocked.status, 403);
        assert_eq!(blocked.body, b"blocked 127.0.0.1 req-8 \n");
        assert_eq!(origin.seen_count(), 0, "answered locally");
    }
);

both_drivers!(
    prefix_host_and_header_rewrites_are_what_the_origin_sees,
    |d: Driver| {
        let origin = Origin::start(|_| Reply::ok(b"ok"));
        let headers = Value::Raw(
        r#"{ set = { "x-env" = "prod", "X-Forwarded-Proto" = "https" }, add = { "x-client" = "${client_ip}" }, remove = ["x-debug"] }"#
            .into(),
    );
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .clear_routes()
            .add_route(
                Route::new("/api", "origin")
                    .set("strip_prefix", "/api")
                    .set("add_prefix", "/v2")
                    .set("host_rewrite", "internal.api")
                    .set("request_headers", headers),
            )
            .add_route(Route::new("/", "origin"));
        let edge = Edge::start(&cfg);
        let check = |how: &str| {
            let seen = origin.last();
            assert_eq!(seen.target, "/v2/users?q=1", "{how}");
            assert_eq!(seen.header("host"), Some("internal.api"), "{how}");
            assert_eq!(seen.header("x-env"), Some("prod"), "{how}");
            assert_eq!(seen.header("x-client"), Some("127.0.0.1"), "{how}");
            assert_eq!(
                seen.header("x-forwarded-proto"),
                Some("https"),
                "{how}: the rule overrides edge's"
            );
            assert_eq!(seen.header("x-debug"), None, "{how}");
            assert_eq!(seen.header("x-keep"), Some("1"), "{how}");
            let protos = seen
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-proto"));
            assert_eq!(protos.count(), 1, "{how}");
        };
        let mut c = Client::connect(edge.addr);
        let (status, ..) = get(&mut c, "/api/users?q=1", "X-Debug: 1\r\nX-Keep: 1\r\n");
        assert_eq!(status, 200);
        check("HTTP/1.1");
        let authority = edge.addr.to_string();
        let r = block_on(async {
            let c = h2_connect(edge.addr).await;
            let fields = [("x-debug", "1"), ("x-keep", "1")];
            h2_request(&c, "GET", "/api/users?q=1", &authority, &fields, b"").await
        });
        assert_eq!(r.unwrap().status, 200);
        check("h2");
        // Other routes are untouched.
        get(&mut c, "/apix?q=1", "X-Debug: 1\r\n");
        let seen = origin.last();
        assert_eq!(
            (seen.target.as_str(), seen.header("x-debug")),
            ("/apix?q=1", Some("1"))
        );
        assert_eq!(seen.header("host"), Some("test"));
    }
);

both_drivers!(
    a_weighted_split_sends_each_upstream_its_share,
    |d: Driver| {
        let a = Origin::fixed(b"a");
        let b = Origin::fixed(b"b");
        let split =
            Value::Raw(r#"[{ name = "a", weight = 3 }, { name = "b", weight = 1 }]"#.into());
        let cfg = Cfg::new(d, a.addr)
            .add_upstream(Upstream::new("a", &[a.addr]))
            .add_upstream(Upstream::new("b", &[b.addr]))
            .clear_routes()
            .add_route(Route::at("/").set("upstreams", split));
        let edge = Edge::start(&cfg);
        let mut clients: Vec<Client> = (0..4).map(|_| Client::connect(edge.addr)).collect();
        for i in 0..3000 {
            assert_eq!(get(&mut clients[i % 4], "/", "").0, 200);
        }
        // Within 3 % of 2 250 / 750 (one worker's smooth weighted round robin is exact).
        let (na, nb) = (a.seen_count() as f64, b.seen_count() as f64);
        assert!((na - 2250.0).abs() <= 0.03 * 2250.0, "a got {na}");
        assert!((nb - 750.0).abs() <= 0.03 * 750.0, "b got {nb}");
    }
);

/// Which of the origins (each answering its index) got `user`'s request, sent on one of `clients`
/// (several connections, so with two workers both serve).
fn home(clients: &mut [Client], user: usize) -> usize {
    let n = clients.len();
    let (status, _, body) = get(&mut clients[user % n], "/", &format!("X-User: u{user}\r\n"));
    assert_eq!(status, 200);
    body.parse().unwrap()
}

both_drivers!(
    hash_balancing_keeps_a_key_on_one_endpoint_and_moves_few_when_one_goes,
    |d: Driver| {
        const SIGHUP: i32 = 1;
        let origins: Vec<Origin> = (0..4)
            .map(|i| Origin::start(move |_| Reply::ok(i.to_string().as_bytes())))
            .collect();
        let with = |n: usize| {
            let addrs: Vec<_> = origins[..n].iter().map(|o| o.addr).collect();
            Cfg::new(d, origins[0].addr)
                .workers(2)
                .server("h2c", true)
                .clear_routes()
                .add_upstream(
                    Upstream::new("hashed", &addrs)
                        .set("balance", "hash")
                        .set("hash_key", "header:X-User"),
                )
                .add_route(Route::new("/", "hashed"))
        };
        let edge = Edge::start(&with(4));
        // 2 000 keys: the share of one endpoint is within 5 % of 1/4 with a wide margin (its
        // standard deviation is 1 %).
        let users = 2000;
        let connect = || -> Vec<Client> { (0..8).map(|_| Client::connect(edge.addr)).collect() };
        let mut clients = connect();
        let before: Vec<usize> = (0..users).map(|u| home(&mut clients, u)).collect();
        // The same keys again, each on another connection (`u % 7`, not `u % 8`): the same endpoints.
        let mut others = connect();
        for (u, &h) in before.iter().enumerate().take(400) {
            assert_eq!(
                home(&mut others[..7], u),
                h,
                "user {u} stays on its endpoint"
            );
        }
        for e in 0..4 {
            let n = before.iter().filter(|&&h| h == e).count();
            assert!(n > users / 8, "endpoint {e} got {n} of {users} keys");
        }
        // Over h2 the same key goes to the same endpoint.
        let authority = edge.addr.to_string();
        let h2_home = block_on(async {
            let c = h2_connect(edge.addr).await;
            let r = h2_request(&c, "GET", "/", &authority, &[("x-user", "u7")], b"").await;
            String::from_utf8(r.unwrap().body).unwrap()
        });
        assert_eq!(h2_home, before[7].to_string());
        // Endpoint 3 removed: only its keys move, at most 1/N + 5 % of all.
        edge.rewrite_config(&with(3));
        edge.signal(SIGHUP);
        assert!(edge
            .wait_log("config.reloaded", Duration::from_secs(5))
            .is_some());
        let mut clients = connect();
        let after: Vec<usize> = (0..users).map(|u| home(&mut clients, u)).collect();
        let moved = (0..users).filter(|&u| after[u] != before[u]).count();
        for (u, (b, a)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a != b, *b == 3, "user {u}: {b} -> {a}");
        }
        assert!(
            moved as f64 <= users as f64 * (0.25 + 0.05),
            "{moved} of {users} moved"
        );
    }
);

both_drivers!(
    a_mirror_sees_its_share_and_a_dead_mirror_changes_nothing_for_the_client,
    |d: Driver| {
        let origin = Origin::fixed(b"primary");
        let shadow = Origin::fixed(b"shadow");
        let dead = crate::harness::refused_addr();
        let mirror = |to: &str| Value::Raw(format!(r#"{{ upstream = "{to}", percent = 50 }}"#));
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .add_upstream(Upstream::new("shadow", &[shadow.addr]))
            .add_upstream(Upstream::new("dead", &[dead]))
            .clear_routes()
            .add_route(Route::new("/live", "origin").set("mirror", mirror("shadow")))
            .add_route(Route::new("/dead", "origin").set("mirror", mirror("dead")))
            .add_route(Route::new("/", "origin"));
        let edge = Edge::start(&cfg);
        let mut c = Client::connect(edge.addr);
        for _ in 0..40 {
            let (status, _, body) = get(&mut c, "/live/x?q=1", "X-Trace: t\r\n");
            assert_eq!((status, body.as_str()), (200, "primary"));
        }
        assert!(
            crate::harness::wait_until(Duration::from_secs(5), || shadow.seen_count() == 20),
            "the mirror got half: {}",
            shadow.seen_count()
        );
        let copy = shadow.last();
        assert_eq!(
            (copy.target.as_str(), copy.header("x-trace")),
            ("/live/x?q=1", Some("t"))
        );
        // A dead mirror: every request still answered by the primary; the failures are counted.
        for _ in 0..20 {
            assert_eq!(get(&mut c, "/dead", "").2, "primary");
        }
        assert_eq!(
            edge.wait_metric("edge_mirror_requests_total", &["result=\"error\""], 10.0),
            10.0
        );
        // A body over 64 KiB is not copied: dropped, counted.
        let body = vec![b'b'; 100 << 10];
        for _ in 0..2 {
            c.send(
                format!(
                    "POST /live HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            c.send(&body);
            assert_eq!(c.read_response(false).unwrap().status, 200);
        }
        assert_eq!(
            edge.wait_metric("edge_mirror_requests_total", &["result=\"dropped\""], 1.0),
            1.0
        );
        assert_eq!(
            edge.metric("edge_mirror_requests_total", &["result=\"ok\""]),
            20.0
        );
        // Over h2 too.
        let authority = edge.addr.to_string();
        block_on(async {
            let c = h2_connect(edge.addr).await;
            for _ in 0..2 {
                let r = h2_request(&c, "GET", "/live/h2", &authority, &[], b"")
                    .await
                    .unwrap();
                assert_eq!(r.body, b"primary");
            }
        });
        assert!(crate::harness::wait_until(
            Duration::from_secs(5),
            || shadow.seen_count() == 21
        ));
        assert_eq!(shadow.last().target, "/live/h2");
    }
);

both_drivers!(
    response_headers_apply_to_forwarded_and_edges_own_answers_for_the_route,
    |d: Driver| {
        let origin = Origin::start(|_| {
            Reply::raw(b"HTTP/1.1 200 OK\r\nServer: origin/1.0\r\nX-Keep: 1\r\nContent-Length: 2\r\n\r\nok", false)
        });
        let dead = crate::harness::refused_addr();
        let rules = || {
            Value::Raw(
            r#"{ set = { "strict-transport-security" = "max-age=31536000" }, add = { "x-served-for" = "${client_ip} ${request_id}" }, remove = ["server"] }"#
                .into(),
        )
        };
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .add_upstream(Upstream::new("dead", &[dead]))
            .clear_routes()
            .add_route(Route::new("/dead", "dead").set("response_headers", rules()))
            .add_route(
                Route::at("/here")
                    .set(
                        "respond",
                        Value::Raw(r#"{ status = 200, body = "here" }"#.into()),
                    )
                    .set("response_headers", rules()),
            )
            .add_route(Route::new("/", "origin").set("response_headers", rules()));
        let edge = Edge::start(&cfg);
        let check = |how: &str, status: u16, header: &dyn Fn(&str) -> Option<String>, want: u16| {
            assert_eq!(status, want, "{how}");
            assert_eq!(
                header("strict-transport-security").as_deref(),
                Some("max-age=31536000"),
                "{how}"
            );
            assert_eq!(header("server"), None, "{how}");
            assert_eq!(
                header("x-served-for").as_deref(),
                Some("127.0.0.1 rid-1"),
                "{how}"
            );
        };
        let mut c = Client::connect(edge.addr);
        for (path, want) in [("/", 200), ("/here", 200), ("/dead", 502)] {
            c.send(
                format!("GET {path} HTTP/1.1\r\nHost: test\r\nX-Request-Id: rid-1\r\n\r\n")
                    .as_bytes(),
            );
            let r = c.read_response(false).unwrap();
            check(
                &format!("HTTP/1.1 {path}"),
                r.status,
                &|n| r.header(n).map(str::to_string),
                want,
            );
            if path == "/" {
                assert_eq!(r.header("x-keep"), Some("1"), "other fields are kept");
            }
            if r.header("connection") == Some("close") {
                c = Client::connect(edge.addr);
            }
        }
        let authority = edge.addr.to_string();
        for (path, want) in [("/", 200), ("/here", 200), ("/dead", 502)] {
            let r = block_on(async {
                let c = h2_connect(edge.addr).await;
                h2_request(
                    &c,
                    "GET",
                    path,
                    &authority,
                    &[("x-request-id", "rid-1")],
                    b"",
                )
                .await
            })
            .unwrap();
            let header = |n: &str| r.headers.get(n).map(|v| v.to_str().unwrap().to_string());
            check(&format!("h2 {path}"), r.status, &header, want);
        }
    }
);
