//! Phase 4 of the request pipeline (DESIGN.md "Request pipeline and traffic rules"): the request
//! rewrite plan. The path sent upstream (the normalised path, then the route's `strip_prefix` and
//! `add_prefix`), the route's `host_rewrite`, and its `request_headers` filled for this request; the
//! upstream request head writer (`edge_upstream::head`) applies the plan. Everything is written into
//! one buffer the connection (or the HTTP/2 stream task) keeps: no allocation per request once it has
//! grown.

use edge_core::config::RouteRules;
use edge_core::policy::headers::HeaderRules;

use super::vars::RequestVars;

/// The request rewrite plan: what the upstream request head carries in place of what was received.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rewrite<'a> {
    /// The path to send in place of the received one, when they differ (normalised, or rewritten by
    /// the route); the received query, from its `?`, follows it.
    pub path: Option<&'a [u8]>,
    /// The route's `host_rewrite`.
    pub host: Option<&'a [u8]>,
    /// The route's `request_headers`, when it has any.
    pub rules: Option<&'a HeaderRules>,
    /// Their fields filled for this request, as `Name: value\r\n` lines.
    pub added: &'a [u8],
    /// A `traceparent` edge started or replaced, sent in place of the received trace context
    /// ([`super::trace`]).
    pub traceparent: Option<&'a [u8]>,
    /// The route's `response_headers` fields filled for this request (phase 6), as `Name: value\r\n`
    /// lines, and where they are in the plan's buffer (an HTTP/1.1 connection writes them on an error
    /// answer after the exchange released its borrow of the buffer).
    pub response_lines: &'a [u8],
    /// `response_lines` as a range of the buffer: (start, end).
    pub response_span: (usize, usize),
}

/// Builds the plan in `scratch`, which holds the normalised path when `normalised` (else `path`, the
/// received path without its query, is the base): the rewritten path first, then the filled header
/// lines.
pub fn plan<'a>(
    rules: &'a RouteRules,
    path: &[u8],
    normalised: bool,
    scratch: &'a mut Vec<u8>,
    vars: &RequestVars<'_>,
    traceparent: Option<&'a [u8]>,
) -> Rewrite<'a> {
    if !rules.rewrites() && rules.response_headers.is_empty() {
        return Rewrite {
            path: normalised.then_some(scratch.as_slice()),
            traceparent,
            ..Rewrite::default()
        };
    }
    if !normalised {
        scratch.clear();
        scratch.extend_from_slice(path);
    }
    let mut changed = normalised;
    if let Some(strip) = &rules.strip_prefix {
        changed |= strip_prefix(scratch, strip.as_bytes());
    }
    if let Some(add) = &rules.add_prefix {
        scratch.splice(0..0, add.bytes());
        changed = true;
    }
    let path_end = scratch.len();
    fill_lines(&rules.request_headers, vars, scratch);
    let request_end = scratch.len();
    fill_lines(&rules.response_headers, vars, scratch);
    let (path, rest) = scratch.split_at(path_end);
    let (added, response_lines) = rest.split_at(request_end - path_end);
    Rewrite {
        path: changed.then_some(path),
        host: rules.host_rewrite.as_deref().map(str::as_bytes),
        rules: (!rules.request_headers.is_empty()).then_some(&rules.request_headers),
        added,
        traceparent,
        response_lines,
        response_span: (request_end, request_end + response_lines.len()),
    }
}

/// Appends `rules`' fields filled for this request to `out`, as `Name: value\r\n` lines.
pub fn fill_lines(rules: &HeaderRules, vars: &RequestVars<'_>, out: &mut Vec<u8>) {
    for (name, value) in rules.fields() {
        out.extend_from_slice(name.written.as_bytes());
        out.extend_from_slice(b": ");
        value.fill(vars, out);
        out.extend_from_slice(b"\r\n");
    }
}

/// Removes `prefix` from the front of `path` when it matches whole segments (`/api` strips `/api`
/// and `/api/x`, never `/apix`); an emptied path becomes `/`. Whether it did.
pub fn strip_prefix(path: &mut Vec<u8>, prefix: &[u8]) -> bool {
    let whole = path.starts_with(prefix) && matches!(path.get(prefix.len()), None | Some(b'/'));
    if !whole {
        return false;
    }
    path.drain(..prefix.len());
    if path.is_empty() {
        path.push(b'/');
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_stripped_by_whole_segments() {
        let strip = |p: &str, x: &str| {
            let mut v = p.as_bytes().to_vec();
            let did = strip_prefix(&mut v, x.as_bytes());
            (String::from_utf8(v).unwrap(), did)
        };
        assert_eq!(strip("/api/users", "/api"), ("/users".into(), true));
        assert_eq!(strip("/api", "/api"), ("/".into(), true));
        assert_eq!(strip("/api/", "/api"), ("/".into(), true));
        assert_eq!(strip("/apix", "/api"), ("/apix".into(), false));
        assert_eq!(strip("/other", "/api"), ("/other".into(), false));
    }
}
