//! Configuration of DESIGN.md "Upstream health, discovery and balancing": weighted endpoints, the
//! balancing policy, re-resolution, active health checks, and the PROXY protocol on the traffic
//! listeners. Types only; validation is in `resolve.rs`.

use std::{fmt, ops::RangeInclusive, str::FromStr};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::{Dur, Limit};

/// One entry of `endpoints`: `"host:port"`, or `{ address = "host:port", weight = 2 }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EndpointSpec {
    /// `"host:port"`, weight 1.
    Address(String),
    /// An address with a weight.
    Weighted(WeightedEndpoint),
}

/// `{ address = "host:port", weight = N }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedEndpoint {
    /// `host:port` or `name:port`.
    pub address: String,
    /// Relative share of requests (at least 1).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

impl EndpointSpec {
    /// The `host:port` text.
    pub fn address(&self) -> &str {
        match self {
            EndpointSpec::Address(a) => a,
            EndpointSpec::Weighted(w) => &w.address,
        }
    }

    /// The weight (1 for a plain address).
    pub fn weight(&self) -> u32 {
        match self {
            EndpointSpec::Address(_) => 1,
            EndpointSpec::Weighted(w) => w.weight,
        }
    }
}

impl From<String> for EndpointSpec {
    fn from(a: String) -> Self {
        EndpointSpec::Address(a)
    }
}

impl From<&str> for EndpointSpec {
    fn from(a: &str) -> Self {
        EndpointSpec::Address(a.to_string())
    }
}

/// `balance`: how a worker picks an endpoint (DESIGN.md "Upstream health, discovery and balancing").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Smooth weighted round robin.
    #[default]
    RoundRobin,
    /// Power of two choices over this worker's in-flight requests per endpoint, divided by weight.
    LeastRequest,
    /// Random, by weight.
    Random,
    /// Consistent hashing on the request's `hash_key` (rendezvous hashing, weighted): a key stays on
    /// its endpoint while that endpoint is usable.
    Hash,
}

/// `hash_key`: what `balance = "hash"` hashes (DESIGN.md "Configuration (TOML)").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashKey {
    /// The client's address (the PROXY-protocol source when one was received).
    ClientIp,
    /// A request header's value (lower-case name).
    Header(Box<str>),
    /// A cookie's value.
    Cookie(Box<str>),
    /// The path as received, without the query.
    Path,
}

impl HashKey {
    /// Parses `"client_ip"`, `"header:NAME"`, `"cookie:NAME"` or `"path"`.
    ///
    /// # Errors
    /// Anything else, with the forms it may take.
    pub fn parse(s: &str) -> Result<HashKey, String> {
        let token = |n: &str| !n.is_empty() && n.bytes().all(crate::policy::template::is_tchar);
        match s {
            "client_ip" => Ok(HashKey::ClientIp),
            "path" => Ok(HashKey::Path),
            _ => match s.split_once(':') {
                Some(("header", n)) if token(n) => Ok(HashKey::Header(n.to_ascii_lowercase().into())),
                Some(("cookie", n)) if token(n) => Ok(HashKey::Cookie(n.into())),
                _ => Err(format!(
                    "{s:?} is not a hash key: \"client_ip\", \"header:NAME\", \"cookie:NAME\" or \"path\""
                )),
            },
        }
    }
}

/// `[upstreams.health_check]`: active HTTP (or gRPC) checks from the process's health thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheck {
    /// Path of the GET (Host = the endpoint, User-Agent: edge-health).
    pub path: String,
    /// Time between probes of one endpoint.
    pub interval: Dur,
    /// Deadline of one probe (connect, request and response head).
    pub timeout: Dur,
    /// Consecutive passes that mark an unhealthy endpoint healthy again.
    pub healthy_threshold: u32,
    /// Consecutive failures that mark an endpoint unhealthy.
    pub unhealthy_threshold: u32,
    /// Statuses that pass, e.g. `"200-399"` or `"204"`.
    pub expect_status: StatusRange,
    /// Set: a gRPC health check (`grpc.health.v1.Health/Check`, the gRPC Health Checking Protocol)
    /// for this service name, `""` meaning the server as a whole, instead of the GET of `path`; a
    /// probe passes on `grpc-status` 0 with the status SERVING, and `path` and `expect_status` are
    /// unused. Needs an HTTP/2 upstream (`protocol = "h2"`, or `"auto"` with `tls = true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_service: Option<String>,
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            path: "/healthz".into(),
            interval: Dur::secs(5),
            timeout: Dur::secs(1),
            healthy_threshold: 2,
            unhealthy_threshold: 3,
            expect_status: StatusRange(200..=399),
            grpc_service: None,
        }
    }
}

/// An inclusive range of status codes written `"200-399"` or `"200"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusRange(pub RangeInclusive<u16>);

impl StatusRange {
    /// Whether `status` passes.
    pub fn contains(&self, status: u16) -> bool {
        self.0.contains(&status)
    }
}

impl FromStr for StatusRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid status range {s:?}; write e.g. \"200-399\" or \"204\"");
        let code = |t: &str| {
            t.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(bad)
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (code(a)?, code(b)?),
            None => (code(s)?, code(s)?),
        };
        match lo <= hi {
            true => Ok(StatusRange(lo..=hi)),
            false => Err(bad()),
        }
    }
}

impl fmt::Display for StatusRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.start() == self.0.end() {
            true => write!(f, "{}", self.0.start()),
            false => write!(f, "{}-{}", self.0.start(), self.0.end()),
        }
    }
}

impl Serialize for StatusRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StatusRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// `server.proxy_protocol`: which PROXY protocol header every traffic connection starts with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocol {
    /// No header expected.
    #[default]
    Off,
    /// The text header (version 1).
    V1,
    /// The binary header (version 2).
    V2,
    /// Either version.
    Any,
}

/// `send_proxy_protocol` on `[[upstreams]]`: the PROXY protocol header each new upstream connection
/// starts with (DESIGN.md "Observability"), carrying the client address edge uses. A header describes a
/// connection, so a pooled connection that carried one is reused only for requests from the same
/// client connection (the same source and destination addresses, `edge_upstream::pool`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendProxyProtocol {
    /// No header.
    #[default]
    Off,
    /// The text header (version 1).
    V1,
    /// The binary header (version 2).
    V2,
}

impl SendProxyProtocol {
    /// The header version to write, `None` when off.
    pub fn version(self) -> Option<crate::proxy_protocol::encode::Version> {
        use crate::proxy_protocol::encode::Version;
        match self {
            SendProxyProtocol::Off => None,
            SendProxyProtocol::V1 => Some(Version::V1),
            SendProxyProtocol::V2 => Some(Version::V2),
        }
    }
}

/// The default `resolve` interval.
pub(super) fn resolve_default() -> Limit {
    Limit(Some(std::time::Duration::from_secs(30)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_ranges_parse_and_print_as_written() {
        assert_eq!("200-399".parse::<StatusRange>().unwrap().0, 200..=399);
        assert_eq!("204".parse::<StatusRange>().unwrap().0, 204..=204);
        assert_eq!("204".parse::<StatusRange>().unwrap().to_string(), "204");
        for bad in ["", "abc", "399-200", "99", "600", "200-"] {
            assert!(bad.parse::<StatusRange>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn endpoints_are_plain_or_weighted() {
        #[derive(Deserialize)]
        struct E {
            endpoints: Vec<EndpointSpec>,
        }
        let e: E = toml::from_str(
            r#"endpoints = ["a:1", { address = "b:2", weight = 3 }, { address = "c:3" }]"#,
        )
        .unwrap();
        let got: Vec<_> = e
            .endpoints
            .iter()
            .map(|s| (s.address(), s.weight()))
            .collect();
        assert_eq!(got, [("a:1", 1), ("b:2", 3), ("c:3", 1)]);
    }
}
