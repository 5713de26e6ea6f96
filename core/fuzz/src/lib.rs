//! edge-core's sans-IO HTTP/1.1 codec and PROXY header parser, compiled on its own for the fuzz targets:
//! the very files of `core/src/http` and `core/src/proxy_protocol.rs` (by `#[path]`, not copies). They
//! depend on httparse and std alone, so the instrumented fuzz build does not also build edge-core's
//! runtime dependencies (monoio, metrics, tracing, toml, ...): that keeps the CI fuzz step's build under
//! a minute on two cores instead of over two. A change that makes `core/src/http` or the PROXY parser use
//! anything else of edge-core breaks this build, which `.ci/run` runs.

#[path = "../../src/http/mod.rs"]
pub mod http;

/// The PROXY protocol header parser (core/src/proxy_protocol.rs), `std` alone.
#[path = "../../src/proxy_protocol.rs"]
pub mod proxy_protocol;
