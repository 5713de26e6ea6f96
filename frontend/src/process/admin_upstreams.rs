//! The admin API's `GET /upstreams` (DESIGN.md "Observability"): per upstream and endpoint, the
//! address, weight, health by active checks, passive ejection, requests in flight and idle pooled
//! connections summed over workers, and the last resolution of each endpoint name, as JSON.
//!
//! Everything is read from state already shared with the admin thread: the published configuration,
//! the health thread's flags, the cells each worker writes at its heartbeat
//! ([`edge_core::runtime::board`], so the numbers are at most 250 ms old) and the supervisor's
//! resolutions. Nothing here touches a worker's request path.

use edge_core::{
    config::ResolvedUpstream,
    runtime::{board::EndpointSample, Shared},
};
use serde_json::{json, Value};

/// The `GET /upstreams` body: pretty-printed JSON, newline-terminated.
pub fn render(shared: &Shared) -> String {
    let (cfg, generation) = shared.config.get();
    let upstreams: Vec<Value> = cfg.upstreams.iter().map(|u| upstream(shared, u)).collect();
    let doc = json!({
        "generation": generation,
        "workers": shared.workers(),
        "upstreams": upstreams,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// One upstream: its settings that shape the choice, its endpoints and its names' resolutions.
fn upstream(shared: &Shared, u: &ResolvedUpstream) -> Value {
    let name = &u.config.name;
    let endpoints: Vec<Value> = u
        .endpoints
        .iter()
        .map(|e| {
            let entry = u.config.endpoints.get(e.spec).map(|s| s.address());
            let health = match (&u.config.health_check, shared.health.state(name, e.addr)) {
                (None, _) => "unchecked",
                // A checked endpoint starts healthy (DESIGN.md), before the health thread takes it.
                (Some(_), Some(true) | None) => "healthy",
                (Some(_), Some(false)) => "unhealthy",
            };
            let samples = shared.board.read(name, e.addr).unwrap_or_default();
            let mut v = json!({
                "address": e.addr.to_string(),
                "entry": entry,
                "weight": e.weight,
                "health": health,
            });
            merge(&mut v, workers_sum(&samples));
            v
        })
        .collect();
    let names: Vec<Value> = u
        .config
        .endpoints
        .iter()
        .map(|s| s.address())
        .filter(|a| a.parse::<std::net::SocketAddr>().is_err())
        .map(|a| resolution(shared, name, a))
        .collect();
    json!({
        "name": name,
        "balance": u.config.balance,
        "health_check": u.config.health_check.is_some(),
        "endpoints": endpoints,
        "names": names,
    })
}

/// The passive-ejection and load fields of one endpoint, over every worker's last publication.
fn workers_sum(samples: &[EndpointSample]) -> Value {
    let ejected: Vec<&EndpointSample> = samples.iter().filter(|s| s.ejected_ms > 0).collect();
    json!({
        "ejected": !ejected.is_empty(),
        "ejected_workers": ejected.len(),
        "ejected_for_ms": ejected.iter().map(|s| s.ejected_ms).max().unwrap_or(0),
        "connect_failures": samples.iter().map(|s| s.failures).max().unwrap_or(0),
        "in_flight": samples.iter().map(|s| u64::from(s.in_flight)).sum::<u64>(),
        "idle": samples.iter().map(|s| u64::from(s.idle)).sum::<u64>(),
    })
}

/// The last resolution of endpoint name `entry` of `upstream`.
fn resolution(shared: &Shared, upstream: &str, entry: &str) -> Value {
    let Some(r) = shared.resolutions.get(upstream, entry) else {
        return json!({ "entry": entry, "resolved_at": null, "result": "pending" });
    };
    let at = humantime::format_rfc3339_millis(r.at).to_string();
    match r.result {
        Ok(addrs) => json!({
            "entry": entry,
            "resolved_at": at,
            "result": "ok",
            "addresses": addrs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
        Err(reason) => json!({
            "entry": entry,
            "resolved_at": at,
            "result": "failed",
            "error": reason,
        }),
    }
}

/// Adds `extra`'s fields to object `v`.
fn merge(v: &mut Value, extra: Value) {
    if let (Value::Object(a), Value::Object(b)) = (v, extra) {
        a.extend(b);
    }
}
