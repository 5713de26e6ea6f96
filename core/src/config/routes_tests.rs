//! Tests of the `[[routes]]` schema: every key parses, prints back and compiles into a table that finds
//! routes; each schema and matcher error names the file, `routes[i].key` and the route's name.

use std::time::Duration;

use super::*;
use crate::policy::route::RouteRequest;

const BASE: &str = "[[upstreams]]\nname = \"a\"\nendpoints = [\"127.0.0.1:1\"]\n\
                    [[upstreams]]\nname = \"b\"\nendpoints = [\"127.0.0.1:2\"]\n";

fn load(routes: &str) -> Result<Resolved, Vec<ConfigError>> {
    Config::parse(&format!("{BASE}{routes}"), "r.toml")
        .map_err(|e| vec![e])?
        .resolve("r.toml")
}

fn find<'a>(r: &'a Resolved, method: &str, host: &str, path: &str) -> Option<&'a ResolvedRoute> {
    r.routes.find(&RouteRequest {
        method: method.as_bytes(),
        host: Some(host.as_bytes()),
        path: path.as_bytes(),
        query: None,
        head: b"",
        fields: &[],
    })
}

const ALL_KEYS: &str = r#"
[[routes]]
path_prefix = "/"
upstream = "a"

[[routes]]
name = "api"
host = "*.example.com"
path_regex = "^/v[0-9]+/"
methods = ["GET", "HEAD"]
headers = [{ name = "x-canary", value = "1" }, { name = "x-tier", prefix = "gold" }, { name = "x-debug", present = false }]
query = [{ name = "v", value = "2" }]
upstream = "b"
request_timeout = "600s"
client_request_timeout = "10m"
abandon_on_client_close = true

[[routes]]
path_exact = "/login"
upstream = "b"
"#;

#[test]
fn every_route_key_parses_prints_back_and_compiles() {
    let r = load(ALL_KEYS).unwrap();
    assert_eq!(r.routes.len(), 3);
    let again = Config::parse(&r.config.to_toml(), "printed").unwrap();
    assert_eq!(again.to_toml(), r.config.to_toml());
    assert_eq!(again.routes[1].headers.len(), 3);
    let (label, api) = r.routes.get(1).unwrap();
    assert_eq!((label, api.upstream, api.index), ("api", Some(1), 1));
    assert_eq!(api.client_request_timeout, Some(Duration::from_secs(600)));
    assert!(api.abandon_on_client_close);
    assert!(
        !r.routes.get(0).unwrap().1.abandon_on_client_close,
        "off by default"
    );
    assert_eq!(find(&r, "GET", "x", "/login").map(|r| r.index), Some(2));
    assert_eq!(find(&r, "GET", "x", "/login/").map(|r| r.index), Some(0));
    assert_eq!(r.routes.get(0).unwrap().0, "0");
    assert!(r
        .routes
        .listing()
        .contains("routes[1] (\"api\"): path_regex"));
}

#[test]
fn the_flag_route_is_a_prefix_route() {
    let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
    c.apply(&Overrides {
        upstreams: vec!["127.0.0.1:9".into()],
        ..Overrides::default()
    });
    let r = c.resolve("d").unwrap();
    assert_eq!(
        find(&r, "GET", "h", "/any").map(|r| r.upstream),
        Some(Some(0))
    );
}

#[test]
fn route_errors_name_file_route_key_and_reason() {
    let cases: &[(&str, &str, &str)] = &[
        ("upstream = \"a\"", "routes[0]", "needs exactly one of path_prefix, path_exact, path_regex (found none)"),
        (
            "name = \"x\"\npath_prefix = \"/\"\npath_regex = \"^/\"\nupstream = \"a\"",
            "routes[0]",
            "route \"x\": needs exactly one of path_prefix, path_exact, path_regex (found path_prefix and path_regex)",
        ),
        ("path_prefix = \"/\"\nmethods = []\nupstream = \"a\"", "routes[0].methods", "must list at least one method"),
        (
            "path_prefix = \"/\"\nheaders = [{ name = \"x\", value = \"1\", present = true }]\nupstream = \"a\"",
            "routes[0].headers[0]",
            "\"x\" needs exactly one of value, prefix, present",
        ),
        (
            "name = \"re\"\npath_regex = \"(\"\nupstream = \"a\"",
            "routes[0].path_regex",
            "route \"re\": invalid regex \"(\"",
        ),
        ("host = \"a.example.com:80\"\npath_prefix = \"/\"\nupstream = \"a\"", "routes[0].host", "has a port"),
        ("host = \"a.*.com\"\npath_prefix = \"/\"\nupstream = \"a\"", "routes[0].host", "only a leading `*.`"),
        ("path_prefix = \"/\"\nmethods = [\"FETCH\"]\nupstream = \"a\"", "routes[0].methods[0]", "unknown method"),
        ("path_prefix = \"/\"\nquery = [{ name = \"\", present = true }]\nupstream = \"a\"", "routes[0].query[0].name", "must not be empty"),
        ("path_prefix = \"/\"\nupstream = \"nope\"", "routes[0].upstream", "no [[upstreams]] entry is named \"nope\""),
    ];
    for (route, key, reason) in cases {
        assert_only_error(load(&format!("[[routes]]\n{route}\n")), key, reason, route);
    }
}

/// `loaded` failed with exactly one error, in `r.toml`, at `key`, whose reason contains `reason`
/// (`case` names the case in a failure).
pub(super) fn assert_only_error(
    loaded: Result<Resolved, Vec<ConfigError>>,
    key: &str,
    reason: &str,
    case: &str,
) {
    let errs = loaded.unwrap_err();
    assert_eq!(errs.len(), 1, "{case}: {errs:?}");
    assert_eq!(errs[0].file, "r.toml");
    assert_eq!(errs[0].key, key, "{case}");
    assert!(
        errs[0].reason.contains(reason),
        "{case}: {}",
        errs[0].reason
    );
}

#[test]
fn unknown_route_keys_are_errors() {
    for route in [
        "path_prefix = \"/\"\nupstream = \"a\"\nrewrite = \"x\"",
        "path_prefix = \"/\"\nupstream = \"a\"\nheaders = [{ name = \"x\", equals = \"1\" }]",
    ] {
        let errs = load(&format!("[[routes]]\n{route}\n")).unwrap_err();
        assert!(errs[0].key.starts_with("routes[0]"), "{errs:?}");
        assert!(errs[0].reason.contains("unknown field"), "{errs:?}");
    }
}

#[test]
fn route_errors_come_in_route_order() {
    let errs = load(
        "[[routes]]\npath_prefix = \"x\"\nupstream = \"nope\"\n\
         [[routes]]\nhost = \"a:1\"\npath_exact = \"/\"\nupstream = \"a\"\n",
    )
    .unwrap_err();
    let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "routes[0].path_prefix",
            "routes[0].upstream",
            "routes[1].host"
        ]
    );
}
