//! Arbitrary bytes through the PROXY protocol header parser (haproxy's proxy-protocol.txt, versions 1 and
//! 2) under each accepted-versions setting: no panic and no wrap (overflow checks are on), and consistent
//! answers: a header never claims more bytes than it was given, a v1 header is at most 107 bytes and ends
//! in CRLF, every shorter prefix of a header is `Incomplete`, the header alone parses the same, and a
//! prefix of any input is `Incomplete` or already the whole input's answer (errors come in byte order).
#![no_main]

use edge_core_fuzz::proxy_protocol::{parse, Parse, Versions, V1_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for versions in [Versions::V1, Versions::V2, Versions::Any] {
        let whole = parse(data, versions);
        if let Ok(Parse::Done(h)) = whole {
            assert!(h.len <= data.len());
            if data.starts_with(b"PROXY ") {
                assert!(h.len <= V1_MAX);
                assert_eq!(&data[h.len - 2..h.len], b"\r\n");
            }
            assert_eq!(parse(&data[..h.len], versions), whole);
            assert_eq!(parse(&data[..h.len - 1], versions), Ok(Parse::Incomplete));
        }
        // A few cut points (every one would be quadratic for long inputs).
        for cut in [
            1,
            6,
            12,
            13,
            14,
            16,
            data.len() / 2,
            data.len().saturating_sub(1),
        ] {
            let Some(prefix) = data.get(..cut) else {
                continue;
            };
            let p = parse(prefix, versions);
            let consistent = match (&p, &whole) {
                (Ok(Parse::Incomplete), Ok(Parse::Done(h))) => cut < h.len,
                (Ok(Parse::Incomplete), _) => true,
                (p, w) => p == w,
            };
            assert!(consistent, "cut at {cut}: {p:?}, whole {whole:?}");
        }
    }
});
