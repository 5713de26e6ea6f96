//! Routing (DESIGN.md "Routing"), end to end: one test per rule (wildcard hosts, whole-segment prefixes,
//! exact and regex paths, methods, header and query conditions, precedence, dot segments, encoded
//! slashes, unreserved decoding, 400 `bad_path`), each sending the same requests over HTTP/1.1 and over
//! h2 (h2c, prior knowledge) and asserting the same upstream request: which route's origin got it and
//! the request target it saw (the normalised path and the received query). Then `edge --check`: the
//! compiled routes in match order, the never-match warnings, and a bad wildcard refused.

use crate::harness::{
    assert_exit, block_on, check_config, h2_connect, h2_request, Cfg, Client, Driver, Edge, Origin,
    Reply, Route, TempDir, Upstream, Value,
};

/// One request: method, target (path and query as sent), host (Host or `:authority`), extra fields.
#[derive(Clone, Copy, Debug)]
struct Req<'a> {
    method: &'a str,
    target: &'a str,
    host: &'a str,
    fields: &'a [(&'a str, &'a str)],
}

fn get(target: &str) -> Req<'_> {
    Req {
        method: "GET",
        target,
        host: "test",
        fields: &[],
    }
}

/// What a request got: the status, and for a proxied one the route whose origin answered and the
/// target that origin saw.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    status: u16,
    upstream: Option<(String, String)>,
}

/// The route that got it and the target its origin saw.
fn to(route: &str, target: &str) -> Got {
    Got {
        status: 200,
        upstream: Some((route.into(), target.into())),
    }
}

fn refused(status: u16) -> Got {
    Got {
        status,
        upstream: None,
    }
}

/// An edge serving HTTP/1.1 and h2c, with one origin per route, named as the route (and its upstream)
/// is; each origin answers its own name.
struct Fixture {
    edge: Edge,
    origins: Vec<(String, Origin)>,
}

impl Fixture {
    /// `routes`: (name, route without `name` and `upstream`), in file order.
    fn start(d: Driver, routes: Vec<(&str, Route)>) -> Fixture {
        let origins: Vec<(String, Origin)> = routes
            .iter()
            .map(|(name, _)| {
                let body = name.to_string();
                (
                    name.to_string(),
                    Origin::start(move |_| Reply::ok(body.as_bytes())),
                )
            })
            .collect();
        let mut cfg = Cfg::new(d, origins[0].1.addr)
            .server("h2c", true)
            .clear_routes();
        for ((name, route), (_, origin)) in routes.into_iter().zip(&origins) {
            cfg = cfg
                .add_upstream(Upstream::new(name, &[origin.addr]))
                .add_route(route.set("name", name).set("upstream", name));
        }
        Fixture {
            edge: Edge::start(&cfg),
            origins,
        }
    }

    /// Which origin answered `body` (its name) and the target it saw last.
    fn seen(&self, status: u16, body: &[u8]) -> Got {
        let origin = self.origins.iter().find(|(n, _)| n.as_bytes() == body);
        Got {
            status,
            upstream: origin.map(|(name, o)| (name.clone(), o.last().target)),
        }
    }

    fn h1(&self, r: &Req<'_>) -> Got {
        let mut c = Client::connect(self.edge.addr);
        let mut text = format!("{} {} HTTP/1.1\r\nHost: {}\r\n", r.method, r.target, r.host);
        for (n, v) in r.fields {
            text.push_str(&format!("{n}: {v}\r\n"));
        }
        c.send(format!("{text}\r\n").as_bytes());
        let resp = c.read_response(r.method == "HEAD").expect("a response");
        self.seen(resp.status, &resp.body)
    }

    fn h2(&self, r: &Req<'_>) -> Got {
        let resp = block_on(async {
            let c = h2_connect(self.edge.addr).await;
            h2_request(&c, r.method, r.target, r.host, r.fields, b"").await
        })
        .expect("an h2 response");
        self.seen(resp.status, &resp.body)
    }

    /// Sends `r` over HTTP/1.1 and over h2; both must get `want` (and reach no other origin).
    fn expect(&self, r: Req<'_>, want: Got) {
        let before = self.total_seen();
        let h1 = self.h1(&r);
        assert_eq!(h1, want, "HTTP/1.1: {r:?}");
        let h2 = self.h2(&r);
        assert_eq!(h2, want, "h2: {r:?}");
        let reached = usize::from(want.upstream.is_some()) * 2;
        assert_eq!(self.total_seen() - before, reached, "{r:?}");
    }

    fn total_seen(&self) -> usize {
        self.origins.iter().map(|(_, o)| o.seen_count()).sum()
    }

    /// `expect` for each (request, route, target seen).
    fn expect_all(&self, cases: &[(Req<'_>, &str, &str)]) {
        for (r, route, target) in cases {
            self.expect(*r, to(route, target));
        }
    }
}

fn prefix(p: &str) -> Route {
    Route::to("-").set("path_prefix", p)
}

fn on_host(host: &str, p: &str) -> Route {
    prefix(p).set("host", host)
}

fn at_host<'a>(host: &'a str, target: &'a str) -> Req<'a> {
    Req {
        host,
        ..get(target)
    }
}

both_drivers!(wildcard_hosts_match_subdomains_longest_suffix_first, |d| {
    let f = Fixture::start(
        d,
        vec![
            ("any", prefix("/")),
            ("wild", on_host("*.example.com", "/")),
            ("deeper", on_host("*.a.example.com", "/")),
            ("exact", on_host("a.example.com", "/")),
            ("exact-api", on_host("API.example.com", "/api")),
        ],
    );
    f.expect_all(&[
        (at_host("a.example.com", "/x"), "exact", "/x"),
        (at_host("A.EXAMPLE.COM:8080", "/x"), "exact", "/x"),
        (at_host("b.example.com", "/x"), "wild", "/x"),
        (at_host("x.b.example.com", "/x"), "wild", "/x"),
        (at_host("x.a.example.com", "/x"), "deeper", "/x"),
        (at_host("example.com", "/x"), "any", "/x"),
        (at_host("other.test", "/x"), "any", "/x"),
        // A host's own routes first; when none matches, the wildcard's.
        (
            at_host("api.example.com", "/api/v1"),
            "exact-api",
            "/api/v1",
        ),
        (at_host("api.example.com", "/other"), "wild", "/other"),
    ]);
});

both_drivers!(path_prefix_matches_whole_segments, |d| {
    let f = Fixture::start(
        d,
        vec![
            ("any", prefix("/")),
            ("ws", prefix("/ws")),
            ("api", prefix("/api/")),
        ],
    );
    f.expect_all(&[
        (get("/ws"), "ws", "/ws"),
        (get("/ws/"), "ws", "/ws/"),
        (get("/ws/chat?room=1"), "ws", "/ws/chat?room=1"),
        (get("/wsfoo"), "any", "/wsfoo"),
        (get("/api"), "api", "/api"),
        (get("/api/x"), "api", "/api/x"),
        (get("/apix"), "any", "/apix"),
        (get("//ws"), "any", "//ws"),
    ]);
});

both_drivers!(exact_and_regex_paths, |d| {
    // No catch-all prefix: `/` would come before every regex (a prefix comes before a regex).
    let f = Fixture::start(
        d,
        vec![
            ("static", prefix("/static")),
            ("login", Route::to("-").set("path_exact", "/login")),
            (
                "users",
                Route::to("-").set("path_regex", "^/v[0-9]+/users/[0-9]+$"),
            ),
            ("anywhere", Route::to("-").set("path_regex", "/img/")),
        ],
    );
    f.expect_all(&[
        (get("/login"), "login", "/login"),
        (get("/login?next=/x"), "login", "/login?next=/x"),
        (get("/v2/users/7"), "users", "/v2/users/7"),
        (get("/a/img/b.png"), "anywhere", "/a/img/b.png"),
        (get("/static/img/b.png"), "static", "/static/img/b.png"),
    ]);
    for unrouted in ["/login/", "/v2/users/7/x", "/x/v2/users/7"] {
        f.expect(get(unrouted), refused(404));
    }
});

both_drivers!(method_header_and_query_conditions, |d| {
    let f = Fixture::start(
        d,
        vec![
            ("any", prefix("/")),
            ("post", prefix("/").set("methods", ["POST", "PUT"])),
            (
                "canary",
                prefix("/").set(
                    "headers",
                    Value::Raw(r#"[{ name = "X-Canary", value = "1" }]"#.into()),
                ),
            ),
            (
                "v2",
                prefix("/").set("query", Value::Raw(r#"[{ name = "v", value = "2" }]"#.into())),
            ),
            (
                "tier",
                prefix("/").set(
                    "headers",
                    Value::Raw(
                        r#"[{ name = "x-tier", prefix = "gold" }, { name = "x-debug", present = false }]"#
                            .into(),
                    ),
                ),
            ),
        ],
    );
    let with = |fields| Req {
        fields,
        ..get("/p")
    };
    f.expect_all(&[
        (get("/p"), "any", "/p"),
        (
            Req {
                method: "POST",
                ..get("/p")
            },
            "post",
            "/p",
        ),
        (
            Req {
                method: "DELETE",
                ..get("/p")
            },
            "any",
            "/p",
        ),
        (with(&[("x-canary", "1")]), "canary", "/p"),
        (with(&[("x-canary", "10")]), "any", "/p"),
        (get("/p?v=2"), "v2", "/p?v=2"),
        (get("/p?a=1&v=%32"), "v2", "/p?a=1&v=%32"),
        (get("/p?v=3"), "any", "/p?v=3"),
        // Two conditions beat one.
        (
            with(&[("x-tier", "golden"), ("x-canary", "1")]),
            "tier",
            "/p",
        ),
        (with(&[("x-tier", "golden"), ("x-debug", "1")]), "any", "/p"),
    ]);
});

both_drivers!(
    precedence_exact_then_longest_prefix_then_regex_then_conditions_then_file_order,
    |d| {
        let f = Fixture::start(
            d,
            vec![
                ("regex", Route::to("-").set("path_regex", "^/api")),
                ("api", prefix("/api")),
                ("v1", prefix("/api/v1")),
                ("exact", Route::to("-").set("path_exact", "/api/v1/x")),
                (
                    "beta",
                    prefix("/api/v1").set(
                        "headers",
                        Value::Raw(r#"[{ name = "x-beta", present = true }]"#.into()),
                    ),
                ),
                ("v1-again", prefix("/api/v1")),
            ],
        );
        let beta = Req {
            fields: &[("x-beta", "yes")],
            ..get("/api/v1/y")
        };
        f.expect_all(&[
            (get("/api/v1/x"), "exact", "/api/v1/x"),
            (get("/api/v1/y"), "v1", "/api/v1/y"),
            (beta, "beta", "/api/v1/y"),
            (get("/api/z"), "api", "/api/z"),
            (get("/apiz"), "regex", "/apiz"),
        ]);
        f.expect(get("/other"), refused(404));
    }
);

both_drivers!(
    dot_segments_are_removed_before_routing_and_forwarding,
    |d| {
        let f = Fixture::start(d, vec![("any", prefix("/")), ("v2", prefix("/v2"))]);
        f.expect_all(&[
            (get("/x/../v2/a"), "v2", "/v2/a"),
            (get("/x/./../v2/a?q=/../b"), "v2", "/v2/a?q=/../b"),
            (get("/v2/%2e%2E/x"), "any", "/x"),
            (get("/v2/./a"), "v2", "/v2/a"),
            (get("/v2/a/.."), "v2", "/v2/"),
        ]);
    }
);

both_drivers!(
    encoded_slashes_stay_one_segment_and_go_upstream_encoded,
    |d| {
        let f = Fixture::start(d, vec![("any", prefix("/")), ("a", prefix("/a"))]);
        f.expect_all(&[
            (get("/a%2Fb"), "any", "/a%2Fb"),
            (get("/a%2fb"), "any", "/a%2Fb"),
            (get("/a/b%2F..%2Fc"), "a", "/a/b%2F..%2Fc"),
            (get("/a/x%5cy"), "a", "/a/x%5Cy"),
        ]);
    }
);

both_drivers!(unreserved_encodings_are_decoded, |d| {
    let f = Fixture::start(d, vec![("any", prefix("/")), ("user", prefix("/~user"))]);
    f.expect_all(&[
        (get("/%7Euser/x"), "user", "/~user/x"),
        (get("/%7euser"), "user", "/~user"),
        (get("/%41%42c"), "any", "/ABc"),
        (get("/~user?q=%7E"), "user", "/~user?q=%7E"),
    ]);
});

both_drivers!(bad_paths_are_400_bad_path, |d| {
    let f = Fixture::start(d, vec![("any", prefix("/"))]);
    let bad = [
        "/../etc/passwd",
        "/a/../../b",
        "/a%00b",
        "/%2e%2e/x",
        "/a%zz",
    ];
    for target in bad {
        f.expect(get(target), refused(400));
    }
    let n = (bad.len() * 2) as f64;
    assert_eq!(
        f.edge
            .wait_metric("edge_requests_invalid_total", &["reason=\"bad_path\""], n),
        n
    );
    // The HTTP/1.1 connection closes after it, with the cause in the body.
    let mut c = Client::connect(f.edge.addr);
    c.send(b"GET /../x HTTP/1.1\r\nHost: test\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(r.text().contains("path above the root"), "{}", r.text());
});

/// A config file with `routes` (TOML) after upstreams `a` and `b`.
fn config_file(dir: &TempDir, routes: &str) -> std::path::PathBuf {
    let path = dir.0.join("routes.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n\
         [[upstreams]]\nname = \"a\"\nendpoints = [\"127.0.0.1:1\"]\n\
         [[upstreams]]\nname = \"b\"\nendpoints = [\"127.0.0.1:2\"]\n{routes}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_lists_routes_in_match_order_and_warns_about_routes_that_never_match() {
    let dir = TempDir::new();
    let path = config_file(
        &dir,
        r#"
[[routes]]
path_prefix = "/"
upstream = "a"

[[routes]]
name = "api"
host = "*.example.com"
path_prefix = "/api"
methods = ["GET"]
upstream = "b"

[[routes]]
name = "shadowed"
host = "*.example.com"
path_prefix = "/api/"
methods = ["GET"]
upstream = "a"

[[routes]]
path_exact = "/a/../b"
upstream = "a"
"#,
    );
    let out = check_config(&path);
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let listing = stdout
        .split("# Routes in match order")
        .nth(1)
        .expect("the route listing");
    let want = "\
# host \"*.example.com\":
#   routes[1] (\"api\"): path_prefix \"/api\", methods [GET] -> upstream \"b\"
#   routes[2] (\"shadowed\"): path_prefix \"/api/\", methods [GET] -> upstream \"a\"
# any host:
#   routes[3]: path_exact \"/a/../b\" -> upstream \"a\"
#   routes[0]: path_prefix \"/\" -> upstream \"a\"
";
    assert!(listing.ends_with(want), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "edge: warning: routes[2] (\"shadowed\") can never match: routes[1] (\"api\") has the same host and path rule"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("edge: warning: routes[3] can never match: path_exact \"/a/../b\" is not a normalised path"),
        "{stderr}"
    );
    assert!(stderr.contains("edge: configuration OK"), "{stderr}");
}

#[test]
fn check_refuses_a_bad_wildcard_and_a_host_with_a_port() {
    let dir = TempDir::new();
    for (host, reason) in [
        ("a.*.com", "only a leading `*.` is allowed"),
        ("*.example.com:8080", "has a port"),
    ] {
        let path = config_file(
            &dir,
            &format!("[[routes]]\nname = \"w\"\nhost = \"{host}\"\npath_prefix = \"/\"\nupstream = \"a\"\n"),
        );
        let out = check_config(&path);
        assert_exit(&out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("routes.toml"), "{stderr}");
        assert!(stderr.contains("key `routes[0].host`"), "{stderr}");
        assert!(stderr.contains("route \"w\""), "{stderr}");
        assert!(stderr.contains(reason), "{stderr}");
    }
}
