//! edge-upstream: the upstream side of one worker: per-endpoint pools of keep-alive connections
//! ([`pool`]), connecting under `connect_timeout` ([`connect`]), endpoint choice ([`balance`], with the
//! policies in [`policy`]), passive ejection ([`eject`]), active health checks on their own thread and as
//! a worker reads them ([`health`]), the HTTP/1.1 client session ([`h1`]) with its zombie clock
//! ([`zombie`]) and retry policy ([`retry`]), and the upstream error type with its kind and
//! retry-safety ([`error`]).
//!
//! Everything here is per worker (`Rc`/`RefCell`, no locks): a worker never uses another worker's
//! connection (DESIGN.md "Upstream pools and retries").

pub mod balance;
pub mod connect;
pub mod eject;
pub mod error;
pub mod h1;
pub mod health;
pub mod permit;
pub mod policy;
pub mod pool;
pub mod retry;
pub mod stream;
pub mod zombie;

pub use balance::{Upstream, UpstreamCounters};
pub use error::{Counted, UpstreamError, UpstreamErrorKind};
pub use pool::UpstreamConn;
