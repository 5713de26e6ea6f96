//! The config text edge is started with.

use std::net::SocketAddr;

use super::Driver;

/// The config used by most tests: one worker unless `extra` says otherwise, short timeouts.
pub fn config(driver: Driver, upstream: SocketAddr, extra_server: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
io_driver = "{driver}"
workers = 1
{extra_server}

[admin]
listen = "127.0.0.1:0"

[log]
level = "info"

[[upstreams]]
name = "origin"
endpoints = ["{upstream}"]
connect_timeout = "1s"
request_timeout = "10s"

[[routes]]
path_prefix = "/"
upstream = "origin"
{extra}
"#,
        driver = driver.name()
    )
}

/// `cfg` (from [`config`] with `origin`) with the upstream's endpoints replaced by `endpoints`.
pub fn with_endpoints(cfg: &str, origin: SocketAddr, endpoints: &[SocketAddr]) -> String {
    let list: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
    cfg.replace(
        &format!("endpoints = [\"{origin}\"]"),
        &format!("endpoints = [{}]", list.join(", ")),
    )
}
