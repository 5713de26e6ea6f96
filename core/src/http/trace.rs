//! W3C trace context (https://www.w3.org/TR/trace-context/, DESIGN.md "Observability"): parsing a
//! `traceparent` value, making a new one, and the per-worker random source that makes them. Sans-IO.
//!
//! `traceparent` is `version-traceid-parentid-flags` in lower-case hex: `00-` + 32 + `-` + 16 + `-` + 2
//! digits, 55 bytes. Version `ff` is invalid; an all-zero trace id or parent id is invalid (§3.2.2.3,
//! §3.2.2.4). A later version than `00` is read as `00` from its first 55 bytes when the byte after them
//! (if any) is `-` (§3.2.4, "versioning of traceparent").

/// Length of a version-00 `traceparent` value.
pub const TRACEPARENT_LEN: usize = 55;

/// A valid `traceparent`: the trace id (16 bytes, hex in the value) and the rest as received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id, as its 32 lower-case hex digits.
    pub trace_id: [u8; 32],
}

/// Parses one `traceparent` value; `None` when it is not valid.
pub fn parse(value: &[u8]) -> Option<TraceParent> {
    if value.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = &value[0..2];
    if !is_hex(version) || version == b"ff" {
        return None;
    }
    match (version, value.len()) {
        (b"00", TRACEPARENT_LEN) => {}
        (b"00", _) => return None,
        (_, TRACEPARENT_LEN) => {}
        (_, _) if value[TRACEPARENT_LEN] == b'-' => {}
        _ => return None,
    }
    let v = &value[..TRACEPARENT_LEN];
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let (trace, parent, flags) = (&v[3..35], &v[36..52], &v[53..55]);
    if !is_hex(trace) || !is_hex(parent) || !is_hex(flags) {
        return None;
    }
    if trace.iter().all(|&b| b == b'0') || parent.iter().all(|&b| b == b'0') {
        return None;
    }
    let mut trace_id = [0u8; 32];
    trace_id.copy_from_slice(trace);
    Some(TraceParent { trace_id })
}

/// Lower-case hex digits only (upper case is invalid in `traceparent`).
fn is_hex(b: &[u8]) -> bool {
    b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Writes a new version-00 `traceparent` with a random trace id and parent id from `rng` and the
/// sampled flag off (`-00`): what edge sends when it starts a trace or replaces an invalid one.
pub fn new_traceparent(rng: &mut TraceRng) -> [u8; TRACEPARENT_LEN] {
    let mut out = [0u8; TRACEPARENT_LEN];
    out[..3].copy_from_slice(b"00-");
    let (a, b, c) = (rng.nonzero(), rng.nonzero(), rng.nonzero());
    hex_into(&mut out[3..19], a);
    hex_into(&mut out[19..35], b);
    out[35] = b'-';
    hex_into(&mut out[36..52], c);
    out[52..55].copy_from_slice(b"-00");
    out
}

/// Writes `n` as 16 lower-case hex digits into `out` (16 bytes).
fn hex_into(out: &mut [u8], n: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, o) in out.iter_mut().enumerate() {
        *o = HEX[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
}

/// A per-worker pseudo-random source for trace and parent ids (wyrand: one multiply per 64 bits, no
/// syscall and no lock per request). Seeded once when the worker starts, from the process's random
/// hash keys (drawn from the OS by std) and the worker index. Not cryptographic: trace ids need to be
/// unique, not secret.
#[derive(Clone, Debug)]
pub struct TraceRng(u64);

impl TraceRng {
    /// A source seeded for worker `worker`.
    pub fn seeded(worker: usize) -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(worker);
        TraceRng(h.finish())
    }

    /// A source with a fixed seed (tests).
    pub fn with_seed(seed: u64) -> Self {
        TraceRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        (t >> 64) as u64 ^ t as u64
    }

    /// The next random value that is not 0 (so an id made of it is never all zero).
    fn nonzero(&mut self) -> u64 {
        loop {
            let n = self.next_u64();
            if n != 0 {
                return n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_gives_its_trace_id() {
        let t = parse(VALID.as_bytes()).unwrap();
        assert_eq!(&t.trace_id, b"4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for b in bad {
            assert_eq!(parse(b.as_bytes()), None, "{b}");
        }
    }

    #[test]
    fn a_later_version_is_read_from_its_first_55_bytes() {
        let v = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(parse(v.as_bytes()).is_some());
        let glued = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x";
        assert_eq!(parse(glued.as_bytes()), None);
    }

    #[test]
    fn a_new_traceparent_is_valid_unsampled_and_different_each_time() {
        let mut rng = TraceRng::with_seed(7);
        let a = new_traceparent(&mut rng);
        let b = new_traceparent(&mut rng);
        assert!(parse(&a).is_some(), "{}", String::from_utf8_lossy(&a));
        assert!(a.ends_with(b"-00"));
        assert_ne!(a[3..35], b[3..35]);
        assert_ne!(a[36..52], b[36..52]);
    }
}
