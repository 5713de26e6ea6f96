//! Routing a request (DESIGN.md "Routing"), the same for HTTP/1.1 and HTTP/2: the target's path is
//! normalised (RFC 3986 §6.2.2, [`edge_core::policy::path`]) into the caller's reusable buffer, then the
//! worker's copy of the compiled route table ([`edge_core::config::Routes`], built at load) picks the
//! route from the method, host, normalised path, query and header fields. The normalised path is also what
//! goes upstream ([`Routed::rewritten`]).

use edge_core::{
    config::{ResolvedRoute, Routes},
    http::head::Field,
    policy::{
        path::{normalise, BadPath},
        route::RouteRequest,
    },
};

/// A request as routing sees it.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The method token.
    pub method: &'a [u8],
    /// The Host field or `:authority` (an absolute-form target's authority), as received.
    pub host: Option<&'a [u8]>,
    /// The origin-form target: path and query (`RequestHead::path`).
    pub target: &'a [u8],
    /// The head buffer `fields` point into.
    pub head: &'a [u8],
    /// The header fields.
    pub fields: &'a [Field],
}

/// What routing found.
#[derive(Clone, Copy, Debug)]
pub struct Routed<'r> {
    /// The route; `None`: no route (404).
    pub route: Option<&'r ResolvedRoute>,
    /// The normalised path differs from the received one: it is in the caller's buffer and is sent
    /// upstream in place of the received path, followed by the received query.
    pub rewritten: bool,
}

/// Normalises the path of `t.target` (into `scratch` only when it is not already normal: no copy, and
/// no allocation once `scratch` has grown) and finds its route in `routes`.
///
/// # Errors
/// [`BadPath`] (400 `bad_path`): a `..` above the root, an encoded NUL, or an invalid percent-encoding.
pub fn find<'r>(
    routes: &'r Routes,
    t: &Target<'_>,
    scratch: &mut Vec<u8>,
) -> Result<Routed<'r>, BadPath> {
    let (path, query) = match t.target.iter().position(|&b| b == b'?') {
        Some(q) => (&t.target[..q], Some(&t.target[q + 1..])),
        None => (t.target, None),
    };
    let normal = normalise(path, scratch)?;
    let rewritten = !std::ptr::eq(normal, path);
    let route = routes.find(&RouteRequest {
        method: t.method,
        host: t.host,
        path: normal,
        query,
        head: t.head,
        fields: t.fields,
    });
    Ok(Routed { route, rewritten })
}

/// Logs `config.route_never_matches` at warn for each route of `cfg` that can never match (at start
/// and at every reload; `edge --check` prints the same lines).
pub fn log_warnings(cfg: &edge_core::config::Resolved) {
    for w in cfg.routes.warnings() {
        tracing::warn!(event = "config.route_never_matches", "{w}");
    }
    // Not about routes, but logged at the same moments: the endpoint names that did not resolve.
    for e in &cfg.unresolved {
        tracing::warn!(event = "upstream.resolve_failed", file = %e.file, key = %e.key, reason = %e.reason, "starting without this endpoint; resolving it again every 5 s until it resolves");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_core::config::{Config, DEFAULT_CONFIG};

    fn routes(extra: &str) -> Routes {
        let text = format!("{DEFAULT_CONFIG}\n{extra}");
        Config::parse(&text, "t")
            .unwrap()
            .resolve("t")
            .unwrap()
            .routes
    }

    fn route(
        routes: &Routes,
        target: &str,
        scratch: &mut Vec<u8>,
    ) -> Result<(usize, bool), BadPath> {
        let t = Target {
            method: b"GET",
            host: Some(b"x"),
            target: target.as_bytes(),
            head: b"",
            fields: &[],
        };
        find(routes, &t, scratch).map(|r| (r.route.map_or(usize::MAX, |r| r.index), r.rewritten))
    }

    #[test]
    fn the_normalised_path_is_routed_and_flagged_when_rewritten() {
        let r = routes("[[routes]]\npath_prefix = \"/v2\"\nupstream = \"origin\"\n");
        let mut scratch = Vec::new();
        assert_eq!(route(&r, "/v2/a?x=/..", &mut scratch), Ok((1, false)));
        assert_eq!(route(&r, "/x/../v2/a?q", &mut scratch), Ok((1, true)));
        assert_eq!(scratch, b"/v2/a");
        assert_eq!(route(&r, "/v2foo", &mut scratch), Ok((0, false)));
        assert_eq!(route(&r, "?q", &mut scratch), Ok((0, true)));
        assert_eq!(scratch, b"/");
        assert_eq!(route(&r, "/../etc", &mut scratch), Err(BadPath));
        assert_eq!(route(&r, "/a%00", &mut scratch), Err(BadPath));
    }
}
