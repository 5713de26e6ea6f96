//! Tests of the route table: one table of requests per rule and per precedence step, the compile
//! errors, the warnings, the listing, and 10 000 routes against the reference matcher.

use super::*;
use crate::http::head::{parse_request, Fields};
use crate::policy::reference::Reference;

/// A route spec from a compact text: `host path-rule [conditions...]`, where the host is `-` for
/// none, the path rule is `=/exact`, `~regex` or a prefix, and each condition is `M:GET,HEAD`,
/// `H:name=value`, `H:name^prefix`, `H:name?` (present), `H:name!` (absent), `Q:` likewise.
fn spec(text: &str) -> RouteSpec {
    let mut words = text.split_whitespace();
    let host = words.next().unwrap();
    let path = words.next().unwrap();
    let mut s = RouteSpec {
        name: None,
        host: (host != "-").then(|| host.to_string()),
        path: match path.as_bytes()[0] {
            b'=' => PathRule::Exact(path[1..].into()),
            b'~' => PathRule::Regex(path[1..].into()),
            _ => PathRule::Prefix(path.into()),
        },
        methods: Vec::new(),
        headers: Vec::new(),
        query: Vec::new(),
        action: format!("upstream {text:?}"),
    };
    for w in words {
        let (kind, rest) = w.split_at(2);
        if kind == "M:" {
            s.methods = rest.split(',').map(str::to_string).collect();
            continue;
        }
        let c = condition(rest);
        match kind {
            "H:" => s.headers.push(c),
            "Q:" => s.query.push(c),
            _ => panic!("bad condition {w}"),
        }
    }
    s
}

fn condition(text: &str) -> Condition {
    let at = text.find(['=', '^', '?', '!']).unwrap();
    let (name, rest) = text.split_at(at);
    // `␠` stands for a space (words are split at spaces).
    let value = rest[1..].replace('␠', " ");
    let test = match rest.as_bytes()[0] {
        b'=' => Test::Value(value),
        b'^' => Test::Prefix(value),
        b'?' => Test::Present(true),
        _ => Test::Present(false),
    };
    Condition {
        name: name.into(),
        test,
    }
}

/// A table of `routes` (each leading to its own index) and its reference matcher.
fn table(routes: &[&str]) -> (RouteTable<usize>, Reference) {
    let specs: Vec<RouteSpec> = routes.iter().map(|t| spec(t)).collect();
    let reference = Reference::new(&specs);
    let with_index = specs.into_iter().enumerate().map(|(i, s)| (s, i)).collect();
    (RouteTable::new(with_index).unwrap(), reference)
}

/// A request from `line` (`METHOD target`), `host` (none when empty) and extra header lines; the route
/// index both matchers agree on.
fn route(t: &(RouteTable<usize>, Reference), line: &str, host: &str, extra: &str) -> Option<usize> {
    let host_line = match host {
        "" => String::new(),
        h => format!("Host: {h}\r\n"),
    };
    let text = format!("{line} HTTP/1.1\r\n{host_line}{extra}\r\n");
    let mut fields = Fields::new();
    let head = parse_request(text.as_bytes(), 100, &mut fields)
        .unwrap()
        .unwrap();
    let buf = text.as_bytes();
    let target = &buf[head.path.clone()];
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    };
    let r = RouteRequest {
        method: &buf[head.method.clone()],
        host: head.authority.clone().map(|a| &buf[a]).or_else(|| {
            fields
                .iter()
                .find(|f| f.name(buf).eq_ignore_ascii_case(b"host"))
                .map(|f| f.value(buf))
        }),
        path,
        query,
        head: buf,
        fields: &fields,
    };
    let found = t.0.find(&r).copied();
    assert_eq!(
        found,
        t.1.find(&r),
        "table and reference differ on {line} {host}"
    );
    assert_eq!(found, t.0.find_index(&r));
    found
}

/// Asserts each (request line, host, extra header lines) goes to the route index given.
fn expect(routes: &[&str], cases: &[(&str, &str, &str, Option<usize>)]) {
    let t = table(routes);
    for (line, host, extra, want) in cases {
        assert_eq!(
            route(&t, line, host, extra),
            *want,
            "{line} host {host:?} {extra:?}"
        );
    }
}

#[test]
fn path_prefix_matches_whole_segments() {
    expect(
        &["- /ws", "- /api/", "- /a//b"],
        &[
            ("GET /ws", "", "", Some(0)),
            ("GET /ws/", "", "", Some(0)),
            ("GET /ws/x", "", "", Some(0)),
            ("GET /wsfoo", "", "", None),
            ("GET /w", "", "", None),
            ("GET /api", "", "", Some(1)),
            ("GET /api/v1", "", "", Some(1)),
            ("GET /apix", "", "", None),
            ("GET /a//b/c", "", "", Some(2)),
            ("GET /a/b", "", "", None),
            ("GET /ws?x=/api", "", "", Some(0)),
        ],
    );
    expect(
        &["- /"],
        &[
            ("GET /anything/at/all", "", "", Some(0)),
            ("GET /", "", "", Some(0)),
        ],
    );
}

#[test]
fn longest_prefix_wins_then_more_conditions_then_file_order() {
    expect(
        &[
            "- /",
            "- /api",
            "- /api/v1",
            "- /api/v1 H:x-beta?",
            "- /api/v1",
        ],
        &[
            ("GET /api/v1/x", "", "", Some(2)),
            ("GET /api/v1/x", "", "X-Beta: 1\r\n", Some(3)),
            ("GET /api/v2", "", "", Some(1)),
            ("GET /other", "", "", Some(0)),
        ],
    );
}

#[test]
fn exact_beats_prefix_beats_regex() {
    expect(
        &["- ~^/api/v[0-9]+$", "- /api", "- =/api/v1", "- ~/x"],
        &[
            ("GET /api/v1", "", "", Some(2)),
            ("GET /api/v2", "", "", Some(1)),
            ("GET /api/v1/", "", "", Some(1)),
            ("GET /x/api", "", "", Some(3)),
            ("GET /y", "", "", None),
        ],
    );
}

#[test]
fn regexes_are_anchored_as_written_and_ranked_by_conditions_then_file_order() {
    expect(
        &[
            "- ~^/v[0-9]+/users/",
            "- ~users",
            "- ~users M:POST",
            "- ~^/v1/",
        ],
        &[
            ("GET /v2/users/7", "", "", Some(0)),
            ("GET /x/users", "", "", Some(1)),
            ("POST /x/users", "", "", Some(2)),
            ("POST /v1/users/", "", "", Some(2)),
            ("GET /v1/users/", "", "", Some(0)),
            ("GET /v1/other", "", "", Some(3)),
        ],
    );
}

#[test]
fn hosts_exact_then_wildcards_longest_suffix_first_then_any() {
    let routes = [
        "- /",
        "*.example.com /",
        "*.a.example.com /",
        "a.example.com /",
        "API.Example.COM /api",
        "[::1] /",
        "10.0.0.1 /",
    ];
    expect(
        &routes,
        &[
            ("GET /", "a.example.com", "", Some(3)),
            ("GET /", "A.EXAMPLE.COM:8080", "", Some(3)),
            ("GET /", "a.example.com.", "", Some(3)),
            ("GET /", "b.example.com", "", Some(1)),
            ("GET /", "x.a.example.com", "", Some(2)),
            ("GET /", "y.x.a.example.com", "", Some(2)),
            ("GET /", "x.b.example.com", "", Some(1)),
            ("GET /", "example.com", "", Some(0)),
            ("GET /", "notexample.com", "", Some(0)),
            ("GET /", "other", "", Some(0)),
            ("GET /", "", "", Some(0)),
            ("GET /", "[::1]:80", "", Some(5)),
            ("GET /", "[::1]", "", Some(5)),
            ("GET /", "10.0.0.1:80", "", Some(6)),
            // A host's routes are tried first; when none matches, the next group's are.
            ("GET /api/x", "api.example.com", "", Some(4)),
            ("GET /other", "api.example.com", "", Some(1)),
            ("GET http://a.example.com/x", "other", "", Some(3)),
        ],
    );
    expect(&["x.example /"], &[("GET /", "y.example", "", None)]);
}

#[test]
fn methods_are_one_condition_and_case_sensitive() {
    expect(
        &["- /", "- / M:GET,HEAD", "- / M:POST"],
        &[
            ("GET /", "", "", Some(1)),
            ("HEAD /", "", "", Some(1)),
            ("POST /", "", "", Some(2)),
            ("PUT /", "", "", Some(0)),
            ("get /", "", "", Some(0)),
        ],
    );
}

#[test]
fn header_conditions() {
    expect(
        &[
            "- /",
            "- / H:x-canary=1",
            "- / H:X-Tier^gold",
            "- / H:x-debug? H:x-trace!",
        ],
        &[
            ("GET /", "", "X-Canary: 1\r\n", Some(1)),
            ("GET /", "", "x-canary:   1  \r\n", Some(1)),
            ("GET /", "", "X-Canary: 10\r\n", Some(0)),
            ("GET /", "", "X-Canary: 0\r\nX-Canary: 1\r\n", Some(1)),
            ("GET /", "", "X-Tier: golden\r\n", Some(2)),
            ("GET /", "", "X-Tier: Gold\r\n", Some(0)),
            ("GET /", "", "X-Debug: \r\n", Some(3)),
            ("GET /", "", "X-Debug: 1\r\nX-Trace: 1\r\n", Some(0)),
            ("GET /", "", "", Some(0)),
        ],
    );
}

#[test]
fn query_conditions_on_decoded_parameters() {
    expect(
        &[
            "- /",
            "- / Q:v=2",
            "- / Q:name=a␠b",
            "- / Q:tag^pre",
            "- / Q:flag? Q:off!",
            "- / Q:a&b=c",
        ],
        &[
            ("GET /?v=2", "", "", Some(1)),
            ("GET /?x=1&v=2", "", "", Some(1)),
            ("GET /?v=%32", "", "", Some(1)),
            ("GET /?%76=2", "", "", Some(1)),
            ("GET /?v=20", "", "", Some(0)),
            ("GET /?v=1&v=2", "", "", Some(1)),
            ("GET /?name=a+b", "", "", Some(2)),
            ("GET /?name=a%20b", "", "", Some(2)),
            ("GET /?tag=prefix", "", "", Some(3)),
            ("GET /?tag=%70re", "", "", Some(3)),
            ("GET /?tag=pr", "", "", Some(0)),
            ("GET /?flag", "", "", Some(4)),
            ("GET /?flag=&off", "", "", Some(0)),
            ("GET /?a%26b=c", "", "", Some(5)),
            ("GET /?a&b=c", "", "", Some(0)),
            ("GET /?v=%zz", "", "", Some(0)),
            ("GET /", "", "", Some(0)),
        ],
    );
}

#[test]
fn no_route_is_none() {
    expect(
        &["- /only", "h.example /"],
        &[("GET /other", "x", "", None), ("OPTIONS *", "", "", None)],
    );
}

fn errors(routes: Vec<RouteSpec>) -> Vec<(usize, String, String)> {
    let with_index: Vec<_> = routes.into_iter().map(|s| (s, ())).collect();
    let errs = RouteTable::new(with_index).unwrap_err();
    errs.into_iter()
        .map(|e| (e.route, e.key, e.reason))
        .collect()
}

#[test]
fn compile_errors_name_route_key_and_reason() {
    let mut named = spec("- /");
    named.name = Some("api".into());
    let bad = [
        ("*.example.com:8080 /", "host", "has a port"),
        ("a.example.com:80 /", "host", "has a port"),
        ("[::1]:80 /", "host", "has a port"),
        ("a.*.com /", "host", "only a leading `*.`"),
        ("* /", "host", "only a leading `*.`"),
        ("*.*.com /", "host", "not a valid wildcard"),
        ("a..com /", "host", "not a host name"),
        ("a/b /", "host", "not a host name"),
        ("- api", "path_prefix", "must start with '/'"),
        ("- =api", "path_exact", "must start with '/'"),
        ("- ~(", "path_regex", "invalid regex"),
        ("- / M:get", "methods[0]", "case-sensitive: \"GET\""),
        ("- / M:GET,FETCH", "methods[1]", "unknown method \"FETCH\""),
        ("- / H:x_y(=1", "headers[0].name", "not a header field name"),
        ("- / Q:=1", "query[0].name", "must not be empty"),
    ];
    for (text, key, reason) in bad {
        let got = errors(vec![named.clone(), spec(text)]);
        assert_eq!(got.len(), 1, "{text}: {got:?}");
        assert_eq!((got[0].0, got[0].1.as_str()), (1, key), "{text}");
        assert!(got[0].2.contains(reason), "{text}: {}", got[0].2);
    }
    let mut spaced = spec("- /");
    spaced.headers.push(condition("x=1 "));
    spaced.name = Some("spaced".into());
    let got = errors(vec![spaced]);
    assert_eq!(got[0].1, "headers[0].value");
    assert!(
        got[0]
            .2
            .starts_with("route \"spaced\": \"1 \" starts or ends"),
        "{}",
        got[0].2
    );
    let got = errors(vec![named.clone(), named.clone()]);
    assert_eq!((got[0].0, got[0].1.as_str()), (1, "name"));
    assert!(
        got[0].2.contains("duplicate route name \"api\""),
        "{}",
        got[0].2
    );
    let mut numeric = spec("- /");
    numeric.name = Some("7".into());
    assert_eq!(errors(vec![numeric])[0].1, "name");
    // Every problem of a route is reported.
    assert_eq!(errors(vec![spec("a:1 api M:x")]).len(), 3);
}

fn warnings(routes: &[&str]) -> Vec<String> {
    table(routes).0.warnings().to_vec()
}

#[test]
fn warnings_name_routes_that_can_never_match() {
    let w = warnings(&[
        "- /api",
        "- /api/",
        "- /api H:x=1",
        "- /api M:GET",
        "h.example /api",
        "- /api M:GET,HEAD",
    ]);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].starts_with("routes[1] can never match: routes[0] has the same host"),
        "{w:?}"
    );
    // Broader conditions that come first (more conditions, or as many and earlier) shadow.
    let w = warnings(&[
        "- =/x M:GET,HEAD H:a^b",
        "- =/x M:GET H:a=bc",
        "- =/x H:a? Q:q=1 M:GET",
    ]);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].starts_with("routes[1] can never match: routes[0]"),
        "{w:?}"
    );
    // A catch-all prefix comes before every regex of its host whose conditions imply its own.
    let w = warnings(&[
        "- ~^/a M:GET",
        "- / M:GET,POST",
        "- ~^/b",
        "h.example ~^/c",
        "- ~^/d Q:x=1 M:GET",
    ]);
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(
        w[0].starts_with(
            "routes[0] can never match: routes[1] has the same host and path_prefix \"/\""
        ),
        "{w:?}"
    );
    assert!(
        w[1].starts_with("routes[4] can never match: routes[1]"),
        "{w:?}"
    );
    for (route, why) in [
        ("- /a/../b", "write \"/b\""),
        ("- =/a/./b", "write \"/a/b\""),
        ("- /%7euser", "write \"/~user\""),
        ("- /a%2fb", "write \"/a%2Fb\""),
        ("- =/../x", "400 bad_path"),
        ("- ~^api/", "anchored on 'a'"),
        ("- ~^$", "only an empty path"),
        ("- / M:CONNECT", "edge answers CONNECT itself"),
    ] {
        let w = warnings(&[route]);
        assert_eq!(w.len(), 1, "{route}: {w:?}");
        assert!(w[0].starts_with("routes[0] can never match: "), "{w:?}");
        assert!(w[0].contains(why), "{route}: {w:?}");
    }
    for fine in [
        "- ~^a?/",
        "- ~^(a|/)",
        "- ~api",
        "- ~^/api",
        "- ~\\Ax|/y",
        "- /a%2Fb",
        "- /api/",
    ] {
        assert_eq!(warnings(&[fine]), Vec::<String>::new(), "{fine}");
    }
}

#[test]
fn the_listing_is_in_match_order() {
    let mut specs: Vec<RouteSpec> = [
        "- /",
        "- ~^/v[0-9]+/",
        "- /api",
        "- =/login M:POST",
        "*.example.com /",
        "a.example.com /api/v1 H:x-beta? Q:v=2",
        "*.a.example.com /",
    ]
    .iter()
    .map(|t| spec(t))
    .collect();
    specs[3].name = Some("login".into());
    for (i, s) in specs.iter_mut().enumerate() {
        s.action = format!("upstream \"u{i}\"");
    }
    let t = RouteTable::new(specs.into_iter().map(|s| (s, ())).collect()).unwrap();
    let want = "\
host \"a.example.com\":
  routes[5]: path_prefix \"/api/v1\", headers [x-beta present], query [v = \"2\"] -> upstream \"u5\"
host \"*.a.example.com\":
  routes[6]: path_prefix \"/\" -> upstream \"u6\"
host \"*.example.com\":
  routes[4]: path_prefix \"/\" -> upstream \"u4\"
any host:
  routes[3] (\"login\"): path_exact \"/login\", methods [POST] -> upstream \"u3\"
  routes[2]: path_prefix \"/api\" -> upstream \"u2\"
  routes[0]: path_prefix \"/\" -> upstream \"u0\"
  routes[1]: path_regex \"^/v[0-9]+/\" -> upstream \"u1\"
";
    assert_eq!(t.listing(), want);
    assert_eq!(t.get(3).map(|(label, _)| label), Some("login"));
    assert_eq!(t.get(2).map(|(label, _)| label), Some("2"));
}

/// 10 000 routes over 200 exact hosts, 20 wildcards and no host, with prefixes, exact paths and a few
/// regexes: every request agrees with the reference, and requests for routes deep in the file find
/// them.
#[test]
fn ten_thousand_routes_agree_with_the_reference() {
    let mut texts = Vec::new();
    for i in 0..10_000 {
        let host = match i % 4 {
            0 => "-".to_string(),
            1 => format!("h{}.example.com", i % 200),
            2 => format!("*.w{}.example.com", i % 20),
            _ => format!("h{}.example.com", (i * 7) % 200),
        };
        let path = match i % 5 {
            0 => format!("/s{}/p{}", i % 97, i),
            1 => format!("=/s{}/e{}", i % 89, i),
            2 => format!("/s{}", i % 101),
            3 if i % 500 == 3 => format!("~^/r{}/[a-z]+$", i % 7),
            _ => format!("/s{}/p{}/deep", i % 53, i),
        };
        let cond = match i % 7 {
            0 => " M:GET",
            1 => " H:x-v=1",
            2 => " Q:v=2",
            _ => "",
        };
        texts.push(format!("{host} {path}{cond}"));
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t = table(&refs);
    assert_eq!(t.0.len(), 10_000);
    let mut found = 0;
    for i in (0..10_000).step_by(50) {
        let host = match i % 3 {
            0 => format!("h{}.example.com", i % 200),
            1 => format!("x.w{}.example.com", i % 20),
            _ => "other".into(),
        };
        let extra = ["", "X-V: 1\r\n"][i % 2];
        let q = ["", "?v=2"][(i / 2) % 2];
        let method = ["GET", "POST"][(i / 4) % 2];
        for path in [
            format!("/s{}/p{}", i % 97, i),
            format!("/s{}/e{}", i % 89, i),
            format!("/s{}/x", i % 101),
            format!("/r{}/abc", i % 7),
            format!("/s{}/p{}/deep/er", i % 53, i),
        ] {
            let line = format!("{method} {path}{q}");
            found += usize::from(route(&t, &line, &host, extra).is_some());
        }
    }
    assert!(found > 300, "only {found} requests found a route");
    // The last route of the file, by its own host and prefix.
    let last = route(&t, "GET /s35/p9999/deep/x", "h193.example.com", "");
    assert_eq!(last, Some(9999));
}

/// A clone (what each worker matches on) shares the routes and finds what the original finds, on
/// another thread, with regexes of its own.
#[test]
fn a_clone_matches_like_the_original_on_another_thread() {
    let t = table(&["- ~^/v[0-9]+/", "- /api", "h.example ~users$"]);
    let clone = t.0.clone();
    assert_eq!(clone.len(), 3);
    assert_eq!(clone.warnings(), t.0.warnings());
    let found = std::thread::spawn(move || {
        let (head, fields) = (b"".as_slice(), Vec::new());
        let req = |host: &'static [u8], path: &'static [u8]| RouteRequest {
            method: b"GET",
            host: Some(host),
            path,
            query: None,
            head,
            fields: &fields,
        };
        [
            clone.find_index(&req(b"x", b"/v2/a")),
            clone.find_index(&req(b"h.example", b"/x/users")),
            clone.find_index(&req(b"x", b"/x/users")),
        ]
    })
    .join()
    .unwrap();
    assert_eq!(found, [Some(0), Some(2), None]);
    assert_eq!(route(&t, "GET /v2/a", "x", ""), Some(0));
}
