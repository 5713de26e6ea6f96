//! edge-core: what both sides of the proxy share: the configuration schema, the thread-per-core worker
//! runtime, HTTP/1.1 framing, metric names, logging setup, and the traffic rules compiled at load
//! (`policy`). See DESIGN.md "Layout".

pub mod access_log;
pub mod buf;
pub mod clock;
pub mod config;
pub mod freelist;
pub mod http;
pub mod io;
pub mod latency;
pub mod log;
pub mod metrics;
pub mod pace;
pub mod policy;
pub mod proxy_protocol;
pub mod runtime;
pub mod slot;
pub mod tls;
pub mod websocket;
