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
        | FieldKind::TraceParent
        | FieldKind::TraceState
        | FieldKind::UserAgent
        | FieldKind::Referer
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
    end_to_end_fields_kept(out, buf, fields, |_| true);
}

/// [`end_to_end_fields`], leaving out also the fields whose name `keep` refuses (a route's response
/// rules).
pub fn end_to_end_fields_kept(
    out: &mut Vec<u8>,
    buf: &[u8],
    fields: &[Field],
    keep: impl Fn(&[u8]) -> bool,
) {
    let named = connection_names_fields(buf, fields);
    let mut lines = FieldLines::default();
    for f in fields {
        if is_hop_by_hop(buf, fields, f, named)
            || f.kind == FieldKind::ContentLength
            || !keep(f.name(buf))
        {
            continue;
        }
        lines.push(out, buf, f);
    }
    lines.flush(out, buf);
}

/// Copies field lines as received (`name: value` CRLF), each run of adjacent lines in one copy: a head
/// forwards most of its fields, and one copy per run costs less than two per field.
///
/// Lines are held back until [`FieldLines::flush`], which the caller runs before writing anything else
/// to the same output and once at the end. A value with whitespace after it is written without that
/// whitespace, as httparse trimmed it.
#[derive(Default)]
pub struct FieldLines {
    /// The held-back run: `buf[start..end]`, empty when `start == end`.
    start: usize,
    end: usize,
}

impl FieldLines {
    /// Adds field `f`'s line, parsed from `buf`.
    pub fn push(&mut self, out: &mut Vec<u8>, buf: &[u8], f: &Field) {
        let start = f.name_start as usize;
        let end = f.value_start as usize + f.value_len as usize;
        if buf.get(end..end + 2) != Some(b"\r\n") {
            self.flush(out, buf);
            out.extend_from_slice(&buf[start..end]);
            out.extend_from_slice(b"\r\n");
            return;
        }
        if start != self.end || self.start == self.end {
            self.flush(out, buf);
            self.start = start;
        }
        self.end = end + 2;
    }

    /// Writes the held-back lines.
    pub fn flush(&mut self, out: &mut Vec<u8>, buf: &[u8]) {
        out.extend_from_slice(&buf[self.start..self.end]);
        self.start = self.end;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::http::head::{parse_request, Fields, MAX_FIELDS};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Coalesced copies write the same bytes as copying each kept line on its own (from its name
        /// to the end of its trimmed value, then CRLF), whatever fields are skipped and whatever
        /// whitespace follows a value.
        #[test]
        fn field_lines_write_what_line_by_line_copies_write(
            lines in proptest::collection::vec(
                ("[a-z]{1,6}", "[ -~]{0,8}", prop_oneof![Just(""), Just(" "), Just("\t ")], any::<bool>()),
                0..10,
            ),
        ) {
            let mut wire = b"GET / HTTP/1.1\r\n".to_vec();
            for (name, value, after, _) in &lines {
                wire.extend_from_slice(format!("{name}: {value}{after}\r\n").as_bytes());
            }
            wire.extend_from_slice(b"\r\n");
            let mut fields = Fields::new();
            prop_assert!(parse_request(&wire, MAX_FIELDS, &mut fields).unwrap().is_some());
            let (mut coalesced, mut one_by_one) = (Vec::new(), Vec::new());
            let mut copier = FieldLines::default();
            for (f, (.., keep)) in fields.iter().zip(&lines) {
                if *keep {
                    copier.push(&mut coalesced, &wire, f);
                    let end = f.value_start as usize + f.value_len as usize;
                    one_by_one.extend_from_slice(&wire[f.name_start as usize..end]);
                    one_by_one.extend_from_slice(b"\r\n");
                }
            }
            copier.flush(&mut coalesced, &wire);
            prop_assert_eq!(String::from_utf8_lossy(&coalesced), String::from_utf8_lossy(&one_by_one));
        }
    }
}
