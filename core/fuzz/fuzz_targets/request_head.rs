//! Arbitrary bytes through the request head parser and the request framing decision (DESIGN.md
//! "HTTP/1.1 rules"): no panic and no wrap (overflow checks are on), and consistent answers: a head never
//! claims more bytes than it was given, every LF in it ends a CRLF, its fields lie inside it, it parses
//! the same from exactly its own bytes and not at all from fewer, a field limit one below its field count
//! refuses it, and a Content-Length too large for a u64 is `BodyTooLarge` (413), never a wrapped length.
#![no_main]

use edge_core_fuzz::http::{
    framing::{request_info, Body, FramingError},
    head::{crlf_only, parse_request, Fields, HeadError},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut fields = Fields::new();
    let Ok(Some(h)) = parse_request(data, 100, &mut fields) else {
        return;
    };
    assert!(h.len <= data.len());
    // The parser checks line ends at the start line and at each field line's end only; every LF of
    // the whole head must still end a CRLF.
    assert!(crlf_only(&data[..h.len]));
    for f in &fields {
        assert!(f.name_start as usize + f.name_len as usize <= h.len);
        assert!(f.value_start as usize + f.value_len as usize <= h.len);
    }
    let mut again = Fields::new();
    assert_eq!(
        parse_request(&data[..h.len], 100, &mut again),
        Ok(Some(h.clone()))
    );
    assert_eq!(again, fields);
    assert_eq!(parse_request(&data[..h.len - 1], 100, &mut again), Ok(None));
    if !fields.is_empty() {
        assert_eq!(
            parse_request(data, fields.len() - 1, &mut again),
            Err(HeadError::TooManyFields)
        );
    }
    let lengths = || {
        fields
            .iter()
            .filter(|f| f.name(data).eq_ignore_ascii_case(b"content-length"))
    };
    match request_info(data, &h, &fields) {
        Ok(info) => {
            if let Body::Length(n) = info.body {
                assert!(n > 0);
                assert!(lengths().next().is_some());
            }
            if info.body == Body::Chunked {
                assert!(lengths().next().is_none());
            }
        }
        // Only a Content-Length of more than 19 digits can be too large for a u64.
        Err(FramingError::BodyTooLarge) => assert!(lengths().any(|f| f.value(data).len() > 19)),
        Err(_) => {}
    }
});
