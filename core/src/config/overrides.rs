//! Command-line overrides (DESIGN.md "CLI": flags override the file, the file overrides the embedded
//! default): [`Overrides`], [`Config::apply`] that writes them into a parsed file, and the attribution of
//! errors in values that came from flags to `<command line>` and the flag that set them.

use super::{
    Config, ConfigError, IoDriverSetting, LogFormat, Route, TlsCertificate, TlsServer, Upstream,
    Workers,
};

/// Settings given on the command line; each replaces the file's value when set.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`
    pub listen: Option<String>,
    /// `--upstream` (repeatable): replaces `[[upstreams]]` and `[[routes]]` with upstream "default", route "/".
    pub upstreams: Vec<String>,
    /// `--workers`
    pub workers: Option<Workers>,
    /// `--admin-listen`
    pub admin_listen: Option<String>,
    /// `--io-driver`
    pub io_driver: Option<IoDriverSetting>,
    /// `--log-format`
    pub log_format: Option<LogFormat>,
    /// `--tls-listen ADDR --tls-cert PEM --tls-key PEM` (given together).
    pub tls: Option<TlsOverride>,
}

/// `--tls-listen ADDR --tls-cert PEM --tls-key PEM`: a `[server.tls]` listening on `listen` with the one
/// certificate `cert` (PEM chain, leaf first) and its key `key` (PEM). The file's other `[server.tls]`
/// keys are kept; without a `[server.tls]` in the file they take their defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOverride {
    /// `--tls-listen`
    pub listen: String,
    /// `--tls-cert`
    pub cert: String,
    /// `--tls-key`
    pub key: String,
}

impl Overrides {
    /// The command-line flag that set the value at `key` (a dotted key path of a [`ConfigError`]), if
    /// one did: errors in values that came from flags name the flag, not the file.
    pub fn flag_for(&self, key: &str) -> Option<&'static str> {
        let set = |k: &str, on: bool| on && (key == k || key.starts_with(&format!("{k}.")));
        if !self.upstreams.is_empty()
            && (key.starts_with("upstreams[") || key.starts_with("routes["))
        {
            Some("--upstream")
        } else if set("server.listen", self.listen.is_some()) {
            Some("--listen")
        } else if set("admin.listen", self.admin_listen.is_some()) {
            Some("--admin-listen")
        } else if set("server.workers", self.workers.is_some()) {
            Some("--workers")
        } else if set("server.io_driver", self.io_driver.is_some()) {
            Some("--io-driver")
        } else if set("log.format", self.log_format.is_some()) {
            Some("--log-format")
        } else if self.tls.is_some() {
            tls_flag_for(key)
        } else {
            None
        }
    }

    /// Re-attributes errors in values that came from flags to `<command line>` and the flag.
    pub fn attribute(&self, errors: Vec<ConfigError>) -> Vec<ConfigError> {
        errors
            .into_iter()
            .map(|e| match self.flag_for(&e.key) {
                Some(flag) => ConfigError {
                    file: "<command line>".into(),
                    key: format!("{flag} ({})", e.key),
                    reason: e.reason,
                },
                None => e,
            })
            .collect()
    }
}

/// The `--tls-*` flag that set the value at `key`, when `--tls-listen` was given.
fn tls_flag_for(key: &str) -> Option<&'static str> {
    if key == "server.tls.listen" {
        Some("--tls-listen")
    } else if key.starts_with("server.tls.certificates") && key.ends_with(".key") {
        Some("--tls-key")
    } else if key.starts_with("server.tls.certificates") {
        Some("--tls-cert")
    } else {
        None
    }
}

impl Config {
    /// Applies command-line overrides (DESIGN.md "CLI": flags override the file).
    pub fn apply(&mut self, o: &Overrides) {
        if let Some(l) = &o.listen {
            self.server.listen = l.clone();
        }
        if !o.upstreams.is_empty() {
            self.upstreams = vec![Upstream::with_endpoints("default", o.upstreams.clone())];
            self.routes = vec![Route::prefix("/", "default")];
        }
        if let Some(w) = o.workers {
            self.server.workers = w;
        }
        if let Some(a) = &o.admin_listen {
            self.admin.listen = a.clone();
        }
        if let Some(d) = o.io_driver {
            self.server.io_driver = d;
        }
        if let Some(f) = o.log_format {
            self.log.format = f;
        }
        if let Some(t) = &o.tls {
            let certificates = vec![TlsCertificate {
                cert: t.cert.clone(),
                key: t.key.clone(),
            }];
            match &mut self.server.tls {
                Some(tls) => {
                    tls.listen = t.listen.clone();
                    tls.certificates = certificates;
                }
                None => {
                    self.server.tls = Some(TlsServer::with_certificate(&t.listen, &t.cert, &t.key))
                }
            }
        }
    }
}
