//! Integration tests: the real `edge` binary over real loopback TCP, with a scripted origin. Each case runs
//! on both io drivers (`epoll` and `io_uring`; the io_uring case is skipped, with a printed reason, only
//! where the kernel refuses io_uring).

mod harness;

/// Defines a module `$name` with one test per io driver; `$body` is a `fn(Driver)`.
macro_rules! both_drivers {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn epoll() {
                ($body)(crate::harness::Driver::Epoll)
            }
            #[test]
            fn io_uring() {
                if crate::harness::Driver::IoUring.available() {
                    ($body)(crate::harness::Driver::IoUring)
                }
            }
        }
    };
}

mod access_log;
mod admin_api;
mod balancing;
mod capacity;
mod cli;
mod client_closed;
mod conformance;
mod deadlines;
mod deploy;
mod discovery;
mod docs;
mod drops;
mod faults;
mod grpc_answers;
mod grpc_health_check;
mod grpc_upstream;
mod h2;
mod h2_floods;
mod h2_local;
mod h2_upstream;
mod h2_websocket;
mod health_check;
mod lifecycle;
mod limits;
mod proxy;
mod proxy_protocol;
mod proxy_protocol_upstream;
mod reload;
mod routing;
mod rules;
mod rules_requests;
mod slow_readers;
mod smuggling;
mod splice;
mod splice_uploads;
mod strictness;
mod tls;
mod tls_cli;
mod tls_reload;
mod tls_session;
mod tls_upstream;
mod upgrade;
mod upstream;
