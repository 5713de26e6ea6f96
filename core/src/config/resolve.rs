//! Validation of a parsed [`Config`] into a [`Resolved`] one (DESIGN.md "Configuration (TOML)"): one
//! check per section, in file order (server, its limits and timeouts, trusted proxies, the upgrade socket,
//! TLS, log, upstreams, routes), every problem collected rather than the first, and every `host:port`
//! resolved to a socket address here, at load, never on a worker. `[server.tls]` certificates and the
//! upstream TLS roots and client certificates are loaded and validated here too (`crate::tls`).

use std::{
    net::{SocketAddr, ToSocketAddrs},
    path::Path,
    sync::Arc,
};

use crate::tls::{SystemRoots, TlsServerState, UpstreamTls};

use super::{
    problems::Problems, routes::resolve_routes, Cidr, Config, ConfigError, HealthCheck, Limits,
    Log, ProxyProtocol, RateLimits, Routes, Server, Timeouts, Upstream,
};

impl Config {
    /// Checks every value and resolves names to addresses.
    ///
    /// # Errors
    /// Every problem found, each naming `file` and the key.
    pub fn resolve(&self, file: &str) -> Result<Resolved, Vec<ConfigError>> {
        let mut p = Problems {
            file,
            errors: Vec::new(),
            warnings: Vec::new(),
        };
        let server = &self.server;
        let plain_listener = !server.listen.is_empty();
        let listen = match plain_listener {
            true => p.take("server.listen", resolve_one(&server.listen)),
            false => None,
        };
        let tls_listen = server
            .tls
            .as_ref()
            .and_then(|t| p.take("server.tls.listen", resolve_one(&t.listen)));
        let admin_listen = if self.admin.listen.is_empty() {
            None
        } else {
            p.take("admin.listen", resolve_one(&self.admin.listen))
        };
        if server.max_connections == 0 {
            p.add("server.max_connections", "must be at least 1");
        }
        if server.max_requests_per_connection == 0 {
            p.add("server.max_requests_per_connection", "must be at least 1");
        }
        if !server.health_path.starts_with('/') {
            p.add("server.health_path", "must start with '/'");
        }
        check_limits(&server.limits, &mut p);
        check_timeouts(&server.timeouts, &mut p);
        if server.config_check.0.is_some_and(|d| d.is_zero()) {
            p.add(
                "server.config_check",
                "must be greater than zero, or \"none\"",
            );
        }
        for (key, reason) in super::http2::check(&server.http2) {
            p.add(key, reason);
        }
        let trusted_proxies = cidrs("server.trusted_proxies", &server.trusted_proxies, &mut p);
        let proxy_protocol_from = check_proxy_protocol(server, &mut p);
        check_upgrade_socket(&server.upgrade_socket, &mut p);
        let tls = super::tls::resolve_server_tls(server, listen, tls_listen, &mut p);
        check_log(&self.log, &mut p);
        let mut roots = SystemRoots::default();
        let upstreams = self
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| resolve_upstream(i, u, &self.upstreams[..i], &mut roots, &mut p))
            .collect();
        let rate_limits = super::rate_limits::resolve_rate_limits(&self.rate_limits, &mut p);
        let routes = resolve_routes(&self.routes, &self.upstreams, &rate_limits, &mut p);
        // With the plain listener disabled, `listen` holds the TLS listener's address (see the field).
        let (Some(listen), Some(routes), true) =
            (listen.or(tls_listen), routes, p.errors.is_empty())
        else {
            return Err(p.errors);
        };
        Ok(Resolved {
            config: self.clone(),
            listen,
            plain_listener,
            tls_listen,
            tls,
            admin_listen,
            trusted_proxies,
            proxy_protocol_from,
            upstreams,
            routes,
            unresolved: p.warnings,
            rate_limits,
        })
    }
}

/// `[server.limits]`: the head must hold at least a short request line; at least one field; the relay
/// budget at least one relay buffer at its largest.
fn check_limits(limits: &Limits, p: &mut Problems<'_>) {
    if limits.max_head_bytes.0 < 256 {
        p.add("server.limits.max_head_bytes", "must be at least 256 bytes");
    }
    if limits.max_headers == 0 {
        p.add("server.limits.max_headers", "must be at least 1");
    }
    if limits.max_headers > crate::http::head::MAX_FIELDS {
        p.add(
            "server.limits.max_headers",
            format!(
                "must be at most {} (the most fields edge parses in one head)",
                crate::http::head::MAX_FIELDS
            ),
        );
    }
    if limits.max_connections_per_client > 65_535 {
        p.add(
            "server.limits.max_connections_per_client",
            "must be at most 65535 (0 turns it off)",
        );
    }
    if limits.relay_buffer_budget.0 < crate::buf::RELAY_BUF_SIZE as u64 {
        p.add(
            "server.limits.relay_buffer_budget",
            "must be at least 256KiB (one relay buffer at its largest)",
        );
    }
}

/// `[server.timeouts]`: the inbound deadlines cannot be zero (drain timing can).
fn check_timeouts(timeouts: &Timeouts, p: &mut Problems<'_>) {
    for (name, d) in [
        ("idle", timeouts.idle),
        ("request", timeouts.request),
        ("send", timeouts.send),
    ] {
        if d.0.is_zero() {
            p.add(
                format!("server.timeouts.{name}"),
                "must be greater than zero",
            );
        }
    }
}

/// `server.trusted_proxies`, parsed; the entries that do not parse are recorded and left out.
fn cidrs(key: &str, cidrs: &[String], p: &mut Problems<'_>) -> Vec<Cidr> {
    cidrs
        .iter()
        .enumerate()
        .filter_map(|(i, c)| p.take(format!("{key}[{i}]"), Cidr::parse(c)))
        .collect()
}

/// `server.proxy_protocol` and `server.proxy_protocol_from`: the peers allowed to send a PROXY header
/// must be listed when the header is expected (an empty list would refuse every connection).
fn check_proxy_protocol(server: &Server, p: &mut Problems<'_>) -> Vec<Cidr> {
    let from = cidrs("server.proxy_protocol_from", &server.proxy_protocol_from, p);
    if server.proxy_protocol != ProxyProtocol::Off && server.proxy_protocol_from.is_empty() {
        p.add(
            "server.proxy_protocol_from",
            "must list the CIDRs allowed to send a PROXY header when server.proxy_protocol is on",
        );
    }
    from
}

/// `server.upgrade_socket`: "" (upgrades disabled) or an absolute path.
fn check_upgrade_socket(path: &str, p: &mut Problems<'_>) {
    if !path.is_empty() && !Path::new(path).is_absolute() {
        p.add(
            "server.upgrade_socket",
            "must be an absolute path (or \"\" to disable upgrades)",
        );
    }
}

/// `[log]`: the level must be a valid tracing filter; `access_path` an absolute path (it is reopened
/// on SIGUSR1, when the working directory may have changed meaning) whose directory exists.
fn check_log(log: &Log, p: &mut Problems<'_>) {
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log.level) {
        p.add("log.level", format!("invalid filter {:?}: {e}", log.level));
    }
    let path = Path::new(&log.access_path);
    if log.access_path.is_empty() {
        return;
    }
    if !path.is_absolute() {
        p.add(
            "log.access_path",
            "must be an absolute path (or \"\" for stderr)",
        );
    } else if !path.parent().is_some_and(Path::is_dir) {
        p.add(
            "log.access_path",
            format!("the directory of {:?} does not exist", log.access_path),
        );
    } else if path.is_dir() {
        p.add(
            "log.access_path",
            format!("{:?} is a directory, not a file", log.access_path),
        );
    }
}

/// `upstreams[i]`, with `earlier` the entries before it (names must be unique). The endpoints that do not
/// resolve are recorded and left out.
fn resolve_upstream(
    i: usize,
    u: &Upstream,
    earlier: &[Upstream],
    roots: &mut SystemRoots,
    p: &mut Problems<'_>,
) -> ResolvedUpstream {
    if u.name.is_empty() {
        p.add(format!("upstreams[{i}].name"), "must not be empty");
    }
    if earlier.iter().any(|o| o.name == u.name) {
        p.add(
            format!("upstreams[{i}].name"),
            format!("duplicate upstream name {:?}", u.name),
        );
    }
    if u.endpoints.is_empty() {
        p.add(
            format!("upstreams[{i}].endpoints"),
            "needs at least one host:port",
        );
    }
    match (&u.hash_key, u.balance) {
        (Some(k), super::Balance::Hash) => {
            if let Err(why) = super::HashKey::parse(k) {
                p.add(format!("upstreams[{i}].hash_key"), why);
            }
        }
        (Some(_), _) => p.add(
            format!("upstreams[{i}].hash_key"),
            "applies only with balance = \"hash\"",
        ),
        (None, _) => {}
    }
    let mut endpoints = Vec::new();
    for (j, e) in u.endpoints.iter().enumerate() {
        let key = format!("upstreams[{i}].endpoints[{j}]");
        if e.weight() == 0 {
            p.add(format!("{key}.weight"), "must be at least 1");
        }
        match resolve_all(e.address()) {
            Ok(addrs) => endpoints.extend(addrs.into_iter().map(|addr| ResolvedEndpoint {
                addr,
                weight: e.weight().max(1),
                spec: j,
            })),
            // A well-formed name that does not resolve yet (a Service not created yet, DNS not ready):
            // edge starts without it and keeps resolving it (DESIGN.md "Observability").
            Err(reason) if is_name_port(e.address()) => p.warn(key, reason),
            Err(reason) => p.add(key, reason),
        }
    }
    if u.resolve.0.is_some_and(|d| d.is_zero()) {
        p.add(
            format!("upstreams[{i}].resolve"),
            "must be greater than zero, or \"none\"",
        );
    }
    if let Some(h) = &u.health_check {
        check_health_check(&format!("upstreams[{i}].health_check"), h, p);
        if h.grpc_service.is_some() && !u.protocol.may_speak_h2(u.tls) {
            p.add(
                format!("upstreams[{i}].health_check.grpc_service"),
                match u.protocol {
                    super::UpstreamProtocol::Auto => "a gRPC health check needs HTTP/2, and protocol = \"auto\" without tls speaks HTTP/1.1: set protocol = \"h2\" (h2c) or tls = true",
                    _ => "a gRPC health check needs HTTP/2: set the upstream's protocol = \"h2\" (or \"auto\" with tls = true)",
                },
            );
        }
    }
    if u.connect_timeout.0.is_zero() {
        p.add(
            format!("upstreams[{i}].connect_timeout"),
            "must be greater than zero",
        );
    }
    if u.splice_request_bodies && (u.tls || u.protocol == super::UpstreamProtocol::H2) {
        p.add(
            format!("upstreams[{i}].splice_request_bodies"),
            "needs a plain HTTP/1.1 upstream (tls = false, protocol \"http1\" or \"auto\"): encrypted or HTTP/2-framed bytes cannot be spliced",
        );
    }
    if u.max_streams_per_connection == 0 {
        p.add(
            format!("upstreams[{i}].max_streams_per_connection"),
            "must be at least 1",
        );
    }
    let tls = super::tls::resolve_upstream_tls(i, u, roots, p);
    ResolvedUpstream {
        config: u.clone(),
        endpoints,
        tls,
    }
}

/// `[upstreams.health_check]`: a path, non-zero timing, thresholds of at least one probe.
fn check_health_check(key: &str, h: &HealthCheck, p: &mut Problems<'_>) {
    if !h.path.starts_with('/') {
        p.add(format!("{key}.path"), "must start with '/'");
    }
    for (name, d) in [("interval", h.interval), ("timeout", h.timeout)] {
        if d.0.is_zero() {
            p.add(format!("{key}.{name}"), "must be greater than zero");
        }
    }
    for (name, n) in [
        ("healthy_threshold", h.healthy_threshold),
        ("unhealthy_threshold", h.unhealthy_threshold),
    ] {
        if n == 0 {
            p.add(format!("{key}.{name}"), "must be at least 1");
        }
    }
}

/// Whether `text` is a well-formed `name:port` (a DNS name, not an address literal, and a port): one
/// that fails to resolve may resolve later.
fn is_name_port(text: &str) -> bool {
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && port.parse::<u16>().is_ok()
        && host.parse::<std::net::IpAddr>().is_err()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// Resolves `host:port` to one socket address (the first the resolver returns).
fn resolve_one(text: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    match text.to_socket_addrs() {
        Ok(mut it) => it
            .next()
            .ok_or_else(|| format!("{text:?} resolves to no address")),
        Err(e) => Err(format!("{text:?} is not a host:port that resolves ({e})")),
    }
}

/// Resolves an endpoint's `host:port` to every address the resolver returns, duplicates removed, in
/// resolver order (DESIGN.md "Upstream health, discovery and balancing": a name with several addresses
/// gives one endpoint per address). An IP literal is itself. Blocking: call it on the supervisor or a
/// resolver thread, never on a worker.
///
/// Debug builds only: when `EDGE_TEST_HOSTS` names a file of `name addr [addr...]` lines, names listed
/// there resolve to those addresses (the tests' resolver, so discovery is tested without editing
/// /etc/hosts); release builds always use the system resolver.
///
/// # Errors
/// Not `host:port`, or the name resolves to no address (the reason names the text).
pub fn resolve_all(text: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    #[cfg(debug_assertions)]
    if let Some(found) = test_hosts(text) {
        return found;
    }
    let mut out: Vec<SocketAddr> = Vec::new();
    let addrs = text
        .to_socket_addrs()
        .map_err(|e| format!("{text:?} is not a host:port that resolves ({e})"))?;
    for a in addrs {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    match out.is_empty() {
        true => Err(format!("{text:?} resolves to no address")),
        false => Ok(out),
    }
}

/// The `EDGE_TEST_HOSTS` lookup of [`resolve_all`] (debug builds): `None` when the variable is unset or
/// the name is not in the file.
#[cfg(debug_assertions)]
fn test_hosts(text: &str) -> Option<Result<Vec<SocketAddr>, String>> {
    let path = std::env::var_os("EDGE_TEST_HOSTS")?;
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let file = std::fs::read_to_string(path).unwrap_or_default();
    let line = file
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&host))?;
    let addrs: Vec<SocketAddr> = line[1..]
        .iter()
        .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect();
    Some(match addrs.is_empty() {
        true => Err(format!("{text:?} resolves to no address")),
        false => Ok(addrs),
    })
}

/// A validated configuration with resolved addresses; what workers run on.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The effective configuration.
    pub config: Config,
    /// Plain traffic listener address. When `plain_listener` is false (`server.listen = ""`) there is
    /// no plain listener and this holds the TLS listener's address (`tls_listen`): never bind it then.
    pub listen: SocketAddr,
    /// Whether the plain traffic listener is on (`server.listen` is not `""`).
    pub plain_listener: bool,
    /// TLS listener address (`server.tls.listen`), `None` without `[server.tls]`.
    pub tls_listen: Option<SocketAddr>,
    /// The TLS listener's rustls configuration and certificates, `None` without `[server.tls]`.
    pub tls: Option<Arc<TlsServerState>>,
    /// Admin listener address, `None` when disabled.
    pub admin_listen: Option<SocketAddr>,
    /// Parsed `server.trusted_proxies`.
    pub trusted_proxies: Vec<Cidr>,
    /// Parsed `server.proxy_protocol_from`.
    pub proxy_protocol_from: Vec<Cidr>,
    /// Upstreams in file order.
    pub upstreams: Vec<ResolvedUpstream>,
    /// The routes, compiled and indexed (DESIGN.md "Routing"): `routes.find(request)`. Each worker
    /// matches on a clone of its own (see [`crate::policy::route::RouteTable`]).
    pub routes: Routes,
    /// Endpoint names that did not resolve at load (file, key, reason): their upstreams start without
    /// them, answer 503 `no_endpoint` while they have no address at all, and the supervisor keeps
    /// resolving them (DESIGN.md "Observability"). `edge --check` prints them as warnings.
    pub unresolved: Vec<ConfigError>,
    /// `[[rate_limits]]` with their keyed state, shared by every worker (routes refer to them by
    /// index); [`RateLimits::adopt`] carries state over a reload.
    pub rate_limits: RateLimits,
}

/// One upstream with its endpoints resolved.
#[derive(Clone, Debug)]
pub struct ResolvedUpstream {
    /// The upstream's settings.
    pub config: Upstream,
    /// Endpoints, in file order.
    pub endpoints: Vec<ResolvedEndpoint>,
    /// The TLS client side when `tls = true` (DESIGN.md "TLS", origination), else `None`.
    pub tls: Option<UpstreamTls>,
}

/// One endpoint address of an upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedEndpoint {
    /// The address it resolved to.
    pub addr: SocketAddr,
    /// Its weight (at least 1).
    pub weight: u32,
    /// Index of the `endpoints` entry it came from.
    pub spec: usize,
}

impl std::fmt::Display for ResolvedEndpoint {
    /// `addr`, with ` (weight N)` when the weight is not 1 (startup and reload log lines).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.weight {
            1 => write!(f, "{}", self.addr),
            w => write!(f, "{} (weight {w})", self.addr),
        }
    }
}
