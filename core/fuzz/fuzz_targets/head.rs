//! Arbitrary bytes through the request and response head parsers and both framing decisions: no panic,
//! and a parsed head never claims more bytes than it was given.
#![no_main]

use edge_core::http::{
    framing::{request_info, response_body},
    head::{parse_request, parse_response, Fields},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut fields = Fields::new();
    if let Ok(Some(h)) = parse_request(data, 100, &mut fields) {
        assert!(h.len <= data.len());
        let _ = request_info(data, &h, &fields);
    }
    if let Ok(Some(h)) = parse_response(data, &mut fields) {
        assert!(h.len <= data.len());
        let _ = response_body(data, &h, &fields, false);
        let _ = response_body(data, &h, &fields, true);
    }
});
