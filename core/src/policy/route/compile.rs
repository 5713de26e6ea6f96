//! One [`RouteSpec`] checked and compiled into the form the index and the matcher use: the host rule
//! parsed, the path rule's key or regex built, methods and conditions validated and pre-lower-cased.
//! Every problem of a route is reported, not just the first.

use super::conditions::{Conditions, FieldTest, ValueTest};
use super::{PathRule, RouteError, RouteSpec, Test};

/// Request hosts are lower-cased into a stack buffer of this size; a host of this size or more (no DNS
/// name is) matches no `host`.
pub(super) const MAX_HOST: usize = 256;

/// A route's host rule, compiled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum HostRule {
    /// No `host`: any host.
    Any,
    /// `host = "name"`, lower-cased.
    Exact(Box<[u8]>),
    /// `host = "*.suffix"`: the lower-cased suffix, without `*.`.
    Wildcard(Box<[u8]>),
}

/// A route's path rule, compiled.
#[derive(Clone, Debug)]
pub(super) enum PathMatch {
    /// `path_prefix`, trailing slashes removed (but `/` stays `/`).
    Prefix(Box<[u8]>),
    /// `path_exact`.
    Exact(Box<[u8]>),
    /// `path_regex`: its place in the table's regex list (each copy of a table has its own compiled
    /// regexes, see `RouteTable`'s `Clone`) and its pattern.
    Regex { slot: usize, pattern: Box<str> },
}

impl PathMatch {
    /// Precedence of the kind within a host group: exact, then prefix, then regex.
    pub(super) fn rank(&self) -> u8 {
        match self {
            PathMatch::Exact(_) => 0,
            PathMatch::Prefix(_) => 1,
            PathMatch::Regex { .. } => 2,
        }
    }

    /// The rule's identity for shadowing: kind and key (a regex by its pattern).
    pub(super) fn key(&self) -> (u8, &[u8]) {
        match self {
            PathMatch::Exact(k) | PathMatch::Prefix(k) => (self.rank(), k),
            PathMatch::Regex { pattern, .. } => (2, pattern.as_bytes()),
        }
    }
}

/// One compiled route.
#[derive(Clone, Debug)]
pub(super) struct Compiled<T> {
    /// What the route leads to.
    pub(super) value: T,
    /// `name`, else the index.
    pub(super) label: String,
    /// Whether `name` was given (messages then quote it).
    pub(super) named: bool,
    pub(super) host: HostRule,
    pub(super) path: PathMatch,
    pub(super) conditions: Conditions,
    /// The spec as written, for the listing and the warnings.
    pub(super) spec: RouteSpec,
}

impl<T> Compiled<T> {
    /// How the route is named in messages: `routes[3]` or `routes[3] ("api")`.
    pub(super) fn title(&self, index: usize) -> String {
        match self.named {
            true => format!("routes[{index}] ({:?})", self.label),
            false => format!("routes[{index}]"),
        }
    }
}

/// The methods of the IANA HTTP Method Registry (RFC 9110 §16.1.1); a method is case-sensitive.
const METHODS: &[&str] = &[
    "ACL",
    "BASELINE-CONTROL",
    "BIND",
    "CHECKIN",
    "CHECKOUT",
    "CONNECT",
    "COPY",
    "DELETE",
    "GET",
    "HEAD",
    "LABEL",
    "LINK",
    "LOCK",
    "MERGE",
    "MKACTIVITY",
    "MKCALENDAR",
    "MKCOL",
    "MKREDIRECTREF",
    "MKWORKSPACE",
    "MOVE",
    "OPTIONS",
    "ORDERPATCH",
    "PATCH",
    "POST",
    "PRI",
    "PROPFIND",
    "PROPPATCH",
    "PUT",
    "QUERY",
    "REBIND",
    "REPORT",
    "SEARCH",
    "TRACE",
    "UNBIND",
    "UNCHECKOUT",
    "UNLINK",
    "UNLOCK",
    "UPDATE",
    "UPDATEREDIRECTREF",
    "VERSION-CONTROL",
];

/// Collects a route's errors, each naming the route.
struct Errors {
    route: usize,
    prefix: String,
    list: Vec<RouteError>,
}

impl Errors {
    fn add(&mut self, key: impl Into<String>, reason: impl std::fmt::Display) {
        self.list.push(RouteError {
            route: self.route,
            key: key.into(),
            reason: format!("{}{reason}", self.prefix),
        });
    }
}

/// Compiles route `i`; `earlier` are the routes before it (names must be unique); a regex is added to
/// `regexes`.
pub(super) fn route<T>(
    i: usize,
    spec: RouteSpec,
    value: T,
    earlier: &[Compiled<T>],
    regexes: &mut Vec<regex::bytes::Regex>,
) -> Result<Compiled<T>, Vec<RouteError>> {
    let mut e = Errors {
        route: i,
        prefix: match &spec.name {
            Some(n) => format!("route {n:?}: "),
            None => String::new(),
        },
        list: Vec::new(),
    };
    let label = match &spec.name {
        Some(n) => {
            check_name(n, earlier, &mut e);
            n.clone()
        }
        None => i.to_string(),
    };
    let host = match &spec.host {
        None => HostRule::Any,
        Some(h) => host_rule(h).unwrap_or_else(|why| {
            e.add("host", why);
            HostRule::Any
        }),
    };
    let path = path_match(&spec.path, regexes, &mut e);
    let conditions = Conditions {
        methods: methods(&spec.methods, &mut e),
        headers: fields(&spec.headers, "headers", &mut e),
        query: fields(&spec.query, "query", &mut e),
    };
    match (path, e.list.is_empty()) {
        (Some(path), true) => Ok(Compiled {
            value,
            label,
            named: spec.name.is_some(),
            host,
            path,
            conditions,
            spec,
        }),
        _ => Err(e.list),
    }
}

/// `name`: non-empty, not a number (unnamed routes are labelled by their index), printable ASCII
/// without quotes or backslashes (it is a metric label value), unique.
fn check_name<T>(name: &str, earlier: &[Compiled<T>], e: &mut Errors) {
    if name.is_empty() {
        e.add(
            "name",
            "must not be empty (leave it out to label the route by its index)",
        );
    } else if name.bytes().all(|b| b.is_ascii_digit()) {
        e.add(
            "name",
            "must not be a number (unnamed routes are labelled by their index)",
        );
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        e.add(
            "name",
            "must be printable ASCII without spaces, quotes or backslashes",
        );
    } else if earlier.iter().any(|c| c.named && c.label == name) {
        e.add("name", format!("duplicate route name {name:?}"));
    }
}

/// Parses `host`: a name or IP literal without a port, or `*.` and a name.
///
/// # Errors
/// The reason, in words.
pub(super) fn host_rule(text: &str) -> Result<HostRule, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(suffix) = lower.strip_prefix("*.") {
        if suffix.contains('*') || suffix.starts_with('[') {
            return Err(format!(
                "{text:?} is not a valid wildcard: `*.` must be followed by a domain name (as in \"*.example.com\")"
            ));
        }
        check_host_name(suffix, text)?;
        return Ok(HostRule::Wildcard(suffix.as_bytes().into()));
    }
    if lower.contains('*') {
        return Err(format!(
            "{text:?} is not a valid wildcard: only a leading `*.` is allowed (as in \"*.example.com\"); leave host out for any host"
        ));
    }
    if let Some(inner) = lower.strip_prefix('[') {
        let ok = inner.strip_suffix(']').is_some_and(|ip| {
            !ip.is_empty()
                && ip
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        });
        return match ok {
            true => Ok(HostRule::Exact(lower.as_bytes().into())),
            false if inner.contains("]:") => Err(format!(
                "{text:?} has a port: routes match the host without its port"
            )),
            false => Err(format!("{text:?} is not a valid IPv6 literal")),
        };
    }
    check_host_name(&lower, text)?;
    Ok(HostRule::Exact(lower.as_bytes().into()))
}

/// A DNS name or IPv4 address: labels of letters, digits, `-` and `_`, separated by single dots; no
/// port.
fn check_host_name(name: &str, text: &str) -> Result<(), String> {
    if name.contains(':') {
        return Err(format!(
            "{text:?} has a port: routes match the host without its port"
        ));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() >= MAX_HOST || !name.split('.').all(label_ok) {
        return Err(format!(
            "{text:?} is not a host name (letters, digits, '-' and '_' in dot-separated labels, at most 255 bytes)"
        ));
    }
    Ok(())
}

/// The path rule compiled (a regex into `regexes`); `None` (with the error recorded) when it does not
/// compile.
fn path_match(
    rule: &PathRule,
    regexes: &mut Vec<regex::bytes::Regex>,
    e: &mut Errors,
) -> Option<PathMatch> {
    let slash = |key: &str, p: &str, e: &mut Errors| {
        let ok = p.starts_with('/');
        if !ok {
            e.add(key, "must start with '/'");
        }
        ok
    };
    match rule {
        PathRule::Prefix(p) => slash("path_prefix", p, e).then(|| {
            let trimmed = p.trim_end_matches('/');
            let key = if trimmed.is_empty() { "/" } else { trimmed };
            PathMatch::Prefix(key.as_bytes().into())
        }),
        PathRule::Exact(p) => {
            slash("path_exact", p, e).then(|| PathMatch::Exact(p.as_bytes().into()))
        }
        PathRule::Regex(r) => match regex::bytes::Regex::new(r) {
            Ok(re) => {
                regexes.push(re);
                Some(PathMatch::Regex {
                    slot: regexes.len() - 1,
                    pattern: r.as_str().into(),
                })
            }
            Err(why) => {
                e.add("path_regex", format!("invalid regex {r:?}: {why}"));
                None
            }
        },
    }
}

/// `methods`: each in the IANA registry, as written (case-sensitive); an empty list is refused (it
/// would match nothing).
fn methods(list: &[String], e: &mut Errors) -> Vec<Box<[u8]>> {
    if list.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Box<[u8]>> = Vec::new();
    for (j, m) in list.iter().enumerate() {
        if !METHODS.contains(&m.as_str()) {
            let hint = match METHODS.contains(&m.to_ascii_uppercase().as_str()) {
                true => format!(
                    " (methods are case-sensitive: {:?})",
                    m.to_ascii_uppercase()
                ),
                false => String::new(),
            };
            e.add(
                format!("methods[{j}]"),
                format!("unknown method {m:?}: not in the IANA HTTP Method Registry{hint}"),
            );
        } else if !out.iter().any(|o| **o == *m.as_bytes()) {
            out.push(m.as_bytes().into());
        }
    }
    out
}

/// RFC 9110 §5.6.2 tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `headers` or `query` (`key`) entries compiled: header names must be tokens and are lower-cased;
/// header values must be receivable (no control characters but HTAB, no whitespace at either end,
/// which the parser trims); query names must not be empty.
fn fields(list: &[super::Condition], key: &str, e: &mut Errors) -> Vec<FieldTest> {
    let headers = key == "headers";
    let mut out = Vec::new();
    for (j, c) in list.iter().enumerate() {
        let name = c.name.as_bytes();
        if headers && (name.is_empty() || !name.iter().all(|&b| is_tchar(b))) {
            e.add(
                format!("{key}[{j}].name"),
                format!(
                    "{:?} is not a header field name (RFC 9110 §5.1: a token)",
                    c.name
                ),
            );
        } else if name.is_empty() {
            e.add(format!("{key}[{j}].name"), "must not be empty");
        }
        let test = match &c.test {
            Test::Value(v) => ValueTest::Value(v.as_bytes().into()),
            Test::Prefix(p) => ValueTest::Prefix(p.as_bytes().into()),
            Test::Present(p) => ValueTest::Present(*p),
        };
        if let (true, Test::Value(v) | Test::Prefix(v)) = (headers, &c.test) {
            let field = matches!(c.test, Test::Value(_));
            if let Err(why) = receivable(v.as_bytes(), field) {
                let which = if field { "value" } else { "prefix" };
                e.add(format!("{key}[{j}].{which}"), format!("{v:?} {why}"));
            }
        }
        let name = match headers {
            true => c.name.to_ascii_lowercase().into_bytes().into(),
            false => name.into(),
        };
        out.push(FieldTest { name, test });
    }
    out
}

/// Whether a header value (or, with `whole` false, a value prefix) can be received: no control
/// characters but HTAB, and no SP / HTAB at the start, nor at the end of a whole value (RFC 9110 §5.5;
/// the parser trims them).
fn receivable(v: &[u8], whole: bool) -> Result<(), &'static str> {
    if v.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("holds a control character: no field value can equal it");
    }
    let edge_ws = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    if edge_ws(v.first()) || (whole && edge_ws(v.last())) {
        return Err("starts or ends with whitespace, which is trimmed from received values");
    }
    Ok(())
}
