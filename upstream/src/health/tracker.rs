//! The thresholds of DESIGN.md "Upstream health, discovery and balancing", sans-IO: an endpoint starts
//! healthy, turns unhealthy after `unhealthy_threshold` consecutive failed probes and healthy again after
//! `healthy_threshold` consecutive passes. A probe's outcome is a [`Verdict`]; why one failed is a
//! [`Failure`], which the `upstream.unhealthy` line names.

use std::{fmt, io};

/// Why a probe failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The connect failed (refused, unreachable, ...).
    Connect(io::ErrorKind),
    /// No response head within `timeout` (connect, write and response head together).
    Timeout,
    /// A response whose status is outside `expect_status` (a gRPC check: other than 200).
    Status(u16),
    /// A response head that does not parse, or one over 16 KiB.
    BadResponse,
    /// The connection closed, or failed, before a whole response head arrived.
    Closed,
    /// The TLS handshake or certificate verification failed (`tls = true` upstreams).
    Tls,
    /// gRPC check: a `grpc-status` other than 0 (OK), e.g. 5 NOT_FOUND for a service the server does
    /// not know, 12 UNIMPLEMENTED when it has no health service.
    GrpcStatus(u32),
    /// gRPC check: the server answered with a status other than SERVING (0 UNKNOWN, 2 NOT_SERVING,
    /// 3 SERVICE_UNKNOWN).
    NotServing(u64),
    /// gRPC check: the response message or its `grpc-status` is missing or malformed.
    BadMessage,
    /// gRPC check: over TLS the server chose HTTP/1.1 in ALPN (`protocol = "auto"`).
    NotH2,
    /// gRPC check: the stream or the connection was reset (RST_STREAM or GOAWAY), with this HTTP/2
    /// error code.
    H2(u32),
    /// gRPC check: the endpoint's address (or `tls_server_name`) is not a valid `:authority`.
    BadAuthority,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Connect(kind) => write!(f, "connect error ({kind})"),
            Failure::Timeout => f.write_str("timeout"),
            Failure::Status(s) => write!(f, "status {s}"),
            Failure::BadResponse => f.write_str("bad response head"),
            Failure::Closed => f.write_str("closed before the response head"),
            Failure::Tls => f.write_str("TLS handshake failed"),
            Failure::GrpcStatus(s) => write!(f, "grpc status {s}"),
            Failure::NotServing(s) => write!(f, "not serving (status {s})"),
            Failure::BadMessage => f.write_str("bad gRPC health response"),
            Failure::NotH2 => f.write_str("the server did not choose h2 in ALPN"),
            Failure::H2(code) => write!(f, "HTTP/2 error {:?}", h2::Reason::from(*code)),
            Failure::BadAuthority => f.write_str("the endpoint is not a valid :authority"),
        }
    }
}

/// A probe's outcome: `Ok` with the passing status, or why it failed.
pub type Verdict = Result<u16, Failure>;

/// A change of state to publish and log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing changed.
    None,
    /// The endpoint turned unhealthy after this many consecutive failures.
    Unhealthy {
        /// Consecutive failed probes.
        failures: u32,
    },
    /// The endpoint turned healthy again after this many consecutive passes.
    Healthy {
        /// Consecutive passed probes.
        passes: u32,
    },
}

/// One endpoint's state and consecutive counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    healthy: bool,
    passes: u32,
    failures: u32,
}

impl Default for Tracker {
    /// Healthy, no probe seen.
    fn default() -> Self {
        Tracker {
            healthy: true,
            passes: 0,
            failures: 0,
        }
    }
}

impl Tracker {
    /// Whether the endpoint is healthy.
    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// Records one probe; `healthy_threshold` and `unhealthy_threshold` are at least 1 (validated).
    pub fn record(
        &mut self,
        passed: bool,
        healthy_threshold: u32,
        unhealthy_threshold: u32,
    ) -> Change {
        if passed {
            self.failures = 0;
            self.passes = self.passes.saturating_add(1);
            if !self.healthy && self.passes >= healthy_threshold {
                self.healthy = true;
                return Change::Healthy {
                    passes: self.passes,
                };
            }
        } else {
            self.passes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.healthy && self.failures >= unhealthy_threshold {
                self.healthy = false;
                return Change::Unhealthy {
                    failures: self.failures,
                };
            }
        }
        Change::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhealthy_after_consecutive_failures_healthy_after_consecutive_passes() {
        let mut t = Tracker::default();
        assert!(t.healthy(), "starts healthy");
        assert_eq!(t.record(false, 2, 3), Change::None);
        assert_eq!(t.record(false, 2, 3), Change::None);
        // A pass in between restarts the count.
        assert_eq!(t.record(true, 2, 3), Change::None);
        assert_eq!(t.record(false, 2, 3), Change::None);
        assert_eq!(t.record(false, 2, 3), Change::None);
        assert_eq!(t.record(false, 2, 3), Change::Unhealthy { failures: 3 });
        assert!(!t.healthy());
        assert_eq!(t.record(false, 2, 3), Change::None, "reported once");
        assert_eq!(t.record(true, 2, 3), Change::None);
        assert_eq!(t.record(false, 2, 3), Change::None);
        assert_eq!(t.record(true, 2, 3), Change::None);
        assert_eq!(t.record(true, 2, 3), Change::Healthy { passes: 2 });
        assert_eq!(t.record(true, 2, 3), Change::None, "reported once");
    }

    #[test]
    fn thresholds_of_one_flip_on_each_change() {
        let mut t = Tracker::default();
        assert_eq!(t.record(true, 1, 1), Change::None);
        assert_eq!(t.record(false, 1, 1), Change::Unhealthy { failures: 1 });
        assert_eq!(t.record(true, 1, 1), Change::Healthy { passes: 1 });
    }

    #[test]
    fn failures_read_as_the_log_names_them() {
        assert_eq!(Failure::Status(500).to_string(), "status 500");
        assert_eq!(Failure::Timeout.to_string(), "timeout");
        assert_eq!(
            Failure::Connect(io::ErrorKind::ConnectionRefused).to_string(),
            "connect error (connection refused)"
        );
        assert_eq!(Failure::GrpcStatus(5).to_string(), "grpc status 5");
        assert_eq!(Failure::NotServing(2).to_string(), "not serving (status 2)");
        assert_eq!(Failure::H2(7).to_string(), "HTTP/2 error REFUSED_STREAM");
    }
}
