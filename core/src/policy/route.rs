//! The compiled route table (DESIGN.md "Routing"): `[[routes]]` as plain [`RouteSpec`]s in, an indexed
//! [`RouteTable`] out, built once at load; [`RouteTable::find`] picks a request's route with hash lookups
//! and short scans, no allocation and no lock, so 10 000 routes cost what 10 do.
//!
//! The rules, in the order a request meets them:
//! 1. host groups, each tried in turn until one has a matching route: the routes whose `host` equals the
//!    request's host (case-insensitive, port and one trailing dot removed), then those whose `*.suffix`
//!    wildcard matches it, longest suffix first (`*.example.com` matches `a.example.com` and
//!    `a.b.example.com`, never `example.com`), then the routes without `host`. A request host over 255
//!    bytes (no DNS name is) matches no `host`.
//! 2. within a group, a route matches when its path rule and every condition hold (`methods`, `headers`,
//!    `query`, see `conditions`), and the most specific matching route wins: a `path_exact`, then the
//!    longest `path_prefix`, then a `path_regex`; among equals, the route with more conditions (a
//!    `methods` list counts as one, each `headers` and `query` entry as one), then the first in the file.
//!
//! Path rules see the normalised path without its query ([`super::path`]). `path_prefix` matches whole
//! segments (Gateway API PathPrefix): `/api` matches `/api`, `/api/` and `/api/x`, never `/apix`; `/`
//! matches every path starting with `/`; trailing slashes of a prefix are ignored (`/api/` is `/api`, as
//! in Gateway API). `path_exact` compares bytes. `path_regex` uses `regex::bytes` (linear time), compiled
//! at load, and is anchored only as written (`^/v[0-9]+/`).

mod compile;
mod conditions;
mod index;
mod listing;
#[cfg(test)]
mod tests;
mod warnings;

use std::sync::Arc;

use crate::http::head::Field;

use compile::Compiled;
use index::{request_host, HostIndex};

/// One `[[routes]]` entry as plain data (the configuration converts its own type into this).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSpec {
    /// `name`: the label in metrics, logs and messages; `None`: the route's index.
    pub name: Option<String>,
    /// `host`: an exact name (`api.example.com`), a `*.` wildcard (`*.example.com`), or `None` for any
    /// host. No port.
    pub host: Option<String>,
    /// The path rule: exactly one of `path_prefix`, `path_exact`, `path_regex`.
    pub path: PathRule,
    /// `methods`: the request's method must be one of these (case-sensitive, RFC 9110 §9.1); empty: any.
    pub methods: Vec<String>,
    /// `headers`: every one must hold.
    pub headers: Vec<Condition>,
    /// `query`: every one must hold, on the percent-decoded query parameters.
    pub query: Vec<Condition>,
    /// What the route does, for [`RouteTable::listing`] (e.g. `upstream "origin"`).
    pub action: String,
}

/// A route's path rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathRule {
    /// `path_prefix`: whole segments (see the module rules).
    Prefix(String),
    /// `path_exact`: the whole normalised path.
    Exact(String),
    /// `path_regex`: a `regex` crate pattern, matched against the normalised path.
    Regex(String),
}

/// One `headers` or `query` entry: a field or parameter name and what must hold of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// Header field name (case-insensitive) or query parameter name (exact, after decoding).
    pub name: String,
    /// The test on its value.
    pub test: Test,
}

/// What a [`Condition`] requires. With a name that occurs more than once, `Value` and `Prefix` hold when
/// any occurrence passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// `value = "..."`: a value equal to this, byte for byte.
    Value(String),
    /// `prefix = "..."`: a value starting with this.
    Prefix(String),
    /// `present = true / false`: the name occurs (with any value) / does not occur.
    Present(bool),
}

/// A route that does not compile: which route (its index in the file), which key, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteError {
    /// Index of the route in the file.
    pub route: usize,
    /// The key under the route, e.g. `path_regex` or `headers[1].name`.
    pub key: String,
    /// What is wrong, naming the route when it has a name.
    pub reason: String,
}

/// What routing needs of a request.
#[derive(Clone, Copy, Debug)]
pub struct RouteRequest<'a> {
    /// The method token.
    pub method: &'a [u8],
    /// The raw Host field or `:authority` (port allowed), `None` when absent.
    pub host: Option<&'a [u8]>,
    /// The normalised path ([`super::path::normalise`]), without the query.
    pub path: &'a [u8],
    /// The query, after its `?` (not normalised), `None` when the target has no `?`.
    pub query: Option<&'a [u8]>,
    /// The head buffer `fields` point into.
    pub head: &'a [u8],
    /// The request's header fields (offsets into `head`).
    pub fields: &'a [Field],
}

/// The compiled routes, indexed for [`RouteTable::find`]; `T` is what a route leads to (the
/// configuration's `ResolvedRoute`).
///
/// A clone shares the routes and their index and compiles nothing again, but has regexes of its own:
/// the `regex` crate keeps a match cache per regex, handed to the first thread that uses it without a
/// lock and to other threads through a mutex (or a new cache). Each worker matches on its own clone, so
/// matching takes no lock and, after its first use, allocates nothing.
#[derive(Debug)]
pub struct RouteTable<T> {
    shared: Arc<Shared<T>>,
    /// The `path_regex` routes' regexes, by `PathMatch::Regex::slot`.
    regexes: Vec<regex::bytes::Regex>,
}

/// What the clones of a table share.
#[derive(Debug)]
struct Shared<T> {
    /// In file order.
    routes: Vec<Compiled<T>>,
    index: HostIndex,
    warnings: Vec<String>,
}

impl<T> Clone for RouteTable<T> {
    fn clone(&self) -> Self {
        RouteTable {
            shared: Arc::clone(&self.shared),
            regexes: self.regexes.clone(),
        }
    }
}

impl<T> RouteTable<T> {
    /// Compiles `routes` (in file order, each with what it leads to) into an indexed table, collecting
    /// the "can never match" warnings.
    ///
    /// # Errors
    /// Every route that does not compile, each error naming its index, key and reason: a `host` with a
    /// port or a bad wildcard (`a.*.com`, `*`), a path rule not starting with `/`, a regex that does not
    /// compile, an unknown method (not in the IANA HTTP Method Registry; methods are case-sensitive), a
    /// header condition whose name is not a token or whose value could never be received, an empty
    /// query parameter name, a name that is empty, numeric or used twice.
    pub fn new(routes: Vec<(RouteSpec, T)>) -> Result<Self, Vec<RouteError>> {
        let mut errors = Vec::new();
        let mut compiled = Vec::with_capacity(routes.len());
        let mut regexes = Vec::new();
        for (i, (spec, value)) in routes.into_iter().enumerate() {
            let earlier = &compiled[..];
            match compile::route(i, spec, value, earlier, &mut regexes) {
                Ok(c) => compiled.push(c),
                Err(e) => errors.extend(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let index = HostIndex::build(&compiled);
        let warnings = warnings::never_matching(&compiled);
        let shared = Shared {
            routes: compiled,
            index,
            warnings,
        };
        Ok(RouteTable {
            shared: Arc::new(shared),
            regexes,
        })
    }

    /// What the route for `r` leads to, or `None` (404): see the module rules. Allocates nothing.
    pub fn find(&self, r: &RouteRequest<'_>) -> Option<&T> {
        self.find_index(r).map(|i| &self.shared.routes[i].value)
    }

    /// The file index of the route for `r`, as [`RouteTable::find`].
    pub fn find_index(&self, r: &RouteRequest<'_>) -> Option<usize> {
        let shared = &*self.shared;
        let mut lower = [0u8; compile::MAX_HOST];
        let host = match (shared.index.has_hosts(), r.host) {
            (true, Some(raw)) => request_host(raw, &mut lower),
            _ => None,
        };
        shared.index.find(&shared.routes, &self.regexes, host, r)
    }

    /// The compiled routes in match order, one line each, grouped by host as they are tried (what
    /// `edge --check` prints).
    pub fn listing(&self) -> String {
        listing::listing(&self.shared.routes, &self.shared.index)
    }

    /// One line per route that can never match, naming the route and why: shadowed by an earlier route
    /// with the same host and path rule that matches every request it would, or (a regex) by a
    /// `path_prefix = "/"` of the same host that matches every request it would; a `path_prefix` or
    /// `path_exact` that no normalised path can equal; a regex that cannot match a path starting with
    /// `/` (when that shows in its first characters); a `methods` list holding only CONNECT (answered
    /// 405 before routing).
    pub fn warnings(&self) -> &[String] {
        &self.shared.warnings
    }

    /// How many routes there are.
    pub fn len(&self) -> usize {
        self.shared.routes.len()
    }

    /// Whether there is no route.
    pub fn is_empty(&self) -> bool {
        self.shared.routes.is_empty()
    }

    /// The route at file index `i` with its label, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<(&str, &T)> {
        self.shared
            .routes
            .get(i)
            .map(|c| (c.label.as_str(), &c.value))
    }

    /// The routes in file order, each with its label (its `name`, else its index).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.shared
            .routes
            .iter()
            .map(|c| (c.label.as_str(), &c.value))
    }
}
