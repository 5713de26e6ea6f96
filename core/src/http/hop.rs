//! Hop-by-hop rules shared by both directions (RFC 9110 §7.6.1, DESIGN.md "HTTP/1.1 rules"): which fields
//! never cross the proxy (Connection and every field it names, Keep-Alive, Proxy-Connection, TE, Trailer,
//! Transfer-Encoding, Upgrade), the Via value edge adds, and the few field writers both the upstream
//! request encoder and the downstream response encoder use.

use super::{
    framing::{connection_has, is_h2c},
    head::{list_elements, Field, FieldKind},
};

/// The Via value edge adds (RFC 9110 §7.6.3).
pub const VIA: &[u8] = b"1.1 edge";

/// Whether field `f` must not be forwarded because it is hop-by-hop or named by Connection. Connection can
/// never remove Host, framing fields or the forwarding fields edge sets.
pub fn is_hop_by_hop(buf: &[u8], fields: &[Field], f: &Field, named: bool) -> bool {
    match f.kind {
        FieldKind::Connection
        | FieldKind::HopByHop
        | FieldKind::Upgrade
        | FieldKind::KeepAlive
        | FieldKind::TransferEncoding => true,
        FieldKind::Other
        | FieldKind::Expect
        | FieldKind::MaxForwards
        | FieldKind::Via
        | FieldKind::RequestId
        | FieldKind::ForwardedOther => named && connection_has(buf, fields, f.name(buf)),
        _ => false,
    }
}

/// Whether any Connection field names something other than close / keep-alive (so per-field checks are
/// needed).
pub fn connection_names_fields(buf: &[u8], fields: &[Field]) -> bool {
    fields
        .iter()
        .filter(|f| f.kind == FieldKind::Connection)
        .flat_map(|f| list_elements(f.value(buf)))
        .any(|t| !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"))
}

/// Writes one `name: value` field line.
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes one `Upgrade` field listing the protocols of every Upgrade field in `fields` (without `h2c`
/// when `strip_h2c`), then `Connection: upgrade` (RFC 9110 §7.8).
pub fn upgrade_fields(out: &mut Vec<u8>, buf: &[u8], fields: &[Field], strip_h2c: bool) {
    out.extend_from_slice(b"Upgrade: ");
    let mut first = true;
    for f in fields.iter().filter(|f| f.kind == FieldKind::Upgrade) {
        for p in list_elements(f.value(buf)).filter(|p| !(strip_h2c && is_h2c(p))) {
            if !first {
                out.extend_from_slice(b", ");
            }
            first = false;
            out.extend_from_slice(p);
        }
    }
    out.extend_from_slice(b"\r\nConnection: upgrade\r\n");
}

/// Writes the end-to-end fields of a head as received (hop-by-hop fields and Content-Length left out:
/// the caller writes the framing it decided).
pub fn end_to_end_fields(out: &mut Vec<u8>, buf: &[u8], fields: &[Field]) {
    let named = connection_names_fields(buf, fields);
    for f in fields {
        if is_hop_by_hop(buf, fields, f, named) || f.kind == FieldKind::ContentLength {
            continue;
        }
        out.extend_from_slice(
            &buf[f.name_start as usize..f.value_start as usize + f.value_len as usize],
        );
        out.extend_from_slice(b"\r\n");
    }
}
