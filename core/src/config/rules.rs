//! The traffic-rule keys of `[[routes]]` (DESIGN.md "Configuration (TOML)", "Request pipeline and
//! traffic rules"): `rate_limit`, `redirect`, `respond`, `strip_prefix`, `add_prefix`, `host_rewrite`,
//! `request_headers`, `response_headers`, `upstreams` (a weighted split) and `mirror`; their schema and
//! their compilation into [`RouteRules`], which a worker's admission applies in the pipeline's phases.
//! Errors name the key under `routes[i]` and, for a named route, the route.

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicUsize, Ordering},
};

use serde::{Deserialize, Serialize};

use crate::policy::headers::{Direction, HeaderRules};
use crate::policy::template::Template;

use super::rate_limits::RateLimits;
use super::{Route, Upstream};

/// `request_headers` / `response_headers`: `{ set = { name = value }, add = { .. }, remove = [..] }`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderOps {
    /// Replace every field of the name with this value (added when absent).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    /// Append a field, keeping any already there.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    /// Drop every field of these names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// `redirect = { to, status }`: answered locally.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redirect {
    /// The Location, with variables (`https://${host}${path}${query}`).
    pub to: String,
    /// 301, 302, 303, 307 or 308; default 302.
    #[serde(default = "found")]
    pub status: u16,
}

fn found() -> u16 {
    302
}

/// `respond = { status, body, content_type }`: answered locally.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Respond {
    /// 200 to 599 (not 101).
    pub status: u16,
    /// The body, with variables; default empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// Its Content-Type; default `text/plain; charset=utf-8`.
    #[serde(default = "text_plain")]
    pub content_type: String,
}

fn text_plain() -> String {
    "text/plain; charset=utf-8".into()
}

/// `mirror = { upstream, percent }`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// The `[[upstreams]]` entry that gets the copies.
    pub upstream: String,
    /// The share of requests copied, above 0 and at most 100.
    pub percent: f64,
}

/// One entry of `upstreams = [{ name, weight }]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitTarget {
    /// An `[[upstreams]]` entry.
    pub name: String,
    /// Its share, relative to the others' (at least 1; default 1).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// `rate_limit`: one `[[rate_limits]]` name or a list of them.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LimitNames {
    /// `rate_limit = "per-client"`
    One(String),
    /// `rate_limit = ["per-client", "per-route"]`
    Many(Vec<String>),
}

impl LimitNames {
    fn names(&self) -> &[String] {
        match self {
            LimitNames::One(n) => std::slice::from_ref(n),
            LimitNames::Many(v) => v,
        }
    }
}

/// A route that answers locally (phase 3), never reaching an upstream.
#[derive(Clone, Debug)]
pub enum LocalRule {
    /// `redirect`
    Redirect {
        /// The Location value.
        to: Template,
        /// The status.
        status: u16,
    },
    /// `respond`
    Respond {
        /// The status.
        status: u16,
        /// The body.
        body: Template,
        /// Its Content-Type.
        content_type: Box<str>,
    },
}

/// A weighted split: the upstreams in smooth weighted round robin order (nginx's interleaving, so
/// weights 5, 1, 1 give a a b a c a a), one cycle of the weights divided by their greatest common
/// divisor, and this worker's place in it. The route table is cloned per worker, and a clone starts
/// its own cursor: only its worker moves it.
#[derive(Debug)]
pub struct Split {
    order: Box<[usize]>,
    cursor: AtomicUsize,
}

impl Clone for Split {
    fn clone(&self) -> Split {
        Split {
            order: self.order.clone(),
            cursor: AtomicUsize::new(0),
        }
    }
}

/// The longest split cycle: weights whose sum, divided by their gcd, is above it are refused.
const MAX_CYCLE: u64 = 10_000;

impl Split {
    /// The cycle of `weights` (upstream index, weight), in smooth weighted round robin order.
    fn new(weights: &[(usize, u32)]) -> Split {
        let g = weights.iter().fold(0u32, |g, &(_, w)| gcd(g, w)).max(1);
        let w: Vec<i64> = weights.iter().map(|&(_, w)| i64::from(w / g)).collect();
        let total: i64 = w.iter().sum();
        let mut current = vec![0i64; w.len()];
        let order = (0..total)
            .map(|_| {
                current.iter_mut().zip(&w).for_each(|(c, w)| *c += w);
                let best = (0..w.len()).fold(0, |b, i| if current[i] > current[b] { i } else { b });
                current[best] -= total;
                weights[best].0
            })
            .collect();
        Split {
            order,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The upstream for the next request on this worker. Only the owning worker calls it, so a load
    /// and a store (no read-modify-write) move the cursor.
    pub fn next(&self) -> usize {
        let at = self.cursor.load(Ordering::Relaxed);
        self.cursor
            .store((at + 1) % self.order.len(), Ordering::Relaxed);
        self.order[at]
    }
}

/// A route's `mirror`: the upstream, its share in parts per million, and this worker's accumulator
/// (cloned fresh per worker, as [`Split`]'s cursor), so exactly the share of a worker's requests is
/// copied, evenly spread.
#[derive(Debug)]
pub struct MirrorRule {
    /// Index of the mirror's upstream.
    pub upstream: usize,
    /// Share of requests copied, parts per million.
    pub per_million: u32,
    acc: std::sync::atomic::AtomicU32,
}

impl Clone for MirrorRule {
    fn clone(&self) -> MirrorRule {
        MirrorRule::new(self.upstream, self.per_million)
    }
}

impl PartialEq for MirrorRule {
    fn eq(&self, other: &MirrorRule) -> bool {
        (self.upstream, self.per_million) == (other.upstream, other.per_million)
    }
}

impl MirrorRule {
    /// A mirror to `upstream` of `per_million` of requests.
    pub fn new(upstream: usize, per_million: u32) -> MirrorRule {
        MirrorRule {
            upstream,
            per_million,
            acc: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Whether this request is copied. Only the owning worker calls it (load and store, no
    /// read-modify-write).
    pub fn chosen(&self) -> bool {
        let next = self.acc.load(Ordering::Relaxed) + self.per_million;
        let hit = next >= 1_000_000;
        self.acc
            .store(if hit { next - 1_000_000 } else { next }, Ordering::Relaxed);
        hit
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A route's compiled rules, in pipeline order.
#[derive(Clone, Debug, Default)]
pub struct RouteRules {
    /// Phase 3: indices into the [`RateLimits`], all of which must admit the request.
    pub limits: Box<[usize]>,
    /// Phase 3: the local answer of a `redirect` or `respond` route.
    pub local: Option<LocalRule>,
    /// Phase 4: a path prefix removed (whole segments), then one added.
    pub strip_prefix: Option<Box<str>>,
    /// Phase 4: the prefix put in front of the (stripped) path, without a trailing `/`.
    pub add_prefix: Option<Box<str>>,
    /// Phase 4: the Host (or `:authority`) sent upstream.
    pub host_rewrite: Option<Box<str>>,
    /// Phase 4: header rules on the request sent upstream.
    pub request_headers: HeaderRules,
    /// Phase 6: header rules on the response to the client (edge's own answers for the route too).
    pub response_headers: HeaderRules,
    /// Phase 5: a weighted split in place of the route's one upstream.
    pub split: Option<Split>,
    /// Phase 5: the mirror.
    pub mirror: Option<MirrorRule>,
}

impl RouteRules {
    /// Whether any phase 4 rule changes the request head.
    pub fn rewrites(&self) -> bool {
        self.strip_prefix.is_some()
            || self.add_prefix.is_some()
            || self.host_rewrite.is_some()
            || !self.request_headers.is_empty()
    }
}

/// What the route leads to, from `upstream`, `upstreams`, `redirect` and `respond` (exactly one).
pub(super) enum Action {
    /// One upstream (its index).
    Upstream(usize),
    /// A weighted split, or a local answer: the upstream is chosen (or not needed) by the rules.
    Rules,
}

/// Compiles route `r`'s rules; each error is (key under the route, reason). `None` for the upstream
/// when the route names none that exists (an error is recorded then).
pub(super) fn compile(
    r: &Route,
    upstreams: &[Upstream],
    limits: &RateLimits,
    errors: &mut Vec<(String, String)>,
) -> (Option<Action>, RouteRules) {
    let mut err = |key: &str, reason: String| errors.push((key.to_string(), reason));
    let upstream_index = |name: &str| upstreams.iter().position(|u| u.name == name);
    let mut rules = RouteRules::default();
    let targets = [
        ("upstream", !r.upstream.is_empty()),
        ("upstreams", !r.upstreams.is_empty()),
        ("redirect", r.redirect.is_some()),
        ("respond", r.respond.is_some()),
    ];
    let given: Vec<&str> = targets.iter().filter(|t| t.1).map(|t| t.0).collect();
    if given.len() != 1 {
        let found = if given.is_empty() {
            "none".into()
        } else {
            given.join(" and ")
        };
        err(
            "",
            format!("needs exactly one of upstream, upstreams, redirect, respond (found {found})"),
        );
    }
    let mut action = None;
    if !r.upstream.is_empty() {
        match upstream_index(&r.upstream) {
            Some(i) => action = Some(Action::Upstream(i)),
            None => err(
                "upstream",
                format!("no [[upstreams]] entry is named {:?}", r.upstream),
            ),
        }
    }
    if !r.upstreams.is_empty() {
        let mut weights = Vec::new();
        for (j, t) in r.upstreams.iter().enumerate() {
            match (upstream_index(&t.name), t.weight) {
                (None, _) => err(
                    &format!("upstreams[{j}].name"),
                    format!("no [[upstreams]] entry is named {:?}", t.name),
                ),
                (_, 0) => err(
                    &format!("upstreams[{j}].weight"),
                    "must be at least 1".into(),
                ),
                (Some(i), w) => weights.push((i, w)),
            }
        }
        let g = weights.iter().fold(0u32, |g, &(_, w)| gcd(g, w)).max(1);
        let cycle: u64 = weights.iter().map(|&(_, w)| u64::from(w / g)).sum();
        if cycle > MAX_CYCLE {
            err("upstreams", format!("the weights divided by their greatest common divisor sum to {cycle}; at most {MAX_CYCLE} (use smaller weights, e.g. percentages)"));
        } else if weights.len() == r.upstreams.len() {
            rules.split = Some(Split::new(&weights));
            action = Some(Action::Rules);
        }
    }
    if let Some(rd) = &r.redirect {
        if ![301, 302, 303, 307, 308].contains(&rd.status) {
            err(
                "redirect.status",
                format!("{} is not a redirect: 301, 302, 303, 307 or 308", rd.status),
            );
        }
        match Template::parse(&rd.to) {
            Ok(_) if rd.to.is_empty() => err("redirect.to", "must not be empty".into()),
            Ok(to) => {
                rules.local = Some(LocalRule::Redirect {
                    to,
                    status: rd.status,
                });
                action = Some(Action::Rules);
            }
            Err(why) => err("redirect.to", why),
        }
    }
    if let Some(rs) = &r.respond {
        if !(200..=599).contains(&rs.status) {
            err(
                "respond.status",
                format!("{} is not a final status from 200 to 599", rs.status),
            );
        }
        if rs.body.len() > 64 << 10 {
            err("respond.body", "at most 64 KiB".into());
        }
        if Template::parse(&rs.content_type)
            .ok()
            .and_then(|t| t.literal().map(|_| ()))
            .is_none()
        {
            err(
                "respond.content_type",
                "must be a plain field value (no variables, CR or LF)".into(),
            );
        }
        match Template::parse_body(&rs.body) {
            Ok(body) => {
                rules.local = Some(LocalRule::Respond {
                    status: rs.status,
                    body,
                    content_type: rs.content_type.clone().into(),
                });
                action = Some(Action::Rules);
            }
            Err(why) => err("respond.body", why),
        }
    }
    let local = r.redirect.is_some() || r.respond.is_some();
    for (key, set) in [
        ("strip_prefix", r.strip_prefix.is_some()),
        ("add_prefix", r.add_prefix.is_some()),
        ("host_rewrite", r.host_rewrite.is_some()),
        ("request_headers", r.request_headers.is_some()),
        ("mirror", r.mirror.is_some()),
    ] {
        if local && set {
            err(
                key,
                "has no effect on a route that answers locally (redirect or respond)".into(),
            );
        }
    }
    rules.strip_prefix = prefix(&mut err, "strip_prefix", &r.strip_prefix);
    rules.add_prefix = prefix(&mut err, "add_prefix", &r.add_prefix);
    if let Some(h) = &r.host_rewrite {
        let ok = !h.is_empty()
            && h.len() <= 255
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
        match ok {
            true => rules.host_rewrite = Some(h.as_str().into()),
            false => err(
                "host_rewrite",
                format!("{h:?} is not a host name (letters, digits, '-', '.', an optional :port)"),
            ),
        }
    }
    for (key, direction, ops, out) in [
        (
            "request_headers",
            Direction::Request,
            &r.request_headers,
            &mut rules.request_headers,
        ),
        (
            "response_headers",
            Direction::Response,
            &r.response_headers,
            &mut rules.response_headers,
        ),
    ] {
        let Some(ops) = ops else { continue };
        let pairs = |m: &BTreeMap<String, String>| -> Vec<(String, String)> {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        match HeaderRules::new(direction, &ops.remove, &pairs(&ops.set), &pairs(&ops.add)) {
            Ok(compiled) => *out = compiled,
            Err(e) => err(
                &format!("{key}.{}", e.key),
                format!("{:?}: {}", e.name, e.reason),
            ),
        }
    }
    if let Some(m) = &r.mirror {
        let at = upstream_index(&m.upstream);
        if at.is_none() {
            err(
                "mirror.upstream",
                format!("no [[upstreams]] entry is named {:?}", m.upstream),
            );
        }
        if !(m.percent > 0.0 && m.percent <= 100.0) {
            err(
                "mirror.percent",
                format!("{} is not a share above 0 and at most 100", m.percent),
            );
        }
        if let Some(i) = at.filter(|_| m.percent > 0.0 && m.percent <= 100.0) {
            rules.mirror = Some(MirrorRule::new(i, (m.percent * 10_000.0).round() as u32));
        }
    }
    if let Some(names) = &r.rate_limit {
        let mut found = Vec::new();
        for name in names.names() {
            match limits.position(name) {
                Some(i) => found.push(i),
                None => err(
                    "rate_limit",
                    format!("no [[rate_limits]] entry is named {name:?}"),
                ),
            }
        }
        rules.limits = found.into();
    }
    (action, rules)
}

/// A `strip_prefix` / `add_prefix` value: starts with `/`, trailing `/` removed (`/` alone is no
/// prefix: refused, as it would change nothing).
fn prefix(
    err: &mut impl FnMut(&str, String),
    key: &str,
    value: &Option<String>,
) -> Option<Box<str>> {
    let v = value.as_deref()?;
    let trimmed = v.trim_end_matches('/');
    if !v.starts_with('/')
        || trimmed.is_empty()
        || v.bytes()
            .any(|b| b <= b' ' || b == b'?' || b == b'#' || b == 0x7f)
    {
        err(key, format!("{v:?} must start with '/', name at least one segment, and hold no spaces, '?' or '#'"));
        return None;
    }
    Some(trimmed.into())
}

#[cfg(test)]
mod tests {
    use super::Split;

    #[test]
    fn a_split_interleaves_by_weight_over_one_reduced_cycle() {
        let s = Split::new(&[(7, 50), (8, 10), (9, 10)]);
        let order: Vec<usize> = (0..7).map(|_| s.next()).collect();
        assert_eq!(order, [7, 7, 8, 7, 9, 7, 7]);
        assert_eq!(s.next(), 7, "the cycle repeats");
        let s = Split::new(&[(0, 95), (1, 5)]);
        let n1 = (0..2000).filter(|_| s.next() == 1).count();
        assert_eq!(n1, 100);
        let fresh = s.clone();
        assert_eq!(fresh.next(), 0, "a worker's clone starts its own cursor");
    }

    #[test]
    fn a_mirror_copies_its_exact_share_evenly() {
        let m = super::MirrorRule::new(1, 100_000);
        let picks: Vec<bool> = (0..100).map(|_| m.chosen()).collect();
        assert!(
            picks
                .chunks(10)
                .all(|c| c.iter().filter(|&&p| p).count() == 1),
            "one in each ten"
        );
        let all = super::MirrorRule::new(1, 1_000_000);
        assert!((0..50).all(|_| all.chosen()), "100 %");
    }
}
