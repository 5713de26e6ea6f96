//! A route's header rules (DESIGN.md "Request pipeline and traffic rules", phases 4 and 6):
//! `request_headers` on the head sent upstream, `response_headers` on the head sent to the client
//! (forwarded responses and edge's own answers for the route alike). Three operations, applied in this
//! order: `remove` drops every field of a name; `set` replaces every field of a name with one (added
//! when absent); `add` appends one field, keeping any already there. Values are [`Template`]s.
//!
//! Refused at load, with the reason (RFC 9110 §7.6.1, DESIGN.md): hop-by-hop fields (Connection,
//! Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade) and framing fields
//! (Content-Length), which belong to each connection and which edge writes itself; pseudo-header names
//! (`:path`); Host in `request_headers` (that is `host_rewrite`); a name that is not a token; one name
//! under two operations.

use super::template::{is_tchar, Template};

/// Which head a rule set applies to; the fields each may not touch differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `request_headers`: the request head sent upstream.
    Request,
    /// `response_headers`: the response head sent to the client.
    Response,
}

/// A field name as configured, with its lower-case form for comparisons and HTTP/2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name {
    /// As written in the configuration (HTTP/1.1 heads use it).
    pub written: Box<str>,
    /// Lower case (HTTP/2 heads use it; comparisons are case-insensitive).
    pub lower: Box<str>,
}

impl Name {
    /// Whether `name` (any case) is this name.
    pub fn is(&self, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(self.lower.as_bytes())
    }
}

/// One direction's rules, compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderRules {
    remove: Box<[Name]>,
    set: Box<[(Name, Template)]>,
    add: Box<[(Name, Template)]>,
}

/// A rule refused at load: the operation's key (`set`, `add`, `remove`), the field name and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// `set`, `add` or `remove`.
    pub key: &'static str,
    /// The field name as configured.
    pub name: String,
    /// Why it is refused.
    pub reason: String,
}

impl HeaderRules {
    /// Compiles one direction's `remove`, `set` and `add` (name, value) lists.
    ///
    /// # Errors
    /// The first refused rule (see the module docs).
    pub fn new(
        direction: Direction,
        remove: &[String],
        set: &[(String, String)],
        add: &[(String, String)],
    ) -> Result<HeaderRules, RuleError> {
        let mut seen: Vec<(&'static str, String)> = Vec::new();
        let mut name = |key: &'static str, written: &str| -> Result<Name, RuleError> {
            let refuse = |reason: String| RuleError {
                key,
                name: written.to_string(),
                reason,
            };
            refused(direction, written).map_or(Ok(()), |r| Err(refuse(r.to_string())))?;
            let lower = written.to_ascii_lowercase();
            if let Some((other, _)) = seen
                .iter()
                .find(|(k, n)| *n == lower && (*k != key || key != "add"))
            {
                return Err(refuse(match *other == key {
                    true => format!("is listed twice under `{key}`"),
                    false => format!("is also under `{other}`: one operation per field"),
                }));
            }
            seen.push((key, lower.clone()));
            Ok(Name {
                written: written.into(),
                lower: lower.into(),
            })
        };
        let remove = remove
            .iter()
            .map(|n| name("remove", n))
            .collect::<Result<_, _>>()?;
        let mut valued = |key, list: &[(String, String)]| {
            list.iter()
                .map(|(n, v)| {
                    let name = name(key, n)?;
                    let value = Template::parse(v).map_err(|reason| RuleError {
                        key,
                        name: n.clone(),
                        reason: format!("value: {reason}"),
                    })?;
                    Ok((name, value))
                })
                .collect::<Result<Box<[_]>, RuleError>>()
        };
        let set = valued("set", set)?;
        let add = valued("add", add)?;
        Ok(HeaderRules { remove, set, add })
    }

    /// Whether there are no rules (the head is written as without them).
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Whether a received field named `name` is left out of the head: `remove`d or replaced by `set`.
    pub fn drops(&self, name: &[u8]) -> bool {
        self.remove.iter().any(|n| n.is(name)) || self.set.iter().any(|(n, _)| n.is(name))
    }

    /// The fields to write: `set`'s, then `add`'s, in configuration order.
    pub fn fields(&self) -> impl Iterator<Item = &(Name, Template)> {
        self.set.iter().chain(self.add.iter())
    }
}

/// Why `name` may not be in a `direction` rule, if it may not.
fn refused(direction: Direction, name: &str) -> Option<&'static str> {
    if name.starts_with(':') {
        return Some("a pseudo-header is not a field a rule can change");
    }
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Some("a field name is a token (letters, digits, and !#$%&'*+-.^_`|~)");
    }
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "connection" | "keep-alive" | "proxy-connection" | "te" | "trailer"
        | "transfer-encoding" | "upgrade" => {
            Some("hop-by-hop: it describes one connection, which edge manages (RFC 9110 §7.6.1)")
        }
        "content-length" => Some("framing: edge writes it from the body it sends"),
        "host" if direction == Direction::Request => Some("use `host_rewrite` to change the Host"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rules_drop_replace_and_add() {
        let r = HeaderRules::new(
            Direction::Response,
            &["Server".into()],
            &pairs(&[("Strict-Transport-Security", "max-age=31536000")]),
            &pairs(&[("X-Edge", "1"), ("x-edge", "2")]),
        )
        .unwrap();
        assert!(r.drops(b"server") && r.drops(b"STRICT-transport-security"));
        assert!(!r.drops(b"x-edge"), "add keeps what is there");
        let written: Vec<_> = r
            .fields()
            .map(|(n, v)| (&*n.written, &*n.lower, v.literal().unwrap()))
            .collect();
        assert_eq!(
            written,
            [
                (
                    "Strict-Transport-Security",
                    "strict-transport-security",
                    b"max-age=31536000".as_slice()
                ),
                ("X-Edge", "x-edge", b"1"),
                ("x-edge", "x-edge", b"2"),
            ]
        );
        assert!(HeaderRules::default().is_empty() && !r.is_empty());
    }

    #[test]
    fn fields_edge_owns_are_refused_with_the_key_and_reason() {
        let err = |d, remove: &[&str], set: &[(&str, &str)]| {
            let remove: Vec<String> = remove.iter().map(|s| s.to_string()).collect();
            HeaderRules::new(d, &remove, &pairs(set), &[]).unwrap_err()
        };
        let e = err(Direction::Request, &[], &[("Transfer-Encoding", "chunked")]);
        assert_eq!((e.key, e.name.as_str()), ("set", "Transfer-Encoding"));
        assert!(e.reason.contains("hop-by-hop"), "{e:?}");
        for name in [
            "Connection",
            "keep-alive",
            "TE",
            "Trailer",
            "Upgrade",
            "Proxy-Connection",
        ] {
            assert!(err(Direction::Response, &[name], &[])
                .reason
                .contains("hop-by-hop"));
        }
        assert!(err(Direction::Response, &["Content-Length"], &[])
            .reason
            .contains("framing"));
        assert!(err(Direction::Request, &[], &[("Host", "x")])
            .reason
            .contains("host_rewrite"));
        assert!(HeaderRules::new(Direction::Response, &[], &pairs(&[("Host", "x")]), &[]).is_ok());
        assert!(err(Direction::Request, &[":path"], &[])
            .reason
            .contains("pseudo-header"));
        assert!(err(Direction::Request, &["bad name"], &[])
            .reason
            .contains("token"));
        let e = err(Direction::Request, &["x-a"], &[("X-A", "1")]);
        assert!(e.reason.contains("also under `remove`"), "{e:?}");
        let e = err(Direction::Request, &[], &[("x-a", "1"), ("x-a", "2")]);
        assert!(e.reason.contains("twice"), "{e:?}");
        let e = err(Direction::Request, &[], &[("x-a", "${nope}")]);
        assert!(e.reason.starts_with("value: unknown variable"), "{e:?}");
    }
}
