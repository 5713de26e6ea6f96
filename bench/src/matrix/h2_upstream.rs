//! `edge-bench matrix` group g, HTTP/2 upstreams and gRPC (DESIGN.md "Fault matrix" g, "HTTP/2 and
//! gRPC upstreams"): edge with a `protocol = "h2"` upstream in front of the h2c origin
//! ([`crate::peers::origin::h2c`]) in one of its fault modes, one edge and one origin per case:
//!
//! - GOAWAY mid-load: the origin sends GOAWAY after every [`GOAWAY_AFTER`] streams of a connection
//!   while [`LOAD_REQUESTS`] HTTP/1.1 requests go through edge on [`LOAD_THREADS`] clients: every one
//!   answers 200, and the origin did send GOAWAY;
//! - REFUSED_STREAM: the origin refuses every [`REFUSE_EVERY`]th stream: every request answers 200
//!   (edge retried the refused ones) and the origin refused some;
//! - PINGs unanswered: `GET /freeze` (the origin stops reading the connection): 504 after the capped
//!   zombie threshold (`max_inactive` 1 s, cap 2 s, `request_timeout` 10 s: 2 s), an `upstream.zombie`
//!   log line and `edge_upstream_timeouts_total{phase="zombie"}`;
//! - slow answer with PINGs ACKed: `GET /slowping` answered after 3 s (past the 2 s zombie threshold)
//!   on a connection that keeps answering PINGs: 200, and no zombie verdict;
//! - gRPC client cancel: an h2c client calls through edge (`server.h2c = true`) a method the origin
//!   holds, then resets the stream with CANCEL: the origin sees the upstream stream reset within 1 s;
//! - bidirectional stream past `request_timeout`: an h2c client sends a DATA chunk every 250 ms on
//!   `/echo` (gRPC content-type) for 3 s, past the upstream `request_timeout` (1 s) and the client
//!   `request` deadline (2 s), reading every echo: all echoed, the stream ends with `grpc-status: 0`.
//!
//! Until edge has HTTP/2 upstreams its config rejects `protocol`, so every case fails with edge's
//! config error in the row: runnable now, meaningful once the feature lands. The runner's
//! invariants hold around each case (health, slots, fds, memory, counters logged).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::base_config;
use super::runner::{run_case, secs, Check, Edge, HealthRule, Row, SEC};
use crate::peers::grpc;
use crate::peers::h2_client::{block_on, connect, echo_session, open, within, H2Request};
use crate::peers::origin::h2c::{H2cOptions, H2cRecords, FREEZE_PATH, SLOWPING_PATH};
use crate::peers::origin::{spawn_origin, OriginHandle, OriginOptions};
use crate::support::probe;

/// Streams per upstream connection before the origin's GOAWAY in the GOAWAY case.
pub const GOAWAY_AFTER: u32 = 25;

/// The origin refuses every this-many-th stream in the REFUSED_STREAM case.
pub const REFUSE_EVERY: u32 = 10;

/// Requests of the GOAWAY and REFUSED_STREAM cases, over [`LOAD_THREADS`] clients.
pub const LOAD_REQUESTS: usize = 300;

/// Concurrent HTTP/1.1 clients of the load cases.
pub const LOAD_THREADS: usize = 6;

/// The origin's delay of `/slowping` (and of `/slow…` gRPC methods held for the cancel case).
const SLOW_ANSWER: Duration = Duration::from_secs(3);

/// One case: how the origin misbehaves, edge's upstream settings, the case body.
struct Case {
    name: &'static str,
    expected: &'static str,
    origin: H2cOptions,
    delay: Option<Duration>,
    /// Lines added to the `[[upstreams]]` table.
    upstream: &'static str,
    body: fn(&Edge, &H2cRecords) -> io::Result<Check>,
}

/// Group g.
///
/// # Errors
/// Origin start-up failures (an edge that does not start fails its case instead).
pub fn group_g(bin: &Path, driver: &[String]) -> io::Result<Vec<Row>> {
    let zombie = "max_inactive = \"1s\"\nmax_inactive_cap = \"2s\"\nrequest_timeout = \"10s\"\n";
    let cases = [
        Case {
            name: "h2 upstream sends GOAWAY mid-load",
            expected: "every request 200, origin sent GOAWAY",
            origin: H2cOptions {
                goaway_after: Some(GOAWAY_AFTER),
                ..Default::default()
            },
            delay: None,
            upstream: "",
            body: goaway_mid_load,
        },
        Case {
            name: "h2 upstream refuses streams (REFUSED_STREAM)",
            expected: "every request 200 (retried), origin refused some",
            origin: H2cOptions {
                refuse_every: Some(REFUSE_EVERY),
                ..Default::default()
            },
            delay: None,
            upstream: "",
            body: refused_streams,
        },
        Case {
            name: "h2 upstream stops answering PINGs",
            expected: "504 at the zombie threshold (2 s), upstream.zombie logged",
            origin: H2cOptions::default(),
            delay: None,
            upstream: zombie,
            body: pings_unanswered,
        },
        Case {
            name: "h2 upstream answers slowly, ACKs PINGs",
            expected: "200 after 3 s, no zombie verdict",
            origin: H2cOptions::default(),
            delay: Some(SLOW_ANSWER),
            upstream: zombie,
            body: slow_with_pings,
        },
        Case {
            name: "gRPC client cancels a call",
            expected: "upstream stream reset (CANCEL) within 1 s",
            origin: H2cOptions::default(),
            delay: Some(Duration::from_secs(30)),
            upstream: "",
            body: grpc_cancel,
        },
        Case {
            name: "bidi stream longer than request_timeout, data flowing",
            expected: "12 chunks echoed over 3 s, grpc-status 0, not cut",
            origin: H2cOptions::default(),
            delay: None,
            upstream: "request_timeout = \"1s\"\n",
            body: bidi_past_request_timeout,
        },
    ];
    let mut rows = Vec::new();
    for c in cases {
        rows.push(run_one(bin, driver, c)?);
    }
    Ok(rows)
}

/// Starts the case's origin and edge, runs it with the invariants, stops both.
fn run_one(bin: &Path, driver: &[String], c: Case) -> io::Result<Row> {
    let origin = spawn_origin(OriginOptions {
        h2c: Some(c.origin.clone()),
        delay: c.delay,
        workers: 1,
        ..Default::default()
    })?;
    let toml = edge_toml(origin.addr(), c.upstream);
    let edge = match Edge::start(bin, "matrix-g", &toml, driver, &[]) {
        Ok(e) => e,
        Err(e) => return Ok(not_started(&c, &e)),
    };
    let records = origin.h2c_records().clone();
    let body = c.body;
    let row = run_case(&edge, "g", c.name, c.expected, HealthRule::Strict, |e| {
        body(e, &records)
    });
    edge.stop();
    stop_origin(origin);
    Ok(row)
}

fn stop_origin(origin: OriginHandle) {
    origin.stop();
}

/// The failed row of a case whose edge did not start (before edge has HTTP/2 upstreams: its
/// config error).
fn not_started(c: &Case, e: &io::Error) -> Row {
    let why = e.to_string().lines().next().unwrap_or("").to_string();
    println!("  g {} … FAIL (edge did not start)", c.name);
    Row {
        group: "g".into(),
        case: c.name.into(),
        expected: c.expected.into(),
        observed: format!("edge did not start ({why}; its config error is printed above)"),
        pass: Some(false),
        notes: vec![format!(
            "edge rejected the h2 upstream config (HTTP/2 upstreams missing?): {e}"
        )],
    }
}

/// edge's config for a case: h2c downstream, one h2 upstream to the origin with `upstream` lines.
pub fn edge_toml(origin: SocketAddr, upstream: &str) -> String {
    format!(
        "{}
[[upstreams]]
name = \"origin\"
endpoints = [\"{origin}\"]
protocol = \"h2\"
{upstream}
[[routes]]
path_prefix = \"/\"
upstream = \"origin\"
",
        base_config("h2c = true")
    )
}

/// [`LOAD_REQUESTS`] HTTP/1.1 GETs of `/fast` on [`LOAD_THREADS`] clients; the statuses other than
/// 200 (or errors), in words.
fn load(addr: SocketAddr) -> Vec<String> {
    let per = LOAD_REQUESTS / LOAD_THREADS;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..LOAD_THREADS)
            .map(|_| {
                s.spawn(move || {
                    (0..per)
                        .filter_map(|_| match probe::get(addr, "/fast", 2 * SEC) {
                            Ok(r) if r.status == 200 => None,
                            Ok(r) => Some(format!("status {}", r.status)),
                            Err(e) => Some(e.to_string()),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|_| vec!["client panicked".into()]))
            .collect()
    })
}

fn goaway_mid_load(e: &Edge, records: &H2cRecords) -> io::Result<Check> {
    let failed = load(e.traffic);
    let s = records.snapshot();
    let mut k = Check::seen(format!(
        "{}/{LOAD_REQUESTS} answered 200; origin: {} streams on {} connections, {} GOAWAYs",
        LOAD_REQUESTS - failed.len(),
        s.streams,
        s.connections,
        s.goaways
    ));
    k.expect(failed.is_empty(), || {
        format!("failed: {:?}", first(&failed))
    })
    .expect(s.goaways > 0, || "the origin never sent GOAWAY".into());
    Ok(k)
}

fn refused_streams(e: &Edge, records: &H2cRecords) -> io::Result<Check> {
    let retries0 = e.metric("edge_upstream_retries_total", &[]);
    let failed = load(e.traffic);
    let s = records.snapshot();
    let retries = e.metric("edge_upstream_retries_total", &[]) - retries0;
    let mut k = Check::seen(format!(
        "{}/{LOAD_REQUESTS} answered 200; origin refused {} of {} streams; edge retries +{retries}",
        LOAD_REQUESTS - failed.len(),
        s.refused,
        s.streams
    ));
    k.expect(failed.is_empty(), || {
        format!("failed: {:?}", first(&failed))
    })
    .expect(s.refused > 0, || "the origin refused nothing".into());
    Ok(k)
}

fn pings_unanswered(e: &Edge, records: &H2cRecords) -> io::Result<Check> {
    let zombies0 = e.metric("edge_upstream_timeouts_total", &[("phase", "zombie")]);
    let logged0 = e.output_count("upstream.zombie");
    let t = Instant::now();
    let r = probe::get(e.traffic, FREEZE_PATH, 8 * SEC);
    let took = t.elapsed();
    let zombies = e.wait_metric(
        "edge_upstream_timeouts_total",
        &[("phase", "zombie")],
        2 * SEC,
        |v| v > zombies0,
    ) - zombies0;
    let logged = e.output_count("upstream.zombie") - logged0;
    let status = r.as_ref().map(|r| r.status).ok();
    let mut k = Check::seen(format!(
        "{} after {}; frozen connections {}; zombie verdicts +{zombies}, upstream.zombie lines +{logged}",
        status.map_or_else(|| format!("{r:?}"), |s| s.to_string()),
        secs(took),
        records.snapshot().frozen
    ));
    k.expect(status == Some(504), || format!("expected 504, got {r:?}"))
        .expect(took >= SEC && took <= 5 * SEC, || {
            format!("answered after {}, expected about 2 s", secs(took))
        })
        .expect(zombies >= 1.0, || "no zombie verdict counted".into())
        .expect(logged >= 1, || "no upstream.zombie log line".into());
    Ok(k)
}

fn slow_with_pings(e: &Edge, _records: &H2cRecords) -> io::Result<Check> {
    let zombies0 = e.metric("edge_upstream_timeouts_total", &[("phase", "zombie")]);
    let t = Instant::now();
    let r = probe::get(e.traffic, SLOWPING_PATH, 8 * SEC);
    let took = t.elapsed();
    let zombies = e.metric("edge_upstream_timeouts_total", &[("phase", "zombie")]) - zombies0;
    let status = r.as_ref().map(|r| r.status).ok();
    let mut k = Check::seen(format!(
        "{} after {}; zombie verdicts +{zombies}",
        status.map_or_else(|| format!("{r:?}"), |s| s.to_string()),
        secs(took)
    ));
    k.expect(status == Some(200), || format!("expected 200, got {r:?}"))
        .expect(zombies == 0.0, || {
            "killed as a zombie while PINGs were ACKed".into()
        });
    Ok(k)
}

fn grpc_cancel(e: &Edge, records: &H2cRecords) -> io::Result<Check> {
    let addr = e.traffic;
    let path = "/slow.Echo/Unary";
    let got = block_on(within(10 * SEC, async move {
        let c = connect(addr).await?;
        let req = H2Request {
            method: "POST",
            path,
            headers: &[("content-type", grpc::CONTENT_TYPE), ("te", "trailers")],
            body: b"x",
            trailers: None,
        };
        let (resp, mut body) = open(&c.send, &req)?.await?;
        body.send_data(grpc::frame(b"cancel me").into(), true)
            .map_err(|e| e.to_string())?;
        let (s, reached) = records.until(5 * SEC, |s| s.streams >= 1).await;
        if !reached {
            return Err(format!("the call never reached the origin: {s:?}"));
        }
        let t = Instant::now();
        body.send_reset(h2::Reason::CANCEL);
        drop(resp);
        let (s, reset) = records.until(3 * SEC, |s| s.resets >= 1).await;
        Ok((s, reset, t.elapsed()))
    }));
    let mut k = match got {
        Ok((s, reset, took)) => {
            let mut k = Check::seen(format!(
                "origin saw {} reset(s) {:?} {} after the client's CANCEL",
                s.resets,
                s.reset_streams,
                secs(took)
            ));
            k.expect(reset && took <= SEC, || {
                format!(
                    "upstream stream not reset within 1 s (after {})",
                    secs(took)
                )
            })
            .expect(s.cancels >= 1, || {
                format!("reset reason not CANCEL: {:?}", s.reset_streams)
            });
            k
        }
        Err(err) => {
            let mut k = Check::seen(format!("error: {err}"));
            k.expect(false, || err.clone());
            k
        }
    };
    k.observed.push_str(&format!("; path {path}"));
    Ok(k)
}

fn bidi_past_request_timeout(e: &Edge, _records: &H2cRecords) -> io::Result<Check> {
    let addr = e.traffic;
    let t = Instant::now();
    let got = block_on(async move {
        let c = connect(addr).await?;
        echo_session(
            &c.send,
            "/echo",
            &[("content-type", grpc::CONTENT_TYPE), ("te", "trailers")],
            (12, 100, Duration::from_millis(250)),
            3 * SEC,
        )
        .await
    });
    let took = t.elapsed();
    Ok(match got {
        Ok(s) => {
            let status = s
                .trailers
                .as_ref()
                .and_then(|t| t.get("grpc-status"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let mut k = Check::seen(format!(
                "{} echoed of 12 over {}, status {}, ended {}, grpc-status {status:?}",
                s.echoed,
                secs(took),
                s.status,
                s.ended
            ));
            k.expect(s.status == 200 && s.echoed == 12 && s.ended, || {
                "the stream was cut or incomplete".into()
            })
            .expect(status.as_deref() == Some("0"), || {
                format!("grpc-status {status:?}")
            });
            k
        }
        Err(err) => {
            let mut k = Check::seen(format!("cut after {}: {err}", secs(took)));
            k.expect(false, || err.clone());
            k
        }
    })
}

/// The first few failures, for a row's notes.
fn first(v: &[String]) -> &[String] {
    &v[..v.len().min(3)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_an_h2_upstream_and_h2c() {
        let t = edge_toml("127.0.0.1:9".parse().unwrap(), "max_inactive = \"1s\"\n");
        assert!(t.contains("h2c = true") && t.contains("protocol = \"h2\""));
        assert!(t.contains("endpoints = [\"127.0.0.1:9\"]\nprotocol = \"h2\"\nmax_inactive"));
    }
}
