//! `edge-bench matrix` group c, capacity (DESIGN.md "Fault matrix", "Capacity"): 300 silent
//! sockets at `max_connections = 256` (the `idle-wedge` keeper, 5 s); a burst of 512 slow
//! requests; health probes behind 15, 64 and 128 slow requests (`hol`).

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use super::base_config;
use super::origin::Conn;
use super::runner::{run_case, Check, Edge, HealthRule, Row, SEC};
use crate::peers::origin::{spawn_origin, OriginOptions};
use crate::scenarios::hol::{probe_behind_slow, PROBE_LIMIT};
use crate::scenarios::idle_wedge::Keeper;
use crate::support::table::ms;

/// Group c: capacity.
///
/// # Errors
/// Origin or edge start-up failures.
pub fn group_c(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let origin = spawn_origin(OriginOptions::default())?;
    let mut extra = vec!["--upstream".to_string(), origin.addr().to_string()];
    extra.extend_from_slice(driver);
    let cfg = base_config("max_connections = 256");
    let edge = Edge::start(bin, "matrix-c", &cfg, &extra, &[])?;
    let s = HealthRule::Strict;
    let mut rows = vec![run_case(
        &edge,
        "c",
        "300 idle sockets at max_connections 256",
        "health answered, idle evicted",
        s,
        |e| {
            let ev0 = e.metric("edge_connections_evicted_total", &[]);
            let keeper = Keeper::start(e.traffic, 300)?;
            // The pressure lasts a fixed 5 s: this is the case's duration, not a synchronisation.
            std::thread::sleep(5 * SEC);
            let active = e.metric("edge_connections_active", &[]);
            let kept = keeper.finish();
            let evicted = e.metric("edge_connections_evicted_total", &[]) - ev0;
            let mut k = Check::seen(format!(
                "{} held, {} re-opened, active {active}, evicted +{evicted}",
                kept.initial, kept.reopened
            ));
            k.expect(evicted > 0.0, || {
                "nothing evicted: the limit was never reached".into()
            })
            .expect(active <= 256.0, || "active over max_connections".into());
            Ok(k)
        },
    )];
    rows.push(run_case(
        &edge,
        "c",
        "burst of twice the limit",
        "each 200 or 503 shed",
        s,
        burst,
    ));
    for k in [15, 64, 128] {
        rows.push(run_case(
            &edge,
            "c",
            &format!("health behind {k} slow requests"),
            "probes < 1 s, slow all 200",
            s,
            |e| {
                let r = probe_behind_slow(
                    e.traffic,
                    e.admin,
                    k,
                    Duration::from_millis(100),
                    Duration::from_millis(2500),
                );
                let q = r.quantiles();
                let mut c = Check::seen(format!(
                    "hol probes {} p99 {}, slow {} ok {} failed",
                    r.probes.len(),
                    q.map_or("-".into(), |q| ms(q.p99)),
                    r.held.ok,
                    r.held.failed
                ));
                c.expect(r.failed() == 0 && r.slower_than(PROBE_LIMIT) == 0, || {
                    r.first_failure()
                        .unwrap_or_else(|| "a probe over 1 s".into())
                })
                .expect(r.held.failed == 0, || {
                    format!("slow request failed: {:?}", r.held.first_error)
                });
                Ok(c)
            },
        ));
    }
    edge.stop();
    drop(origin);
    Ok(rows)
}

/// 512 connections each send `GET /slow` (3 s) against a limit of 256: the first ones are
/// served, the rest shed with 503 (none evictable: all have a request in progress).
fn burst(e: &Edge) -> io::Result<Check> {
    let shed0 = e.metric("edge_connections_shed_total", &[("reason", "limit")]);
    let mut conns = Vec::new();
    let mut connect_err = 0;
    for i in 0..512 {
        match Conn::open(e.traffic).and_then(|mut c| {
            c.send(format!("GET /slow/{i} HTTP/1.1\r\nHost: m\r\n\r\n").as_bytes())?;
            Ok(c)
        }) {
            Ok(c) => conns.push(c),
            Err(_) => connect_err += 1,
        }
    }
    let until = Instant::now() + 15 * SEC;
    let (mut ok200, mut shed503, mut retry_after, mut other) = (0, 0, 0, Vec::new());
    for c in &mut conns {
        match c.read_response(until) {
            Ok(r) if r.status == 200 => ok200 += 1,
            Ok(r) if r.status == 503 => {
                shed503 += 1;
                if r.header("retry-after") == Some("1") && r.says_close() {
                    retry_after += 1;
                }
            }
            Ok(r) => other.push(r.status.to_string()),
            Err(e) => other.push(e.to_string()),
        }
    }
    drop(conns);
    let shed = e.metric("edge_connections_shed_total", &[("reason", "limit")]) - shed0;
    let mut k = Check::seen(format!(
        "{ok200} x 200, {shed503} x 503 ({retry_after} with Retry-After + close), {} other, shed +{shed}",
        other.len() + connect_err
    ));
    k.expect(other.is_empty() && connect_err == 0, || {
        format!(
            "{} unanswered, first: {:?}",
            other.len() + connect_err,
            other.first()
        )
    })
    .expect(ok200 > 0 && shed503 > 0, || {
        "expected both served and shed connections".into()
    })
    .expect(retry_after == shed503, || {
        "a 503 without Retry-After: 1 / Connection: close".into()
    })
    .expect(shed == shed503 as f64, || {
        "shed counter differs from the 503s seen".into()
    });
    Ok(k)
}
