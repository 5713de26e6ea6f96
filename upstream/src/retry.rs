//! The retry policy of DESIGN.md "Upstream pools and retries", as one decision: a request is sent again,
//! once, on a fresh connection only when the failed attempt used a reused pooled connection (which the
//! upstream may have closed just as it was reused), the method is idempotent (RFC 9110 §9.2.2), and
//! everything sent so far can be replayed (the body went whole with the head, or not at all yet while
//! waiting for `100 Continue`). Connect failures are retried separately, on the next endpoint, by the
//! checkout ([`crate::balance`]).

/// What the policy looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The connection came from the pool.
    pub reused: bool,
    /// The request method is idempotent.
    pub idempotent: bool,
    /// What was sent is still whole in the send buffer (body sent with the head, or not started).
    pub replayable: bool,
    /// Attempts already made before this one.
    pub previous: u32,
}

impl Attempt {
    /// Whether a failure of this attempt, if the failure itself is retry-safe, may be retried.
    pub fn may_retry(self) -> bool {
        self.reused && self.idempotent && self.replayable && self.previous == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_first_attempt_on_a_reused_connection_with_a_replayable_idempotent_request() {
        let a = Attempt {
            reused: true,
            idempotent: true,
            replayable: true,
            previous: 0,
        };
        assert!(a.may_retry());
        assert!(!Attempt { reused: false, ..a }.may_retry());
        assert!(!Attempt {
            idempotent: false,
            ..a
        }
        .may_retry());
        assert!(!Attempt {
            replayable: false,
            ..a
        }
        .may_retry());
        assert!(!Attempt { previous: 1, ..a }.may_retry());
    }
}
