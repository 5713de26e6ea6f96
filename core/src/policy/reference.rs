//! The reference route matcher: DESIGN.md "Routing" written as plainly as possible, a linear scan over
//! every route that computes each matching route's precedence and keeps the best. Slow (it allocates
//! and looks at every route) and obviously correct; the unit tests and the `route_match` fuzz target
//! compare the indexed [`super::route::RouteTable`] with it. Never used on the request path.
//!
//! The precedence of a matching route, smaller first: host group (exact host, then `*.` wildcard, then
//! any host), for a wildcard its longer suffix first; path kind (exact, prefix, regex), for a prefix
//! its longer prefix first; more conditions first; earlier in the file first.

use std::cmp::Reverse;

use super::route::{PathRule, RouteRequest, RouteSpec, Test};

/// Specs with their regexes compiled and their hosts lower-cased.
pub struct Reference {
    routes: Vec<(RouteSpec, Option<regex::bytes::Regex>, Option<String>)>,
}

type Rank = (
    u8,
    Reverse<usize>,
    u8,
    Reverse<usize>,
    Reverse<usize>,
    usize,
);

impl Reference {
    /// The matcher for `routes` (which must compile into a `RouteTable`).
    ///
    /// # Panics
    /// When a `path_regex` does not compile.
    pub fn new(routes: &[RouteSpec]) -> Reference {
        let routes = routes
            .iter()
            .map(|s| {
                let re = match &s.path {
                    PathRule::Regex(r) => Some(regex::bytes::Regex::new(r).expect("a valid regex")),
                    _ => None,
                };
                (
                    s.clone(),
                    re,
                    s.host.as_deref().map(str::to_ascii_lowercase),
                )
            })
            .collect();
        Reference { routes }
    }

    /// The index of the route for `r`, or `None`.
    pub fn find(&self, r: &RouteRequest<'_>) -> Option<usize> {
        let host = r.host.and_then(host_of);
        let params = query_params(r.query.unwrap_or_default());
        let req = Request {
            host: host.as_deref(),
            params: &params,
            r,
        };
        self.routes
            .iter()
            .enumerate()
            .filter_map(|(i, (spec, re, host))| rank(i, spec, re.as_ref(), host.as_deref(), &req))
            .min()
            .map(|rank| rank.5)
    }
}

/// The request host as routes see it: port and one trailing dot removed, lower-cased; `None` when
/// empty or over 255 bytes.
fn host_of(raw: &[u8]) -> Option<Vec<u8>> {
    let mut h = raw.to_vec();
    if h.first() == Some(&b'[') {
        if let Some(end) = h.iter().position(|&b| b == b']') {
            h.truncate(end + 1);
        }
    } else if let Some(colon) = h.iter().position(|&b| b == b':') {
        h.truncate(colon);
    }
    if h.last() == Some(&b'.') {
        h.pop();
    }
    h.make_ascii_lowercase();
    (!h.is_empty() && h.len() <= 255).then_some(h)
}

/// A request as the reference sees it: its host as routes see it, its decoded query parameters.
struct Request<'a> {
    host: Option<&'a [u8]>,
    params: &'a [(Vec<u8>, Vec<u8>)],
    r: &'a RouteRequest<'a>,
}

/// The precedence of route `i` (`spec`, its regex, its lower-cased host) for `req`, or `None` when it
/// does not match.
fn rank(
    i: usize,
    spec: &RouteSpec,
    re: Option<&regex::bytes::Regex>,
    spec_host: Option<&str>,
    req: &Request<'_>,
) -> Option<Rank> {
    let (r, host) = (req.r, req.host);
    let (group, suffix) = match spec_host {
        None => (2, 0),
        Some(h) => match h.strip_prefix("*.") {
            Some(s) => {
                let host = host?;
                let dotted = format!(".{s}");
                (host.ends_with(dotted.as_bytes()) && host.len() > dotted.len()).then_some(())?;
                (1, s.len())
            }
            None => (host? == h.as_bytes()).then_some((0, 0))?,
        },
    };
    let (kind, length) = match &spec.path {
        PathRule::Exact(p) => (r.path == p.as_bytes()).then_some((0, 0))?,
        PathRule::Prefix(p) => {
            let p = p.trim_end_matches('/');
            let p = if p.is_empty() { "/" } else { p };
            let tail = r.path.strip_prefix(p.as_bytes())?;
            let whole = p == "/" || tail.is_empty() || tail[0] == b'/';
            whole.then_some((1, p.len()))?
        }
        PathRule::Regex(_) => re?.is_match(r.path).then_some((2, 0))?,
    };
    let methods = spec.methods.is_empty() || spec.methods.iter().any(|m| m.as_bytes() == r.method);
    let headers = spec.headers.iter().all(|c| {
        let values: Vec<&[u8]> = r
            .fields
            .iter()
            .filter(|f| f.name(r.head).eq_ignore_ascii_case(c.name.as_bytes()))
            .map(|f| f.value(r.head))
            .collect();
        holds(&c.test, &values)
    });
    let query = spec.query.iter().all(|c| {
        let values: Vec<&[u8]> = req
            .params
            .iter()
            .filter(|(n, _)| n == c.name.as_bytes())
            .map(|(_, v)| v.as_slice())
            .collect();
        holds(&c.test, &values)
    });
    let conditions = usize::from(!spec.methods.is_empty()) + spec.headers.len() + spec.query.len();
    (methods && headers && query).then_some((
        group,
        Reverse(suffix),
        kind,
        Reverse(length),
        Reverse(conditions),
        i,
    ))
}

fn holds(test: &Test, values: &[&[u8]]) -> bool {
    match test {
        Test::Present(p) => values.is_empty() != *p,
        Test::Value(v) => values.contains(&v.as_bytes()),
        Test::Prefix(p) => values.iter().any(|x| x.starts_with(p.as_bytes())),
    }
}

/// The query's parameters, decoded: `&`-separated, name before the first `=`, `+` a space, `%XX` a
/// byte, any other `%` itself.
fn query_params(query: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    query
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.iter().position(|&b| b == b'=') {
            Some(i) => (decode(&p[..i]), decode(&p[i + 1..])),
            None => (decode(p), Vec::new()),
        })
        .collect()
}

fn decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let digit = |at: usize| s.get(at).and_then(|&b| (b as char).to_digit(16));
        match (s[i], digit(i + 1), digit(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}
