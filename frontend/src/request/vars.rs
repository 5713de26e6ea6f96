//! The request's side of the route rules' variables (`${client_ip}`, `${host}`, `${path}`,
//! `${query}`, `${scheme}`, `${request_id}`, `${header:NAME}`, [`edge_core::policy::template`]):
//! each is read from the received head when a rule's value is filled, nothing copied beforehand.

use std::net::SocketAddr;

use edge_core::{
    http::{
        head::{first_value, Field},
        write::push_ip,
    },
    policy::template::{Var, Vars},
};

/// One request's variables.
pub struct RequestVars<'a> {
    /// The client (the PROXY-protocol source when one was received).
    pub peer: SocketAddr,
    /// Host or `:authority` as received.
    pub host: Option<&'a [u8]>,
    /// The origin-form target as received: path, then `?` and the query when there is one.
    pub target: &'a [u8],
    /// The client spoke TLS to edge.
    pub https: bool,
    /// The request id.
    pub id: &'a [u8],
    /// The head the fields index into.
    pub buf: &'a [u8],
    /// The received fields.
    pub fields: &'a [Field],
}

impl Vars for RequestVars<'_> {
    fn write(&self, var: &Var, out: &mut Vec<u8>) {
        let query_at = self.target.iter().position(|&b| b == b'?');
        match var {
            Var::ClientIp => push_ip(out, self.peer.ip()),
            Var::Host => out.extend_from_slice(self.host.unwrap_or_default()),
            Var::Path => {
                out.extend_from_slice(&self.target[..query_at.unwrap_or(self.target.len())])
            }
            Var::Query => out.extend_from_slice(query_at.map_or(&[][..], |q| &self.target[q..])),
            Var::Scheme => out.extend_from_slice(if self.https { b"https" } else { b"http" }),
            Var::RequestId => out.extend_from_slice(self.id),
            Var::Header(name) => {
                out.extend_from_slice(first_value(self.buf, self.fields, name).unwrap_or_default())
            }
        }
    }
}

/// The request's key for `balance = "hash"` (DESIGN.md "Upstream health, discovery and balancing"),
/// hashed the same way on every worker (SipHash with fixed keys), so one key goes to one endpoint
/// whichever core serves it; `None` when the request has no such key (the header or cookie is
/// absent).
pub fn hash_key(key: &edge_core::config::HashKey, v: &RequestVars<'_>) -> Option<u64> {
    use edge_core::config::HashKey;
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    match key {
        HashKey::ClientIp => v.peer.ip().to_canonical().hash(&mut h),
        HashKey::Path => {
            let end = v
                .target
                .iter()
                .position(|&b| b == b'?')
                .unwrap_or(v.target.len());
            h.write(&v.target[..end]);
        }
        HashKey::Header(name) => h.write(first_value(v.buf, v.fields, name.as_bytes())?),
        HashKey::Cookie(name) => h.write(cookie(v, name.as_bytes())?),
    }
    Some(h.finish())
}

/// The value of cookie `name` in the Cookie fields (RFC 6265 §4.2.1: `name=value` pairs separated
/// by `; `).
fn cookie<'a>(v: &RequestVars<'a>, name: &[u8]) -> Option<&'a [u8]> {
    v.fields
        .iter()
        .filter(|f| f.name(v.buf).eq_ignore_ascii_case(b"cookie"))
        .flat_map(|f| f.value(v.buf).split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|&b| b == b'=')?;
            (&pair[..eq] == name).then(|| &pair[eq + 1..])
        })
}
