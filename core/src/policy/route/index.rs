//! The route index: host groups in hash maps (exact names; wildcard suffixes), and in each group exact
//! paths in a hash map, prefixes in a hash map keyed by the segment-bounded prefix (walked from the
//! longest candidate down: the whole path, then the path cut before each `/` from the right, then `/`),
//! and regexes in a list scanned only in their group. A key's routes are kept in precedence order (more
//! conditions first, then file order), so the first whose conditions hold wins. A lookup costs one hash
//! per host candidate and per path segment, whatever the number of routes.

use std::{
    collections::HashMap,
    hash::{BuildHasherDefault, Hasher},
};

use super::compile::{Compiled, HostRule, PathMatch, MAX_HOST};
use super::RouteRequest;

/// FxHash (rustc's): a fast non-cryptographic hash. The keys come from the configuration; requests only
/// look up, so a request cannot make a key's bucket longer.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A byte-string keyed map with [`FxHasher`].
pub(super) type Map<V> = HashMap<Box<[u8]>, V, BuildHasherDefault<FxHasher>>;

/// The routes of one host group, indexed by path rule. Values are file indexes, in precedence order.
#[derive(Clone, Debug, Default)]
pub(super) struct Group {
    pub(super) exact: Map<Vec<usize>>,
    pub(super) prefixes: Map<Vec<usize>>,
    pub(super) regexes: Vec<usize>,
    /// Length of the longest prefix key: longer candidates are not looked up.
    longest_prefix: usize,
}

impl Group {
    fn add<T>(&mut self, i: usize, c: &Compiled<T>) {
        match &c.path {
            PathMatch::Exact(k) => self.exact.entry(k.clone()).or_default().push(i),
            PathMatch::Prefix(k) => {
                self.longest_prefix = self.longest_prefix.max(k.len());
                self.prefixes.entry(k.clone()).or_default().push(i)
            }
            PathMatch::Regex { .. } => self.regexes.push(i),
        }
    }

    /// Puts every list in precedence order: more conditions first, then file order.
    fn sort<T>(&mut self, routes: &[Compiled<T>]) {
        let order = |list: &mut Vec<usize>| {
            list.sort_by_key(|&i| (std::cmp::Reverse(routes[i].conditions.count()), i))
        };
        self.exact.values_mut().for_each(order);
        self.prefixes.values_mut().for_each(order);
        order(&mut self.regexes);
    }

    /// The best route of this group for `r`: exact, then the longest prefix, then regexes (compiled
    /// in `regexes`).
    fn find<T>(
        &self,
        routes: &[Compiled<T>],
        regexes: &[regex::bytes::Regex],
        r: &RouteRequest<'_>,
    ) -> Option<usize> {
        let first = |list: &[usize]| list.iter().copied().find(|&i| routes[i].conditions.hold(r));
        let path = r.path;
        if let Some(found) = self.exact.get(path).and_then(|l| first(l)) {
            return Some(found);
        }
        if !self.prefixes.is_empty() && path.first() == Some(&b'/') {
            if let Some(found) = self.prefix_walk(path, first) {
                return Some(found);
            }
        }
        self.regexes.iter().copied().find(|&i| {
            let PathMatch::Regex { slot, .. } = routes[i].path else {
                return false;
            };
            regexes[slot].is_match(path) && routes[i].conditions.hold(r)
        })
    }

    /// The segment-bounded prefixes of `path` (starting with `/`), longest first, each looked up: the
    /// whole path (unless it ends with `/`), the path before each `/` (keys never end with `/`), then
    /// `/`.
    fn prefix_walk(&self, path: &[u8], first: impl Fn(&[usize]) -> Option<usize>) -> Option<usize> {
        let try_key = |key: &[u8]| match key.len() <= self.longest_prefix {
            true => self.prefixes.get(key).and_then(|l| first(l)),
            false => None,
        };
        if path.last() != Some(&b'/') {
            if let Some(found) = try_key(path) {
                return Some(found);
            }
        }
        for at in memchr::memrchr_iter(b'/', path) {
            if at > 0 && path[at - 1] != b'/' {
                if let Some(found) = try_key(&path[..at]) {
                    return Some(found);
                }
            }
        }
        try_key(b"/")
    }
}

/// Host groups: exact names, wildcard suffixes, and the routes without a host.
#[derive(Clone, Debug, Default)]
pub(super) struct HostIndex {
    pub(super) exact: Map<Group>,
    pub(super) wildcard: Map<Group>,
    pub(super) any: Group,
}

impl HostIndex {
    pub(super) fn build<T>(routes: &[Compiled<T>]) -> HostIndex {
        let mut index = HostIndex::default();
        for (i, c) in routes.iter().enumerate() {
            let group = match &c.host {
                HostRule::Any => &mut index.any,
                HostRule::Exact(h) => index.exact.entry(h.clone()).or_default(),
                HostRule::Wildcard(s) => index.wildcard.entry(s.clone()).or_default(),
            };
            group.add(i, c);
        }
        index.exact.values_mut().for_each(|g| g.sort(routes));
        index.wildcard.values_mut().for_each(|g| g.sort(routes));
        index.any.sort(routes);
        index
    }

    /// Whether any route names a host (else the request's host is not looked at).
    pub(super) fn has_hosts(&self) -> bool {
        !self.exact.is_empty() || !self.wildcard.is_empty()
    }

    /// The route for `r`, whose host is `host` (lower-cased, port removed: [`request_host`]).
    pub(super) fn find<T>(
        &self,
        routes: &[Compiled<T>],
        regexes: &[regex::bytes::Regex],
        host: Option<&[u8]>,
        r: &RouteRequest<'_>,
    ) -> Option<usize> {
        if let Some(host) = host {
            let group = self.exact.get(host);
            if let Some(found) = group.and_then(|g| g.find(routes, regexes, r)) {
                return Some(found);
            }
            if !self.wildcard.is_empty() {
                // Suffixes after each dot, longest first; `*.x` needs at least one byte before `.x`.
                for dot in memchr::memchr_iter(b'.', host).filter(|&d| d > 0) {
                    let found = self.wildcard.get(&host[dot + 1..]);
                    if let Some(found) = found.and_then(|g| g.find(routes, regexes, r)) {
                        return Some(found);
                    }
                }
            }
        }
        self.any.find(routes, regexes, r)
    }
}

/// The request's host as routes compare it, written into `buf`: the port removed (`a:80` → `a`,
/// `[::1]:80` → `[::1]`), one trailing dot removed (`a.example.` is `a.example`), lower-cased. `None`
/// when it is empty or over 255 bytes.
pub(super) fn request_host<'b>(raw: &[u8], buf: &'b mut [u8; MAX_HOST]) -> Option<&'b [u8]> {
    let host = strip_port(raw);
    let host = host.strip_suffix(b".").unwrap_or(host);
    if host.is_empty() || host.len() >= buf.len() {
        return None;
    }
    let out = &mut buf[..host.len()];
    out.copy_from_slice(host);
    out.make_ascii_lowercase();
    Some(out)
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`; a host without a port as it is.
pub(super) fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().position(|&b| b == b':') {
        Some(i) => &host[..i],
        None => host,
    }
}
