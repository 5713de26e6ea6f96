//! W3C trace context on admission (DESIGN.md "Observability", `log.traceparent`), decided before phase 1
//! so every answer's log lines carry the trace id:
//!
//! - `propagate` (default): one valid `traceparent` field is forwarded as received with its
//!   `tracestate`; an invalid one (or several `traceparent` fields, which the specification treats as
//!   invalid) is replaced, and an absent one started, with a new value (random trace id and parent id
//!   from the worker's [`TraceRng`](edge_core::http::trace::TraceRng), sampled flag off) while
//!   `tracestate` is dropped ([`edge_upstream::head::RequestRewrite::traceparent`]). The trace id (the
//!   received or the new one) is logged.
//! - `forward`: both fields pass through as received; the trace id is logged when the value is valid.
//! - `off`: both pass through; no trace id is logged.

use edge_core::{
    config::TraceMode,
    http::{
        head::{Field, FieldKind},
        trace::{new_traceparent, parse},
    },
};

use crate::{context::Worker, log::RequestFacts};

/// Notes the request's trace context in `facts` (its trace id to log, and a `traceparent` to send in
/// place of the received one) under `mode`.
pub fn note(w: &Worker, mode: TraceMode, buf: &[u8], fields: &[Field], facts: &mut RequestFacts) {
    if mode == TraceMode::Off {
        return;
    }
    let mut given = fields.iter().filter(|f| f.kind == FieldKind::TraceParent);
    let valid = match (given.next(), given.next()) {
        (Some(f), None) => parse(f.value(buf)),
        _ => None,
    };
    match (valid, mode) {
        (Some(t), _) => facts.set_trace_id(&t.trace_id),
        (None, TraceMode::Propagate) => {
            let t = new_traceparent(&mut w.trace_rng.borrow_mut());
            let mut id = [0u8; 32];
            id.copy_from_slice(&t[3..35]);
            facts.traceparent = t;
            facts.trace_started = true;
            facts.set_trace_id(&id);
        }
        (None, _) => {}
    }
}
