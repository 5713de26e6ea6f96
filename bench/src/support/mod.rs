//! What every job shares: the `edge` child process, its temporary config and the system under test
//! (origin + edge), the blocking probe client (and its HTTPS twin, [`tls_probe`]), the test
//! certificates ([`certs`]), edge's admin metrics and log events, `/proc` readings, machine facts
//! and result tables.

pub mod certs;
pub mod cgroup;
pub mod edge_config;
pub mod edge_proc;
pub mod host;
pub mod metrics;
pub mod probe;
pub mod procfs;
pub mod stack;
pub mod table;
pub mod tls_probe;
