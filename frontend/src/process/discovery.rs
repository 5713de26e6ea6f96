//! Re-resolution of endpoint names (DESIGN.md "Upstream health, discovery and balancing", Discovery):
//! every `resolve` interval the names of an upstream's endpoints are resolved again, off the workers, and
//! a changed address set is published like a reload (new endpoints get pools; vanished endpoints' pools
//! drain after their last request, see `Upstream::rebuild`). A failed resolution keeps the last good
//! set and logs `upstream.resolve_failed`. A name that has no address yet (it did not resolve at start
//! or reload) is looked up at least every 5 s until it resolves; meanwhile an upstream with no address
//! at all answers 503 `no_endpoint`.
//!
//! Lookups block (getaddrinfo), so they run on a resolver thread of their own: a slow DNS server never
//! holds up the supervisor's signal handling or worker restarts. The supervisor alone publishes: it sends
//! lookups to the resolver, and applies the answers to whatever configuration is current when they come
//! back (an entry a reload changed meanwhile is left alone), so a reload and a re-resolution never
//! overwrite each other.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::mpsc,
    time::Instant,
};

use edge_core::{
    config::{resolve_all, Resolved, ResolvedEndpoint},
    runtime::{board::Resolution, Shared},
};

/// How often an endpoint name that has no address yet is looked up again.
const UNRESOLVED_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The names of one upstream to look up again.
struct Lookup {
    upstream: String,
    /// (index of the `endpoints` entry, its `host:port` text).
    entries: Vec<(usize, String)>,
}

/// The answers for one [`Lookup`].
struct Answer {
    upstream: String,
    entries: Vec<(usize, String, Result<Vec<SocketAddr>, String>)>,
}

/// The supervisor's side of re-resolution: when each upstream is due, and the resolver thread.
pub struct Discovery {
    lookups: mpsc::Sender<Lookup>,
    answers: mpsc::Receiver<Answer>,
    due: HashMap<String, Instant>,
    pending: HashSet<String>,
}

impl Discovery {
    /// Starts the resolver thread.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start() -> std::io::Result<Discovery> {
        let (lookups, jobs) = mpsc::channel::<Lookup>();
        let (done, answers) = mpsc::channel();
        std::thread::Builder::new()
            .name("edge-resolver".into())
            .spawn(move || {
                for job in jobs {
                    let entries = job
                        .entries
                        .into_iter()
                        .map(|(j, text)| {
                            let r = resolve_all(&text);
                            (j, text, r)
                        })
                        .collect();
                    let answer = Answer {
                        upstream: job.upstream,
                        entries,
                    };
                    if done.send(answer).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Discovery {
            lookups,
            answers,
            due: HashMap::new(),
            pending: HashSet::new(),
        })
    }

    /// Applies the answers that came back, then sends the lookups that are due. Called from the
    /// supervisor's loop (every 100 ms); never blocks.
    pub fn tick(&mut self, shared: &Shared) {
        while let Ok(answer) = self.answers.try_recv() {
            self.pending.remove(&answer.upstream);
            apply(shared, answer);
        }
        let (current, _) = shared.config.get();
        let now = Instant::now();
        for u in &current.upstreams {
            // An entry with no address yet is looked up at least every UNRESOLVED_EVERY, whatever
            // `resolve` says (DESIGN.md "Observability": names that do not resolve at start).
            let unresolved =
                (0..u.config.endpoints.len()).any(|j| !u.endpoints.iter().any(|e| e.spec == j));
            let every = match (u.config.resolve.0, unresolved) {
                (Some(every), true) => every.min(UNRESOLVED_EVERY),
                (None, true) => UNRESOLVED_EVERY,
                (Some(every), false) => every,
                (None, false) => continue,
            };
            let names = names(&u.config.endpoints);
            let name = &u.config.name;
            if names.is_empty() || self.pending.contains(name) {
                continue;
            }
            let due = self.due.entry(name.clone()).or_insert(now + every);
            // A shorter period (a name that stopped resolving) applies from now, not after the longer one.
            *due = (*due).min(now + every);
            if now < *due {
                continue;
            }
            *due = now + every;
            let lookup = Lookup {
                upstream: name.clone(),
                entries: names,
            };
            if self.lookups.send(lookup).is_ok() {
                self.pending.insert(name.clone());
            }
        }
    }
}

/// The entries of `endpoints` that are names (IP literals never change).
fn names(endpoints: &[edge_core::config::EndpointSpec]) -> Vec<(usize, String)> {
    endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.address().parse::<SocketAddr>().is_err())
        .map(|(j, e)| (j, e.address().to_string()))
        .collect()
}

/// Publishes the configuration with `answer`'s addresses when they changed anything.
fn apply(shared: &Shared, answer: Answer) {
    let (current, _) = shared.config.get();
    let Some(i) = current
        .upstreams
        .iter()
        .position(|u| u.config.name == answer.upstream)
    else {
        return; // removed by a reload meanwhile
    };
    let upstream = &current.upstreams[i];
    let mut endpoints = upstream.endpoints.clone();
    for (j, text, result) in answer.entries {
        // Changed by a reload meanwhile: the reload resolved it already.
        if upstream.config.endpoints.get(j).map(|e| e.address()) != Some(text.as_str()) {
            continue;
        }
        shared.resolutions.record(
            &answer.upstream,
            &text,
            Resolution {
                at: std::time::SystemTime::now(),
                result: result.clone(),
            },
        );
        match result {
            Ok(addrs) => {
                endpoints = replaced(&endpoints, j, &addrs, upstream.config.endpoints[j].weight())
            }
            Err(reason) => {
                tracing::warn!(event = "upstream.resolve_failed", upstream = %answer.upstream, endpoint = %text, %reason, "keeping the last resolved addresses");
            }
        }
    }
    if endpoints == upstream.endpoints {
        return;
    }
    let mut next: Resolved = (*current).clone();
    next.upstreams[i].endpoints = endpoints;
    let listed: Vec<String> = next.upstreams[i]
        .endpoints
        .iter()
        .map(ToString::to_string)
        .collect();
    let generation = shared.config.publish(next);
    tracing::info!(event = "upstream.resolved", upstream = %answer.upstream, endpoints = %listed.join(","), generation, "endpoint addresses changed; new requests use them");
}

/// Records the resolution of every endpoint name of `cfg` as loaded (at start and at every reload, for
/// the admin API's `GET /upstreams`): its addresses, or why it did not resolve; names no longer in `cfg`
/// are forgotten.
pub fn record_load(shared: &Shared, cfg: &Resolved) {
    let at = std::time::SystemTime::now();
    for (i, u) in cfg.upstreams.iter().enumerate() {
        for (j, text) in names(&u.config.endpoints) {
            let key = format!("upstreams[{i}].endpoints[{j}]");
            let result = match cfg.unresolved.iter().find(|e| e.key == key) {
                Some(e) => Err(e.reason.clone()),
                None => Ok(u
                    .endpoints
                    .iter()
                    .filter(|e| e.spec == j)
                    .map(|e| e.addr)
                    .collect()),
            };
            shared
                .resolutions
                .record(&u.config.name, &text, Resolution { at, result });
        }
    }
    shared.resolutions.retain(|upstream, name| {
        cfg.upstreams.iter().any(|u| {
            u.config.name == upstream && u.config.endpoints.iter().any(|e| e.address() == name)
        })
    });
}

/// `endpoints` with the addresses of entry `spec` replaced by `addrs` (in their place, entry order kept).
fn replaced(
    endpoints: &[ResolvedEndpoint],
    spec: usize,
    addrs: &[SocketAddr],
    weight: u32,
) -> Vec<ResolvedEndpoint> {
    let mut out: Vec<ResolvedEndpoint> = Vec::with_capacity(endpoints.len() + addrs.len());
    let at = endpoints
        .iter()
        .position(|e| e.spec >= spec)
        .unwrap_or(endpoints.len());
    out.extend(endpoints[..at].iter().copied());
    out.extend(addrs.iter().map(|&addr| ResolvedEndpoint {
        addr,
        weight: weight.max(1),
        spec,
    }));
    out.extend(endpoints[at..].iter().filter(|e| e.spec != spec).copied());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str, spec: usize) -> ResolvedEndpoint {
        ResolvedEndpoint {
            addr: addr.parse().unwrap(),
            weight: 1,
            spec,
        }
    }

    #[test]
    fn an_entrys_addresses_are_replaced_in_place() {
        let eps = [
            ep("10.0.0.1:80", 0),
            ep("10.0.0.2:80", 1),
            ep("10.0.0.3:80", 1),
            ep("10.0.0.9:80", 2),
        ];
        let new: Vec<SocketAddr> = vec!["10.0.0.5:80".parse().unwrap()];
        let got = replaced(&eps, 1, &new, 1);
        assert_eq!(
            got,
            [
                ep("10.0.0.1:80", 0),
                ep("10.0.0.5:80", 1),
                ep("10.0.0.9:80", 2)
            ]
        );
        // An entry that had no address yet gets its place by entry order.
        let got = replaced(&[ep("10.0.0.1:80", 0), ep("10.0.0.9:80", 2)], 1, &new, 1);
        assert_eq!(
            got,
            [
                ep("10.0.0.1:80", 0),
                ep("10.0.0.5:80", 1),
                ep("10.0.0.9:80", 2)
            ]
        );
    }

    #[test]
    fn only_names_are_looked_up_again() {
        let specs: Vec<edge_core::config::EndpointSpec> = vec![
            "127.0.0.1:80".into(),
            "app.internal:80".into(),
            "[::1]:80".into(),
        ];
        assert_eq!(names(&specs), [(1, "app.internal:80".to_string())]);
    }
}
