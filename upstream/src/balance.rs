//! One upstream as a worker sees it: its endpoints with their pools, round-robin selection, and the
//! checkout that reuses a pooled connection or connects (retrying once on the next endpoint when the
//! connect is refused or times out, DESIGN.md "Upstream pools and retries").

use std::{cell::Cell, net::SocketAddr, rc::Rc, time::Duration};

use monoio::time::Instant;

use edge_core::config::ResolvedUpstream;

use crate::{
    connect::connect,
    eject::Transition,
    error::UpstreamError,
    pool::{Pool, UpstreamConn},
};

/// One endpoint of an upstream.
pub struct Endpoint {
    /// Its address (resolved at config load).
    pub addr: SocketAddr,
    /// Its weight (at least 1; DESIGN.md "Upstream health, discovery and balancing").
    pub weight: u32,
    /// Its idle connections (shared with the previous generation's endpoint of the same upstream and
    /// address after a config reload, so warm connections survive it).
    pub pool: Rc<Pool>,
    /// Its `max_active` budget (shared like `pool`).
    pub slots: Rc<crate::permit::Slots>,
    /// Its connect health, passive ejection (shared like `pool`).
    pub health: Rc<crate::eject::Health>,
}

/// One upstream, per worker.
pub struct Upstream {
    /// Settings from `[[upstreams]]`.
    pub config: edge_core::config::Upstream,
    /// Endpoints in file order.
    pub endpoints: Vec<Endpoint>,
    next: Cell<usize>,
    ejected: metrics::Counter,
    pub(crate) worker: usize,
    /// Active health checks as this worker reads them ([`Upstream::with_checks`]).
    pub(crate) checks: crate::health::Checks,
}

/// How a checkout went, for the retry counter.
pub struct Checkout {
    /// The connection.
    pub conn: UpstreamConn,
    /// The first connect attempt failed and a second endpoint (or attempt) succeeded.
    pub retried: bool,
}

impl Upstream {
    /// Builds the per-worker state of one configured upstream for `worker` (which also staggers
    /// round-robin); `ejected` counts passive ejections (`edge_upstream_errors_total{kind="ejected"}`).
    pub fn new(r: &ResolvedUpstream, worker: usize, ejected: metrics::Counter) -> Self {
        Self::rebuild(r, worker, ejected, None)
    }

    /// Like [`Upstream::new`], after a config reload: an endpoint whose address was already an endpoint of
    /// `previous` (the same upstream, by name, in the old configuration) keeps that endpoint's pool,
    /// `max_active` budget and ejection state; requests still running on the old configuration return
    /// their connections to the same pool. Endpoints that are gone keep their pools only until the last
    /// request of the old configuration ends, then those connections close.
    pub fn rebuild(
        r: &ResolvedUpstream,
        worker: usize,
        ejected: metrics::Counter,
        previous: Option<&Upstream>,
    ) -> Self {
        let kept =
            |addr: SocketAddr| previous.and_then(|p| p.endpoints.iter().find(|e| e.addr == addr));
        Upstream {
            config: r.config.clone(),
            endpoints: r
                .endpoints
                .iter()
                .map(|r| (r.addr, r.weight))
                .map(|(addr, weight)| match kept(addr) {
                    Some(e) => Endpoint {
                        addr,
                        weight,
                        pool: e.pool.clone(),
                        slots: e.slots.clone(),
                        health: e.health.clone(),
                    },
                    None => Endpoint {
                        addr,
                        weight,
                        pool: Default::default(),
                        slots: Default::default(),
                        health: Default::default(),
                    },
                })
                .collect(),
            next: Cell::new(worker),
            ejected,
            worker,
            checks: Default::default(),
        }
    }

    /// The next endpoint in round-robin order that is usable; when none is, the least recently failed by
    /// passive ejection.
    fn pick(&self) -> usize {
        self.checks.begin_pick(&self.config.name, self.worker);
        let n = self.endpoints.len();
        let start = self.next.get() % n;
        let now = Instant::now();
        let i = (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.usable(i, now))
            .unwrap_or_else(|| crate::eject::choose(n, start, now, |i| &self.endpoints[i].health));
        self.next.set(i + 1);
        i
    }

    /// Whether a pick may use endpoint `i` at `now`: not passively ejected, and healthy by active checks
    /// (or the upstream fails open, see [`crate::health::Checks::begin_pick`]).
    fn usable(&self, i: usize, now: Instant) -> bool {
        !self.endpoints[i].health.is_ejected(now) && self.checks.healthy(i)
    }

    /// Connects to endpoint `i`, recording the outcome for passive ejection.
    async fn connect(&self, i: usize) -> Result<crate::connect::UpstreamStream, UpstreamError> {
        let ep = &self.endpoints[i];
        let res = connect(ep.addr, self.config.connect_timeout.0).await;
        let transition = match &res {
            Ok(_) => ep.health.succeeded(),
            Err(_) => ep.health.failed(Instant::now()),
        };
        match transition {
            Transition::Ejected(d) => {
                self.ejected.increment(1);
                tracing::warn!(event = "upstream.ejected", worker = self.worker, upstream = %self.config.name, endpoint = %ep.addr, backoff_ms = d.as_millis() as u64, "endpoint ejected after consecutive connect failures");
            }
            Transition::Returned => {
                tracing::info!(event = "upstream.returned", worker = self.worker, upstream = %self.config.name, endpoint = %ep.addr, "ejected endpoint connects again");
            }
            Transition::None => {}
        }
        res
    }

    /// A pooled connection to the next endpoint, or a new one. `fresh` skips the pool (used for the retry
    /// after a reused connection failed).
    ///
    /// # Errors
    /// The connect error of the last attempt (retry-safe: nothing was sent).
    pub async fn checkout(&self, fresh: bool) -> Result<Checkout, UpstreamError> {
        let first = self.pick();
        let permit = self.permit(first).await?;
        if !fresh {
            if let Some(mut conn) = self.endpoints[first].pool.take() {
                conn.permit = permit;
                // A pool kept across a reload may hold connections checked in under the old endpoint list.
                conn.endpoint = first;
                return Ok(Checkout {
                    conn,
                    retried: false,
                });
            }
        }
        match self.connect(first).await {
            Ok(s) => {
                let mut conn = UpstreamConn::new(s, first);
                conn.permit = permit;
                Ok(Checkout {
                    conn,
                    retried: false,
                })
            }
            Err(e) if self.endpoints.len() < 2 => Err(e),
            Err(e) => {
                // One retry, on the next endpoint.
                drop(permit);
                let second = self.pick();
                tracing::debug!(event = "upstream.connect_retry", endpoint = %self.endpoints[first].addr, error = %e.kind);
                let permit = self.permit(second).await?;
                let s = self.connect(second).await.map_err(|_| e)?;
                let mut conn = UpstreamConn::new(s, second);
                conn.permit = permit;
                Ok(Checkout {
                    conn,
                    retried: true,
                })
            }
        }
    }

    /// Waits up to `queue_timeout` for a `max_active` permit of endpoint `i`.
    async fn permit(&self, i: usize) -> Result<crate::permit::Permit, UpstreamError> {
        let slots = &self.endpoints[i].slots;
        if let Some(p) = slots.try_acquire(self.config.max_active) {
            return Ok(p);
        }
        monoio::time::timeout(
            self.config.queue_timeout.0,
            slots.acquire(self.config.max_active),
        )
        .await
        .map_err(|_| UpstreamError::new(crate::error::UpstreamErrorKind::QueueTimeout))
    }

    /// Returns a connection after a complete, well-framed response. `keep_alive_secs` is the upstream's
    /// `Keep-Alive: timeout=N`, which caps the idle lifetime at N-1 s.
    pub fn checkin(&self, conn: UpstreamConn, keep_alive_secs: Option<u64>) {
        let mut lifetime = self.config.pool_idle_timeout.0;
        if let Some(n) = keep_alive_secs {
            lifetime = lifetime.min(Duration::from_secs(n.saturating_sub(1)));
        }
        self.endpoints[conn.endpoint]
            .pool
            .put(conn, lifetime, self.config.pool_max_idle);
    }

    /// Closes expired idle connections; returns the idle count left.
    pub fn sweep(&self) -> usize {
        let now = monoio::time::Instant::now();
        self.endpoints.iter().map(|e| e.pool.sweep(now)).sum()
    }
}
