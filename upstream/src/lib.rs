//! edge-upstream: the upstream side of one worker: the upstream-session seam the orchestrator is written
//! against ([`session`]: open a session for a request, send, receive, finish), implemented for HTTP/1.1
//! ([`h1`]) over per-endpoint pools of keep-alive connections ([`pool`]); the forwarded request head
//! ([`head`]) and the received response ([`received`]) in their protocol-neutral HTTP/1.1 syntax;
//! connecting under `connect_timeout` ([`connect`]), endpoint choice ([`balance`], with the policies in
//! [`policy`]), passive ejection ([`eject`]), active health checks on their own thread and as a worker
//! reads them ([`health`]), what a worker publishes for the admin API ([`publish`]), the zombie clock ([`zombie`]), the retry policy ([`retry`]), and the upstream
//! error type with its kind and retry-safety ([`error`]).
//!
//! Everything here is per worker (`Rc`/`RefCell`, no locks): a worker never uses another worker's
//! connection (DESIGN.md "Upstream pools and retries").

pub mod any;
pub mod balance;
pub mod connect;
pub mod eject;
pub mod error;
pub mod h1;
pub mod h2;
pub mod head;
pub mod health;
pub mod permit;
pub mod policy;
pub mod pool;
pub mod publish;
pub mod received;
pub mod retry;
pub mod session;
pub mod stream;
pub mod zombie;

pub use balance::{Swept, Upstream, UpstreamCounters};
pub use error::{Counted, UpstreamError, UpstreamErrorKind};
pub use pool::UpstreamConn;

/// The upstream session an [`Upstream`] opens ([`session::Open`]): HTTP/1.1 or HTTP/2.
pub type Exchange<'u> = <Upstream as session::Open>::Session<'u>;
/// The upstream side of a tunnel after a `101` ([`session::UpstreamSession::into_tunnel`]).
pub type Tunnel = <Upstream as session::Open>::Tunnel;
