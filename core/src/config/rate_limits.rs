//! `[[rate_limits]]` (DESIGN.md "Configuration (TOML)", "Request pipeline and traffic rules"): named
//! limits that routes refer to, each resolved into its GCRA parameters and a keyed table shared by
//! every worker ([`crate::policy::limit`]). A limit that keeps its name and `max_keys` across a reload
//! keeps its table, so clients keep their state ([`RateLimits::adopt`]).

use std::{fmt, str::FromStr, sync::Arc, time::Duration};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use crate::policy::limit::{Gcra, KeyTable};
use crate::policy::template::is_tchar;

use super::problems::Problems;

/// `[[rate_limits]]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// What routes' `rate_limit` names; the `limit` label of `edge_requests_limited_total`.
    pub name: String,
    /// `"client_ip"`, `"header:NAME"` (requests without the field are not limited) or `"route"`.
    #[serde(default = "client_ip")]
    pub key: String,
    /// Sustained rate: `"N/s"`, `"N/m"` or `"N/h"`.
    pub rate: Rate,
    /// Requests allowed at once above the sustained rate.
    #[serde(default)]
    pub burst: u64,
    /// Distinct keys tracked; beyond it the least recently active are forgotten.
    #[serde(default = "default_max_keys")]
    pub max_keys: u64,
}

fn client_ip() -> String {
    "client_ip".into()
}

fn default_max_keys() -> u64 {
    1_000_000
}

/// The largest `max_keys` (64 million keys, 3 GiB of table): beyond it a typo, not a plan.
const MAX_KEYS: u64 = 1 << 26;

/// A rate: `count` requests per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Requests per period (at least 1).
    pub count: u64,
    /// The period: one second, minute or hour.
    pub per: Duration,
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rate, String> {
        let bad =
            || format!("invalid rate {s:?}: write \"N/s\", \"N/m\" or \"N/h\", e.g. \"100/s\"");
        let (n, unit) = s.split_once('/').ok_or_else(bad)?;
        let count: u64 = n.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        if count == 0 {
            return Err(format!("invalid rate {s:?}: at least 1 request per period"));
        }
        Ok(Rate { count, per })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// What a limit counts requests by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address (the PROXY-protocol source when one was received).
    ClientIp,
    /// A request header's value (lower-case name); requests without it are not limited.
    Header(Box<str>),
    /// The route: one budget for every client of the routes that use the limit.
    Route,
}

/// One resolved `[[rate_limits]]` entry.
pub struct ResolvedLimit {
    /// Its name (the metric label).
    pub name: String,
    /// What it counts by.
    pub key: LimitKey,
    /// Its rate and burst.
    pub gcra: Gcra,
    /// `max_keys` as configured (a reload with another value starts a new table).
    pub max_keys: u64,
    /// The keys' state, shared by every worker.
    pub table: Arc<KeyTable>,
}

impl fmt::Debug for ResolvedLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedLimit")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("gcra", &self.gcra)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

/// Every `[[rate_limits]]` entry, in file order (routes refer to them by index).
#[derive(Clone, Debug, Default)]
pub struct RateLimits(pub Arc<[ResolvedLimit]>);

impl RateLimits {
    /// The index of the limit named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|l| l.name == name)
    }

    /// After a reload: each limit that has the same name and `max_keys` as one of `previous` takes
    /// that limit's table, so its keys keep their state (a changed rate applies from the next
    /// request). Called before the configuration is handed to workers.
    pub fn adopt(&mut self, previous: &RateLimits) {
        let adopted: Vec<ResolvedLimit> = self
            .0
            .iter()
            .map(|l| {
                let kept = previous
                    .0
                    .iter()
                    .find(|p| p.name == l.name && p.max_keys == l.max_keys);
                ResolvedLimit {
                    name: l.name.clone(),
                    key: l.key.clone(),
                    gcra: l.gcra,
                    max_keys: l.max_keys,
                    table: kept.map_or_else(|| l.table.clone(), |p| p.table.clone()),
                }
            })
            .collect();
        self.0 = adopted.into();
    }
}

/// Checks `[[rate_limits]]` and builds their tables.
pub(super) fn resolve_rate_limits(limits: &[RateLimit], p: &mut Problems<'_>) -> RateLimits {
    let mut out = Vec::with_capacity(limits.len());
    for (i, l) in limits.iter().enumerate() {
        let at = |key: &str| format!("rate_limits[{i}].{key}");
        let named = |reason: String| format!("rate limit {:?}: {reason}", l.name);
        if l.name.is_empty() {
            p.add(at("name"), "must not be empty");
        } else if limits[..i].iter().any(|o| o.name == l.name) {
            p.add(
                at("name"),
                named("another [[rate_limits]] entry has this name".into()),
            );
        }
        let key = match l.key.as_str() {
            "client_ip" => Some(LimitKey::ClientIp),
            "route" => Some(LimitKey::Route),
            k => match k.strip_prefix("header:") {
                Some(h) if !h.is_empty() && h.bytes().all(is_tchar) => {
                    Some(LimitKey::Header(h.to_ascii_lowercase().into()))
                }
                _ => {
                    p.add(
                        at("key"),
                        named(format!(
                            "{k:?} is not a key: \"client_ip\", \"header:NAME\" or \"route\""
                        )),
                    );
                    None
                }
            },
        };
        if l.max_keys == 0 || l.max_keys > MAX_KEYS {
            p.add(
                at("max_keys"),
                named(format!("must be between 1 and {MAX_KEYS}")),
            );
        }
        if let (Some(key), true) = (key, (1..=MAX_KEYS).contains(&l.max_keys)) {
            out.push(ResolvedLimit {
                name: l.name.clone(),
                key,
                gcra: Gcra::new(l.rate.count, l.rate.per, l.burst),
                max_keys: l.max_keys,
                table: Arc::new(KeyTable::new(l.max_keys)),
            });
        }
    }
    RateLimits(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print_back() {
        for text in ["100/s", "5/m", "3600/h"] {
            assert_eq!(text.parse::<Rate>().unwrap().to_string(), text);
        }
        assert_eq!(
            "10/m".parse::<Rate>().unwrap(),
            Rate {
                count: 10,
                per: Duration::from_secs(60)
            }
        );
        for bad in ["100", "x/s", "10/d", "0/s", "-1/s"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reload_keeps_the_state_of_limits_that_keep_their_name_and_size() {
        let mut p = Problems {
            file: "f",
            errors: Vec::new(),
            warnings: Vec::new(),
        };
        let limit = |name: &str, max_keys| RateLimit {
            name: name.into(),
            key: "client_ip".into(),
            rate: "1/s".parse().unwrap(),
            burst: 0,
            max_keys,
        };
        let old = resolve_rate_limits(&[limit("a", 10), limit("b", 10), limit("c", 10)], &mut p);
        let mut new =
            resolve_rate_limits(&[limit("a", 10), limit("b", 20), limit("d", 10)], &mut p);
        new.adopt(&old);
        assert!(
            Arc::ptr_eq(&new.0[0].table, &old.0[0].table),
            "same name and size"
        );
        assert!(
            !Arc::ptr_eq(&new.0[1].table, &old.0[1].table),
            "max_keys changed"
        );
        assert!(p.errors.is_empty());
    }
}
