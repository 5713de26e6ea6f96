//! edge-bench: the test origin, the load generators and the scenarios that drive the real `edge`
//! binary as a black box (DESIGN.md, Layout, Benchmark method and Fault matrix).
//!
//! One module per job, each owning its subcommands' `Args`:
//! - [`compare`]: the `compare` subcommand, edge against nginx, HAProxy and direct under wrk, per
//!   workload, with JSON and SVG output;
//! - [`scale`]: the `scale` subcommand, latency at fixed rates, throughput against connections and
//!   memory against idle connections;
//! - [`matrix`]: the `matrix` subcommand, every case of DESIGN.md "Fault matrix" with its
//!   invariants;
//! - [`scenarios`]: the single-situation subcommands (`demo`, `hol`, `idle-wedge`, `partial`,
//!   `drip`, `idle-memory`, `alloc`);
//! - [`slow`]: the `slow-readers` subcommand, memory under slow readers of large bodies for edge,
//!   nginx and HAProxy, with its JSON output;
//! - [`peers`]: the test origin (`origin`) and the closed- and open-loop load generators (`load`),
//!   with their sans-IO HTTP/1.1 framing and buffered monoio reads;
//! - [`support`]: what the jobs share: the `edge` child process and its temp config, origin + edge
//!   on free loopback ports, the blocking probe client, edge's metrics and log events, `/proc`
//!   readings, machine facts and result tables.

pub mod compare;
pub mod matrix;
pub mod peers;
pub mod scale;
pub mod scenarios;
pub mod slow;
pub mod support;
