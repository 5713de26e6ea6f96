//! Arbitrary bytes through the chunked decoder, whole, split at a fuzzer-chosen point (the first byte)
//! and, for short inputs, byte by byte: no panic, no wrap, all feedings agree on the body, the bytes
//! consumed, the verdict and the declared size, and the payload never exceeds what the chunks declared.
#![no_main]

use edge_core_fuzz::http::chunked::{ChunkError, ChunkedDecoder};
use libfuzzer_sys::fuzz_target;

/// Decodes `parts` in order: (payload, bytes consumed, done, declared), or the error.
fn decode<'a>(
    parts: impl Iterator<Item = &'a [u8]>,
) -> Result<(Vec<u8>, usize, bool, u64), ChunkError> {
    let mut d = ChunkedDecoder::new();
    let (mut body, mut consumed) = (Vec::new(), 0);
    for part in parts {
        let p = d.feed(part, |r| body.extend_from_slice(&part[r]))?;
        assert!(p.consumed <= part.len());
        consumed += p.consumed;
        assert!(body.len() as u64 <= d.declared());
        if p.done {
            assert_eq!(body.len() as u64, d.declared());
            break;
        }
        // Before the end of the body the decoder takes everything it is given.
        assert_eq!(p.consumed, part.len());
    }
    Ok((body, consumed, d.is_done(), d.declared()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(input.len());
    let whole = decode(std::iter::once(input));
    assert_eq!(whole, decode([&input[..at], &input[at..]].into_iter()));
    if input.len() <= 512 {
        assert_eq!(whole, decode(input.chunks(1)));
    }
});
