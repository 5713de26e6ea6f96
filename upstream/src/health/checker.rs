//! The health thread's runtime (DESIGN.md "Upstream health, discovery and balancing"): one task per
//! checked endpoint, so a slow endpoint delays only its own probes, and a watcher that follows config
//! reloads. Endpoints are keyed by (upstream name, address): one that stays across a reload keeps its
//! task, counts and state and takes the new settings at its next probe; a new one starts healthy; a
//! removed one stops after its probe in flight, whose result is dropped.
//!
//! Everything here runs on the one health thread (`Rc`/`RefCell`); what workers see is only the
//! [`HealthFlag`] of each endpoint, stored when its state changes.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    net::SocketAddr,
    rc::Rc,
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use edge_core::{
    config::{HealthCheck, Resolved},
    metrics::CheckResult,
    runtime::{health::HealthFlag, Shared},
};
use metrics::{Counter, Gauge};
use monoio::time::Instant;

use super::{
    grpc, probe,
    tracker::{Change, Tracker, Verdict},
};

/// How often the watcher compares the config generation and looks at `Shared::closing`.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// (upstream name, endpoint address).
type Key = (String, SocketAddr);

/// What a probe of one endpoint needs, replaced as a whole at a reload.
struct Settings {
    check: HealthCheck,
    request: Request,
    /// TLS to the endpoint, for a `tls = true` upstream (probes speak what requests speak).
    tls: Option<crate::connect::TlsTarget>,
    /// With `send_proxy_protocol`, the header a probe's connection starts with: v2 LOCAL or v1
    /// `UNKNOWN` (the probe is edge's own connection, not a client's).
    proxy_header: Option<Vec<u8>>,
}

/// What a probe sends: a GET over HTTP/1.1, or with `grpc_service` a gRPC health call over HTTP/2.
enum Request {
    Http(Vec<u8>),
    Grpc(grpc::GrpcProbe),
}

/// One checked endpoint.
struct Slot {
    upstream: String,
    /// The configured address text: the `endpoint` label and the `Host` of the probe.
    endpoint: RefCell<String>,
    addr: SocketAddr,
    flag: HealthFlag,
    settings: RefCell<Rc<Settings>>,
    tracker: RefCell<Tracker>,
    checks: [Counter; 2],
    /// Set when a reload removed the endpoint: its task ends.
    retired: Cell<bool>,
}

/// Every checked endpoint, and the gauges by (upstream, configured endpoint text).
#[derive(Default)]
struct Checker {
    slots: RefCell<HashMap<Key, Rc<Slot>>>,
    gauges: RefCell<HashMap<(String, String), Gauge>>,
}

/// Runs until `shared.closing`: follows the published configuration and probes its checked endpoints.
pub(super) async fn run(shared: Arc<Shared>) {
    let checker = Rc::new(Checker::default());
    let mut generation = 0;
    while !shared.closing.load(Ordering::Relaxed) {
        if shared.config.generation() != generation {
            let (cfg, g) = shared.config.get();
            apply(&checker, &cfg, &shared);
            generation = g;
        }
        monoio::time::sleep(WATCH_EVERY).await;
    }
}

/// Makes the checked set that of `cfg`: keeps the endpoints that stay, starts the new ones, retires
/// the removed ones, then sets every gauge and prunes the shared table.
fn apply(checker: &Rc<Checker>, cfg: &Resolved, shared: &Shared) {
    let mut wanted: HashMap<Key, (String, Rc<Settings>)> = HashMap::new();
    for u in &cfg.upstreams {
        let Some(check) = &u.config.health_check else {
            continue;
        };
        for e in &u.endpoints {
            let text = u.config.endpoints[e.spec].address().to_string();
            let tls = u.tls.as_ref().and_then(|t| {
                Some(crate::connect::TlsTarget {
                    config: t.config.clone(),
                    server_name: t.server_name(e.spec)?.clone(),
                    handshakes: crate::balance::UpstreamCounters::noop().tls_handshakes,
                })
            });
            // DESIGN.md: Host = the endpoint, or `tls_server_name` when set.
            let host = u.config.tls_server_name.as_deref().unwrap_or(&text);
            let request = match &check.grpc_service {
                Some(service) => Request::Grpc(grpc::GrpcProbe::new(service, host)),
                None => Request::Http(probe::request(check, host)),
            };
            let settings = Rc::new(Settings {
                request,
                check: check.clone(),
                tls,
                proxy_header: u.config.send_proxy_protocol.version().map(|v| {
                    let mut h = Vec::new();
                    edge_core::proxy_protocol::encode::local(v, &mut h);
                    h
                }),
            });
            wanted
                .entry((u.config.name.clone(), e.addr))
                .or_insert((text, settings));
        }
    }
    let mut slots = checker.slots.borrow_mut();
    slots.retain(|key, slot| {
        let stays = wanted.contains_key(key);
        slot.retired.set(!stays);
        stays
    });
    for (key, (text, settings)) in wanted {
        match slots.get(&key) {
            Some(slot) => {
                *slot.endpoint.borrow_mut() = text;
                *slot.settings.borrow_mut() = settings;
            }
            None => {
                let slot = Rc::new(Slot {
                    flag: shared.health.flag(&key.0, key.1),
                    checks: edge_core::metrics::health_checks(&key.0),
                    upstream: key.0.clone(),
                    endpoint: RefCell::new(text),
                    addr: key.1,
                    settings: RefCell::new(settings),
                    tracker: RefCell::default(),
                    retired: Cell::new(false),
                });
                // It starts healthy, whatever a holder of the flag saw before (DESIGN.md).
                slot.flag.store(true, Ordering::Relaxed);
                monoio::spawn(probe_loop(checker.clone(), slot.clone()));
                slots.insert(key, slot);
            }
        }
    }
    drop(slots);
    checker.set_gauges();
    shared.health.prune();
}

/// Probes `slot` every `interval` (from one probe's start to the next; a probe that took longer is
/// followed at once) until it is retired.
async fn probe_loop(checker: Rc<Checker>, slot: Rc<Slot>) {
    loop {
        let settings = slot.settings.borrow().clone();
        let started = Instant::now();
        let (tls, proxy_header) = (settings.tls.as_ref(), settings.proxy_header.clone());
        let verdict = match &settings.request {
            Request::Http(request) => {
                let request = request.clone();
                probe::probe(
                    &slot.upstream,
                    slot.addr,
                    request,
                    &settings.check,
                    tls,
                    proxy_header,
                )
                .await
            }
            Request::Grpc(request) => {
                grpc::grpc_probe(
                    &slot.upstream,
                    slot.addr,
                    request,
                    &settings.check,
                    tls,
                    proxy_header,
                )
                .await
            }
        };
        if slot.retired.get() {
            return;
        }
        checker.record(&slot, &settings.check, verdict);
        monoio::time::sleep_until(started + settings.check.interval.0).await;
        if slot.retired.get() {
            return;
        }
    }
}

impl Checker {
    /// Counts one probe of `slot`; on a change of state publishes it, logs it and sets the gauge.
    fn record(&self, slot: &Slot, check: &HealthCheck, verdict: Verdict) {
        let result = match verdict {
            Ok(_) => CheckResult::Pass,
            Err(f) => {
                tracing::debug!(event = "upstream.health_check_failed", upstream = %slot.upstream, endpoint = %slot.endpoint.borrow(), addr = %slot.addr, reason = %f);
                CheckResult::Fail
            }
        };
        slot.checks[result as usize].increment(1);
        let change = slot.tracker.borrow_mut().record(
            verdict.is_ok(),
            check.healthy_threshold,
            check.unhealthy_threshold,
        );
        let endpoint = slot.endpoint.borrow();
        match change {
            Change::None => return,
            Change::Unhealthy { failures } => {
                slot.flag.store(false, Ordering::Relaxed);
                let reason = verdict.err().map_or_else(String::new, |f| f.to_string());
                tracing::warn!(event = "upstream.unhealthy", upstream = %slot.upstream, endpoint = %endpoint, addr = %slot.addr, failures, %reason, "endpoint failed its health checks; it gets no new requests");
            }
            Change::Healthy { passes } => {
                slot.flag.store(true, Ordering::Relaxed);
                tracing::info!(event = "upstream.healthy", upstream = %slot.upstream, endpoint = %endpoint, addr = %slot.addr, passes, "endpoint passes its health checks again");
            }
        }
        self.set_gauge(&slot.upstream, &endpoint);
    }

    /// `edge_upstream_endpoint_healthy{upstream,endpoint}`: 1 when every address of that configured entry
    /// is healthy, else 0.
    fn set_gauge(&self, upstream: &str, endpoint: &str) {
        let healthy = self
            .slots
            .borrow()
            .values()
            .filter(|s| s.upstream == upstream && *s.endpoint.borrow() == endpoint)
            .all(|s| s.tracker.borrow().healthy());
        let key = (upstream.to_string(), endpoint.to_string());
        let mut gauges = self.gauges.borrow_mut();
        let g = gauges
            .entry(key)
            .or_insert_with(|| edge_core::metrics::endpoint_healthy(upstream, endpoint));
        g.set(if healthy { 1.0 } else { 0.0 });
    }

    /// Sets every gauge after a reload; an entry no longer checked gets NaN (the exporter cannot drop a
    /// series, and NaN neither alerts nor reads as healthy).
    fn set_gauges(&self) {
        let live: Vec<(String, String)> = self
            .slots
            .borrow()
            .values()
            .map(|s| (s.upstream.clone(), s.endpoint.borrow().clone()))
            .collect();
        self.gauges.borrow_mut().retain(|key, g| {
            let stays = live.contains(key);
            if !stays {
                g.set(f64::NAN);
            }
            stays
        });
        for (upstream, endpoint) in &live {
            self.set_gauge(upstream, endpoint);
        }
    }
}
