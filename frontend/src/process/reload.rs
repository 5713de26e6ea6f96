//! Config reload on SIGHUP (DESIGN.md "Configuration", "Drain and upgrade"): the supervisor re-reads the file with
//! the same command-line overrides, resolves endpoint names on its own thread, and publishes the result
//! ([`edge_core::runtime::Published`]); each worker switches at its next request or heartbeat tick, and
//! requests in flight finish on the configuration they started with.
//!
//! Reloadable: routes and their traffic rules, rate limits (a limit that keeps its name and
//! `max_keys` keeps its clients' state), upstreams, timeouts, limits, health path, trusted proxies, per-connection request
//! cap, the slow/access log settings, and TLS certificates and settings (rotation, DESIGN.md "TLS"; also
//! on a file change, [`super::cert_watch`]). Settings fixed at start (listeners, workers, pinning, io driver,
//! backlog, max_connections, upgrade socket, log format and level) must not change: such a file is
//! rejected as a whole, with a `config.rejected` line per key, and the running configuration stays, as it
//! does for a file that does not parse or validate.

use edge_core::config::{Overrides, Resolved};
use edge_core::runtime::Shared;

/// Where the configuration comes from, kept by the supervisor to read it again.
#[derive(Clone, Debug, Default)]
pub struct ConfigSource {
    /// `--config FILE`, or `None` for the embedded default.
    pub path: Option<String>,
    /// The command-line overrides, applied again on every reload.
    pub overrides: Overrides,
}

impl ConfigSource {
    /// The file name used in log lines.
    pub fn file(&self) -> &str {
        self.path.as_deref().unwrap_or("<embedded default>")
    }
}

/// A setting that changed but only applies at start: its key and why it is refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    /// Dotted key.
    pub key: &'static str,
    /// The reason, with the old and new value.
    pub reason: String,
}

/// The settings fixed at start that differ between `old` and `new`.
pub fn fixed_changes(old: &Resolved, new: &Resolved) -> Vec<Refused> {
    let (o, n) = (&old.config, &new.config);
    // (key, what it is, old value, new value), compared as their Debug text.
    let fixed: [(&'static str, &str, String, String); 11] = [
        (
            "server.listen",
            "the traffic listener",
            dbg(&o.server.listen),
            dbg(&n.server.listen),
        ),
        (
            "server.tls.listen",
            "the TLS listener",
            dbg(&o.server.tls.as_ref().map(|t| &t.listen)),
            dbg(&n.server.tls.as_ref().map(|t| &t.listen)),
        ),
        (
            "admin.listen",
            "the admin listener",
            dbg(&o.admin.listen),
            dbg(&n.admin.listen),
        ),
        (
            "server.workers",
            "the worker count",
            dbg(&o.server.workers),
            dbg(&n.server.workers),
        ),
        (
            "server.pin_workers",
            "worker pinning",
            dbg(&o.server.pin_workers),
            dbg(&n.server.pin_workers),
        ),
        (
            "server.io_driver",
            "the io driver",
            dbg(&o.server.io_driver),
            dbg(&n.server.io_driver),
        ),
        (
            "server.backlog",
            "the listen backlog",
            dbg(&o.server.backlog),
            dbg(&n.server.backlog),
        ),
        (
            "server.max_connections",
            "max_connections",
            dbg(&o.server.max_connections),
            dbg(&n.server.max_connections),
        ),
        (
            "server.upgrade_socket",
            "the upgrade socket",
            dbg(&o.server.upgrade_socket),
            dbg(&n.server.upgrade_socket),
        ),
        (
            "log.format",
            "the log format",
            dbg(&o.log.format),
            dbg(&n.log.format),
        ),
        (
            "log.level",
            "the log level",
            dbg(&o.log.level),
            dbg(&n.log.level),
        ),
    ];
    fixed
        .into_iter()
        .filter(|(_, _, a, b)| a != b)
        .map(|(key, what, a, b)| Refused {
            key,
            reason: format!(
                "{what} cannot change on reload (was {a}, now {b}); restart or use `edge --upgrade`"
            ),
        })
        .collect()
}

fn dbg(v: &impl std::fmt::Debug) -> String {
    format!("{v:?}")
}

/// Handles one reload (`cause`: "SIGHUP", or the certificate files changed): reads, validates and resolves the configuration again and publishes it, or logs
/// `config.rejected` (file, key, reason) for each problem and keeps the running configuration. Returns
/// whether the new configuration was published.
pub fn reload(shared: &Shared, source: &ConfigSource, cause: &str) -> bool {
    let file = source.file();
    tracing::info!(
        event = "config.reloading",
        file,
        cause,
        "reading the configuration again"
    );
    let mut new = match crate::load_config(source.path.as_deref(), &source.overrides) {
        Ok(r) => r,
        Err(errors) => {
            for e in &errors {
                if e.key.starts_with("server.tls.certificates") || e.key.contains(".tls_") {
                    tracing::error!(event = "tls.reload_failed", file = %e.file, key = %e.key, reason = %e.reason, "certificate files rejected; the running certificates stay");
                }
                tracing::error!(event = "config.rejected", file = %e.file, key = %e.key, reason = %e.reason, "configuration rejected; the running configuration stays");
            }
            return false;
        }
    };
    let (old, _) = shared.config.get();
    let refused = fixed_changes(&old, &new);
    if !refused.is_empty() {
        for r in &refused {
            tracing::error!(event = "config.rejected", file, key = r.key, reason = %r.reason, "configuration rejected; the running configuration stays");
        }
        return false;
    }
    // Rate limits that keep their name (and size) keep their clients' state.
    new.rate_limits.adopt(&old.rate_limits);
    for u in &new.upstreams {
        let eps: Vec<String> = u.endpoints.iter().map(ToString::to_string).collect();
        tracing::info!(event = "config.upstream", name = %u.config.name, endpoints = %eps.join(","));
    }
    announce(&new);
    crate::request::route::log_warnings(&new);
    crate::process::discovery::record_load(shared, &new);
    if new.config.log.access_path != old.config.log.access_path {
        // Workers switch format with the new snapshot; the one writer switches file here.
        shared.access.open(&new.config.log.access_path);
    }
    let (upstreams, routes) = (new.upstreams.len(), new.routes.len());
    let generation = shared.config.publish(new);
    tracing::info!(
        event = "config.reloaded",
        file,
        generation,
        upstreams,
        routes,
        "new requests use the reloaded configuration"
    );
    true
}

/// Labels of the expiry gauges set so far (supervisor thread only).
static ANNOUNCED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// After a configuration was loaded (start, reload): the expiry gauge of each served certificate (a
/// certificate no longer served reads NaN, so an expiry alert does not fire for a rotated-away one), and
/// the warning for each upstream that does not verify its certificates.
pub fn announce(cfg: &Resolved) {
    let served: Vec<(String, f64)> = cfg.tls.as_ref().map_or(Vec::new(), |tls| {
        tls.certificates
            .iter()
            .map(|c| (c.label.clone(), c.not_after as f64))
            .collect()
    });
    let mut announced = ANNOUNCED.lock().unwrap_or_else(|p| p.into_inner());
    for gone in announced
        .iter()
        .filter(|l| !served.iter().any(|(s, _)| s == *l))
    {
        metrics::gauge!("edge_tls_certificate_expiry_timestamp_seconds", "certificate" => gone.clone())
            .set(f64::NAN);
    }
    for (label, not_after) in &served {
        metrics::gauge!("edge_tls_certificate_expiry_timestamp_seconds", "certificate" => label.clone())
            .set(*not_after);
    }
    *announced = served.into_iter().map(|(l, _)| l).collect();
    drop(announced);
    for u in cfg
        .upstreams
        .iter()
        .filter(|u| u.config.tls && !u.config.tls_verify)
    {
        tracing::warn!(event = "upstream.tls_unverified", upstream = %u.config.name, "tls_verify = false: this upstream's certificates are not verified (for labs only)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::config::{Config, DEFAULT_CONFIG};

    fn resolved(edit: impl FnOnce(&mut Config)) -> Resolved {
        let mut c = Config::parse(DEFAULT_CONFIG, "d").unwrap();
        edit(&mut c);
        c.resolve("d").unwrap()
    }

    #[test]
    fn routes_upstreams_and_timeouts_may_change() {
        let old = resolved(|_| {});
        let new = resolved(|c| {
            c.routes[0].path_prefix = Some("/api".into());
            c.upstreams[0].endpoints = vec!["127.0.0.1:9".into()];
            c.server.timeouts.idle = edge_core::config::Dur::secs(5);
            c.server.limits.max_headers = 10;
        });
        assert_eq!(fixed_changes(&old, &new), vec![]);
    }

    #[test]
    fn listener_and_worker_changes_are_refused_by_key() {
        let old = resolved(|_| {});
        let new = resolved(|c| {
            c.server.listen = "127.0.0.1:9999".into();
            c.server.workers = edge_core::config::Workers::Count(3);
            c.server.io_driver = edge_core::config::IoDriverSetting::Epoll;
        });
        let keys: Vec<_> = fixed_changes(&old, &new).iter().map(|r| r.key).collect();
        assert_eq!(
            keys,
            ["server.listen", "server.workers", "server.io_driver"]
        );
    }
}
