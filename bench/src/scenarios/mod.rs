//! The scenario subcommands: each starts its own origin and edge on free loopback ports, drives
//! one situation, prints a table and exits non-zero when its invariant fails.
//!
//! - [`demo`]: the Quick start demo (load, then health behind slow requests);
//! - [`hol`]: health probes behind slow requests (head-of-line blocking);
//! - [`idle_wedge`]: health probes while more silent sockets than `max_connections` are held;
//! - [`inbound`]: `partial` and `drip`, the inbound `request` deadline;
//! - [`idle_memory`]: resident memory per idle keep-alive connection;
//! - [`alloc`]: allocations per request with a counting allocator;
//! - [`balance`]: balancing policies in front of a fast and a slow endpoint.

pub mod alloc;
pub mod balance;
pub mod demo;
pub mod hol;
pub mod idle_memory;
pub mod idle_wedge;
pub mod inbound;
