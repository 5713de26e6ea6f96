//! Phase 3 of the request pipeline, first part (DESIGN.md "Request pipeline and traffic rules"): the
//! route's rate limits. Each limit named by the route's `rate_limit` keys the request (client address,
//! a header's value, or the route) and asks its table, which every worker shares
//! ([`edge_core::policy::limit::KeyTable`]: one atomic word per key, so the limit is exact for the
//! whole process with no lock); every limit must admit the request. Refused: 429 with `Retry-After`,
//! `edge_requests_limited_total{worker,limit}` and a rate-limited `request.limited` line.
//!
//! A request that one limit refuses is not counted against the limits after it (they are asked in
//! order and asking stops), but it was counted by those before it: a client over one of two limits
//! still spends the other, as with nginx's several `limit_req`.

use std::net::SocketAddr;

use edge_core::{
    config::{LimitKey, RateLimits, ResolvedRoute},
    http::head::{first_value, Field},
    policy::limit::Verdict,
};

use crate::context::Worker;

/// A request as the limits see it.
pub struct Keyed<'a> {
    /// The client (the PROXY-protocol source when one was received).
    pub peer: SocketAddr,
    /// The head the fields index into.
    pub buf: &'a [u8],
    /// The request's fields.
    pub fields: &'a [Field],
}

/// The seconds of `Retry-After` when one of the route's limits refuses the request, with the index
/// of that limit; `None` when every limit admits it.
pub fn check(
    w: &Worker,
    limits: &RateLimits,
    counters: &[metrics::Counter],
    route: &ResolvedRoute,
    r: &Keyed<'_>,
) -> Option<(u64, usize)> {
    if route.rules.limits.is_empty() {
        return None;
    }
    let now = edge_core::clock::coarse_now().into_std();
    for &i in route.rules.limits.iter() {
        let limit = &limits.0[i];
        let table = &limit.table;
        let key = match &limit.key {
            LimitKey::ClientIp => table.key_ip(r.peer.ip()),
            LimitKey::Route => table.key(route.label.as_bytes()),
            LimitKey::Header(name) => match first_value(r.buf, r.fields, name.as_bytes()) {
                Some(value) => table.key(value),
                None => continue,
            },
        };
        let admission = table.admit(key, &limit.gcra, table.clock(now));
        if admission.evicted_active && w.log_limit.allow() {
            tracing::warn!(event = "rate_limit.evicted", worker = w.id, limit = %limit.name, max_keys = limit.max_keys, "a key still being limited was forgotten to make room: raise max_keys");
        }
        if let Verdict::Limit { .. } = admission.verdict {
            if let Some(c) = counters.get(i) {
                c.increment(1);
            }
            let secs = admission.verdict.retry_after_secs().unwrap_or(1);
            return Some((secs, i));
        }
    }
    None
}
