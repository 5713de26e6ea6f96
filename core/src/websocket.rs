//! The WebSocket opening handshake's key and accept (RFC 6455 §4.1, §4.2.2), for WebSocket over HTTP/2
//! (RFC 8441, DESIGN.md "HTTP/2 and gRPC upstreams"). An extended CONNECT stream carries no
//! Sec-WebSocket-Key (RFC 8441 §5), so edge makes one ([`new_key`]) for the `GET` + `Upgrade: websocket`
//! it sends an HTTP/1.1 upstream, and checks the upstream's `Sec-WebSocket-Accept` against it
//! ([`accepts`]). Sans-IO, but for the kernel's random bytes in [`new_key`].
//!
//! # An HTTP/2 upstream's extended CONNECT (`edge_upstream::h2`)
//! An HTTP/2 upstream (RFC 8441 on both sides) maps the other way, inside its upstream session and
//! nowhere else (the orchestrator, the tunnel and the downstream sessions stay as they are):
//! - `send_head`: a forwarded head for which [`upgrade_key`] finds a key is sent as `:method CONNECT`,
//!   `:protocol websocket`, `:scheme`, `:path`, `:authority` (the key, Upgrade and Connection left out;
//!   the other fields as for any request), without END_STREAM; an upstream whose SETTINGS do not allow
//!   extended CONNECT (RFC 8441 §3) answers that attempt as 502 `bad_response`;
//! - `read_head`: a 2xx to it is written into the received bytes as [`write_switch_head`] of that key
//!   followed by the 2xx's fields and the empty line, so the orchestrator's `101` path
//!   (`frontend/src/proxy/tunnel.rs`) and its accept check see the same answer from either kind of
//!   upstream; any other status is an ordinary response;
//! - `into_tunnel`: the stream's `RecvStream` and `SendStream` as the tunnel's owned-buffer reader and
//!   writer (as `frontend/src/server/h2/tunnel.rs` wraps the downstream stream's), its `shutdown`
//!   sending END_STREAM, and a drop resetting the stream (RST_STREAM CANCEL).

use base64::{engine::general_purpose::STANDARD, Engine as _};

use crate::http::head::{list_elements, Field, FieldKind};

/// Length of a Sec-WebSocket-Key value: 16 bytes in base64 (RFC 6455 §4.1), bytes.
pub const KEY_LEN: usize = 24;

/// Length of a Sec-WebSocket-Accept value: a SHA-1 digest in base64 (RFC 6455 §4.2.2), bytes.
pub const ACCEPT_LEN: usize = 28;

/// The GUID RFC 6455 §1.3 appends to the key before hashing.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A fresh Sec-WebSocket-Key: 16 random bytes from the kernel (`getrandom(2)`), in base64. One system
/// call per WebSocket stream; the key is a nonce against confused caches (RFC 6455 §10.3), not a
/// secret, so should the call fail the bytes come from the clock and a per-thread counter instead.
pub fn new_key() -> [u8; KEY_LEN] {
    let mut nonce = [0u8; 16];
    // SAFETY: `nonce` is a valid, writable 16-byte buffer for the whole call.
    let n = unsafe { libc::getrandom(nonce.as_mut_ptr().cast(), nonce.len(), 0) };
    if n != nonce.len() as isize {
        nonce = fallback_nonce();
    }
    key_from(nonce)
}

/// The Sec-WebSocket-Key of `nonce`.
pub fn key_from(nonce: [u8; 16]) -> [u8; KEY_LEN] {
    let mut out = [0u8; KEY_LEN];
    let n = STANDARD
        .encode_slice(nonce, &mut out)
        .expect("16 bytes encode to 24");
    debug_assert_eq!(n, KEY_LEN);
    out
}

/// The Sec-WebSocket-Accept a server answers to `key` (RFC 6455 §4.2.2 step 5.4): base64 of the SHA-1
/// of the key followed by the GUID.
pub fn accept(key: &[u8]) -> [u8; ACCEPT_LEN] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key);
    ctx.update(GUID);
    let digest = ctx.finish();
    let mut out = [0u8; ACCEPT_LEN];
    let n = STANDARD
        .encode_slice(digest.as_ref(), &mut out)
        .expect("20 bytes encode to 28");
    debug_assert_eq!(n, ACCEPT_LEN);
    out
}

/// Whether `value`, a `101`'s Sec-WebSocket-Accept, answers `key` (RFC 6455 §4.1: the client fails the
/// connection otherwise). Exact comparison: the value is base64, case matters.
pub fn accepts(key: &[u8], value: &[u8]) -> bool {
    value == accept(key)
}

/// The Sec-WebSocket-Key of a request head (`buf`, its fields `fields`) that asks for a WebSocket
/// upgrade: an Upgrade field naming `websocket` and one Sec-WebSocket-Key. `None` for any other head.
pub fn upgrade_key<'a>(buf: &'a [u8], fields: &[Field]) -> Option<&'a [u8]> {
    let websocket = fields
        .iter()
        .filter(|f| f.kind == FieldKind::Upgrade)
        .flat_map(|f| list_elements(f.value(buf)))
        .any(|p| p.eq_ignore_ascii_case(b"websocket"));
    let mut keys = fields
        .iter()
        .filter(|f| f.name(buf).eq_ignore_ascii_case(b"sec-websocket-key"));
    match (websocket, keys.next(), keys.next()) {
        (true, Some(k), None) => Some(k.value(buf)),
        _ => None,
    }
}

/// Writes the start of the `101` an upstream's switch for `key` reads as (RFC 6455 §4.2.2): status
/// line, `Upgrade: websocket`, `Connection: Upgrade` and the key's `Sec-WebSocket-Accept`; the caller
/// adds the answer's other fields and the empty line.
pub fn write_switch_head(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: ",
    );
    out.extend_from_slice(&accept(key));
    out.extend_from_slice(b"\r\n");
}

/// Nonce bytes when the kernel gave none: the time, the thread and a per-thread counter, hashed.
fn fallback_nonce() -> [u8; 16] {
    use std::cell::Cell;
    thread_local!(static COUNT: Cell<u64> = const { Cell::new(0) });
    let count = COUNT.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    ctx.update(&nanos.to_le_bytes());
    ctx.update(&count.to_le_bytes());
    ctx.update(&std::process::id().to_le_bytes());
    ctx.update(format!("{:?}", std::thread::current().id()).as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&ctx.finish().as_ref()[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_of_rfc_6455s_sample_key() {
        // RFC 6455 §1.3.
        let key = b"dGhlIHNhbXBsZSBub25jZQ==";
        assert_eq!(&accept(key), b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(accepts(key, b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        assert!(!accepts(key, b"s3pPLMBiTxaQ9kYGzzhZRbK+xOO="));
        assert!(!accepts(key, b""));
    }

    #[test]
    fn an_upgrade_heads_key_and_the_switch_it_reads_as() {
        let parse = |head: &[u8]| {
            let mut fields = crate::http::head::Fields::default();
            crate::http::head::parse_request(head, 64, &mut fields)
                .unwrap()
                .unwrap();
            upgrade_key(head, &fields).map(<[u8]>::to_vec)
        };
        let head = b"GET /c HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: upgrade\r\n\
                     Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
        assert_eq!(
            parse(head).as_deref(),
            Some(&b"dGhlIHNhbXBsZSBub25jZQ=="[..])
        );
        let other = b"GET /c HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nSec-WebSocket-Key: k\r\n\r\n";
        assert_eq!(parse(other), None);
        let two = b"GET /c HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Key: a\r\n\
                    Sec-WebSocket-Key: b\r\n\r\n";
        assert_eq!(parse(two), None);
        let mut out = Vec::new();
        write_switch_head(&mut out, b"dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(
            out,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
        );
    }

    #[test]
    fn keys_are_base64_of_16_bytes_and_differ() {
        assert_eq!(&key_from(*b"the sample nonce"), b"dGhlIHNhbXBsZSBub25jZQ==");
        let (a, b) = (new_key(), new_key());
        assert_ne!(a, b);
        let decoded = STANDARD.decode(a).unwrap();
        assert_eq!(decoded.len(), 16);
        assert_ne!(fallback_nonce(), fallback_nonce());
    }
}
