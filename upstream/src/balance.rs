//! One upstream as a worker sees it: its endpoints with their pools, which of them are usable, the
//! choice among those by the `balance` policy ([`crate::policy`], DESIGN.md "Upstream health, discovery
//! and balancing"), and the checkout that reuses a pooled connection or connects (retrying once on
//! another endpoint when the connect is refused or times out, DESIGN.md "Upstream pools and retries").

use std::{net::SocketAddr, rc::Rc, sync::Arc, time::Duration};

use monoio::time::Instant;

use edge_core::{config::ResolvedUpstream, metrics::EndpointMetrics};

use crate::{
    connect::{connect, TlsTarget},
    eject::Transition,
    error::UpstreamError,
    h1::H1Exchange,
    policy::{Picker, Rng},
    pool::{Pool, Reuse, UpstreamConn},
    session::{ClientConn, Opened},
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
    /// Its HTTP/2 connections (`protocol = "h2"` or `"auto"`; shared across a reload like `pool`).
    pub h2: Rc<crate::h2::H2Conns>,
    /// Its `max_active` budget (shared like `pool`); its count of checked-out connections is this
    /// worker's requests in flight on the endpoint, which `least_request` compares.
    pub slots: Rc<crate::permit::Slots>,
    /// Its connect health, passive ejection (shared like `pool`).
    pub health: Rc<crate::eject::Health>,
    /// How to open TLS to it, for a `tls = true` upstream.
    pub tls: Option<crate::connect::TlsTarget>,
    /// Its name for consistent hashing: a hash of its address, the same on every worker and across
    /// reloads and re-resolutions that keep the address.
    pub id: u64,
    /// Its attempts on this worker by response class
    /// (`edge_upstream_endpoint_requests_total{worker,upstream,endpoint,status_class}`), registered when
    /// the endpoint set is built.
    pub metrics: EndpointMetrics,
}

/// The consistent-hashing name of the endpoint at `addr` ([`Endpoint::id`]).
fn endpoint_id(addr: SocketAddr) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: every worker and every process computes the same value.
    let mut h = std::hash::DefaultHasher::new();
    addr.hash(&mut h);
    h.finish()
}

/// One upstream, per worker.
pub struct Upstream {
    /// Settings from `[[upstreams]]`.
    pub config: edge_core::config::Upstream,
    /// Endpoints in file order.
    pub endpoints: Vec<Endpoint>,
    picker: Picker,
    /// What `balance = "hash"` hashes (`None` for the other policies).
    pub hash_key: Option<edge_core::config::HashKey>,
    /// This upstream's counters on this worker (`upstream` label).
    pub metrics: edge_core::metrics::UpstreamMetrics,
    pub(crate) worker: usize,
    /// Active health checks as this worker reads them ([`Upstream::with_checks`]).
    pub(crate) checks: crate::health::Checks,
    /// Where this worker publishes each endpoint's numbers for the admin API, in endpoint order
    /// ([`Upstream::with_board`]); empty when not published.
    pub(crate) boards: Vec<Arc<edge_core::runtime::board::EndpointBoard>>,
    /// The worker's `edge_upstream_h2_pings_total` handles, for its HTTP/2 connections.
    pub(crate) h2_pings: Arc<[metrics::Counter; 2]>,
}

/// What a sweep of an upstream's connections left ([`Upstream::sweep`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Idle pooled HTTP/1.1 connections.
    pub idle: usize,
    /// HTTP/2 connections without a stream in flight.
    pub h2_idle: usize,
    /// HTTP/2 connections with streams in flight.
    pub h2_active: usize,
    /// Streams in flight on HTTP/2 connections.
    pub h2_streams: usize,
}

impl std::ops::Add for Swept {
    type Output = Swept;

    fn add(self, o: Swept) -> Swept {
        Swept {
            idle: self.idle + o.idle,
            h2_idle: self.h2_idle + o.h2_idle,
            h2_active: self.h2_active + o.h2_active,
            h2_streams: self.h2_streams + o.h2_streams,
        }
    }
}

/// The settings a pooled connection was opened with, besides its address.
fn tls_settings(u: &edge_core::config::Upstream) -> impl PartialEq + '_ {
    (
        u.tls,
        &u.tls_server_name,
        &u.tls_ca,
        u.tls_verify,
        &u.tls_client_cert,
        &u.tls_client_key,
    )
}

/// The worker's metric handles its upstreams share (registered once per worker, never per request);
/// each upstream registers its own labelled counters besides ([`Upstream::metrics`]).
#[derive(Clone)]
pub struct UpstreamCounters {
    /// `edge_upstream_tls_handshakes_total{worker,result}`, in [`edge_core::metrics::TlsResult::ALL`]
    /// order.
    pub tls_handshakes: Arc<[metrics::Counter; 4]>,
    /// `edge_upstream_h2_pings_total{worker,result}`, in [`edge_core::metrics::PingResult::ALL`] order.
    pub h2_pings: Arc<[metrics::Counter; 2]>,
    /// Whether the upstreams register their counters (false: tests and the health thread count nowhere).
    pub register: bool,
}

impl UpstreamCounters {
    /// Handles that count nowhere (tests, the health thread).
    pub fn noop() -> Self {
        UpstreamCounters {
            tls_handshakes: Arc::new(std::array::from_fn(|_| metrics::Counter::noop())),
            h2_pings: Arc::new(std::array::from_fn(|_| metrics::Counter::noop())),
            register: false,
        }
    }
}

impl Upstream {
    /// Builds the per-worker state of one configured upstream for `worker` (which also staggers
    /// round robin and seeds the random policies), counting into the worker's `counters`.
    pub fn new(r: &ResolvedUpstream, worker: usize, counters: &UpstreamCounters) -> Self {
        Self::rebuild(r, worker, counters, None)
    }

    /// Like [`Upstream::new`], after a config reload: an endpoint whose address was already an endpoint of
    /// `previous` (the same upstream, by name, in the old configuration) keeps that endpoint's pool,
    /// `max_active` budget and ejection state; requests still running on the old configuration return
    /// their connections to the same pool. Endpoints that are gone keep their pools only until the last
    /// request of the old configuration ends, then those connections close.
    pub fn rebuild(
        r: &ResolvedUpstream,
        worker: usize,
        counters: &UpstreamCounters,
        previous: Option<&Upstream>,
    ) -> Self {
        // Pooled connections carry the TLS settings they were opened with: a pool is kept only when
        // those did not change.
        let same_tls = previous.is_some_and(|p| {
            tls_settings(&p.config) == tls_settings(&r.config)
                && p.config.protocol == r.config.protocol
        });
        let kept = |addr: SocketAddr| {
            previous
                .filter(|_| same_tls)
                .and_then(|p| p.endpoints.iter().find(|e| e.addr == addr))
        };
        let n = r.endpoints.len();
        let target = |spec: usize| -> Option<TlsTarget> {
            let tls = r.tls.as_ref()?;
            Some(TlsTarget {
                config: tls.config.clone(),
                server_name: tls.server_name(spec)?.clone(),
                handshakes: counters.tls_handshakes.clone(),
            })
        };
        let endpoint_metrics = |addr: SocketAddr| match counters.register {
            true => EndpointMetrics::register(worker, &r.config.name, &addr.to_string()),
            false => EndpointMetrics::noop(),
        };
        let name: &str = &r.config.name;
        let up = Upstream {
            config: r.config.clone(),
            endpoints: r
                .endpoints
                .iter()
                .map(|r| match kept(r.addr) {
                    Some(e) => Endpoint {
                        addr: r.addr,
                        weight: r.weight,
                        pool: e.pool.clone(),
                        h2: e.h2.clone(),
                        slots: e.slots.clone(),
                        health: e.health.clone(),
                        tls: target(r.spec),
                        id: endpoint_id(r.addr),
                        metrics: endpoint_metrics(r.addr),
                    },
                    None => Endpoint {
                        addr: r.addr,
                        weight: r.weight,
                        pool: Rc::new(crate::pool::Pool::for_endpoint(name, r.addr)),
                        h2: Default::default(),
                        slots: Default::default(),
                        health: Default::default(),
                        tls: target(r.spec),
                        id: endpoint_id(r.addr),
                        metrics: endpoint_metrics(r.addr),
                    },
                })
                .collect(),
            picker: Picker::new(r.config.balance, n, Rng::for_worker(worker)),
            hash_key: match r.config.balance {
                edge_core::config::Balance::Hash => Some(
                    edge_core::config::HashKey::parse(
                        r.config.hash_key.as_deref().unwrap_or("client_ip"),
                    )
                    .unwrap_or(edge_core::config::HashKey::ClientIp),
                ),
                _ => None,
            },
            metrics: match counters.register {
                true => edge_core::metrics::UpstreamMetrics::register(worker, &r.config.name),
                false => edge_core::metrics::UpstreamMetrics::noop(),
            },
            worker,
            checks: Default::default(),
            boards: Vec::new(),
            h2_pings: counters.h2_pings.clone(),
        };
        up.stagger();
        up
    }

    /// Advances round robin by `worker` picks (modulo the total weight), so that workers do not all send
    /// their first requests to the same endpoint; done once per build, never on the request path.
    fn stagger(&self) {
        let total: u64 = self.endpoints.iter().map(|e| u64::from(e.weight)).sum();
        if self.config.balance != edge_core::config::Balance::RoundRobin || total == 0 {
            return;
        }
        let all = Usable {
            up: self,
            now: Instant::now(),
            except: None,
            all: true,
        };
        for _ in 0..(self.worker as u64 % total) {
            self.picker.pick(&all, None);
        }
    }

    /// Whether endpoint `i` may get a new request at `now`: the one place that decides. Not passively
    /// ejected (DESIGN.md "Upstream pools and retries"), and healthy by active checks, unless every
    /// endpoint is unhealthy and the upstream fails open for this pick ([`crate::health::Checks::begin_pick`],
    /// DESIGN.md "Upstream health, discovery and balancing").
    pub fn usable(&self, i: usize, now: Instant) -> bool {
        !self.endpoints[i].health.is_ejected(now) && self.checks.healthy(i)
    }

    /// The endpoint for the next attempt: the policy's choice among the usable endpoints other than
    /// `except` (the one whose connect just failed, so that a retry goes elsewhere when there are
    /// several); when none is usable, the least recently failed of them (DESIGN.md "Upstream pools and
    /// retries").
    pub(crate) fn pick(&self, except: Option<usize>, key: Option<u64>) -> usize {
        self.checks.begin_pick(&self.config.name, self.worker);
        if self.endpoints.len() == 1 {
            return 0;
        }
        let now = edge_core::clock::coarse_now();
        let candidates = Usable {
            up: self,
            now,
            except,
            all: false,
        };
        self.picker.pick(&candidates, key).unwrap_or_else(|| {
            crate::eject::least_recently_failed(self.endpoints.len(), except, |i| {
                &self.endpoints[i].health
            })
        })
    }

    /// Connects to endpoint `i`, recording the outcome for passive ejection; a failed connect is an
    /// attempt without a response (`status_class="error"`). With `send_proxy_protocol`, the connection
    /// starts with the PROXY header of `proxied`.
    ///
    /// # Errors
    /// As [`connect`], on this endpoint ([`UpstreamError::endpoint`]).
    pub(crate) async fn connect(
        &self,
        i: usize,
        proxied: Option<ClientConn>,
    ) -> Result<UpstreamConn, UpstreamError> {
        let ep = &self.endpoints[i];
        let header = self
            .config
            .send_proxy_protocol
            .version()
            .zip(proxied)
            .map(|(version, c)| {
                let mut h = Vec::with_capacity(edge_core::proxy_protocol::encode::MAX_LEN);
                edge_core::proxy_protocol::encode::proxied(
                    version,
                    c.source,
                    c.destination,
                    &mut h,
                );
                h
            });
        let res = connect(
            &self.config.name,
            ep.addr,
            self.config.connect_timeout.0,
            ep.tls.as_ref(),
            header,
        )
        .await
        .map(|s| {
            let mut conn = UpstreamConn::new(s, i);
            conn.proxied = proxied;
            conn
        })
        .map_err(|e| e.at(ep.addr));
        let transition = match &res {
            Ok(_) => ep.health.succeeded(),
            Err(_) => {
                ep.metrics.failed();
                ep.health.failed(Instant::now())
            }
        };
        match transition {
            Transition::Ejected(d) => {
                self.metrics
                    .error(edge_core::metrics::UpstreamErrorLabel::Ejected)
                    .increment(1);
                tracing::warn!(event = "upstream.ejected", worker = self.worker, upstream = %self.config.name, endpoint = %ep.addr, backoff_ms = d.as_millis() as u64, "endpoint ejected after consecutive connect failures");
            }
            Transition::Returned => {
                tracing::info!(event = "upstream.returned", worker = self.worker, upstream = %self.config.name, endpoint = %ep.addr, "ejected endpoint connects again");
            }
            Transition::None => {}
        }
        res
    }

    /// A pooled connection to the endpoint the policy picks (as `reuse` allows: [`Reuse::Fresh`] for
    /// the retry after a reused connection failed), or a new one, as an HTTP/1.1 session: how it opens
    /// ([`crate::session::Open`]). `retried`: the first connect attempt failed and a second endpoint (or
    /// attempt) succeeded.
    ///
    /// # Errors
    /// The connect error of the last attempt (retry-safe: nothing was sent); `NoEndpoint` while the
    /// upstream has no address.
    pub(crate) async fn checkout(
        &self,
        reuse: Reuse,
        client: ClientConn,
        key: Option<u64>,
    ) -> Result<Opened<H1Exchange<'_>>, UpstreamError> {
        let opened = |conn, retried| Opened {
            session: H1Exchange::new(self, conn),
            retried,
        };
        if self.endpoints.is_empty() {
            // Every endpoint name is still unresolved; the supervisor keeps resolving them.
            return Err(UpstreamError::new(
                crate::error::UpstreamErrorKind::NoEndpoint,
            ));
        }
        // With `send_proxy_protocol` a connection is labelled with the client connection its header
        // described, and only reused for it.
        let proxied = self.config.send_proxy_protocol.version().map(|_| client);
        let first = self.pick(None, key);
        let permit = self.permit(first).await?;
        if let Some(mut conn) = self.endpoints[first].pool.take(reuse, proxied) {
            conn.permit = permit;
            // A pool kept across a reload may hold connections checked in under the old endpoint list.
            conn.endpoint = first;
            return Ok(opened(conn, false));
        }
        let attempt = |i, permit| async move {
            let mut conn = self.connect(i, proxied).await?;
            conn.permit = permit;
            Ok(conn)
        };
        // Boxed: a new connection allocates its state anyway, and the connect and TLS handshake
        // futures inline would take kilobytes of every request's future that reuses a connection
        // (bench/README.md "Large bodies after the slow-reader work").
        let (conn, retried) = Box::pin(self.first_or_second(first, permit, key, attempt)).await?;
        Ok(opened(conn, retried))
    }

    /// Runs `attempt` (a connect) on endpoint `first` with its `max_active` permit; when it fails and
    /// the upstream has another endpoint, once more on the one the policy picks besides `first`, with
    /// a permit of its own (DESIGN.md "Upstream pools and retries": a refused or timed-out connect is
    /// retried on the next endpoint). The flag: the second attempt served.
    ///
    /// # Errors
    /// The first attempt's error when there is no second endpoint or the second attempt failed too;
    /// `QueueTimeout` waiting for the second endpoint's permit.
    pub(crate) async fn first_or_second<T, F>(
        &self,
        first: usize,
        permit: crate::permit::Permit,
        key: Option<u64>,
        attempt: impl Fn(usize, crate::permit::Permit) -> F,
    ) -> Result<(T, bool), UpstreamError>
    where
        F: std::future::Future<Output = Result<T, UpstreamError>>,
    {
        // The first permit goes with the first attempt's future, so it is free again before the
        // second endpoint is picked.
        let e = match attempt(first, permit).await {
            Ok(t) => return Ok((t, false)),
            Err(e) if self.endpoints.len() < 2 => return Err(e),
            Err(e) => e,
        };
        let second = self.pick(Some(first), key);
        tracing::debug!(event = "upstream.connect_retry", worker = self.worker, upstream = %self.config.name, endpoint = %self.endpoints[first].addr, error = %e.kind);
        let permit = self.permit(second).await?;
        let t = attempt(second, permit).await.map_err(|_| e)?;
        Ok((t, true))
    }

    /// Waits up to `queue_timeout` for a `max_active` permit of endpoint `i`.
    pub(crate) async fn permit(&self, i: usize) -> Result<crate::permit::Permit, UpstreamError> {
        let slots = &self.endpoints[i].slots;
        if let Some(p) = slots.try_acquire(self.config.max_active) {
            return Ok(p);
        }
        edge_core::clock::timeout(
            self.config.queue_timeout.0,
            slots.acquire(self.config.max_active),
        )
        .await
        .map_err(|_| {
            UpstreamError::new(crate::error::UpstreamErrorKind::QueueTimeout)
                .at(self.endpoints[i].addr)
        })
    }

    /// Returns a connection after a complete, well-framed response (an HTTP/1.1 session's
    /// [`crate::session::Finish::Reuse`]). `keep_alive_secs` is the upstream's `Keep-Alive: timeout=N`,
    /// which caps the idle lifetime at N-1 s.
    pub(crate) fn checkin(&self, conn: UpstreamConn, keep_alive_secs: Option<u64>) {
        let mut lifetime = self.config.pool_idle_timeout.0;
        if let Some(n) = keep_alive_secs {
            lifetime = lifetime.min(Duration::from_secs(n.saturating_sub(1)));
        }
        self.endpoints[conn.endpoint]
            .pool
            .put(conn, lifetime, self.config.pool_max_idle);
    }

    /// Closes expired idle connections and those above `pool_max_idle` ([`crate::pool`],
    /// [`crate::h2::H2Conns::sweep`]); returns what is left.
    pub fn sweep(&self) -> Swept {
        let now = edge_core::clock::coarse_now();
        let max_idle = self.config.pool_max_idle;
        let idle_timeout = self.config.pool_idle_timeout.0;
        self.endpoints
            .iter()
            .map(|e| {
                let (h2_idle, h2_active, h2_streams) = e.h2.sweep(now, idle_timeout, max_idle);
                Swept {
                    idle: e.pool.sweep(now, max_idle),
                    h2_idle,
                    h2_active,
                    h2_streams,
                }
            })
            .fold(Swept::default(), |a, b| a + b)
    }
}

/// The endpoints of an [`Upstream`] as a policy sees them at one instant: usable unless
/// [`Upstream::usable`] says otherwise or it is `except`; `all` makes every endpoint usable (for the
/// start-up stagger).
struct Usable<'a> {
    up: &'a Upstream,
    now: Instant,
    except: Option<usize>,
    all: bool,
}

impl crate::policy::Endpoints for Usable<'_> {
    fn count(&self) -> usize {
        self.up.endpoints.len()
    }
    fn usable(&self, i: usize) -> bool {
        self.all || (self.except != Some(i) && self.up.usable(i, self.now))
    }
    fn weight(&self, i: usize) -> u32 {
        self.up.endpoints[i].weight
    }
    fn in_flight(&self, i: usize) -> usize {
        self.up.endpoints[i].slots.active()
    }
    fn id(&self, i: usize) -> u64 {
        self.up.endpoints[i].id
    }
}

#[cfg(test)]
mod tests;
