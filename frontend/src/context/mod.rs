//! The per-worker context every connection, session and exchange of a worker shares (single-threaded,
//! `Rc`, nothing shared with other workers on the request path): the config-dependent [`Live`] snapshot
//! (configuration, this worker's copy of the route table, upstream pools, per-route counters), metric
//! handles, the warn-log limiter, the idle-connection list ([`idle`]), the request-id counter, the
//! access-log buffer and the trace-context random source.
//!
//! Config reload: each request takes the current snapshot once ([`Worker::live`]) and finishes on it;
//! before that, the worker compares the supervisor's published generation with its own (a read of one
//! atomic) and rebuilds the snapshot when it moved. The heartbeat tick (`crate::process::worker`) does
//! the same check, so an idle worker also switches.

pub mod idle;
pub mod log_limit;

use std::{
    cell::{Cell, RefCell},
    rc::Rc,
    sync::Arc,
};

use edge_core::{
    access_log::AccessBuffer,
    config::{Resolved, Routes},
    http::trace::TraceRng,
    metrics::{RouteCounters, WorkerMetrics},
    runtime::Shared,
};
use edge_upstream::{Upstream, UpstreamCounters};

use log_limit::LogLimit;

/// The config-dependent part of a worker, replaced as a whole at a config reload. A request holds the
/// snapshot it started on until it ends.
pub struct Live {
    /// The configuration.
    pub cfg: Arc<Resolved>,
    /// Its generation ([`edge_core::runtime::Published`]).
    pub generation: u64,
    /// This worker's copy of the compiled route table (`cfg.routes`, DESIGN.md "Routing"): it shares
    /// the index and has regex match caches of its own, so matching takes no lock.
    pub routes: Routes,
    /// Upstreams in config order, each with per-endpoint pools.
    pub upstreams: Vec<Upstream>,
    /// `edge_requests_limited_total{worker,limit}`, one per `[[rate_limits]]` entry in config order
    /// (registered when the snapshot is built, never looked up per request).
    pub limited: Vec<metrics::Counter>,
    /// `edge_mirror_requests_total{worker,result}`, in [`crate::proxy::mirror::RESULTS`] order.
    pub mirror_results: Vec<metrics::Counter>,
    /// This worker's `edge_requests_total` handles of each route (DESIGN.md "Metrics": the `route`
    /// label), indexed by the route's index in the file; built with the routes, at start and reload.
    pub route_counters: Vec<RouteCounters>,
}

impl Live {
    /// Builds worker `id`'s state for `cfg`; with `previous`, pools of endpoints that stay are kept (see
    /// [`Upstream::rebuild`]); endpoint health flags come from `shared.health`
    /// ([`Upstream::with_checks`]), the admin API's cells from `shared.board` ([`Upstream::with_board`]).
    fn build(
        cfg: Arc<Resolved>,
        generation: u64,
        id: usize,
        counters: &UpstreamCounters,
        previous: Option<&Live>,
        shared: &Shared,
        metrics: &WorkerMetrics,
    ) -> Live {
        let upstreams = cfg
            .upstreams
            .iter()
            .map(|u| {
                let old = previous
                    .and_then(|p| p.upstreams.iter().find(|o| o.config.name == u.config.name));
                Upstream::rebuild(u, id, counters, old)
                    .with_checks(&shared.health)
                    .with_board(&shared.board)
            })
            .collect();
        let limited = cfg
            .rate_limits
            .0
            .iter()
            .map(|l| edge_core::metrics::requests_limited(id, &l.name))
            .collect();
        let mirror_results = crate::proxy::mirror::RESULTS
            .iter()
            .map(|r| edge_core::metrics::mirror_requests(id, r))
            .collect();
        let mut labels: Vec<_> = cfg
            .routes
            .iter()
            .map(|(_, r)| (r.index, &r.label))
            .collect();
        labels.sort_unstable_by_key(|(i, _)| *i);
        let route_counters = labels
            .into_iter()
            .map(|(_, label)| metrics.route_counters(label))
            .collect();
        Live {
            limited,
            mirror_results,
            routes: cfg.routes.clone(),
            upstreams,
            route_counters,
            generation,
            cfg,
        }
    }
}

/// Everything one worker's connections share (single-threaded).
pub struct Worker {
    /// Worker index (the `worker` label).
    pub id: usize,
    /// Process-wide state.
    pub shared: Arc<Shared>,
    live: RefCell<Rc<Live>>,
    upstream_counters: UpstreamCounters,
    /// Metric handles.
    pub metrics: WorkerMetrics,
    /// Warn-log rate limit.
    pub log_limit: LogLimit,
    /// Idle connections, least recently active first (DESIGN.md "Capacity").
    pub idle: crate::context::idle::IdleList,
    /// Open connections of this worker.
    pub open: Cell<usize>,
    /// Set when one of the worker's own tasks (heartbeat, pool sweep) panicked: the worker stops.
    pub(crate) fatal: std::cell::RefCell<Option<String>>,
    /// What this worker's response relays hold of their memory budget (DESIGN.md "Memory under slow
    /// readers and large bodies").
    pub relay: edge_core::pace::RelayBudget,
    /// Prefix of generated request ids, drawn when this worker starts (a restarted worker draws a new
    /// one, so its counter starting again at 1 does not repeat the ids of the worker before it).
    pub id_prefix: u32,
    next_id: Cell<u64>,
    /// This worker's access-log buffer (`log.access`, [`edge_core::access_log`]).
    pub access: RefCell<AccessBuffer>,
    /// The access line being formatted (reused).
    pub access_line: RefCell<Vec<u8>>,
    /// Random source of the trace contexts this worker starts (W3C trace context).
    pub trace_rng: RefCell<TraceRng>,
}

impl Worker {
    /// Builds a worker's state on the currently published configuration.
    pub fn new(id: usize, shared: Arc<Shared>) -> Self {
        let metrics = WorkerMetrics::register(id);
        let upstream_counters = UpstreamCounters {
            tls_handshakes: metrics.upstream_tls_handshakes.clone(),
            h2_pings: metrics.upstream_h2_pings.clone(),
            register: true,
        };
        let (cfg, generation) = shared.config.get();
        let relay_budget = cfg.config.server.limits.relay_buffer_budget.0 as usize;
        Worker {
            live: RefCell::new(Rc::new(Live::build(
                cfg,
                generation,
                id,
                &upstream_counters,
                None,
                &shared,
                &metrics,
            ))),
            access: RefCell::new(
                shared
                    .access
                    .worker_buffer(metrics.access_log_dropped.clone()),
            ),
            access_line: RefCell::new(Vec::new()),
            trace_rng: RefCell::new(TraceRng::seeded(id)),
            upstream_counters,
            metrics,
            log_limit: LogLimit::new(id),
            idle: Default::default(),
            open: Cell::new(0),
            fatal: std::cell::RefCell::new(None),
            relay: edge_core::pace::RelayBudget::new(relay_budget),
            id_prefix: id_prefix(),
            next_id: Cell::new(0),
            id,
            shared,
        }
    }

    /// The configuration snapshot a new request runs on: the current one, rebuilt first when the
    /// supervisor published a new configuration. No lock and no shared write unless it changed.
    pub fn live(&self) -> Rc<Live> {
        if self.shared.config.generation() != self.live.borrow().generation {
            self.refresh();
        }
        self.live.borrow().clone()
    }

    /// The snapshot in use, without checking for a newer one.
    pub fn current(&self) -> std::cell::Ref<'_, Rc<Live>> {
        self.live.borrow()
    }

    #[cold]
    fn refresh(&self) {
        let (cfg, generation) = self.shared.config.get();
        let old = self.live.borrow().clone();
        let new = Live::build(
            cfg,
            generation,
            self.id,
            &self.upstream_counters,
            Some(&old),
            &self.shared,
            &self.metrics,
        );
        self.relay
            .set_limit(new.cfg.config.server.limits.relay_buffer_budget.0 as usize);
        *self.live.borrow_mut() = Rc::new(new);
        tracing::debug!(
            event = "config.applied",
            worker = self.id,
            generation,
            "worker switched to the reloaded configuration"
        );
    }

    /// Whether one of the worker's own tasks panicked.
    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.borrow().is_some()
    }

    /// The next generated request id: (worker prefix, worker, counter).
    pub fn next_request_id(&self) -> (u32, u16, u64) {
        let n = self.next_id.get() + 1;
        self.next_id.set(n);
        (self.id_prefix, self.id as u16, n)
    }

    /// Replaces `out` with a new generated request id: for an answer to a request refused before
    /// admission gave it one (DESIGN.md "Observability": X-Request-Id on every response).
    pub fn generate_request_id(&self, out: &mut Vec<u8>) {
        let (p, w, n) = self.next_request_id();
        out.clear();
        edge_core::http::request_id::RequestId::Generated(p, w, n).write(b"", &[], out);
    }
}

fn id_prefix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    t ^ std::process::id().rotate_left(16)
}
