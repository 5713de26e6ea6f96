//! gRPC's message framing (the gRPC over HTTP/2 protocol, "Length-Prefixed-Message"), sans-IO: one
//! byte of compressed flag, four bytes of big-endian length, then the message. The h2c origin echoes
//! messages with it, `edge-bench compare` writes h2load's request body with it, and the tests and the
//! fault matrix read answers with it.

/// The prefix before every message: the compressed flag and the 32-bit length.
pub const PREFIX_LEN: usize = 5;

/// The content type of a gRPC call (a `+proto` or `+json` suffix is also gRPC).
pub const CONTENT_TYPE: &str = "application/grpc";

/// Whether a request's content-type makes it a gRPC call (`application/grpc` or
/// `application/grpc+…`, case-insensitive).
pub fn is_grpc(content_type: &str) -> bool {
    let ct = content_type.trim().as_bytes();
    let base = CONTENT_TYPE.as_bytes();
    ct.len() >= base.len()
        && ct[..base.len()].eq_ignore_ascii_case(base)
        && matches!(ct.get(base.len()), None | Some(b'+' | b';'))
}

/// `message` framed as one uncompressed length-prefixed message.
///
/// # Panics
/// When the message is 4 GiB or longer (the length does not fit the prefix).
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN + message.len());
    push_frame(&mut out, message);
    out
}

/// Appends `message` framed to `out` (see [`frame`]).
///
/// # Panics
/// As [`frame`].
pub fn push_frame(out: &mut Vec<u8>, message: &[u8]) {
    let len = u32::try_from(message.len()).expect("a gRPC message under 4 GiB");
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
}

/// What [`split`] found at the front of a byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<'a> {
    /// A whole message (its payload) and the bytes it took, prefix included.
    Message(&'a [u8], usize),
    /// Not enough bytes yet for the message the prefix announces (or for the prefix).
    Partial,
}

/// The first message of `bytes`.
pub fn split(bytes: &[u8]) -> Next<'_> {
    if bytes.len() < PREFIX_LEN {
        return Next::Partial;
    }
    let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    match bytes.get(PREFIX_LEN..PREFIX_LEN + len) {
        Some(m) => Next::Message(m, PREFIX_LEN + len),
        None => Next::Partial,
    }
}

/// The whole messages of `bytes` and how many trailing bytes are left over (a partial message).
pub fn messages(mut bytes: &[u8]) -> (Vec<&[u8]>, usize) {
    let mut out = Vec::new();
    while let Next::Message(m, used) = split(bytes) {
        out.push(m);
        bytes = &bytes[used..];
    }
    (out, bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_splits_at_every_boundary() {
        let mut wire = frame(b"hello");
        push_frame(&mut wire, b"");
        push_frame(&mut wire, &[7u8; 300]);
        assert_eq!(&wire[..5], &[0, 0, 0, 0, 5]);
        let (all, rest) = messages(&wire);
        assert_eq!(all, vec![&b"hello"[..], &b""[..], &[7u8; 300][..]]);
        assert_eq!(rest, 0);
        for cut in 0..wire.len() {
            let (some, rest) = messages(&wire[..cut]);
            let used: usize = some.iter().map(|m| m.len() + PREFIX_LEN).sum();
            assert_eq!(used + rest, cut, "cut at {cut}");
            assert!(some.len() < 3);
        }
        assert_eq!(split(&wire[..4]), Next::Partial);
    }

    #[test]
    fn grpc_content_types() {
        assert!(is_grpc("application/grpc"));
        assert!(is_grpc("application/grpc+proto"));
        assert!(is_grpc("Application/GRPC"));
        assert!(!is_grpc("application/grpc-web"));
        assert!(!is_grpc("application/json"));
        assert!(!is_grpc("application/grp"));
    }
}
