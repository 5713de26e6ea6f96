//! `[[routes]]` (DESIGN.md "Configuration (TOML)", "Routing"): the schema, its checks, and its
//! compilation into the indexed route table of `crate::policy::route` that workers match requests with.
//! The schema's own rules are checked here (exactly one path rule, exactly one test per condition, a
//! known upstream); the rules of the matcher (hosts, paths, regexes, methods, header names) are checked
//! by the table's compiler, and every error names the file, `routes[i].key` and, for a named route, its
//! name.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::policy::route::{self, Condition, PathRule, RouteSpec, RouteTable, Test};

use super::problems::Problems;
use super::rate_limits::RateLimits;
use super::rules::{
    self, Action, HeaderOps, LimitNames, Mirror, Redirect, Respond, RouteRules, SplitTarget,
};
use super::{Dur, Limit, Upstream};

/// `[[routes]]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Label in metrics, logs and `edge --check`; default: the route's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Exact host (`api.example.com`) or `*.` wildcard (`*.example.com`), case-insensitive, no port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Whole-segment path prefix (`/api` matches `/api`, `/api/x`, never `/apix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// The whole normalised path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_exact: Option<String>,
    /// A `regex` crate pattern on the normalised path, anchored as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_regex: Option<String>,
    /// Only these methods (case-sensitive); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Header conditions; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<FieldCondition>,
    /// Query conditions on the percent-decoded parameters; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<FieldCondition>,
    /// Name of an `[[upstreams]]` entry; exactly one of `upstream`, `upstreams`, `redirect`, `respond`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub upstream: String,
    /// A weighted split over `[[upstreams]]` entries (in place of `upstream`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<SplitTarget>,
    /// Overrides the upstream's `request_timeout` for this route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Limit>,
    /// Overrides `server.timeouts.request` once the route is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_timeout: Option<Dur>,
    /// An HTTP/1.1 client's close (or half-close) while the upstream works ends the exchange: the
    /// upstream connection is closed and the request logged as 499, as nginx does by default. Off by
    /// default: a half-close after a whole request is answered (DESIGN.md "Fault matrix", a.).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandon_on_client_close: bool,
    /// `[[rate_limits]]` names; each must admit the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<LimitNames>,
    /// Answer with a redirect, locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    /// Answer with this status and body, locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respond: Option<Respond>,
    /// Remove this path prefix (whole segments) before forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_prefix: Option<String>,
    /// Then put this prefix in front.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_prefix: Option<String>,
    /// The Host (or `:authority`) sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_rewrite: Option<String>,
    /// Header rules on the request sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_headers: Option<HeaderOps>,
    /// Header rules on the response to the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers: Option<HeaderOps>,
    /// Copy a share of requests to another upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Mirror>,
}

impl Route {
    /// A route of every path (`path_prefix = "/"`) to `upstream`, with nothing else set.
    pub fn prefix(path_prefix: &str, upstream: &str) -> Self {
        Route {
            name: None,
            host: None,
            path_prefix: Some(path_prefix.into()),
            path_exact: None,
            path_regex: None,
            methods: None,
            headers: Vec::new(),
            query: Vec::new(),
            upstream: upstream.into(),
            upstreams: Vec::new(),
            request_timeout: None,
            client_request_timeout: None,
            abandon_on_client_close: false,
            rate_limit: None,
            redirect: None,
            respond: None,
            strip_prefix: None,
            add_prefix: None,
            host_rewrite: None,
            request_headers: None,
            response_headers: None,
            mirror: None,
        }
    }
}

/// One `headers` or `query` entry: `{ name, value | prefix | present }`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldCondition {
    /// Header field name (case-insensitive) or query parameter name.
    pub name: String,
    /// The value equals this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The value starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The name occurs (`true`) or does not (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
}

/// The compiled `[[routes]]`: what [`Resolved::routes`](super::Resolved::routes) holds.
pub type Routes = RouteTable<ResolvedRoute>;

/// What a matched route leads to.
#[derive(Clone, Debug)]
pub struct ResolvedRoute {
    /// `name`, else the route's index: the label in metrics and logs.
    pub label: String,
    /// Index of the route in the file.
    pub index: usize,
    /// Index into [`Resolved::upstreams`](super::Resolved::upstreams) of the route's one upstream;
    /// `None` when `rules` choose (a weighted split) or the route answers locally.
    pub upstream: Option<usize>,
    /// Route override of the upstream request timeout.
    pub request_timeout: Option<Limit>,
    /// Route override of the inbound `request` deadline.
    pub client_request_timeout: Option<Duration>,
    /// `abandon_on_client_close`: an HTTP/1.1 client's close while the upstream works ends the
    /// exchange (watched at once, a readiness wait per request).
    pub abandon_on_client_close: bool,
    /// The traffic rules (DESIGN.md "Request pipeline and traffic rules").
    pub rules: RouteRules,
}

/// `[[routes]]`: at least one; each checked and compiled into the table. `None` (with every problem
/// recorded, in route order) when any route is wrong.
pub(super) fn resolve_routes(
    routes: &[Route],
    upstreams: &[Upstream],
    limits: &RateLimits,
    p: &mut Problems<'_>,
) -> Option<Routes> {
    if routes.is_empty() {
        p.add("routes", "at least one [[routes]] entry is needed");
    }
    // (route index, key, reason), sorted by route index at the end (stable: a route's schema errors,
    // then its matcher errors, then its upstream).
    let mut errors: Vec<(usize, String, String)> = Vec::new();
    let mut rule_errors = Vec::new();
    let mut specs = Vec::with_capacity(routes.len());
    for (i, r) in routes.iter().enumerate() {
        let named = |reason: String| match &r.name {
            Some(n) => format!("route {n:?}: {reason}"),
            None => reason,
        };
        let (spec, schema) = spec(r);
        errors.extend(schema.into_iter().map(|(k, why)| (i, k, named(why))));
        let mut errs = Vec::new();
        let (action, rules) = rules::compile(r, upstreams, limits, &mut errs);
        rule_errors.extend(errs.into_iter().map(|(k, why)| (i, k, named(why))));
        let resolved = ResolvedRoute {
            label: r.name.clone().unwrap_or_else(|| i.to_string()),
            index: i,
            upstream: match action {
                Some(Action::Upstream(u)) => Some(u),
                _ => None,
            },
            request_timeout: r.request_timeout,
            client_request_timeout: r.client_request_timeout.map(|d| d.0),
            abandon_on_client_close: r.abandon_on_client_close,
            rules,
        };
        specs.push((spec, resolved));
    }
    let table = match RouteTable::new(specs) {
        Ok(t) => Some(t),
        Err(es) => {
            errors.extend(
                es.into_iter()
                    .map(|e: route::RouteError| (e.route, e.key, e.reason)),
            );
            None
        }
    };
    errors.extend(rule_errors);
    errors.sort_by_key(|e| e.0);
    for (i, key, reason) in errors.iter() {
        let key = match key.is_empty() {
            true => format!("routes[{i}]"),
            false => format!("routes[{i}].{key}"),
        };
        p.add(key, reason.clone());
    }
    table.filter(|_| errors.is_empty())
}

/// The plain spec the table compiles, and the schema errors (key under the route, reason). A route
/// without a path rule gets `path_prefix = "/"` here so the rest of it is still checked.
fn spec(r: &Route) -> (RouteSpec, Vec<(String, String)>) {
    let mut errors = Vec::new();
    let rules: Vec<(&str, PathRule)> = [
        ("path_prefix", r.path_prefix.clone().map(PathRule::Prefix)),
        ("path_exact", r.path_exact.clone().map(PathRule::Exact)),
        ("path_regex", r.path_regex.clone().map(PathRule::Regex)),
    ]
    .into_iter()
    .filter_map(|(k, rule)| rule.map(|rule| (k, rule)))
    .collect();
    if rules.len() != 1 {
        let found: Vec<&str> = rules.iter().map(|(k, _)| *k).collect();
        let found = match found.is_empty() {
            true => "none".to_string(),
            false => found.join(" and "),
        };
        errors.push((
            String::new(),
            format!("needs exactly one of path_prefix, path_exact, path_regex (found {found})"),
        ));
    }
    if r.methods.as_ref().is_some_and(Vec::is_empty) {
        errors.push((
            "methods".into(),
            "must list at least one method, or be left out for any method".into(),
        ));
    }
    let path = rules
        .into_iter()
        .next()
        .map_or(PathRule::Prefix("/".into()), |(_, rule)| rule);
    let spec = RouteSpec {
        name: r.name.clone(),
        host: r.host.clone(),
        path,
        methods: r.methods.clone().unwrap_or_default(),
        headers: conditions("headers", &r.headers, &mut errors),
        query: conditions("query", &r.query, &mut errors),
        action: action_text(r),
    };
    (spec, errors)
}

/// `headers` / `query` (`key`) entries as conditions; an entry without exactly one of `value`,
/// `prefix`, `present` is an error (and left out).
fn conditions(
    key: &str,
    list: &[FieldCondition],
    errors: &mut Vec<(String, String)>,
) -> Vec<Condition> {
    let mut out = Vec::new();
    for (j, c) in list.iter().enumerate() {
        let test = match (&c.value, &c.prefix, c.present) {
            (Some(v), None, None) => Test::Value(v.clone()),
            (None, Some(p), None) => Test::Prefix(p.clone()),
            (None, None, Some(p)) => Test::Present(p),
            _ => {
                errors.push((
                    format!("{key}[{j}]"),
                    format!("{:?} needs exactly one of value, prefix, present", c.name),
                ));
                continue;
            }
        };
        out.push(Condition {
            name: c.name.clone(),
            test,
        });
    }
    out
}

/// What the route does, for `edge --check`'s listing.
fn action_text(r: &Route) -> String {
    if let Some(rd) = &r.redirect {
        return format!("redirect {} to {:?}", rd.status, rd.to);
    }
    if let Some(rs) = &r.respond {
        return format!("respond {}", rs.status);
    }
    if !r.upstreams.is_empty() {
        let split: Vec<String> = r
            .upstreams
            .iter()
            .map(|t| format!("{:?} ({})", t.name, t.weight))
            .collect();
        return format!("upstreams {}", split.join(", "));
    }
    format!("upstream {:?}", r.upstream)
}
