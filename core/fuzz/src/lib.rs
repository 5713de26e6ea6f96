//! edge-core's sans-IO HTTP/1.1 codec, PROXY header parser and routing, compiled on its own for the fuzz
//! targets: the very files of `core/src/http`, `core/src/proxy_protocol.rs` and `core/src/policy` (by
//! `#[path]`, not copies). They depend on httparse, memchr, regex and std alone, so the instrumented
//! fuzz build does not also build edge-core's runtime dependencies (monoio, metrics, tracing, toml,
//! ...): that keeps the CI fuzz step's build short on two cores. A change that makes `core/src/http`, the PROXY parser or
//! `core/src/policy` use anything else of edge-core breaks this build, which `.ci/run` runs.

#[path = "../../src/http/mod.rs"]
pub mod http;

/// The PROXY protocol header parser (core/src/proxy_protocol.rs), `std` alone.
#[path = "../../src/proxy_protocol.rs"]
pub mod proxy_protocol;

/// Path normalisation and the route table (core/src/policy), std, memchr and regex alone.
#[path = "../../src/policy/mod.rs"]
pub mod policy;
