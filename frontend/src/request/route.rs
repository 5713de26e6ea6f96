//! Routing (DESIGN.md "Routing"): the path without its query, byte-wise, is matched against each
//! route's `path_prefix` (plain prefix: `/api` matches `/apix`). Routes whose `host` equals the request's
//! host (case-insensitive, port removed) come first, then routes without a host; the longest prefix wins
//! and on a tie the first in the file.

use edge_core::config::ResolvedRoute;

/// Routes in matching order.
pub struct Router {
    routes: Vec<ResolvedRoute>,
}

impl Router {
    /// Orders routes once: host-specific first, then by prefix length (longest first), file order on ties.
    pub fn new(routes: &[ResolvedRoute]) -> Self {
        let mut routes = routes.to_vec();
        routes.sort_by_key(|r| (r.host.is_none(), std::cmp::Reverse(r.path_prefix.len())));
        Router { routes }
    }

    /// The route for a request target and Host value, or `None` (404).
    pub fn find(&self, target: &[u8], host: Option<&[u8]>) -> Option<&ResolvedRoute> {
        let path = target.split(|&b| b == b'?').next().unwrap_or(target);
        let host = host.map(strip_port);
        self.routes.iter().find(|r| {
            let host_ok = match (&r.host, host) {
                (None, _) => true,
                (Some(want), Some(have)) => want.as_bytes().eq_ignore_ascii_case(have),
                (Some(_), None) => false,
            };
            host_ok && path.starts_with(r.path_prefix.as_bytes())
        })
    }
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`.
fn strip_port(host: &[u8]) -> &[u8] {
    match host.iter().rposition(|&b| b == b':') {
        Some(i) if !host[i..].contains(&b']') => &host[..i],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, host: Option<&str>, upstream: usize) -> ResolvedRoute {
        ResolvedRoute {
            path_prefix: prefix.into(),
            host: host.map(str::to_string),
            upstream,
            request_timeout: None,
            client_request_timeout: None,
        }
    }

    #[test]
    fn host_routes_first_then_longest_prefix_then_file_order() {
        let r = Router::new(&[
            route("/", None, 0),
            route("/api", None, 1),
            route("/api", None, 2),
            route("/", Some("x.example"), 3),
        ]);
        let up = |t: &str, h: Option<&str>| {
            r.find(t.as_bytes(), h.map(str::as_bytes))
                .map(|r| r.upstream)
        };
        assert_eq!(up("/apix?q=1", None), Some(1));
        assert_eq!(up("/ap", None), Some(0));
        assert_eq!(up("/api/v1", Some("X.Example:8080")), Some(3));
        assert_eq!(up("/api/v1", Some("other")), Some(1));
        assert_eq!(up("/?/api", None), Some(0));
    }

    #[test]
    fn no_route_is_none() {
        let r = Router::new(&[route("/only", None, 0)]);
        assert!(r.find(b"/other", None).is_none());
    }

    #[test]
    fn ipv6_host_port() {
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
        assert_eq!(strip_port(b"[::1]"), b"[::1]");
    }
}
