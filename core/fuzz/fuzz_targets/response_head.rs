//! Arbitrary bytes through the response head parser, the response framing decision and what edge tells
//! the client about a bodyless response (DESIGN.md "HTTP/1.1 rules", RFC 9110 §8.6, RFC 9112 §6.1,
//! §6.3): no panic, no wrap, and
//! - HEAD, 1xx, 204 and 304 responses have no body: none of the bytes after such a head is relayed;
//! - 1xx and 204 never carry a Content-Length on, and one announcing a body is not kept for reuse;
//! - the body scanner never relays more than a Content-Length says, nor a range outside its input.
#![no_main]

use edge_core_fuzz::http::{
    body::BodyScanner,
    framing::{bodyless_content_length, response_body, response_keeps_alive, Body},
    head::{crlf_only, parse_response, FieldKind, Fields},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut fields = Fields::new();
    let Ok(Some(h)) = parse_response(data, &mut fields) else {
        return;
    };
    assert!(h.len <= data.len());
    // The parser checks line ends at the start line and at each field line's end only; every LF of
    // the whole head must still end a CRLF.
    assert!(crlf_only(&data[..h.len]));
    assert!((100..=999).contains(&h.status));
    let rest = &data[h.len..];
    let never_framed = h.status < 200 || h.status == 204;
    let length = bodyless_content_length(data, &h, &fields);
    let keeps = response_keeps_alive(data, &h, &fields);
    if never_framed {
        assert_eq!(length, None);
        let te = fields.iter().any(|f| f.kind == FieldKind::TransferEncoding);
        assert!(
            !(te && keeps),
            "a {} with Transfer-Encoding kept for reuse",
            h.status
        );
    }
    for head_request in [false, true] {
        let Ok(body) = response_body(data, &h, &fields, head_request) else {
            continue;
        };
        if head_request || never_framed || h.status == 304 {
            assert_eq!(body, Body::None);
        }
        let mut scan = BodyScanner::new(body);
        let mut relayed = 0u64;
        let used = scan.scan(rest, |r| {
            assert!(r.start <= r.end && r.end <= rest.len());
            relayed += (r.end - r.start) as u64;
        });
        match body {
            Body::None => {
                assert_eq!(used, Ok(0));
                assert_eq!(relayed, 0);
                assert!(scan.is_done());
            }
            Body::Length(n) => {
                assert!(n > 0);
                assert!(relayed <= n);
                assert_eq!(used, Ok(relayed as usize));
            }
            Body::Chunked | Body::CloseDelimited => {}
        }
    }
});
