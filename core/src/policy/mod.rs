//! The traffic rules as data compiled at load (DESIGN.md "Layout", `src/policy/`; "Routing"): sans-IO,
//! no allocation and no lock per request. [`path`] normalises a request path (RFC 3986 §6.2.2);
//! [`route`] compiles `[[routes]]` into an indexed [`route::RouteTable`] and finds a request's route;
//! [`reference`](mod@reference) is the obviously-correct linear matcher the tests and the fuzz target
//! compare the table with; [`limit`] is rate-limit state (GCRA, and the keyed table workers share);
//! [`template`] parses values with variables (`${path}`) and fills them per request; [`headers`]
//! compiles a route's header rules.
//!
//! This module depends on std, `memchr`, `regex` and `crate::http::head` alone, so the fuzz crate
//! (`core/fuzz`) compiles these very files without the rest of edge-core; the configuration converts its
//! `[[routes]]` into the plain [`route::RouteSpec`] here rather than this module reading config types.

pub mod headers;
pub mod limit;
pub mod path;
pub mod reference;
pub mod route;
pub mod template;
