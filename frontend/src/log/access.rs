//! The access line of one finished request (DESIGN.md "Observability"): its fields are gathered from
//! the request's [`RequestLog`] and [`RequestFacts`], formatted ([`super::format`]) into the worker's
//! reused line buffer and appended to the worker's access-log buffer
//! ([`edge_core::access_log::AccessBuffer`]), which drops and counts the line rather than wait when the
//! writer is behind. Nothing here allocates once the buffers have grown.

use std::{net::SocketAddr, time::Duration};

use edge_core::{config::AccessFormat, metrics::Protocol};

use super::{
    format::{self, AccessLine},
    RequestFacts, RequestLog,
};
use crate::context::Worker;

/// Formats and buffers the access line of a request that ended with `status` after `elapsed`.
#[allow(clippy::too_many_arguments)]
pub fn write_line(
    w: &Worker,
    format: AccessFormat,
    protocol: Protocol,
    log: &RequestLog<'_>,
    facts: &RequestFacts,
    peer: SocketAddr,
    status: u16,
    elapsed: Duration,
) {
    let (method, target) = match log.line.iter().position(|&b| b == b' ') {
        Some(i) => (&log.line[..i], &log.line[i + 1..]),
        None => (log.line, &b""[..]),
    };
    let query_len = match facts.live {
        Some(_) => facts.query_len,
        // Not admitted: the query as far as the kept line shows it.
        None => target
            .iter()
            .position(|&b| b == b'?')
            .map_or(0, |q| target.len() - q - 1),
    };
    let (route, upstream) = facts.names();
    let id = match log.id {
        b"-" => &b""[..],
        id => id,
    };
    let line = AccessLine {
        time: std::time::SystemTime::now(),
        worker: w.id,
        protocol,
        client: peer,
        method,
        target,
        query_len,
        host: &facts.host,
        status,
        request_bytes: facts.request_bytes.get(),
        response_bytes: facts.response_bytes.get(),
        duration: elapsed,
        ttfb: facts.ttfb.get(),
        route,
        upstream,
        endpoint: facts.endpoint.get(),
        attempts: facts.attempts.get(),
        request_id: id,
        trace_id: log.trace,
        user_agent: &facts.user_agent,
        referer: &facts.referer,
        grpc_status: facts.grpc_status.get(),
    };
    let mut out = w.access_line.borrow_mut();
    out.clear();
    format::write(&mut out, format, &line);
    w.access.borrow_mut().push(&out);
}
