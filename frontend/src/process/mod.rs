//! The binary's life (DESIGN.md "Layout", `frontend/src/process`): the command line ([`cli`]), startup
//! (`startup`: configuration, fd limit, io driver, listeners, admin thread, workers), the worker threads
//! ([`worker`]), supervision and signals ([`supervise`]), configuration reload and the file watches
//! ([`reload`], [`config_watch`], [`cert_watch`]), endpoint re-resolution ([`discovery`]), the admin API ([`admin`], [`admin_upstreams`])
//! and the zero-downtime binary handover ([`handover`]).

pub mod admin;
pub mod admin_upstreams;
#[cfg(feature = "count-alloc")]
pub mod alloc_count;
pub mod allocator;
pub mod cert_watch;
pub mod cli;
pub mod config_watch;
pub mod discovery;
pub mod handover;
pub mod reload;
pub(crate) mod startup;
pub mod supervise;
pub mod worker;
