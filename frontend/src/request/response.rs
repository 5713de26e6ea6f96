//! Phase 6 of the request pipeline (DESIGN.md "Request pipeline and traffic rules"): the fields edge adds
//! to a forwarded response head on its way to the client, decided once per request and written by every
//! protocol's session in its own framing (interim, `101` and final heads alike): Via (DESIGN.md
//! "HTTP/1.1 rules", RFC 9110 §7.6.3: `1.1 edge`, the response having been received over HTTP/1.1),
//! then X-Request-Id (DESIGN.md "Observability": returned on every response) unless the upstream's
//! response carries its own, which is kept as the one id (never two). The route's `response_headers`
//! rules join them here. No session adds a field to a forwarded response by itself. (The request
//! direction has its one place too: the upstream request head writer, `edge_upstream::head`.) edge's own
//! answers carry X-Request-Id too, written by each session's answer writer.

use edge_core::{
    http::{
        head::{Field, FieldKind},
        hop::VIA,
    },
    policy::headers::HeaderRules,
};

/// The fields added to one forwarded response's heads. `Copy`, built by admission, handed to the
/// downstream session when it is made.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFields<'a> {
    /// The request id (empty: not known, nothing added).
    id: &'a [u8],
    /// The route's `response_headers` (`None`: it has none).
    rules: Option<&'a HeaderRules>,
    /// Their fields filled for this request, as `Name: value\r\n` lines.
    lines: &'a [u8],
}

impl<'a> ResponseFields<'a> {
    /// The fields of a forwarded response with request id `id`: Via and X-Request-Id.
    pub const fn forwarded(id: &'a [u8]) -> Self {
        ResponseFields {
            id,
            rules: None,
            lines: b"",
        }
    }

    /// With the route's `response_headers` (`rules`) and their fields filled for this request
    /// (`lines`, `Name: value\r\n` each).
    pub fn with_rules(self, rules: Option<&'a HeaderRules>, lines: &'a [u8]) -> Self {
        ResponseFields {
            rules,
            lines,
            ..self
        }
    }

    /// Whether the response's own field `name` goes to the client (a rule may remove or replace it).
    pub fn keeps(&self, name: &[u8]) -> bool {
        self.rules.is_none_or(|r| !r.drops(name))
    }

    /// The route's filled `response_headers` fields (also written on edge's own answers for the
    /// route), as `Name: value\r\n` lines.
    pub fn rule_lines(&self) -> &'a [u8] {
        self.lines
    }

    /// Each field to add to a response head whose own fields are `fields`, as (name in its usual case,
    /// value), in order: Via, X-Request-Id unless the upstream sent one (or a rule removes or sets it),
    /// then the route's rules. Borrowed bytes, so HTTP/2 makes its header values without allocating a
    /// copy per field.
    pub fn each(&self, fields: &[Field]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        let upstream_id = fields.iter().any(|f| f.kind == FieldKind::RequestId);
        let id = (!self.id.is_empty() && !upstream_id && self.keeps(b"x-request-id"))
            .then_some((&b"X-Request-Id"[..], self.id));
        [(&b"Via"[..], VIA)]
            .into_iter()
            .chain(id)
            .chain(field_lines(self.lines))
    }
}

/// The (name, value) of each `Name: value\r\n` line of `lines`.
pub fn field_lines(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = l.iter().position(|&b| b == b':')?;
            Some((&l[..colon], l[colon + 1..].trim_ascii_start()))
        })
}

#[cfg(test)]
mod tests {
    use super::ResponseFields;
    use edge_core::http::head::{parse_response, Fields};

    fn added(head: &str) -> Vec<(String, String)> {
        let mut f = Fields::new();
        parse_response(head.as_bytes(), &mut f).unwrap().unwrap();
        ResponseFields::forwarded(b"id-1")
            .each(&f)
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn a_forwarded_response_gets_via_and_the_request_id() {
        assert_eq!(
            added("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            [
                ("Via".into(), "1.1 edge".into()),
                ("X-Request-Id".into(), "id-1".into())
            ]
        );
    }

    #[test]
    fn the_upstreams_request_id_is_kept_alone() {
        assert_eq!(
            added("HTTP/1.1 200 OK\r\nx-request-id: up\r\n\r\n"),
            [("Via".into(), "1.1 edge".into())]
        );
    }

    #[test]
    fn route_rules_add_their_lines_and_drop_what_they_replace() {
        use edge_core::policy::headers::{Direction, HeaderRules};
        let rules = HeaderRules::new(
            Direction::Response,
            &["server".into()],
            &[("Strict-Transport-Security".into(), "max-age=1".into())],
            &[],
        )
        .unwrap();
        let lines = b"Strict-Transport-Security: max-age=1\r\n";
        let r = ResponseFields::forwarded(b"id-1").with_rules(Some(&rules), lines);
        assert!(!r.keeps(b"Server") && !r.keeps(b"strict-transport-security") && r.keeps(b"etag"));
        let added: Vec<_> = r.each(&[]).map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(
            added.last().unwrap(),
            &(b"Strict-Transport-Security".to_vec(), b"max-age=1".to_vec())
        );
        assert_eq!(added.len(), 3);
    }
}
