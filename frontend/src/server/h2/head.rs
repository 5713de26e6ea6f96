//! The response head of one HTTP/2 stream as h2 sends it (DESIGN.md "HTTP/2": responses drop
//! hop-by-hop fields), built from the upstream's HTTP/1.1-syntax head with the fields edge adds; for a
//! WebSocket stream (RFC 8441 §5) the upstream's `101` becomes the stream's `200`.

use bytes::Bytes;
use edge_core::http::{head::Field, hop::is_hop_by_hop};

use crate::request::ResponseFields;

/// The field a WebSocket `101` answers the key with (RFC 6455 §4.2.2); an HTTP/2 stream's `200` has
/// none (RFC 8441 §5).
pub const ACCEPT: &[u8] = b"sec-websocket-accept";

/// The response head as h2 sends it: `status`, the fields that are not hop-by-hop, and the fields
/// edge adds (`added`, the request pipeline's phase 6: Via, X-Request-Id). The head's bytes and the
/// added values are copied once, into one buffer, and every field value is a slice of that copy (no
/// allocation per value; a field name outside the standard ones is still one). `switched`: the head
/// is a WebSocket `101` answered as `200` (RFC 8441 §5), without its Sec-WebSocket-Accept. `None`
/// when the status or a field cannot be an HTTP/2 header (the caller answers 502 or resets).
pub fn response(
    buf: &[u8],
    status: u16,
    fields: &[Field],
    added: &ResponseFields<'_>,
    switched: bool,
) -> Option<http::Response<()>> {
    let mut resp = http::Response::new(());
    *resp.status_mut() = http::StatusCode::from_u16(status).ok()?;
    let kept = |f: &Field| !(switched && f.name(buf).eq_ignore_ascii_case(ACCEPT));
    let end = fields
        .iter()
        .map(|f| (f.value_start + f.value_len) as usize)
        .max()
        .unwrap_or(0);
    let extra: usize = added.each(fields).map(|(_, v)| v.len()).sum();
    let mut copy = Vec::with_capacity(end + extra);
    copy.extend_from_slice(&buf[..end]);
    for (_, v) in added.each(fields) {
        copy.extend_from_slice(v);
    }
    let shared = Bytes::from(copy);
    let map = resp.headers_mut();
    map.reserve(fields.len() + 2); // and what edge adds
    for f in fields
        .iter()
        .filter(|f| !is_hop_by_hop(buf, fields, f, true) && added.keeps(f.name(buf)) && kept(f))
    {
        let name = http::HeaderName::from_bytes(f.name(buf)).ok()?;
        let start = f.value_start as usize;
        let value = shared.slice(start..start + f.value_len as usize);
        map.append(name, http::HeaderValue::from_maybe_shared(value).ok()?);
    }
    let mut at = end;
    for (name, v) in added.each(fields) {
        let name = http::HeaderName::from_bytes(name).ok()?;
        let value = shared.slice(at..at + v.len());
        at += v.len();
        map.append(name, http::HeaderValue::from_maybe_shared(value).ok()?);
    }
    Some(resp)
}
