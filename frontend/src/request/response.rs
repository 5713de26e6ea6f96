//! Phase 6 of the request pipeline (DESIGN.md "Request pipeline and traffic rules"): the fields edge adds
//! to a forwarded response head on its way to the client, decided once per request and written by every
//! protocol's session in its own framing (interim, `101` and final heads alike): Via (DESIGN.md
//! "HTTP/1.1 rules", RFC 9110 §7.6.3: `1.1 edge`, the response having been received over HTTP/1.1),
//! then X-Request-Id (DESIGN.md "Observability": returned on every response) unless the upstream's
//! response carries its own, which is kept as the one id (never two). The route's `response_headers`
//! rules join them here. No session adds a field to a forwarded response by itself. (The request
//! direction has its one place too: the upstream request head writer, `edge_upstream::head`.) edge's own
//! answers carry X-Request-Id too, written by each session's answer writer.

use edge_core::http::{
    head::{Field, FieldKind},
    hop::VIA,
};

/// The fields added to one forwarded response's heads. `Copy`, built by admission, handed to the
/// downstream session when it is made.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFields<'a> {
    /// The request id (empty: not known, nothing added).
    id: &'a [u8],
}

impl<'a> ResponseFields<'a> {
    /// The fields of a forwarded response with request id `id`: Via and X-Request-Id.
    pub const fn forwarded(id: &'a [u8]) -> Self {
        ResponseFields { id }
    }

    /// Each field to add to a response head whose own fields are `fields`, as (name in its usual case,
    /// value), in order. X-Request-Id is left out when the upstream sent one. Borrowed bytes, so HTTP/2
    /// makes its header values without allocating a copy per field.
    pub fn each(&self, fields: &[Field]) -> impl Iterator<Item = (&'static str, &'a [u8])> {
        let upstream_id = fields.iter().any(|f| f.kind == FieldKind::RequestId);
        let id = (!self.id.is_empty() && !upstream_id).then_some(("X-Request-Id", self.id));
        [("Via", VIA)].into_iter().chain(id)
    }
}

#[cfg(test)]
mod tests {
    use super::ResponseFields;
    use edge_core::http::head::{parse_response, Fields};

    fn added(head: &str) -> Vec<(&'static str, String)> {
        let mut f = Fields::new();
        parse_response(head.as_bytes(), &mut f).unwrap().unwrap();
        ResponseFields::forwarded(b"id-1")
            .each(&f)
            .map(|(n, v)| (n, String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    #[test]
    fn a_forwarded_response_gets_via_and_the_request_id() {
        assert_eq!(
            added("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            [("Via", "1.1 edge".into()), ("X-Request-Id", "id-1".into())]
        );
    }

    #[test]
    fn the_upstreams_request_id_is_kept_alone() {
        assert_eq!(
            added("HTTP/1.1 200 OK\r\nx-request-id: up\r\n\r\n"),
            [("Via", "1.1 edge".into())]
        );
    }
}
