//! edge-frontend: the downstream side of edge and the `edge` binary's startup. [`cli`] parses arguments;
//! [`start`] loads the configuration, raises the fd limit, chooses the io driver, binds the listeners (or
//! takes them over from a running edge, [`upgrade`]), starts the admin thread and one pinned worker per
//! core, then [`supervise`]s them until a signal or a handover (those steps are in `startup`); SIGHUP
//! [`reload`]s the configuration.
//!
//! Per request: [`server`] (the downstream session: HTTP/1.1 keep-alive loop, inbound deadlines) →
//! [`route`] → [`proxy`] (the orchestrator, over the upstream HTTP/1.1 client of `edge_upstream::h1`)
//! (heads encoded by `edge_upstream::h1::encode` and [`server::h1::encode`]); every failure is answered and recorded through [`respond`].

pub mod admin;
#[cfg(feature = "count-alloc")]
pub mod alloc_count;
pub mod cert_watch;
pub mod cli;
pub mod discovery;
pub mod evict;
pub mod faults;
pub mod proxy;
pub mod proxy_protocol;
pub mod reload;
pub mod respond;
pub mod route;
pub mod server;
mod startup;
pub mod supervise;
pub mod tls;
pub mod upgrade;
pub mod worker;

use edge_core::config::{Config, ConfigError, Overrides, Resolved, DEFAULT_CONFIG};

/// Exit code: clean shutdown.
pub const EXIT_OK: i32 = 0;
/// Exit code: runtime failure (a worker could not start, a second signal during drain).
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code: bad configuration or arguments, or the traffic port held by another process.
pub const EXIT_CONFIG: i32 = 2;

/// Loads the file (or the embedded default), applies CLI overrides, validates and resolves.
///
/// # Errors
/// Every configuration error, each naming the file and key.
pub fn load_config(
    path: Option<&str>,
    overrides: &Overrides,
) -> Result<Resolved, Vec<ConfigError>> {
    let (text, file) = match path {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => (t, p.to_string()),
            Err(e) => {
                return Err(vec![ConfigError {
                    file: p.into(),
                    key: String::new(),
                    reason: format!("cannot read: {e}"),
                }]);
            }
        },
        None => (DEFAULT_CONFIG.to_string(), "<embedded default>".to_string()),
    };
    let mut cfg = Config::parse(&text, &file).map_err(|e| vec![e])?;
    cfg.apply(overrides);
    cfg.resolve(&file)
        .map_err(|errors| overrides.attribute(errors))
}

/// Starts edge with a resolved configuration (read from `source`, which SIGHUP reads again) and runs
/// until SIGTERM/SIGINT or until a new process took the sockets over; returns the exit code. With
/// `upgrade`, the listening sockets come from the running edge at `server.upgrade_socket`
/// ([`upgrade::take_over`]) instead of being bound.
pub fn start(resolved: Resolved, source: reload::ConfigSource, upgrade: bool) -> i32 {
    let cfg = &resolved.config;
    edge_core::log::init(cfg.log.format, &cfg.log.level);
    startup::set_panic_hook();
    supervise::block_signals();
    startup::run(&resolved, &source, upgrade).unwrap_or_else(|code| code)
}
