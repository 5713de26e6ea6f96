//! Values with variables (DESIGN.md "Configuration", `[[routes]]`: `redirect`, `respond`,
//! `request_headers`, `response_headers`): `${client_ip}`, `${host}`, `${path}`, `${query}`,
//! `${scheme}`, `${request_id}`, `${header:NAME}`, parsed at load into text and variable pieces
//! ([`Template::parse`]), and filled per request by appending to the caller's buffer
//! ([`Template::fill`]), so a buffer reused across requests allocates nothing once it has grown.
//!
//! Syntax: `${name}` is a variable; `$$` is one `$`; a `$` not followed by `{` or `$` is itself. Text
//! may not hold CR, LF or NUL (a value could otherwise end a header line); the variables' values come
//! from a parsed request, which holds none of them either. What each variable is:
//! - `client_ip`: the client's address without port (the PROXY-protocol source when one was received);
//! - `host`: the request's host (Host or `:authority`) as received, port included;
//! - `path`: the path as received, without the query; `query`: `?` and the query when the request has
//!   one, else nothing (so `${path}${query}` is the request target);
//! - `scheme`: `http` or `https`, as the client spoke to edge;
//! - `request_id`: the request's id (the `X-Request-Id` edge sends upstream);
//! - `header:NAME`: the first field named NAME (case-insensitive), empty when absent.

/// A variable of a [`Template`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    /// `${client_ip}`
    ClientIp,
    /// `${host}`
    Host,
    /// `${path}`
    Path,
    /// `${query}`
    Query,
    /// `${scheme}`
    Scheme,
    /// `${request_id}`
    RequestId,
    /// `${header:NAME}`, the name in lower case.
    Header(Box<[u8]>),
}

/// The request's side of [`Template::fill`]: appends one variable's value to `out`.
pub trait Vars {
    /// Appends the value of `var` for this request to `out` (nothing when it has none).
    fn write(&self, var: &Var, out: &mut Vec<u8>);
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Box<[u8]>),
    Var(Var),
}

/// A parsed value with variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pieces: Box<[Piece]>,
}

/// The variable names [`Template::parse`] knows, for its error text.
const KNOWN: &str =
    "${client_ip}, ${host}, ${path}, ${query}, ${scheme}, ${request_id}, ${header:NAME}";

impl Template {
    /// Parses `s` (see the module docs for the syntax).
    ///
    /// # Errors
    /// A reason, for a config error naming the key: an unknown or unterminated variable, a header name
    /// that is not a token (RFC 9110 §5.1), CR, LF or NUL in the text.
    pub fn parse(s: &str) -> Result<Template, String> {
        if let Some(c) = s.bytes().find(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(format!("holds the control character {:?}", char::from(c)));
        }
        Template::parse_body(s)
    }

    /// Parses a body (`respond.body`): like [`Template::parse`], with line breaks allowed.
    ///
    /// # Errors
    /// As [`Template::parse`], but for CR and LF.
    pub fn parse_body(s: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut text = Vec::new();
        let mut rest = s.as_bytes();
        while let Some(at) = rest.iter().position(|&b| b == b'$') {
            text.extend_from_slice(&rest[..at]);
            rest = &rest[at..];
            match rest.get(1) {
                Some(b'$') => {
                    text.push(b'$');
                    rest = &rest[2..];
                }
                Some(b'{') => {
                    let end = rest.iter().position(|&b| b == b'}').ok_or_else(|| {
                        format!("`{}` has no closing `}}`", String::from_utf8_lossy(rest))
                    })?;
                    let var = variable(&rest[2..end])?;
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text).into()));
                    }
                    pieces.push(Piece::Var(var));
                    rest = &rest[end + 1..];
                }
                _ => {
                    text.push(b'$');
                    rest = &rest[1..];
                }
            }
        }
        text.extend_from_slice(rest);
        if !text.is_empty() {
            pieces.push(Piece::Text(text.into()));
        }
        Ok(Template {
            pieces: pieces.into(),
        })
    }

    /// The value when it has no variable (so it can be written as is, e.g. as a static header value).
    pub fn literal(&self) -> Option<&[u8]> {
        match &*self.pieces {
            [] => Some(b""),
            [Piece::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// The variables it uses, in order.
    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Var(v) => Some(v),
            Piece::Text(_) => None,
        })
    }

    /// Appends the value for one request to `out`.
    pub fn fill(&self, vars: &impl Vars, out: &mut Vec<u8>) {
        for p in self.pieces.iter() {
            match p {
                Piece::Text(t) => out.extend_from_slice(t),
                Piece::Var(v) => vars.write(v, out),
            }
        }
    }
}

/// The variable named by the text between `${` and `}`.
fn variable(name: &[u8]) -> Result<Var, String> {
    Ok(match name {
        b"client_ip" => Var::ClientIp,
        b"host" => Var::Host,
        b"path" => Var::Path,
        b"query" => Var::Query,
        b"scheme" => Var::Scheme,
        b"request_id" => Var::RequestId,
        _ => match name.strip_prefix(b"header:") {
            Some(field) if !field.is_empty() && field.iter().all(|&b| is_tchar(b)) => {
                Var::Header(field.to_ascii_lowercase().into())
            }
            Some(_) => {
                return Err(format!(
                    "`${{{}}}`: a header name is a token (letters, digits, and !#$%&'*+-.^_`|~)",
                    String::from_utf8_lossy(name)
                ))
            }
            None => {
                return Err(format!(
                    "unknown variable `${{{}}}` (known: {KNOWN})",
                    String::from_utf8_lossy(name)
                ))
            }
        },
    })
}

/// RFC 9110 §5.6.2 `tchar`.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Req;

    impl Vars for Req {
        fn write(&self, var: &Var, out: &mut Vec<u8>) {
            out.extend_from_slice(match var {
                Var::ClientIp => b"10.0.0.7".as_slice(),
                Var::Host => b"example.com",
                Var::Path => b"/old/a",
                Var::Query => b"?x=1",
                Var::Scheme => b"https",
                Var::RequestId => b"r-1",
                Var::Header(n) if &**n == b"x-user" => b"alice",
                Var::Header(_) => b"",
            })
        }
    }

    fn filled(s: &str) -> String {
        let mut out = b"prefix:".to_vec();
        Template::parse(s).unwrap().fill(&Req, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_variable_is_filled_and_text_kept() {
        assert_eq!(
            filled(
                "${scheme}://${host}${path}${query} ${client_ip} ${request_id} ${header:X-User}"
            ),
            "prefix:https://example.com/old/a?x=1 10.0.0.7 r-1 alice"
        );
        assert_eq!(filled("${header:x-absent}!"), "prefix:!");
        assert_eq!(filled("cost $5, $${path}"), "prefix:cost $5, ${path}");
    }

    #[test]
    fn a_value_without_variables_is_a_literal() {
        let t = Template::parse("max-age=31536000").unwrap();
        assert_eq!(t.literal(), Some(b"max-age=31536000".as_slice()));
        assert_eq!(Template::parse("").unwrap().literal(), Some(b"".as_slice()));
        assert_eq!(
            Template::parse("a$$b").unwrap().literal(),
            Some(b"a$b".as_slice())
        );
        let t = Template::parse("/new${path}").unwrap();
        assert_eq!(t.literal(), None);
        assert_eq!(t.vars().collect::<Vec<_>>(), [&Var::Path]);
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let err = |s| Template::parse(s).unwrap_err();
        assert!(err("${pth}").contains("unknown variable `${pth}`"));
        assert!(err("${path").contains("no closing"));
        assert!(err("${header:}").contains("token"));
        assert!(err("${header:a b}").contains("token"));
        assert!(err("a\r\nInjected: 1").contains("control character"));
    }
}
