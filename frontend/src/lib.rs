//! edge-frontend: the downstream side of edge and the `edge` binary (DESIGN.md "Layout"). By job, and
//! in the one direction their imports run:
//!
//! - [`process`]: the binary's life: command line, startup, worker threads, supervision and signals,
//!   reload and file watches, endpoint re-resolution, the admin API, the binary handover;
//! - [`accept`]: connections in: the accept loop, capacity and eviction, the PROXY protocol header, the
//!   TLS handshake;
//! - [`server`]: the downstream session of each protocol ([`server::h1`], [`server::h2`]) behind one
//!   [`server::Session`] interface;
//! - [`request`]: admission, once for every protocol: local answers, routing, request id, deadlines,
//!   retry-safety, the request-phase rules;
//! - [`proxy`]: the orchestrator: an admitted request, the upstream exchange, the response;
//! - [`respond`]: the one map from every failure to its status, connection fate, counter and log line;
//!   [`log`]: request log lines and their rate limit;
//! - [`context`]: the per-worker state every layer reads ([`context::Worker`]).

pub mod accept;
pub mod context;
pub mod faults;
pub mod log;
pub mod process;
pub mod proxy;
pub mod request;
pub mod respond;
pub mod server;

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
    if path.is_some() && !overrides.upstreams.is_empty() {
        say_what_upstream_replaces(&cfg, &file);
    }
    cfg.apply(overrides);
    cfg.resolve(&file).map_err(|errors| {
        let mut errors = overrides.attribute(errors);
        edge_core::config::add_lines(&text, &file, &mut errors);
        errors
    })
}

/// DESIGN.md "CLI": `--upstream` replaces the file's `[[upstreams]]` and `[[routes]]` with one upstream
/// "default" and route "/", and says so on stderr when the file had others (logging is not set up yet
/// at the first load, so this is a plain line).
fn say_what_upstream_replaces(cfg: &Config, file: &str) {
    if cfg.upstreams.is_empty() && cfg.routes.is_empty() {
        return;
    }
    let names: Vec<&str> = cfg.upstreams.iter().map(|u| u.name.as_str()).collect();
    eprintln!(
        "edge: --upstream replaces the {} upstream(s) [{}] and {} route(s) of {file} with upstream \"default\" and route \"/\"",
        names.len(),
        names.join(", "),
        cfg.routes.len()
    );
}

/// Starts edge with a resolved configuration (read from `source`, which SIGHUP reads again) and runs
/// until SIGTERM/SIGINT or until a new process took the sockets over; returns the exit code. With
/// `upgrade`, the listening sockets come from the running edge at `server.upgrade_socket`
/// ([`process::handover::take_over`]) instead of being bound.
pub fn start(resolved: Resolved, source: process::reload::ConfigSource, upgrade: bool) -> i32 {
    let cfg = &resolved.config;
    edge_core::log::init(cfg.log.format, &cfg.log.level);
    process::startup::set_panic_hook();
    process::supervise::block_signals();
    process::startup::run(&resolved, &source, upgrade).unwrap_or_else(|code| code)
}
