//! Phase 6 of the request pipeline (DESIGN.md "Request pipeline and traffic rules"): the fields edge adds
//! to a forwarded response head on its way to the client, decided once per request and written by every
//! protocol's session in its own framing (interim, `101` and final heads alike). Today that is Via
//! (DESIGN.md "HTTP/1.1 rules", RFC 9110 §7.6.3: `1.1 edge`, the response having been received over
//! HTTP/1.1); the route's `response_headers` rules join it here. No session adds a field to a forwarded
//! response by itself. (The request direction has its one place too: the upstream request head writer,
//! `edge_upstream::head`.)

use edge_core::http::hop::VIA;

/// edge's Via value as text ([`VIA`]).
const VIA_TEXT: &str = match std::str::from_utf8(VIA) {
    Ok(v) => v,
    Err(_) => panic!("VIA is ASCII"),
};

/// The fields added to one forwarded response's heads. `Copy`, built by admission, handed to the
/// downstream session when it is made.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseFields {
    _built_by_admission: (),
}

impl ResponseFields {
    /// The fields of a forwarded response: Via.
    pub const fn forwarded() -> Self {
        ResponseFields {
            _built_by_admission: (),
        }
    }

    /// Each field to add, as (name in its usual case, value), in order. Static text, so HTTP/2 makes
    /// its header values without allocating.
    pub fn each(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        [("Via", VIA_TEXT)].into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::ResponseFields;

    #[test]
    fn a_forwarded_response_gets_via() {
        let added: Vec<_> = ResponseFields::forwarded().each().collect();
        assert_eq!(added, [("Via", "1.1 edge")]);
    }
}
