//! [`Cfg`]: the config edge is started with, built by setters per section and rendered to TOML by one
//! function ([`Cfg::render`]). A section with a key set is always rendered, so no setting can be
//! silently dropped; a misspelled key reaches edge, which refuses unknown keys at start.

use std::{fmt, net::SocketAddr};

use super::Driver;

/// A TOML value as edge's config reads it.
#[derive(Clone, Debug)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
    Strs(Vec<String>),
    /// `endpoints` with weights: `[{ address = "a", weight = 2 }, ...]`.
    Weighted(Vec<(String, u32)>),
    /// `server.tls.certificates`: `[{ cert = "a.pem", key = "a.key" }, ...]`.
    Certs(Vec<(String, String)>),
    /// TOML written as is, e.g. a route's `headers = [{ name = "x", value = "1" }]`.
    Raw(String),
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.into())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<SocketAddr> for Value {
    fn from(v: SocketAddr) -> Self {
        Value::Str(v.to_string())
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v.into())
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(v.try_into().unwrap())
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&[SocketAddr]> for Value {
    fn from(v: &[SocketAddr]) -> Self {
        Value::Strs(v.iter().map(SocketAddr::to_string).collect())
    }
}

impl<const N: usize> From<[&str; N]> for Value {
    fn from(v: [&str; N]) -> Self {
        Value::Strs(v.iter().map(|s| s.to_string()).collect())
    }
}

impl From<&[(SocketAddr, u32)]> for Value {
    fn from(v: &[(SocketAddr, u32)]) -> Self {
        Value::Weighted(v.iter().map(|(a, w)| (a.to_string(), *w)).collect())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => write!(f, "{}", quoted(s)),
            Value::Int(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Strs(list) => {
                let items: Vec<String> = list.iter().map(|s| quoted(s)).collect();
                write!(f, "[{}]", items.join(", "))
            }
            Value::Weighted(list) => {
                let items: Vec<String> = list
                    .iter()
                    .map(|(a, w)| format!("{{ address = {}, weight = {w} }}", quoted(a)))
                    .collect();
                write!(f, "[{}]", items.join(", "))
            }
            Value::Raw(text) => write!(f, "{text}"),
            Value::Certs(list) => {
                let items: Vec<String> = list
                    .iter()
                    .map(|(c, k)| format!("{{ cert = {}, key = {} }}", quoted(c), quoted(k)))
                    .collect();
                write!(f, "[{}]", items.join(", "))
            }
        }
    }
}

/// A TOML basic string.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// One table's keys in the order first set; setting a key again replaces its value.
#[derive(Clone, Debug, Default)]
struct Table(Vec<(String, Value)>);

impl Table {
    fn set(&mut self, key: &str, v: impl Into<Value>) {
        let v = v.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.0.push((key.into(), v)),
        }
    }

    fn with(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.set(key, v);
        self
    }

    /// `header` (`[name]` or `[[name]]`), then one `key = value` line per key.
    fn render(&self, out: &mut String, header: &str) {
        out.push_str(&format!("\n{header}\n"));
        for (k, v) in &self.0 {
            out.push_str(&format!("{k} = {v}\n"));
        }
    }
}

/// An `[[upstreams]]` entry: `name` and `endpoints`, then the keys set on it, then its
/// `[upstreams.health_check]` sub-table when a key of it is set.
#[derive(Clone, Debug)]
pub struct Upstream(Table, Option<Table>);

impl Upstream {
    pub fn new(name: &str, endpoints: &[SocketAddr]) -> Self {
        Upstream(
            Table::default()
                .with("name", name)
                .with("endpoints", endpoints),
            None,
        )
    }

    /// Sets `key` (e.g. `max_inactive`) on this upstream.
    pub fn set(self, key: &str, v: impl Into<Value>) -> Self {
        Upstream(self.0.with(key, v), self.1)
    }

    /// Sets `key` (e.g. `interval`) of this upstream's `[upstreams.health_check]`.
    pub fn health_check(self, key: &str, v: impl Into<Value>) -> Self {
        let check = self.1.unwrap_or_default().with(key, v);
        Upstream(self.0, Some(check))
    }
}

/// A `[[routes]]` entry: `path_prefix` and `upstream`, then the keys set on it.
#[derive(Clone, Debug)]
pub struct Route(Table);

impl Route {
    /// A route with only a path prefix: set `upstream`, `upstreams`, `redirect` or `respond` and any
    /// other key with [`Route::set`].
    pub fn at(path_prefix: &str) -> Self {
        Route(Table::default().with("path_prefix", path_prefix))
    }

    pub fn new(path_prefix: &str, upstream: &str) -> Self {
        Route(
            Table::default()
                .with("path_prefix", path_prefix)
                .with("upstream", upstream),
        )
    }

    /// A route to `upstream` with no path rule yet: set one (`path_prefix`, `path_exact` or
    /// `path_regex`) and any other key with [`Route::set`].
    pub fn to(upstream: &str) -> Self {
        Route(Table::default().with("upstream", upstream))
    }

    /// Sets `key` (e.g. `request_timeout`) on this route.
    pub fn set(self, key: &str, v: impl Into<Value>) -> Self {
        Route(self.0.with(key, v))
    }
}

/// A whole edge config. [`Cfg::new`] is what most tests use: loopback port 0 for traffic and admin, one
/// worker, upstream `origin` (connect 1 s, request 10 s) behind route `/`; setters change or add keys.
#[derive(Clone, Debug)]
pub struct Cfg {
    server: Table,
    timeouts: Table,
    limits: Table,
    tls: Table,
    http2: Table,
    admin: Table,
    log: Table,
    upstreams: Vec<Upstream>,
    routes: Vec<Route>,
    rate_limits: Vec<Table>,
}

impl Cfg {
    pub fn new(driver: Driver, origin: SocketAddr) -> Self {
        Cfg {
            server: Table::default()
                .with("listen", "127.0.0.1:0")
                .with("io_driver", driver.name())
                .with("workers", 1)
                // Tests reload by SIGHUP unless they turn the file check on themselves.
                .with("config_check", "none"),
            timeouts: Table::default(),
            limits: Table::default(),
            tls: Table::default(),
            http2: Table::default(),
            admin: Table::default().with("listen", "127.0.0.1:0"),
            log: Table::default().with("level", "info"),
            upstreams: vec![Upstream::new("origin", &[origin])
                .set("connect_timeout", "1s")
                .set("request_timeout", "10s")],
            routes: vec![Route::new("/", "origin")],
            rate_limits: Vec::new(),
        }
    }

    /// A `[[rate_limits]]` entry like [`Cfg::rate_limit`], tracking at most `max_keys` keys.
    pub fn rate_limit_keys(
        self,
        name: &str,
        key: &str,
        rate: &str,
        burst: usize,
        max_keys: usize,
    ) -> Self {
        let mut cfg = self.rate_limit(name, key, rate, burst);
        if let Some(t) = cfg.rate_limits.last_mut() {
            t.set("max_keys", max_keys);
        }
        cfg
    }

    /// A `[[rate_limits]]` entry: `name`, `key`, `rate` and `burst` (`max_keys` default).
    pub fn rate_limit(mut self, name: &str, key: &str, rate: &str, burst: usize) -> Self {
        self.rate_limits.push(
            Table::default()
                .with("name", name)
                .with("key", key)
                .with("rate", rate)
                .with("burst", burst),
        );
        self
    }

    /// `server.workers`.
    pub fn workers(self, n: usize) -> Self {
        self.server("workers", n)
    }

    /// `server.listen` (the traffic listener).
    pub fn listen(self, addr: SocketAddr) -> Self {
        self.server("listen", addr)
    }

    /// Any `[server]` key, e.g. `max_connections`.
    pub fn server(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.server.set(key, v);
        self
    }

    /// A `[server.timeouts]` key: `idle`, `request`, `send`, `drain`, `drain_delay`.
    pub fn timeout(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.timeouts.set(key, v);
        self
    }

    /// A `[server.limits]` key: `max_head_bytes`, `max_headers`, `max_body_bytes`.
    pub fn limit(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.limits.set(key, v);
        self
    }

    /// A `[server.tls]` key: `listen`, `min_version`, `alpn`, `handshake_timeout`, ...
    pub fn tls(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.tls.set(key, v);
        self
    }

    /// `[server.tls]` on loopback port 0 with `certificates` (cert, key) in this order (the first is the
    /// default).
    pub fn tls_certs(self, certificates: &[(&std::path::Path, &std::path::Path)]) -> Self {
        let list = certificates
            .iter()
            .map(|(c, k)| (c.display().to_string(), k.display().to_string()))
            .collect();
        self.tls("listen", "127.0.0.1:0")
            .tls("certificates", Value::Certs(list))
    }

    /// A `[server.http2]` key, e.g. `max_resets_per_second`.
    pub fn http2(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.http2.set(key, v);
        self
    }

    /// A `[log]` key, e.g. `slow_request`.
    pub fn log(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.log.set(key, v);
        self
    }

    /// A key of the `origin` upstream, e.g. `connect_timeout` or `max_inactive`.
    pub fn upstream_field(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.upstreams[0].0.set(key, v);
        self
    }

    /// A key of the `origin` upstream's `[upstreams.health_check]`, e.g. `path` or `interval`.
    pub fn health_check(mut self, key: &str, v: impl Into<Value>) -> Self {
        let u = self.upstreams.remove(0);
        self.upstreams.insert(0, u.health_check(key, v));
        self
    }

    /// The `origin` upstream's endpoints (weight 1 each), in file order.
    pub fn endpoints(self, endpoints: &[SocketAddr]) -> Self {
        self.upstream_field("endpoints", endpoints)
    }

    /// The `origin` upstream's endpoints with their weights (DESIGN.md "Upstream health, discovery and
    /// balancing").
    pub fn weighted_endpoints(self, endpoints: &[(SocketAddr, u32)]) -> Self {
        self.upstream_field("endpoints", endpoints)
    }

    /// The `origin` upstream's `balance`: `round_robin`, `least_request` or `random`.
    pub fn balance(self, policy: &str) -> Self {
        self.upstream_field("balance", policy)
    }

    /// A key of the `/` route, e.g. `request_timeout`.
    pub fn route_field(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.routes[0].0.set(key, v);
        self
    }

    /// The path prefix of the route to `origin` (`/` unless set).
    pub fn route_prefix(self, prefix: &str) -> Self {
        self.route_field("path_prefix", prefix)
    }

    /// Another `[[upstreams]]` entry, after `origin` and those added before.
    pub fn add_upstream(mut self, u: Upstream) -> Self {
        self.upstreams.push(u);
        self
    }

    /// No `[[routes]]` entry (not even the `origin` route); add them with [`Cfg::add_route`].
    pub fn clear_routes(mut self) -> Self {
        self.routes.clear();
        self
    }

    /// Another `[[routes]]` entry, after the `origin` route and those added before.
    pub fn add_route(mut self, r: Route) -> Self {
        self.routes.push(r);
        self
    }

    /// The TOML text edge reads: `[server]` and its subtables (when set), `[admin]`, `[log]`, then the
    /// upstreams and the routes in the order added.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.server.render(&mut out, "[server]");
        for (name, t) in [
            ("timeouts", &self.timeouts),
            ("limits", &self.limits),
            ("tls", &self.tls),
            ("http2", &self.http2),
        ] {
            if !t.0.is_empty() {
                t.render(&mut out, &format!("[server.{name}]"));
            }
        }
        self.admin.render(&mut out, "[admin]");
        self.log.render(&mut out, "[log]");
        for u in &self.upstreams {
            u.0.render(&mut out, "[[upstreams]]");
            if let Some(check) = &u.1 {
                check.render(&mut out, "[upstreams.health_check]");
            }
        }
        for l in &self.rate_limits {
            l.render(&mut out, "[[rate_limits]]");
        }
        for r in &self.routes {
            r.0.render(&mut out, "[[routes]]");
        }
        out
    }
}
