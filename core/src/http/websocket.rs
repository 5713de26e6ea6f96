//! The WebSocket opening handshake's key and accept (RFC 6455 §4.1, §4.2.2), for WebSocket over HTTP/2
//! (RFC 8441, DESIGN.md "HTTP/2 and gRPC upstreams"). An extended CONNECT stream carries no
//! Sec-WebSocket-Key (RFC 8441 §5), so edge makes one ([`new_key`]) for the `GET` + `Upgrade: websocket`
//! it sends an HTTP/1.1 upstream, and checks the upstream's `Sec-WebSocket-Accept` against it
//! ([`accepts`]). Sans-IO, but for the kernel's random bytes in [`new_key`].
//!
//! An HTTP/2 upstream (RFC 8441 on both sides) maps the other way: the forwarded HTTP/1.1-syntax head's
//! `Upgrade: websocket` becomes `:method CONNECT` + `:protocol websocket` (the key, Upgrade and
//! Connection left out), and its 2xx becomes the `101` whose `Sec-WebSocket-Accept` is [`accept`] of the
//! key in that head, so the downstream side sees the same answer from either kind of upstream.

use base64::{engine::general_purpose::STANDARD, Engine as _};

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
    fn keys_are_base64_of_16_bytes_and_differ() {
        assert_eq!(&key_from(*b"the sample nonce"), b"dGhlIHNhbXBsZSBub25jZQ==");
        let (a, b) = (new_key(), new_key());
        assert_ne!(a, b);
        let decoded = STANDARD.decode(a).unwrap();
        assert_eq!(decoded.len(), 16);
        assert_ne!(fallback_nonce(), fallback_nonce());
    }
}
