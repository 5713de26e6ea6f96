//! edge-bench: the test origin, the load generator and the scenarios that drive the real `edge`
//! binary as a black box (DESIGN.md, Layout, Benchmark method and Fault matrix).
//!
//! Modules by job:
//! - [`origin`]: the thread-per-core monoio test origin ([`origin::spawn_origin`] runs it
//!   in-process);
//! - [`load`]: the bounded closed-loop keep-alive load generator; [`openloop`]: the open-loop
//!   one (fixed rate, latency from the scheduled send time);
//! - [`edge_proc`]: finding, building, starting, health-waiting and stopping the `edge` child;
//! - [`stack`]: origin + edge on free loopback ports, as every scenario sets them up;
//! - [`demo`], [`hol`]: the `demo` and `hol` subcommands;
//! - [`alloc`]: allocations per request with a counting allocator (`alloc`);
//! - [`idle_wedge`], [`inbound`] (`partial`, `drip`), [`idle_memory`]: the capacity, inbound
//!   deadline and idle-memory scenarios, with shared helpers in [`scenario`];
//! - [`compare`] ([`compare_run`], [`compare_target`], [`compare_workload`], [`compare_wrk`], [`compare_report`],
//!   [`compare_tables`], [`compare_json`], [`compare_plot`]): the `compare` subcommand, edge
//!   against nginx, HAProxy and direct under wrk, per workload, with JSON and SVG output;
//! - [`scale`] ([`scale_target`], [`scale_report`], [`scale_plot`]): the `scale` subcommand,
//!   latency at fixed rates, throughput against connections and memory against idle connections;
//! - [`matrix`] ([`matrix_cases`], [`matrix_life`], [`matrix_origin`]): the `matrix`
//!   subcommand, every case of DESIGN.md "Fault matrix" with its invariants;
//! - [`host`]: CPU lists and pinning, tool versions, commit, date and machine facts for result records;
//! - [`http`], [`chunked`], [`wire`], [`stop`], [`probe`], [`table`]: sans-IO framing, buffered
//!   monoio reads, the per-runtime stop signal, the blocking probe client and result tables.

pub mod compare;
pub mod matrix;
pub mod peers;
pub mod scale;
pub mod scenarios;
pub mod support;
