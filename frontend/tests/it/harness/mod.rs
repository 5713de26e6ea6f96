//! Test harness: starts the real `edge` binary on 127.0.0.1 port 0 with a generated config, a scripted
//! origin on plain std threads, and a raw HTTP/1.1 client. Every wait is bounded and event-driven (the
//! ready log line, a channel), never a fixed sleep. This file only names the parts and re-exports them.

// A shared API: not every test module uses every part, so unused parts are not warned about.
#![allow(dead_code, unused_imports)]

mod asserts;
mod certs;
mod client;
mod config;
mod driver;
mod edge;
mod grpc;
mod h2_client;
mod h2_origin;
mod metrics;
mod origin;
mod site;
mod sockets;
mod tempdir;
mod tls_client;
mod tls_origin;
mod wire;
mod ws_origin;

pub use asserts::{assert_about, assert_error_response, settle, wait_lines, wait_until};
pub use certs::{Ca, Pem};
pub use client::{Client, Response};
pub use config::{Cfg, Route, Upstream, Value};
pub use driver::{each_driver, Driver};
pub use edge::{assert_exit, check_config, raise_fd_limit, run_edge, Edge};
pub use grpc::{every_call_shape, GrpcCall, GrpcCase, GrpcResult, GrpcServer};
pub use h2_client::{
    block_on, connect as h2_connect, connect_after as h2_connect_after,
    connect_tls as h2_connect_tls, read_at_least, read_to_end, request as h2_request, send_all,
    websocket as h2_websocket, H2Response, H2Tunnel,
};
pub use h2_origin::{H2Origin, H2OriginState, H2Seen};
pub use metrics::metric_sum;
pub use origin::{read_request, Origin, Reply, Seen};
pub use site::Site;
pub use sockets::{refused_addr, Drip, HangingListener};
pub use tempdir::TempDir;
pub use tls_client::{TlsConn, TlsOpts, Versions};
pub use tls_origin::{Handshake, TlsOrigin};
pub use ws_origin::WsOrigin;
