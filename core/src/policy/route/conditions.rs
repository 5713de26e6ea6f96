//! A route's conditions besides its path (DESIGN.md "Routing", "Configuration" `[[routes]]`): `methods`
//! (the method is one of them, case-sensitive), `headers` (field names case-insensitive, values compared
//! byte for byte as received, after the parser's trimming) and `query` (on percent-decoded parameters).
//! All must hold. Evaluated without allocating: query parameters are compared while they are decoded.
//!
//! Query parameters are the `&`-separated pieces of the query; a piece's name ends at its first `=` (a
//! piece without `=` is a name with an empty value). Names and values are decoded as HTML forms and
//! `URLSearchParams` do (WHATWG URL "application/x-www-form-urlencoded"): `+` is a space, `%XX` is that
//! byte, and a `%` not followed by two hex digits stays a `%`.

use super::{super::path::hex, RouteRequest};

/// A route's compiled conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Conditions {
    /// Allowed methods; empty: any.
    pub(super) methods: Vec<Box<[u8]>>,
    /// Header conditions (names lower-cased).
    pub(super) headers: Vec<FieldTest>,
    /// Query conditions (names as written).
    pub(super) query: Vec<FieldTest>,
}

/// One `headers` or `query` entry, compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FieldTest {
    pub(super) name: Box<[u8]>,
    pub(super) test: ValueTest,
}

/// What must hold of the named field or parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ValueTest {
    Value(Box<[u8]>),
    Prefix(Box<[u8]>),
    Present(bool),
}

impl ValueTest {
    /// The verdict over the values of every occurrence of the name: `Value` and `Prefix` hold when one
    /// occurrence passes `passes`, `Present` by whether there is any.
    fn over<V>(
        &self,
        mut values: impl Iterator<Item = V>,
        passes: impl Fn(&V, &[u8], bool) -> bool,
    ) -> bool {
        match self {
            ValueTest::Present(want) => values.next().is_some() == *want,
            ValueTest::Value(v) => values.any(|x| passes(&x, v, true)),
            ValueTest::Prefix(p) => values.any(|x| passes(&x, p, false)),
        }
    }
}

impl Conditions {
    /// How many conditions there are, for precedence: a `methods` list counts as one.
    pub(super) fn count(&self) -> usize {
        usize::from(!self.methods.is_empty()) + self.headers.len() + self.query.len()
    }

    /// Whether every condition holds for `r`.
    pub(super) fn hold(&self, r: &RouteRequest<'_>) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| **m == *r.method))
            && self.headers.iter().all(|t| header_holds(t, r))
            && self
                .query
                .iter()
                .all(|t| query_holds(t, r.query.unwrap_or_default()))
    }

    /// Whether every request these conditions admit is admitted by `other` too (a sound, partial
    /// check: `false` may just mean "cannot tell"). Used to find shadowed routes.
    pub(super) fn imply(&self, other: &Conditions) -> bool {
        let methods = other.methods.is_empty()
            || (!self.methods.is_empty() && self.methods.iter().all(|m| other.methods.contains(m)));
        methods
            && other.headers.iter().all(|t| implied(&self.headers, t))
            && other.query.iter().all(|t| implied(&self.query, t))
    }
}

/// Whether one of `tests` (all of which hold) makes `t` hold.
fn implied(tests: &[FieldTest], t: &FieldTest) -> bool {
    tests
        .iter()
        .filter(|s| s.name == t.name)
        .any(|s| match (&s.test, &t.test) {
            (ValueTest::Present(a), ValueTest::Present(b)) => a == b,
            (ValueTest::Value(_) | ValueTest::Prefix(_), ValueTest::Present(true)) => true,
            (ValueTest::Value(a), ValueTest::Value(b)) => a == b,
            (ValueTest::Value(a) | ValueTest::Prefix(a), ValueTest::Prefix(b)) => a.starts_with(b),
            _ => false,
        })
}

fn header_holds(t: &FieldTest, r: &RouteRequest<'_>) -> bool {
    let values = r
        .fields
        .iter()
        .filter(|f| f.name(r.head).eq_ignore_ascii_case(&t.name))
        .map(|f| f.value(r.head));
    t.test.over(values, |v, want, whole| match whole {
        true => *v == want,
        false => v.starts_with(want),
    })
}

fn query_holds(t: &FieldTest, query: &[u8]) -> bool {
    let values = query
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.iter().position(|&b| b == b'=') {
            Some(i) => (&p[..i], &p[i + 1..]),
            None => (p, &p[p.len()..]),
        })
        .filter(|(name, _)| decoded_eq(name, &t.name))
        .map(|(_, value)| value);
    t.test.over(values, |raw, want, whole| match whole {
        true => decoded_eq(raw, want),
        false => decoded_starts_with(raw, want),
    })
}

/// The bytes of a query name or value as decoded (see the module rules).
pub(super) fn decoded(raw: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let b = *raw.get(i)?;
        i += 1;
        Some(match b {
            b'+' => b' ',
            b'%' => match (
                raw.get(i).and_then(|&h| hex(h)),
                raw.get(i + 1).and_then(|&l| hex(l)),
            ) {
                (Some(h), Some(l)) => {
                    i += 2;
                    (h << 4) | l
                }
                _ => b'%',
            },
            b => b,
        })
    })
}

/// Whether `raw` decodes to exactly `want`.
pub(super) fn decoded_eq(raw: &[u8], want: &[u8]) -> bool {
    let mut d = decoded(raw);
    want.iter().all(|&w| d.next() == Some(w)) && d.next().is_none()
}

/// Whether `raw` decodes to something starting with `want`.
pub(super) fn decoded_starts_with(raw: &[u8], want: &[u8]) -> bool {
    let mut d = decoded(raw);
    want.iter().all(|&w| d.next() == Some(w))
}
