//! Routing (DESIGN.md "Routing", core/src/policy): the first byte picks what the rest is.
//!
//! - Even: a request path through the normaliser: no panic; the fast "already normal" check and the
//!   state machine agree (`normalise` returns the input exactly when the machine writes it back
//!   unchanged); the state machine gives the same answer fed whole, split at a fuzzer-chosen point, and
//!   (short paths) byte by byte; a normal form is normal and normalises to itself without a copy.
//! - Odd: a route set and requests generated from the bytes (hosts with wildcards and ports, segment
//!   prefixes, exact paths, regexes, methods, header and query conditions): the indexed table and the
//!   linear reference matcher pick the same route for every request.
#![no_main]

use edge_core_fuzz::http::head::{parse_request, Fields};
use edge_core_fuzz::policy::{
    path::{is_normal, normalise, BadPath, Normaliser},
    reference::Reference,
    route::{Condition, PathRule, RouteRequest, RouteSpec, RouteTable, Test},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 0 => path(rest),
        Some((_, rest)) => routes(&mut Gen { data: rest, at: 0 }),
        None => {}
    }
});

/// The state machine fed `pieces`.
fn fed(pieces: &[&[u8]]) -> Result<Vec<u8>, BadPath> {
    let mut out = Vec::new();
    let mut n = Normaliser::new(&mut out);
    for p in pieces {
        n.feed(p)?;
    }
    n.finish()?;
    Ok(out)
}

fn path(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut p = b"/".to_vec();
    p.extend_from_slice(rest);
    let mut scratch = Vec::new();
    let result = normalise(&p, &mut scratch).map(|n| (n.to_vec(), std::ptr::eq(n, p.as_slice())));
    let whole = fed(&[&p]);
    assert_eq!(result.as_ref().map(|r| &r.0), whole.as_ref());
    if let Ok((normal, same)) = &result {
        assert_eq!(*same, *normal == p, "the fast check disagrees");
        assert_eq!(is_normal(&p), *same);
        assert!(is_normal(normal));
        let mut again = Vec::new();
        let twice = normalise(normal, &mut again).unwrap();
        assert!(std::ptr::eq(twice, normal.as_slice()));
    }
    let at = usize::from(split).min(p.len());
    assert_eq!(fed(&[&p[..at], &p[at..]]), whole);
    if p.len() <= 256 {
        let bytes: Vec<&[u8]> = p.chunks(1).collect();
        assert_eq!(fed(&bytes), whole);
    }
}

/// Choices drawn from the fuzzer's bytes (zeros once they run out).
struct Gen<'a> {
    data: &'a [u8],
    at: usize,
}

impl Gen<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[usize::from(self.byte()) % from.len()]
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

const SEGMENTS: &[&str] = &["a", "b", "api", "ws", "wsfoo", "", "x%2Fy", "~u", "v1", "A"];

fn path_text(g: &mut Gen<'_>) -> String {
    let n = g.byte() % 4;
    let mut p = String::new();
    for _ in 0..n {
        p.push('/');
        p.push_str(g.pick(SEGMENTS));
    }
    if p.is_empty() || g.byte() % 4 == 0 {
        p.push('/');
    }
    p
}

fn condition(g: &mut Gen<'_>, names: &[&str], values: &[&str]) -> Condition {
    let name = g.pick(names).to_string();
    let test = match g.byte() % 4 {
        0 => Test::Value(g.pick(values).into()),
        1 => Test::Prefix(g.pick(values).into()),
        2 => Test::Present(true),
        _ => Test::Present(false),
    };
    Condition { name, test }
}

fn route(g: &mut Gen<'_>, i: usize) -> RouteSpec {
    let hosts = [
        "-",
        "a.example.com",
        "b.example.com",
        "*.example.com",
        "*.a.example.com",
        "A.Example.COM",
        "[::1]",
    ];
    let host = g.pick(&hosts);
    let path = match g.byte() % 3 {
        0 => PathRule::Prefix(path_text(g)),
        1 => PathRule::Exact(path_text(g)),
        _ => PathRule::Regex(
            g.pick(&["^/a", "^/api/v[0-9]+$", "ws", "^/$", "b/?$", "(?i)^/API", "^/x%2Fy"]).into(),
        ),
    };
    let methods = match g.byte() % 4 {
        0 => vec![],
        1 => vec!["GET".into()],
        2 => vec!["GET".into(), "HEAD".into()],
        _ => vec!["POST".into()],
    };
    let headers = (0..g.byte() % 3)
        .map(|_| condition(g, &["x-a", "X-B"], &["1", "2", "", "ab"]))
        .collect();
    let query = (0..g.byte() % 3)
        .map(|_| condition(g, &["q", "r", "a b"], &["1", "2", "x y", ""]))
        .collect();
    RouteSpec {
        name: (g.byte() % 2 == 0).then(|| format!("r{i}")),
        host: (host != "-").then(|| host.to_string()),
        path,
        methods,
        headers,
        query,
        action: String::new(),
    }
}

fn routes(g: &mut Gen<'_>) {
    let n = 1 + usize::from(g.byte() % 16);
    let specs: Vec<RouteSpec> = (0..n).map(|i| route(g, i)).collect();
    let reference = Reference::new(&specs);
    let table = RouteTable::new(specs.into_iter().enumerate().map(|(i, s)| (s, i)).collect())
        .expect("generated routes compile");
    let _ = (table.listing(), table.warnings());
    for _ in 0..16 {
        if g.done() {
            break;
        }
        request(g, &table, &reference);
    }
}

fn request(g: &mut Gen<'_>, table: &RouteTable<usize>, reference: &Reference) {
    let method = g.pick(&["GET", "HEAD", "POST", "PUT"]);
    let host = g.pick(&[
        "",
        "a.example.com",
        "A.EXAMPLE.COM:80",
        "x.a.example.com",
        "b.example.com",
        "example.com",
        "[::1]:8080",
        "other",
        "a.example.com.",
    ]);
    let query = g.pick(&["", "?q=1", "?q=2&r=x+y", "?a%20b=1", "?q", "?r=%32", "?q=ab&q=1"]);
    let fields = g.pick(&["", "X-A: 1\r\n", "x-a: 2\r\nX-B: abc\r\n", "X-B: 1\r\nX-B: ab\r\n"]);
    let raw = path_text(g);
    let host_line = match host {
        "" => String::new(),
        h => format!("Host: {h}\r\n"),
    };
    let text = format!("{method} {raw}{query} HTTP/1.1\r\n{host_line}{fields}\r\n");
    let mut parsed = Fields::new();
    let Ok(Some(head)) = parse_request(text.as_bytes(), 100, &mut parsed) else {
        return;
    };
    let mut scratch = Vec::new();
    let Ok(path) = normalise(raw.as_bytes(), &mut scratch) else {
        return;
    };
    let buf = text.as_bytes();
    let r = RouteRequest {
        method: &buf[head.method.clone()],
        host: (!host.is_empty()).then_some(host.as_bytes()),
        path,
        query: query.strip_prefix('?').map(str::as_bytes),
        head: buf,
        fields: &parsed,
    };
    assert_eq!(
        table.find_index(&r),
        reference.find(&r),
        "{text:?} normalised to {:?}",
        String::from_utf8_lossy(path)
    );
}
