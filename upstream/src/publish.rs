//! What a worker publishes about its upstreams for the admin API's `GET /upstreams` (DESIGN.md
//! "Observability"): per endpoint, its requests in flight, idle pooled connections and passive-ejection
//! state on this worker, stored into the worker's own cells of the process-wide
//! [`UpstreamBoard`] at the worker's heartbeat, never on the request path.

use edge_core::runtime::board::{EndpointSample, UpstreamBoard};
use monoio::time::Instant;

use crate::Upstream;

impl Upstream {
    /// Takes the board cells of every endpoint from `table` (its mutex is taken here, when the worker
    /// builds the upstream). Call it after [`Upstream::new`] / [`Upstream::rebuild`].
    pub fn with_board(mut self, table: &UpstreamBoard) -> Self {
        self.boards = self
            .endpoints
            .iter()
            .map(|e| table.endpoint(&self.config.name, e.addr))
            .collect();
        self
    }

    /// Stores this worker's numbers for every endpoint at `now` (relaxed stores into cells only this
    /// worker writes). Called from the worker's heartbeat.
    pub fn publish(&self, now: Instant) {
        for (e, board) in self.endpoints.iter().zip(&self.boards) {
            let sample = EndpointSample {
                in_flight: e.slots.active() as u32,
                idle: e.pool.len() as u32,
                failures: e.health.failures(),
                ejected_ms: e
                    .health
                    .ejected_for(now)
                    .map_or(0, |d| (d.as_millis() as u64).max(1)),
            };
            board.publish(self.worker, sample);
        }
    }
}
