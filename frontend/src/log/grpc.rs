//! The `grpc_status` of a request's access line (DESIGN.md "Observability"): the status of edge's own
//! gRPC answer is noted where it is written; the one an upstream sends, in a trailers-only response head
//! or in the trailers after the messages, is noted by [`note_status`] from that field section.

use edge_core::http::grpc::parse_status;

use super::RequestFacts;

/// Notes in `facts` the `grpc-status` among `fields` (name, value pairs of a response head or a
/// trailer section, names in any case), when the request is a gRPC call and the field holds a number
/// ([`parse_status`]); anything else leaves the noted status as it was. Cheap for a request that is not
/// a gRPC call (one flag test) and allocation-free.
///
/// With an `http::HeaderMap` `map`: `note_status(facts, map.iter().map(|(n, v)| (n.as_str().as_bytes(),
/// v.as_bytes())))`.
pub(crate) fn note_status<'a>(
    facts: &RequestFacts,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    if !facts.grpc {
        return;
    }
    let status = fields
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(b"grpc-status"))
        .and_then(|(_, value)| parse_status(value));
    if status.is_some() {
        facts.grpc_status.set(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_status_is_noted_from_a_field_section_of_a_grpc_call() {
        let mut facts = RequestFacts::default();
        let fields: [(&[u8], &[u8]); 2] = [
            (b"content-type", b"application/grpc"),
            (b"Grpc-Status", b"14"),
        ];
        note_status(&facts, fields);
        assert_eq!(facts.grpc_status.get(), None, "not a gRPC call");
        facts.grpc = true;
        note_status(&facts, fields);
        assert_eq!(facts.grpc_status.get(), Some(14));
        // A section without the field, or with a value that is no number, keeps what was noted.
        note_status(&facts, [(&b"grpc-message"[..], &b"x"[..])]);
        note_status(&facts, [(&b"grpc-status"[..], &b"OK"[..])]);
        assert_eq!(facts.grpc_status.get(), Some(14));
        let map = {
            let mut m = http::HeaderMap::new();
            m.insert("grpc-status", http::HeaderValue::from_static("0"));
            m
        };
        note_status(
            &facts,
            map.iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
        );
        assert_eq!(facts.grpc_status.get(), Some(0));
    }
}
