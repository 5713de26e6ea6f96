//! Tests of the chunked decoder: every split of valid bodies, one row per rejection rule, sizes at and past
//! the limit and `u64::MAX`, and generated inputs.

use super::*;
use proptest::prelude::*;

/// Decodes `body` fed whole, then split at every byte boundary into two parts, and (for short
/// bodies) one byte at a time; all must agree. Returns (data, consumed).
fn decode_split(body: &[u8]) -> Result<(Vec<u8>, usize), ChunkError> {
    let feed = |parts: &mut dyn Iterator<Item = &[u8]>| -> Result<(Vec<u8>, usize), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut consumed = 0;
        for part in parts {
            if d.is_done() {
                break;
            }
            let p = d.feed(part, |r| out.extend_from_slice(&part[r]))?;
            consumed += p.consumed;
        }
        assert!(d.is_done(), "not done: {:?}", String::from_utf8_lossy(body));
        Ok((out, consumed))
    };
    let whole = feed(&mut std::iter::once(body))?;
    for split in 0..=body.len() {
        let (a, b) = body.split_at(split);
        assert_eq!(feed(&mut [a, b].into_iter())?, whole, "split {split}");
    }
    assert_eq!(feed(&mut body.chunks(1))?, whole, "byte by byte");
    Ok(whole)
}

#[test]
fn decodes_at_every_split() {
    let msg = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    let (data, consumed) = decode_split(msg).unwrap();
    assert_eq!(data, b"hello 0123456789");
    assert_eq!(consumed, msg.len() - 4);
}

#[test]
fn accepts_valid_shapes_at_every_split() {
    for (ok, data) in [
        (&b"0\r\n\r\n"[..], &b""[..]),
        (b"000\r\n\r\n", b""),
        (b"00000000000000000000003\r\nabc\r\n0\r\n\r\n", b"abc"),
        (b"3;a\r\nabc\r\n0\r\n\r\n", b"abc"),
        (b"3 ; a = b ;c\r\nabc\r\n0;last\r\n\r\n", b"abc"),
        (b"3;a=\"q \\\" ;\\\\\"\r\nabc\r\n0\r\n\r\n", b"abc"),
        (b"3;a=\"\"\r\nabc\r\n0\r\n\r\n", b"abc"),
        (
            b"3\r\nabc\r\n0\r\nA: b\r\nC:\r\nD: \t e\xff\r\n\r\n",
            b"abc",
        ),
        (b"1\r\n\r\r\n1\r\n\n\r\n0\r\n\r\n", b"\r\n"),
    ] {
        assert_eq!(
            decode_split(ok).map(|(d, _)| d),
            Ok(data.to_vec()),
            "{:?}",
            String::from_utf8_lossy(ok)
        );
    }
}

/// One row per rule of DESIGN.md "HTTP/1.1 rules"; every row is `ChunkError::Malformed`.
#[test]
fn rejects_malformed() {
    let long_ext = format!("1;{}\r\n", "a".repeat(MAX_EXTENSIONS + 1));
    let many_ext = {
        let mut s = String::new();
        for _ in 0..1000 {
            s.push_str("1;abcdefgh\r\nx\r\n");
        }
        s
    };
    let long_trailers = format!("0\r\n{}", "T: v\r\n".repeat(MAX_TRAILERS / 6 + 1));
    let zeros = format!("{}1\r\n", "0".repeat(MAX_SIZE_LINE));
    for (rule, bad) in [
        ("empty size", &b"\r\n"[..]),
        ("empty size before ext", b";a\r\n"),
        ("non-hex size", b"x\r\n"),
        ("sign", b"+5\r\nhello\r\n"),
        ("minus", b"-5\r\n"),
        ("0x prefix", b"0x5\r\nhello\r\n"),
        ("size line over 4 KiB", zeros.as_bytes()),
        ("bare LF after size", b"5\nhello\r\n0\r\n\r\n"),
        ("bare CR after size", b"5\rhello\r\n"),
        ("whitespace before CRLF", b"5 \r\nhello\r\n"),
        ("whitespace inside size", b"5 5\r\n"),
        ("ext without name", b"5;\r\n"),
        ("ext name not a token", b"5;a@b\r\n"),
        ("ext control char", b"5;\x01\r\n"),
        ("ext bare LF", b"5;a\nb\r\n"),
        ("ext bare CR", b"5;a\rb\r\n"),
        ("ext value empty", b"5;a=\r\n"),
        ("ext value not a token", b"5;a=b@c\r\n"),
        ("ext quoted CR", b"5;a=\"b\rc\"\r\n"),
        ("ext quoted LF", b"5;a=\"b\nc\"\r\n"),
        ("ext unterminated quote", b"5;a=\"bc\r\n"),
        ("ext trailing garbage", b"5;a=\"b\"c\r\n"),
        ("ext whitespace before CRLF", b"5;a \r\n"),
        ("extensions over 4 KiB in one line", long_ext.as_bytes()),
        ("extensions over 4 KiB in all", many_ext.as_bytes()),
        ("data longer than size", b"5\r\nhelloX\r\n"),
        ("data then bare LF", b"5\r\nhello\n0\r\n\r\n"),
        ("data then bare CR", b"5\r\nhello\r0\r\n\r\n"),
        ("data then nothing", b"5\r\nhello0\r\n\r\n"),
        ("trailer control char", b"0\r\n\x01\r\n\r\n"),
        ("trailer obs-fold", b"0\r\nA: b\r\n folded\r\n\r\n"),
        ("trailer leading space", b"0\r\n folded\r\n\r\n"),
        ("trailer without colon", b"0\r\nA\r\n\r\n"),
        ("trailer empty name", b"0\r\n: v\r\n\r\n"),
        ("trailer space before colon", b"0\r\nA : v\r\n\r\n"),
        ("trailer NUL in value", b"0\r\nA: \x00\r\n\r\n"),
        ("trailer bare LF", b"0\r\nA: b\n\r\n"),
        ("trailers over 16 KiB", long_trailers.as_bytes()),
        ("final bare LF", b"0\r\n\n"),
        ("final CR then junk", b"0\r\n\rX"),
    ] {
        let mut d = ChunkedDecoder::new();
        let r = d.feed(bad, |_| {});
        assert_eq!(
            r,
            Err(ChunkError::Malformed),
            "{rule}: {:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn large_size_is_checked() {
    let mut d = ChunkedDecoder::new();
    let p = d.feed(b"ffffffffffffffff\r\nabc", |_| {}).unwrap();
    assert!(!p.done);
    assert_eq!(p.consumed, 21);
    assert_eq!(d.declared(), u64::MAX);
    let mut d = ChunkedDecoder::new();
    let p = d.feed(b"0000ffffffffffffffff\r\n", |_| {}).unwrap();
    assert_eq!(p.consumed, 22);
    // The 17th significant digit does not fit a u64: too large for any limit, never wrapped.
    for bad in [
        &b"11111111111111111\r\n"[..],
        b"10000000000000000",
        b"fffffffffffffffff",
    ] {
        let r = ChunkedDecoder::new().feed(bad, |_| {});
        assert_eq!(
            r,
            Err(ChunkError::TooLarge),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // A second chunk that would take the declared total past u64::MAX.
    let mut d = ChunkedDecoder::new();
    d.feed(b"ffffffffffffffff\r\n", |_| {}).unwrap();
    d.state = State::SizeStart; // as if its data had passed
    assert_eq!(d.feed(b"1\r\n", |_| {}), Err(ChunkError::TooLarge));
}

#[test]
fn declared_size_is_known_and_limited_before_the_data() {
    let mut d = ChunkedDecoder::with_limit(10);
    assert_eq!(d.feed(b"5", |_| {}).map(|p| p.consumed), Ok(1));
    assert_eq!(d.declared(), 5);
    d.feed(b"\r\nhel", |_| {}).unwrap();
    assert_eq!(d.declared(), 5);
    d.feed(b"lo\r\n5;x=y\r\n", |_| {}).unwrap();
    assert_eq!(d.declared(), 10, "exactly the limit is allowed");
    d.feed(b"world\r\n", |_| {}).unwrap();
    assert_eq!(d.feed(b"1\r\n", |_| {}), Err(ChunkError::TooLarge));
    // Refused at the first digit that shows it, whatever follows: many digits, no data needed.
    let many = format!("1{}\r\n", "f".repeat(4000));
    for (limit, bad) in [
        (10, &b"b"[..]),
        (10, b"0000000000000000000000b"),
        (10, b"1ffffffffffffffffffffff\r\n"),
        (1 << 20, b"100001\r\n"),
        (1 << 20, many.as_bytes()),
        (0, b"1\r\n"),
    ] {
        let r = ChunkedDecoder::with_limit(limit).feed(bad, |_| {});
        assert_eq!(
            r,
            Err(ChunkError::TooLarge),
            "{limit} {:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let mut d = ChunkedDecoder::with_limit(0);
    assert!(d.feed(b"000\r\n\r\n", |_| {}).unwrap().done);
}

#[test]
fn encode_chunk_sizes() {
    let mut out = Vec::new();
    encode_chunk(&mut out, b"");
    assert!(out.is_empty());
    encode_chunk(&mut out, &[b'x'; 26]);
    assert!(out.starts_with(b"1a\r\nxxx"));
    assert!(out.ends_with(b"x\r\n"));
}

/// Feeds `input` in pieces cut at `cuts`; returns the decoded data, the bytes consumed and whether
/// the body is done, or the error.
fn feed_cut(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize, bool), ChunkError> {
    feed_cut_limited(input, cuts, u64::MAX)
}

/// [`feed_cut`] with a decoder limited to `limit` declared bytes.
fn feed_cut_limited(
    input: &[u8],
    cuts: &[usize],
    limit: u64,
) -> Result<(Vec<u8>, usize, bool), ChunkError> {
    let mut d = ChunkedDecoder::with_limit(limit);
    let mut out = Vec::new();
    let mut at = 0;
    let mut consumed = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(input.len());
    for c in cuts {
        if c < at || d.is_done() {
            continue;
        }
        let part = &input[at..c];
        let p = d.feed(part, |r| out.extend_from_slice(&part[r]))?;
        consumed += p.consumed;
        at = c;
    }
    Ok((out, consumed, d.is_done()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes never panic the decoder, and how they are cut never changes the verdict.
    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..256),
                                   cuts in proptest::collection::vec(any::<usize>(), 0..4)) {
        let whole = feed_cut(&input, &[]);
        let cut = feed_cut(&input, &cuts);
        match (&whole, &cut) {
            (Ok(w), Ok(c)) => prop_assert_eq!(w, c),
            (Err(_), Err(_)) => {}
            // A cut can leave an error unseen only if it comes after the end of the body.
            _ => prop_assert!(false, "{whole:?} vs {cut:?}"),
        }
    }

    /// Bytes that look like chunked framing (digits, CR, LF, `;`) never panic either.
    #[test]
    fn framing_like_bytes_never_panic(input in proptest::collection::vec(
        prop::sample::select(&b"0123456789aAfF\r\n;= \t\"\\x:"[..]), 0..128)) {
        let _ = feed_cut(&input, &[]);
    }

    /// decode(encode(x)) == x for any payload cut into any chunks, fed cut anywhere.
    #[test]
    fn decode_of_encode_is_identity(
        pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..4),
    ) {
        let mut wire = Vec::new();
        for p in &pieces {
            encode_chunk(&mut wire, p);
        }
        wire.extend_from_slice(LAST_CHUNK);
        let len = wire.len();
        wire.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let (data, consumed, done) = feed_cut(&wire, &cuts).unwrap();
        prop_assert!(done);
        prop_assert_eq!(consumed, len);
        prop_assert_eq!(data, pieces.concat());
    }

    /// Under a limit, a well-formed body passes exactly when its chunks declare at most the limit in
    /// all, and is `TooLarge` otherwise, however it is cut.
    #[test]
    fn limit_is_judged_on_the_declared_total(
        pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
        slack in -80i64..80,
        cuts in proptest::collection::vec(any::<usize>(), 0..4),
    ) {
        let mut wire = Vec::new();
        for p in &pieces {
            encode_chunk(&mut wire, p);
        }
        wire.extend_from_slice(LAST_CHUNK);
        let total = pieces.iter().map(Vec::len).sum::<usize>() as i64;
        let limit = (total + slack).max(0) as u64;
        match feed_cut_limited(&wire, &cuts, limit) {
            Ok((data, consumed, done)) => {
                prop_assert!(total as u64 <= limit);
                prop_assert!(done);
                prop_assert_eq!(consumed, wire.len());
                prop_assert_eq!(data, pieces.concat());
            }
            Err(e) => {
                prop_assert_eq!(e, ChunkError::TooLarge);
                prop_assert!(total as u64 > limit);
            }
        }
    }
}
