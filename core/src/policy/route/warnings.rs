//! Routes that can never match (DESIGN.md "Routing": `edge --check` warns about them), found at load:
//!
//! - a route shadowed by another with the same host rule and the same path rule that comes before it in
//!   precedence (at least as many conditions, and earlier in the file when as many) and admits every
//!   request it admits (its conditions are implied by this route's, see `Conditions::imply`);
//! - a `path_regex` route shadowed by a `path_prefix = "/"` route of the same host rule whose conditions
//!   it implies: that prefix matches every path, and a prefix comes before a regex;
//! - a `path_prefix` or `path_exact` that is not a normalised path (a `.` or `..` segment, an encoding
//!   of an unreserved character or with lower-case hex, an encoded NUL, a bad `%`): the request path is
//!   normalised before matching, so it can never equal it;
//! - a `path_regex` anchored (`^` or `\A`, no `|` anywhere) on a first character that is a literal other
//!   than `/` and not optional, or on nothing at all (`^$`): every normalised path starts with `/`;
//! - `methods` naming only CONNECT: edge answers CONNECT itself (405) before routing.
//!
//! The checks are sound but partial: a warned route never matches; an unwarned one may still not.

use std::collections::HashMap;

use super::super::path::normalise;
use super::compile::{Compiled, HostRule};
use super::PathRule;

/// A host rule and a path rule's identity ([`super::compile::PathMatch::key`]).
type RuleKey<'a> = (&'a HostRule, (u8, &'a [u8]));

/// One line per route that can never match (see the module rules), in file order.
pub(super) fn never_matching<T>(routes: &[Compiled<T>]) -> Vec<String> {
    let mut out = Vec::new();
    let mut same_rule: HashMap<RuleKey<'_>, Vec<usize>> = HashMap::new();
    for (i, c) in routes.iter().enumerate() {
        same_rule
            .entry((&c.host, c.path.key()))
            .or_default()
            .push(i);
    }
    // Per host rule, a `path_prefix = "/"` route with the fewest conditions: it comes before every
    // regex route of its host that admits no request it does not.
    let mut catch_all: HashMap<&HostRule, usize> = HashMap::new();
    for (i, c) in routes.iter().enumerate() {
        if c.path.key() == (1, b"/".as_slice()) {
            let best = catch_all.entry(&c.host).or_insert(i);
            if c.conditions.count() < routes[*best].conditions.count() {
                *best = i;
            }
        }
    }
    for (i, c) in routes.iter().enumerate() {
        if let Some(why) = not_normal(&c.spec.path).or_else(|| regex_off_root(&c.spec.path)) {
            out.push(format!("{} can never match: {why}", c.title(i)));
            continue;
        }
        if c.conditions.methods.iter().all(|m| **m == *b"CONNECT")
            && !c.conditions.methods.is_empty()
        {
            out.push(format!(
                "{} can never match: edge answers CONNECT itself (405) before routing",
                c.title(i)
            ));
            continue;
        }
        let count = c.conditions.count();
        let peers = &same_rule[&(&c.host, c.path.key())];
        let first = peers.iter().copied().find(|&j| {
            let o = &routes[j];
            let before =
                (o.conditions.count(), std::cmp::Reverse(j)) > (count, std::cmp::Reverse(i));
            j != i && before && c.conditions.imply(&o.conditions)
        });
        if let Some(j) = first {
            out.push(format!(
                "{} can never match: {} has the same host and path rule, comes first, and matches every request it would",
                c.title(i),
                routes[j].title(j)
            ));
            continue;
        }
        if let (2, Some(&j)) = (c.path.rank(), catch_all.get(&c.host)) {
            if c.conditions.imply(&routes[j].conditions) {
                out.push(format!(
                    "{} can never match: {} has the same host and path_prefix \"/\", which matches every path, and a prefix comes before a regex",
                    c.title(i),
                    routes[j].title(j)
                ));
            }
        }
    }
    out
}

/// Why a `path_prefix` / `path_exact` is not a normalised path, or `None` when it is.
fn not_normal(rule: &PathRule) -> Option<String> {
    let (key, p) = match rule {
        PathRule::Prefix(p) => ("path_prefix", p),
        PathRule::Exact(p) => ("path_exact", p),
        PathRule::Regex(_) => return None,
    };
    let mut scratch = Vec::new();
    match normalise(p.as_bytes(), &mut scratch) {
        Ok(n) if n == p.as_bytes() => None,
        Ok(n) => Some(format!(
            "{key} {p:?} is not a normalised path (RFC 3986 §6.2.2), and request paths are matched normalised; write {:?}",
            String::from_utf8_lossy(n)
        )),
        Err(_) => Some(format!(
            "{key} {p:?} is a path edge answers 400 bad_path (a `..` above the root, an encoded NUL or a bad `%`)"
        )),
    }
}

/// Why a `path_regex` cannot match a path starting with `/` (as far as its first characters show), or
/// `None`.
fn regex_off_root(rule: &PathRule) -> Option<String> {
    let PathRule::Regex(r) = rule else {
        return None;
    };
    let rest = r.strip_prefix('^').or_else(|| r.strip_prefix("\\A"))?;
    if r.contains('|') {
        return None; // an alternative may start anywhere
    }
    let literal = |b: u8| b.is_ascii_alphanumeric() || b"-_~%:@!&',;=".contains(&b);
    let optional = |b: Option<u8>| matches!(b, Some(b'?' | b'*' | b'{'));
    let mut bytes = rest.bytes();
    match (bytes.next(), bytes.next()) {
        (None, _) | (Some(b'$'), None) => Some(format!(
            "path_regex {r:?} matches only an empty path; request paths start with '/'"
        )),
        (Some(b), next) if literal(b) && !optional(next) => Some(format!(
            "path_regex {r:?} is anchored on {:?}; request paths start with '/'",
            b as char
        )),
        _ => None,
    }
}
