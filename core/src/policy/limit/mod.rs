//! Rate-limit state (DESIGN.md "Request pipeline and traffic rules", `[[rate_limits]]`): the GCRA
//! arithmetic ([`gcra::Gcra`], one `u64` of state per key) and the keyed table every worker shares
//! ([`table::KeyTable`]), which makes a per-client limit exact for the whole process whichever cores
//! the client's connections land on, with no lock: each key's state is one atomic word, updated by
//! compare-and-swap. [`conns::ClientConns`] counts open connections per client the same way
//! (`max_connections_per_client`).

pub mod conns;
pub mod gcra;
pub mod table;

pub use gcra::{Gcra, Verdict};
pub use table::{Admission, KeyTable};
