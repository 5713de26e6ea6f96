//! The chunked decoder under a body limit, as `max_body_bytes` runs it (DESIGN.md "Configuration"). The
//! input is a decimal limit, a LF, then the body. The limit is judged on declared sizes: the limited
//! decoder must agree with an unlimited one that is given the same bytes, except that it says `TooLarge`
//! as soon as the sizes declared so far pass the limit, and never lets the payload pass it; a split
//! (at a point the bytes choose) changes nothing.
#![no_main]

use edge_core_fuzz::http::body::{BodyError, BodyScanner};
use edge_core_fuzz::http::chunked::{ChunkError, ChunkedDecoder};
use edge_core_fuzz::http::framing::Body;
use libfuzzer_sys::fuzz_target;

/// Feeds `parts` to a decoder limited to `limit`: (payload length, consumed, done), or the error.
fn limited<'a>(
    limit: u64,
    parts: impl Iterator<Item = &'a [u8]>,
) -> Result<(u64, usize, bool), ChunkError> {
    let mut d = ChunkedDecoder::with_limit(limit);
    let (mut payload, mut consumed) = (0u64, 0);
    for part in parts {
        let p = d.feed(part, |r| payload += (r.end - r.start) as u64)?;
        consumed += p.consumed;
        assert!(payload <= d.declared() && d.declared() <= limit);
        if p.done {
            break;
        }
    }
    Ok((payload, consumed, d.is_done()))
}

fuzz_target!(|data: &[u8]| {
    let Some(nl) = data.iter().position(|&b| b == b'\n') else {
        return;
    };
    let (digits, body) = (&data[..nl], &data[nl + 1..]);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return;
    }
    let limit = digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    let Some(limit) = limit else {
        return;
    };
    let at = body.iter().map(|&b| usize::from(b)).sum::<usize>() % (body.len() + 1);
    let got = limited(limit, std::iter::once(body));
    assert_eq!(got, limited(limit, [&body[..at], &body[at..]].into_iter()));

    // The same bytes without a limit: where it stops, and what the chunks declared by then.
    let mut free = ChunkedDecoder::new();
    let (mut payload, mut declared_at_error) = (0u64, None);
    let free_result = free.feed(body, |r| payload += (r.end - r.start) as u64);
    if free_result.is_err() {
        declared_at_error = Some(free.declared());
    }
    match (got, free_result) {
        (Ok((p, consumed, done)), Ok(f)) => {
            assert!(free.declared() <= limit);
            assert_eq!((p, consumed, done), (payload, f.consumed, f.done));
        }
        // Only the limit can refuse what the unlimited decoder takes, and only once it is passed.
        (Err(ChunkError::TooLarge), Ok(_)) => assert!(free.declared() > limit),
        (Err(ChunkError::TooLarge), Err(_)) => {}
        (Err(ChunkError::Malformed), Err(e)) => {
            assert_eq!(e, ChunkError::Malformed);
            assert!(declared_at_error.is_some_and(|d| d <= limit));
        }
        (Ok(_) | Err(ChunkError::Malformed), r) => {
            panic!("limited decoder {got:?} but unlimited {r:?} (limit {limit})")
        }
    }

    // BodyScanner with the same limit: the same verdict, mapped to what the relay answers.
    let mut s = BodyScanner::with_limit(Body::Chunked, limit);
    let scanned = s.scan(body, |_| {});
    match got {
        Ok((_, consumed, _)) => assert_eq!(scanned, Ok(consumed)),
        Err(ChunkError::TooLarge) => assert_eq!(scanned, Err(BodyError::TooLarge)),
        Err(ChunkError::Malformed) => assert_eq!(scanned, Err(BodyError::BadChunk)),
    }
});
