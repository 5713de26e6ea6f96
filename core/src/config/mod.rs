//! The configuration schema of DESIGN.md "Configuration (TOML)": serde types with `deny_unknown_fields`
//! and their defaults, the embedded default (`deploy/edge.toml`), parsing, and [`ConfigError`]. Beside it:
//! the value types (`values`), the TLS keys (`tls`; certificates are loaded by `crate::tls`), CLI
//! [`Overrides`] (`overrides`), validation into a [`Resolved`] config whose names are resolved to socket
//! addresses, at load, never on a worker (`resolve`), `[[routes]]` and their compilation into the route
//! table (`routes`), and [`Cidr`].
//!
//! Errors name the file, the key path and the reason ([`ConfigError`]).

mod cidr;
mod discovery;
mod http2;
mod locate;
mod overrides;
mod problems;
mod rate_limits;
mod resolve;
mod routes;
mod rules;
mod tls;
mod upstream_protocol;
mod values;

use std::{fmt, time::Duration};

pub use cidr::Cidr;
pub use discovery::{
    Balance, EndpointSpec, HashKey, HealthCheck, ProxyProtocol, SendProxyProtocol, StatusRange,
    WeightedEndpoint,
};
pub use http2::Http2;
pub use locate::add_lines;
pub use overrides::{Overrides, TlsOverride};
pub use rate_limits::{LimitKey, Rate, RateLimit, RateLimits, ResolvedLimit};
pub use resolve::{resolve_all, Resolved, ResolvedEndpoint, ResolvedUpstream};
pub use routes::{FieldCondition, ResolvedRoute, Route, Routes};
pub use rules::{
    HeaderOps, LimitNames, LocalRule, Mirror, MirrorRule, Redirect, Respond, RouteRules, Split,
    SplitTarget,
};
use serde::{Deserialize, Serialize};
pub use tls::{AlpnProtocol, TlsCertificate, TlsServer, TlsVersion};
pub use upstream_protocol::UpstreamProtocol;
pub use values::{
    AccessFormat, ByteLimit, Bytes, Dur, IoDriverSetting, Limit, LogFormat, PinWorkers, TraceMode,
    Workers,
};

/// The default configuration, `deploy/edge.toml`, embedded at build time.
pub const DEFAULT_CONFIG: &str = include_str!("../../../deploy/edge.toml");

/// The whole configuration file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[server]`
    #[serde(default)]
    pub server: Server,
    /// `[admin]`
    #[serde(default)]
    pub admin: Admin,
    /// `[log]`
    #[serde(default)]
    pub log: Log,
    /// `[[upstreams]]`
    #[serde(default)]
    pub upstreams: Vec<Upstream>,
    /// `[[routes]]`
    #[serde(default)]
    pub routes: Vec<Route>,
    /// `[[rate_limits]]`
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimit>,
}

/// `[server]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// Plain traffic listener address; one SO_REUSEPORT socket per worker; "" disables it (allowed only
    /// with `[server.tls]`).
    pub listen: String,
    /// Worker thread count.
    pub workers: Workers,
    /// CPU pinning policy.
    pub pin_workers: PinWorkers,
    /// io driver choice.
    pub io_driver: IoDriverSetting,
    /// listen(2) backlog per worker socket.
    pub backlog: u32,
    /// Open downstream connections for the whole process (DESIGN.md "Capacity").
    pub max_connections: usize,
    /// Requests served on one client connection before `Connection: close`.
    pub max_requests_per_connection: u64,
    /// Readiness path answered locally on the traffic listener.
    pub health_path: String,
    /// CIDRs whose X-Forwarded-For / -Proto are kept and appended to.
    pub trusted_proxies: Vec<String>,
    /// Unix socket path for `edge --upgrade`; "" disables.
    pub upgrade_socket: String,
    /// PROXY protocol header expected on every traffic connection (DESIGN.md "Upstream health,
    /// discovery and balancing").
    pub proxy_protocol: ProxyProtocol,
    /// CIDRs allowed to send a PROXY header; required when `proxy_protocol` is on.
    pub proxy_protocol_from: Vec<String>,
    /// Accept HTTP/2 with prior knowledge on the plain listener (DESIGN.md "HTTP/2"): a connection that
    /// starts with the connection preface (RFC 9113 §3.4) is served as h2c.
    pub h2c: bool,
    /// How often the configuration file (the target of its symlinks, as a Kubernetes ConfigMap swaps
    /// it) is checked for a change and reloaded as at SIGHUP (DESIGN.md "Configuration"); `None`
    /// ("none"): SIGHUP only.
    pub config_check: Limit,
    /// `[server.timeouts]`
    pub timeouts: Timeouts,
    /// `[server.limits]`
    pub limits: Limits,
    /// `[server.http2]`: HTTP/2 limits.
    pub http2: Http2,
    /// `[server.tls]`; absent: no TLS listener (DESIGN.md "TLS").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsServer>,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: "127.0.0.1:8080".into(),
            workers: Workers::Auto,
            pin_workers: PinWorkers::Auto,
            io_driver: IoDriverSetting::Auto,
            backlog: 4096,
            max_connections: 10_000,
            max_requests_per_connection: 1000,
            health_path: "/_health".into(),
            trusted_proxies: Vec::new(),
            upgrade_socket: String::new(),
            proxy_protocol: ProxyProtocol::Off,
            proxy_protocol_from: Vec::new(),
            h2c: false,
            config_check: Limit(Some(Duration::from_secs(10))),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            http2: Http2::default(),
            tls: None,
        }
    }
}

/// `[server.timeouts]`: inbound deadlines (DESIGN.md "Inbound deadlines") and drain timing.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// No request in progress: before the first byte and between keep-alive requests.
    pub idle: Dur,
    /// A whole request, head and body, from its first byte; never restarted by a read.
    pub request: Dur,
    /// No progress writing a response to the client.
    pub send: Dur,
    /// Graceful shutdown: time allowed for in-flight requests after SIGTERM.
    pub drain: Dur,
    /// After SIGTERM, health answers 503 this long before listeners close.
    pub drain_delay: Dur,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            idle: Dur::secs(75),
            request: Dur::secs(30),
            send: Dur::secs(30),
            drain: Dur::secs(30),
            drain_delay: Dur::secs(5),
        }
    }
}

/// `[server.limits]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Request line + header fields, bytes.
    pub max_head_bytes: Bytes,
    /// Header field count.
    pub max_headers: usize,
    /// Request body bytes; `none` for unlimited.
    pub max_body_bytes: ByteLimit,
    /// Open connections per client address for the whole process (0 = off; at most 65 535).
    pub max_connections_per_client: u32,
    /// Response relay buffers one worker holds at most, bytes (DESIGN.md "Memory under slow readers
    /// and large bodies"): when it is spent, new relays wait for buffers ([`crate::pace::RelayBudget`]).
    pub relay_buffer_budget: Bytes,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: Bytes(16 << 10),
            max_headers: 100,
            max_body_bytes: ByteLimit(Some(64 << 20)),
            max_connections_per_client: 0,
            relay_buffer_budget: Bytes(crate::pace::RELAY_BUDGET as u64),
        }
    }
}

/// `[admin]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Admin {
    /// Admin listener address; "" disables it.
    pub listen: String,
}

impl Default for Admin {
    fn default() -> Self {
        Admin {
            listen: "127.0.0.1:9901".into(),
        }
    }
}

/// `[log]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A tracing filter directive, e.g. `info` or `edge=debug`.
    pub level: String,
    /// Requests slower than this log `request.slow` at warn.
    pub slow_request: Dur,
    /// One access line per request (DESIGN.md "Observability").
    pub access: bool,
    /// How access lines are written.
    pub access_format: AccessFormat,
    /// Where access lines go: `""` = stderr, else a file appended to and reopened on SIGUSR1.
    pub access_path: String,
    /// W3C trace context handling.
    pub traceparent: TraceMode,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            format: LogFormat::Text,
            level: "info".into(),
            slow_request: Dur::secs(5),
            access: false,
            access_format: AccessFormat::Json,
            access_path: String::new(),
            traceparent: TraceMode::Propagate,
        }
    }
}

/// `[[upstreams]]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// Name that routes refer to.
    pub name: String,
    /// `host:port` / `name:port` entries, or `{ address, weight }`; names are resolved on the supervisor at
    /// load, reload and every `resolve` interval, never on a worker.
    pub endpoints: Vec<EndpointSpec>,
    /// How a worker picks an endpoint.
    #[serde(default)]
    pub balance: Balance,
    /// What `balance = "hash"` hashes: `client_ip` (default), `header:NAME`, `cookie:NAME`, `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key: Option<String>,
    /// Re-resolution interval of endpoint names; `none`: at load and reload only.
    #[serde(default = "discovery::resolve_default")]
    pub resolve: Limit,
    /// Active health checks; absent: passive ejection only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Connect deadline (504 on expiry, 502 on refusal).
    #[serde(default = "d2s")]
    pub connect_timeout: Dur,
    /// From the request's last byte written upstream to the response head.
    #[serde(default = "l30s")]
    pub request_timeout: Limit,
    /// No progress writing the request to the upstream.
    #[serde(default = "d30s")]
    pub write_timeout: Dur,
    /// Active connections per worker per endpoint; 0 = unlimited.
    #[serde(default)]
    pub max_active: usize,
    /// Wait for a connection when `max_active` is reached; then 503.
    #[serde(default = "d1s")]
    pub queue_timeout: Dur,
    /// Idle keep-alive connections kept per worker per endpoint.
    #[serde(default = "pool64")]
    pub pool_max_idle: usize,
    /// Idle pooled connection lifetime.
    #[serde(default = "d4s")]
    pub pool_idle_timeout: Dur,
    /// Zombie detection inactivity (DESIGN.md "Zombie detection").
    #[serde(default = "d10s")]
    pub max_inactive: Dur,
    /// Zombie threshold cap.
    #[serde(default = "d60s")]
    pub max_inactive_cap: Dur,
    /// Whether received bytes count as activity for zombie detection.
    #[serde(default = "yes")]
    pub zombie_counts_received: bool,
    /// Move the rest of a large HTTP/1.1 `Content-Length` request body from the client's socket to
    /// this upstream's with `splice(2)`, with no copy through edge (both connections plain TCP). Off by
    /// default: it takes the copy off edge's CPU and leaves the upstream reading pages nobody touched
    /// recently, which pays when the upstream runs on another host and costs a co-located one more than
    /// edge saves (bench/README.md "Request bodies by splice").
    #[serde(default)]
    pub splice_request_bodies: bool,
    /// Start each new upstream connection with a PROXY protocol header ([`SendProxyProtocol`]).
    #[serde(default)]
    pub send_proxy_protocol: SendProxyProtocol,
    /// The HTTP version spoken to the upstream ([`UpstreamProtocol`]).
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// HTTP/2: concurrent streams per upstream connection (also capped by the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS); another connection opens when every one is full.
    #[serde(default = "upstream_protocol::max_streams_default")]
    pub max_streams_per_connection: u32,
    /// Connect with TLS (DESIGN.md "TLS", origination); the `tls_*` keys need it.
    #[serde(default)]
    pub tls: bool,
    /// SNI and the name verified; default: the endpoint's host text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// PEM file of the trusted roots; default: the system trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<String>,
    /// Verify the upstream's certificate chain and name; `false` is for labs only.
    #[serde(default = "yes")]
    pub tls_verify: bool,
    /// PEM chain of the client certificate for mutual TLS (needs `tls_client_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_cert: Option<String>,
    /// PEM private key of `tls_client_cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_key: Option<String>,
}

fn d1s() -> Dur {
    Dur::secs(1)
}
fn d2s() -> Dur {
    Dur::secs(2)
}
fn d4s() -> Dur {
    Dur::secs(4)
}
fn d10s() -> Dur {
    Dur::secs(10)
}
fn d30s() -> Dur {
    Dur::secs(30)
}
fn d60s() -> Dur {
    Dur::secs(60)
}
fn l30s() -> Limit {
    Limit(Some(Duration::from_secs(30)))
}
fn pool64() -> usize {
    64
}
fn yes() -> bool {
    true
}

impl Upstream {
    /// An upstream with the documented defaults and the given endpoints.
    pub fn with_endpoints(name: &str, endpoints: Vec<String>) -> Self {
        Upstream {
            name: name.into(),
            endpoints: endpoints.into_iter().map(EndpointSpec::Address).collect(),
            balance: Balance::RoundRobin,
            hash_key: None,
            resolve: discovery::resolve_default(),
            health_check: None,
            connect_timeout: d2s(),
            request_timeout: l30s(),
            write_timeout: d30s(),
            max_active: 0,
            queue_timeout: d1s(),
            pool_max_idle: pool64(),
            pool_idle_timeout: d4s(),
            max_inactive: d10s(),
            max_inactive_cap: d60s(),
            zombie_counts_received: true,
            splice_request_bodies: false,
            send_proxy_protocol: SendProxyProtocol::Off,
            protocol: UpstreamProtocol::Http1,
            max_streams_per_connection: upstream_protocol::max_streams_default(),
            tls: false,
            tls_server_name: None,
            tls_ca: None,
            tls_verify: true,
            tls_client_cert: None,
            tls_client_key: None,
        }
    }
}

/// One configuration error: which file, which key (dotted path), and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file name, `<embedded default>` or `<command line>`.
    pub file: String,
    /// Dotted key path, e.g. `server.timeouts.idle` or `upstreams[0].endpoints[1]`.
    pub key: String,
    /// What is wrong, in words.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}: key `{}`: {}", self.file, self.key, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses a TOML document.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `file`, the key path where deserialization failed, and serde's reason
    /// (unknown keys included).
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let mut reason = inner.message().to_string();
            if let Some(span) = inner.span() {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                reason = format!("{reason} (line {line})");
            }
            ConfigError {
                file: file.into(),
                key: if key == "." {
                    "(top level)".into()
                } else {
                    key
                },
                reason,
            }
        })
    }

    /// The effective configuration as TOML (what `edge --check` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print config: {e}\n"))
    }
}

#[cfg(test)]
mod routes_tests;
#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
