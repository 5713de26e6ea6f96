//! One upstream as a worker sees it: its endpoints with their pools, round-robin selection, and the
//! checkout that reuses a pooled connection or connects (retrying once on the next endpoint when the
//! connect is refused or times out, DESIGN.md "Upstream pools and retries").

use std::{cell::Cell, net::SocketAddr, time::Duration};

use edge_core::config::ResolvedUpstream;

use crate::{
    connect::connect,
    error::UpstreamError,
    pool::{Pool, UpstreamConn},
};

/// One endpoint of an upstream.
pub struct Endpoint {
    /// Its address (resolved at config load).
    pub addr: SocketAddr,
    /// Its idle connections.
    pub pool: Pool,
}

/// One upstream, per worker.
pub struct Upstream {
    /// Settings from `[[upstreams]]`.
    pub config: edge_core::config::Upstream,
    /// Endpoints in file order.
    pub endpoints: Vec<Endpoint>,
    next: Cell<usize>,
}

/// How a checkout went, for the retry counter.
pub struct Checkout {
    /// The connection.
    pub conn: UpstreamConn,
    /// The first connect attempt failed and a second endpoint (or attempt) succeeded.
    pub retried: bool,
}

impl Upstream {
    /// Builds the per-worker state of one configured upstream; `offset` staggers round-robin per worker.
    pub fn new(r: &ResolvedUpstream, offset: usize) -> Self {
        Upstream {
            config: r.config.clone(),
            endpoints: r
                .endpoints
                .iter()
                .map(|&addr| Endpoint {
                    addr,
                    pool: Pool::default(),
                })
                .collect(),
            next: Cell::new(offset),
        }
    }

    fn pick(&self) -> usize {
        let i = self.next.get() % self.endpoints.len();
        self.next.set(i + 1);
        i
    }

    /// A pooled connection to the next endpoint, or a new one. `fresh` skips the pool (used for the retry
    /// after a reused connection failed).
    ///
    /// # Errors
    /// The connect error of the last attempt (retry-safe: nothing was sent).
    pub async fn checkout(&self, fresh: bool) -> Result<Checkout, UpstreamError> {
        let first = self.pick();
        if !fresh {
            if let Some(conn) = self.endpoints[first].pool.take() {
                return Ok(Checkout {
                    conn,
                    retried: false,
                });
            }
        }
        let timeout = self.config.connect_timeout.0;
        match connect(self.endpoints[first].addr, timeout).await {
            Ok(s) => Ok(Checkout {
                conn: UpstreamConn::new(s, first),
                retried: false,
            }),
            Err(e) if self.endpoints.len() < 2 => Err(e),
            Err(e) => {
                // One retry, on the next endpoint.
                let second = self.pick();
                tracing::debug!(event = "upstream.connect_retry", endpoint = %self.endpoints[first].addr, error = %e.kind);
                let s = connect(self.endpoints[second].addr, timeout)
                    .await
                    .map_err(|_| e)?;
                Ok(Checkout {
                    conn: UpstreamConn::new(s, second),
                    retried: true,
                })
            }
        }
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
