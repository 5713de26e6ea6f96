//! Arbitrary bytes through the chunked decoder, whole and split at a fuzzer-chosen point (the first byte):
//! no panic, and both feedings agree on the body, the bytes consumed and the verdict.
#![no_main]

use edge_core::http::chunked::ChunkedDecoder;
use libfuzzer_sys::fuzz_target;

/// Decodes `parts` in order: (body bytes, total consumed, done) or `None` on a chunk error.
fn decode(parts: &[&[u8]]) -> Option<(Vec<u8>, usize, bool)> {
    let mut d = ChunkedDecoder::new();
    let (mut body, mut consumed) = (Vec::new(), 0);
    for part in parts {
        let p = d
            .feed(part, |r| body.extend_from_slice(&part[r]))
            .ok()?;
        assert!(p.consumed <= part.len());
        consumed += p.consumed;
        if p.done {
            return Some((body, consumed, true));
        }
        // Before the end of the body the decoder takes everything it is given.
        assert_eq!(p.consumed, part.len());
    }
    Some((body, consumed, d.is_done()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(input.len());
    // The same body split anywhere gives the same result (ChunkedDecoder::feed).
    assert_eq!(decode(&[input]), decode(&[&input[..at], &input[at..]]));
});
