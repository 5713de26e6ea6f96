//! The compiled routes in match order, as text (what `edge --check` prints, DESIGN.md "Routing"): the
//! host groups in the order a request tries them (exact names, wildcards by longest suffix, then any
//! host), and in each group the routes in the order they are tried: exact paths, prefixes longest
//! first, then regexes; routes under one key by more conditions, then file order.

use std::fmt::Write as _;

use super::compile::Compiled;
use super::conditions::{Conditions, FieldTest, ValueTest};
use super::index::{Group, HostIndex};
use super::PathRule;

pub(super) fn listing<T>(routes: &[Compiled<T>], index: &HostIndex) -> String {
    let mut out = String::new();
    let mut exact: Vec<_> = index.exact.iter().collect();
    exact.sort_by(|a, b| a.0.cmp(b.0));
    for (host, g) in exact {
        let _ = writeln!(out, "host {:?}:", String::from_utf8_lossy(host));
        group(&mut out, routes, g);
    }
    let mut wildcard: Vec<_> = index.wildcard.iter().collect();
    wildcard.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
    for (suffix, g) in wildcard {
        let _ = writeln!(out, "host \"*.{}\":", String::from_utf8_lossy(suffix));
        group(&mut out, routes, g);
    }
    out.push_str("any host:\n");
    group(&mut out, routes, &index.any);
    out
}

fn group<T>(out: &mut String, routes: &[Compiled<T>], g: &Group) {
    let mut exact: Vec<_> = g.exact.iter().collect();
    exact.sort_by(|a, b| a.0.cmp(b.0));
    let mut prefixes: Vec<_> = g.prefixes.iter().collect();
    prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
    let keyed = exact
        .into_iter()
        .chain(prefixes)
        .flat_map(|(_, l)| l.iter());
    let mut any = false;
    for &i in keyed.chain(&g.regexes) {
        any = true;
        line(out, i, &routes[i]);
    }
    if !any {
        out.push_str("  (none)\n");
    }
}

fn line<T>(out: &mut String, i: usize, c: &Compiled<T>) {
    let _ = write!(out, "  {}: ", c.title(i));
    let _ = match &c.spec.path {
        PathRule::Exact(p) => write!(out, "path_exact {p:?}"),
        PathRule::Prefix(p) => write!(out, "path_prefix {p:?}"),
        PathRule::Regex(r) => write!(out, "path_regex {r:?}"),
    };
    conditions(out, &c.conditions);
    let _ = writeln!(out, " -> {}", c.spec.action);
}

fn conditions(out: &mut String, c: &Conditions) {
    if !c.methods.is_empty() {
        let names: Vec<_> = c
            .methods
            .iter()
            .map(|m| String::from_utf8_lossy(m))
            .collect();
        let _ = write!(out, ", methods [{}]", names.join(", "));
    }
    for (key, tests) in [("headers", &c.headers), ("query", &c.query)] {
        if !tests.is_empty() {
            let texts: Vec<_> = tests.iter().map(test).collect();
            let _ = write!(out, ", {key} [{}]", texts.join(", "));
        }
    }
}

fn test(t: &FieldTest) -> String {
    let name = String::from_utf8_lossy(&t.name);
    match &t.test {
        ValueTest::Value(v) => format!("{name} = {:?}", String::from_utf8_lossy(v)),
        ValueTest::Prefix(p) => format!("{name} prefix {:?}", String::from_utf8_lossy(p)),
        ValueTest::Present(true) => format!("{name} present"),
        ValueTest::Present(false) => format!("{name} absent"),
    }
}
