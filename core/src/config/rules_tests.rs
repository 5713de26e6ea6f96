//! Tests of the traffic-rule keys of `[[routes]]` and of `[[rate_limits]]`: every key parses, prints
//! back and compiles; each error names the file, `routes[i].key` (or `rate_limits[i].key`), the
//! route's name and the reason.

use super::routes_tests::assert_only_error;
use super::*;

const BASE: &str = "[[upstreams]]\nname = \"a\"\nendpoints = [\"127.0.0.1:1\"]\n\
                    [[upstreams]]\nname = \"b\"\nendpoints = [\"127.0.0.1:2\"]\n\
                    [[rate_limits]]\nname = \"per-client\"\nrate = \"100/s\"\nburst = 50\n";

fn load(rest: &str) -> Result<Resolved, Vec<ConfigError>> {
    Config::parse(&format!("{BASE}{rest}"), "r.toml")
        .map_err(|e| vec![e])?
        .resolve("r.toml")
}

const ALL_RULES: &str = r#"
[[rate_limits]]
name = "by-user"
key = "header:X-User"
rate = "10/m"
max_keys = 1000

[[routes]]
name = "api"
path_prefix = "/api"
upstreams = [{ name = "a", weight = 95 }, { name = "b", weight = 5 }]
rate_limit = ["per-client", "by-user"]
strip_prefix = "/api"
add_prefix = "/v2/"
host_rewrite = "internal.api"
request_headers = { set = { "x-env" = "prod" }, add = { "x-client" = "${client_ip}" }, remove = ["x-debug"] }
response_headers = { set = { "strict-transport-security" = "max-age=31536000" }, remove = ["server"] }
mirror = { upstream = "b", percent = 10 }

[[routes]]
name = "old"
path_prefix = "/old"
redirect = { to = "https://${host}/new${path}${query}", status = 301 }

[[routes]]
path_exact = "/blocked"
respond = { status = 403, body = "forbidden\n" }
response_headers = { add = { "x-reason" = "policy" } }
"#;

#[test]
fn every_rule_key_parses_compiles_and_prints_back() {
    let r = load(ALL_RULES).unwrap();
    assert_eq!(r.rate_limits.0.len(), 2);
    assert_eq!(r.rate_limits.0[1].key, LimitKey::Header("x-user".into()));
    let route = |label: &str| {
        r.routes
            .iter()
            .map(|(_, t)| t)
            .find(|x| x.label == label)
            .unwrap()
    };
    let api = route("api");
    assert_eq!(api.upstream, None, "the split chooses");
    assert_eq!(&*api.rules.limits, [0, 1]);
    assert_eq!(api.rules.strip_prefix.as_deref(), Some("/api"));
    assert_eq!(
        api.rules.add_prefix.as_deref(),
        Some("/v2"),
        "trailing slash dropped"
    );
    assert_eq!(api.rules.mirror, Some(MirrorRule::new(1, 100_000)));
    let split = api.rules.split.as_ref().unwrap();
    let to_b = (0..100).filter(|_| split.next() == 1).count();
    assert_eq!(to_b, 5);
    let old = route("old");
    assert!(matches!(
        old.rules.local,
        Some(LocalRule::Redirect { status: 301, .. })
    ));
    let blocked = route("2");
    assert!(matches!(
        blocked.rules.local,
        Some(LocalRule::Respond { status: 403, .. })
    ));
    // Printed back (`edge --check`, `GET /config`), the file loads again to the same rules.
    let text = toml::to_string(&r.config).unwrap();
    let again = Config::parse(&text, "again.toml")
        .unwrap()
        .resolve("again.toml")
        .unwrap();
    assert_eq!(again.routes.len(), r.routes.len());
    assert_eq!(toml::to_string(&again.config).unwrap(), text);
}

#[test]
fn each_bad_rule_names_file_route_key_and_reason() {
    let cases: &[(&str, &str, &str)] = &[
        ("path_prefix = \"/\"", "routes[0]", "exactly one of upstream, upstreams, redirect, respond (found none)"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nrespond = { status = 200 }", "routes[0]", "found upstream and respond"),
        ("path_prefix = \"/\"\nupstreams = [{ name = \"c\" }]", "routes[0].upstreams[0].name", "no [[upstreams]] entry is named \"c\""),
        ("path_prefix = \"/\"\nupstreams = [{ name = \"a\", weight = 0 }]", "routes[0].upstreams[0].weight", "at least 1"),
        ("path_prefix = \"/\"\nupstreams = [{ name = \"a\", weight = 10001 }, { name = \"b\", weight = 1 }]", "routes[0].upstreams", "at most 10000"),
        ("path_prefix = \"/\"\nredirect = { to = \"/x\", status = 200 }", "routes[0].redirect.status", "not a redirect"),
        ("path_prefix = \"/\"\nredirect = { to = \"${nope}\" }", "routes[0].redirect.to", "unknown variable `${nope}`"),
        ("path_prefix = \"/\"\nrespond = { status = 101 }", "routes[0].respond.status", "not a final status"),
        ("path_prefix = \"/\"\nrespond = { status = 200 }\nstrip_prefix = \"/a\"", "routes[0].strip_prefix", "no effect on a route that answers locally"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nstrip_prefix = \"api\"", "routes[0].strip_prefix", "must start with '/'"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nadd_prefix = \"/\"", "routes[0].add_prefix", "at least one segment"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nhost_rewrite = \"a b\"", "routes[0].host_rewrite", "not a host name"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nrequest_headers = { set = { \"Transfer-Encoding\" = \"chunked\" } }", "routes[0].request_headers.set", "\"Transfer-Encoding\": hop-by-hop"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nrequest_headers = { remove = [\"host\"] }", "routes[0].request_headers.remove", "host_rewrite"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nresponse_headers = { add = { \"content-length\" = \"1\" } }", "routes[0].response_headers.add", "framing"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nmirror = { upstream = \"c\", percent = 5 }", "routes[0].mirror.upstream", "no [[upstreams]] entry"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nmirror = { upstream = \"b\", percent = 0 }", "routes[0].mirror.percent", "above 0 and at most 100"),
        ("path_prefix = \"/\"\nupstream = \"a\"\nrate_limit = \"nope\"", "routes[0].rate_limit", "no [[rate_limits]] entry is named \"nope\""),
        ("name = \"n\"\npath_prefix = \"/\"\nupstream = \"a\"\nrate_limit = [\"per-client\", \"nope\"]", "routes[0].rate_limit", "route \"n\": no [[rate_limits]]"),
    ];
    for (route, key, reason) in cases {
        assert_only_error(load(&format!("[[routes]]\n{route}\n")), key, reason, route);
    }
}

#[test]
fn each_bad_rate_limit_names_its_key() {
    let route = "[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "name = \"per-client\"\nrate = \"1/s\"",
            "rate_limits[1].name",
            "another [[rate_limits]] entry has this name",
        ),
        (
            "name = \"x\"\nrate = \"1/s\"\nkey = \"cookie\"",
            "rate_limits[1].key",
            "not a key",
        ),
        (
            "name = \"x\"\nrate = \"1/s\"\nmax_keys = 0",
            "rate_limits[1].max_keys",
            "between 1 and",
        ),
        (
            "name = \"x\"\nrate = \"1/d\"",
            "rate_limits[1].rate",
            "\"N/s\", \"N/m\" or \"N/h\"",
        ),
    ];
    for (limit, key, reason) in cases {
        let loaded = load(&format!("[[rate_limits]]\n{limit}\n{route}"));
        assert_only_error(loaded, key, reason, limit);
    }
}

#[test]
fn hash_keys_parse_and_bad_ones_name_their_key() {
    let up = |extra: &str| {
        Config::parse(
            &format!("[[upstreams]]\nname = \"h\"\nendpoints = [\"127.0.0.1:1\"]\n{extra}\n[[routes]]\npath_prefix = \"/\"\nupstream = \"h\"\n"),
            "h.toml",
        )
        .unwrap()
        .resolve("h.toml")
    };
    for key in ["client_ip", "path", "header:X-User", "cookie:session"] {
        assert!(
            up(&format!("balance = \"hash\"\nhash_key = \"{key}\"")).is_ok(),
            "{key}"
        );
    }
    assert!(up("balance = \"hash\"").is_ok(), "client_ip by default");
    let e = up("balance = \"hash\"\nhash_key = \"query\"").unwrap_err();
    assert_eq!(e[0].key, "upstreams[0].hash_key");
    assert!(e[0].reason.contains("not a hash key"), "{e:?}");
    let e = up("hash_key = \"path\"").unwrap_err();
    assert!(
        e[0].reason.contains("only with balance = \"hash\""),
        "{e:?}"
    );
}
