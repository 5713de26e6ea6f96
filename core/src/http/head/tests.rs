//! Head parsing rules (DESIGN.md "HTTP/1.1 rules"), one row per rule.

use super::*;
use proptest::prelude::*;

#[test]
fn request_fields_are_classified_by_offset() {
    let buf = b"GET /a?b HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 5\r\nX-Custom: v\r\n\r\nhello";
    let mut f = Fields::new();
    let h = parse_request(buf, 100, &mut f).unwrap().unwrap();
    assert_eq!(&buf[h.target.clone()], b"/a?b");
    assert_eq!(&buf[h.method.clone()], b"GET");
    assert_eq!(h.minor, 1);
    assert_eq!(h.len, buf.len() - 5);
    assert_eq!(f[0].kind, FieldKind::Host);
    assert_eq!(f[1].kind, FieldKind::ContentLength);
    assert_eq!(f[1].value(buf), b"5");
    assert_eq!(f[2].name(buf), b"X-Custom");
}

#[test]
fn long_field_names_keep_their_length() {
    let name = format!("X-{}", "n".repeat(70_000));
    let buf = format!("GET / HTTP/1.1\r\nHost: x\r\n{name}: v\r\n\r\n");
    let mut f = Fields::new();
    parse_request(buf.as_bytes(), 100, &mut f).unwrap().unwrap();
    assert_eq!(f[1].name(buf.as_bytes()), name.as_bytes());
    assert_eq!(f[1].value(buf.as_bytes()), b"v");
}

#[test]
fn partial_and_invalid_heads() {
    let mut f = Fields::new();
    assert_eq!(
        parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n", 100, &mut f),
        Ok(None)
    );
    assert_eq!(
        parse_request(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", 1, &mut f).unwrap_err(),
        HeadError::TooManyFields
    );
    // The field over the limit is refused as soon as its line ends, before the head does.
    assert_eq!(
        parse_request(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n", 1, &mut f),
        Err(HeadError::TooManyFields)
    );
}

/// Feeds every proper prefix of `text` (all must be incomplete, never an error), then the whole.
fn parse_at_every_split(text: &[u8]) -> (RequestHead, Fields) {
    let mut f = Fields::new();
    for split in 0..text.len() {
        assert_eq!(
            parse_request(&text[..split], 100, &mut f),
            Ok(None),
            "prefix {split} of {:?}",
            String::from_utf8_lossy(text)
        );
    }
    let h = parse_request(text, 100, &mut f).unwrap().unwrap();
    (h, f)
}

#[test]
fn accepted_heads_at_every_split() {
    for ok in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"\r\nGET /a?b=c HTTP/1.0\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET http://a.example:8080/p?q HTTP/1.1\r\nHost: b\r\n\r\n",
        b"PATCH /x HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xc3\xa9\r\nX-Tab: a\tb\r\nX-Empty:\r\n\r\n",
        b"M-SEARCH~ /x HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        let (h, _) = parse_at_every_split(ok);
        assert_eq!(h.len, ok.len());
    }
}

#[test]
fn absolute_form_takes_its_authority() {
    let text = b"GET HTTP://a.example:8080/p?q HTTP/1.1\r\nHost: b\r\n\r\n";
    let (h, _) = parse_at_every_split(text);
    assert_eq!(&text[h.authority.clone().unwrap()], b"a.example:8080");
    assert_eq!(&text[h.path.clone()], b"/p?q");
    let text = b"GET https://a?q HTTP/1.1\r\nHost: b\r\n\r\n";
    let (h, _) = parse_at_every_split(text);
    assert_eq!(&text[h.authority.clone().unwrap()], b"a");
    assert_eq!(&text[h.path.clone()], b"?q");
    let text = b"GET /p HTTP/1.1\r\nHost: b\r\n\r\n";
    let (h, _) = parse_at_every_split(text);
    assert_eq!(h.authority, None);
    assert_eq!(h.path, h.target);
}

/// One row per head rule of DESIGN.md "HTTP/1.1 rules"; every row is `Invalid`.
#[test]
fn rejects_malformed_heads() {
    for (rule, bad) in [
        (
            "bare LF after request line",
            &b"GET / HTTP/1.1\nHost: a\r\n\r\n"[..],
        ),
        ("bare LF after a field", b"GET / HTTP/1.1\r\nHost: a\n\r\n"),
        ("bare LF at the end", b"GET / HTTP/1.1\r\nHost: a\r\n\n"),
        ("bare LF only", b"GET / HTTP/1.1\nHost: a\n\n"),
        (
            "bare LF empty line first",
            b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        ("bare CR in a value", b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"),
        (
            "whitespace before colon",
            b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        ),
        ("tab before colon", b"GET / HTTP/1.1\r\nHost\t: x\r\n\r\n"),
        ("obs-fold", b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"),
        (
            "obs-fold with tab",
            b"GET / HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n",
        ),
        (
            "leading whitespace on the first field",
            b"GET / HTTP/1.1\r\n A: b\r\n\r\n",
        ),
        ("NUL in a value", b"GET / HTTP/1.1\r\nA: b\x00c\r\n\r\n"),
        (
            "control char in a value",
            b"GET / HTTP/1.1\r\nA: b\x1bc\r\n\r\n",
        ),
        ("DEL in a value", b"GET / HTTP/1.1\r\nA: b\x7fc\r\n\r\n"),
        ("non-token field name", b"GET / HTTP/1.1\r\nA(b): c\r\n\r\n"),
        (
            "non-ASCII field name",
            b"GET / HTTP/1.1\r\nX\xc3\xa9: c\r\n\r\n",
        ),
        ("empty field name", b"GET / HTTP/1.1\r\n: c\r\n\r\n"),
        ("non-token method", b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("empty method", b" / HTTP/1.1\r\nHost: a\r\n\r\n"),
        (
            "fragment in the target",
            b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        (
            "fragment in an absolute target",
            b"GET http://a/#b HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        ("relative target", b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n"),
        (
            "authority-form without CONNECT",
            b"GET a:80 HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        (
            "asterisk-form without OPTIONS",
            b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        (
            "unknown scheme",
            b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        (
            "space in the target",
            b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        ("two spaces", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"),
        ("lowercase version", b"GET / http/1.1\r\nHost: a\r\n\r\n"),
        ("HTTP/0.9 style", b"GET /\r\n\r\n"),
    ] {
        let mut f = Fields::new();
        assert_eq!(
            parse_request(bad, 100, &mut f),
            Err(HeadError::Invalid),
            "{rule}: {:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn rejects_malformed_response_heads() {
    for (rule, bad) in [
        (
            "bare LF",
            &b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"[..],
        ),
        (
            "bare LF at the end",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n",
        ),
        (
            "whitespace before colon",
            b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
        ),
        ("obs-fold", b"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n"),
        ("NUL in a value", b"HTTP/1.1 200 OK\r\nA: \x00\r\n\r\n"),
        ("status below 100", b"HTTP/1.1 099 Low\r\n\r\n"),
        ("two-digit status", b"HTTP/1.1 99 Low\r\n\r\n"),
    ] {
        let mut f = Fields::new();
        assert_eq!(
            parse_response(bad, &mut f).map(|h| h.map(|h| h.status)),
            Err(HeadError::Invalid),
            "{rule}"
        );
    }
}

/// Characters a generated field value may hold (VCHAR, SP, HTAB inside, obs-text).
fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![0x21u8..=0x7e, Just(b' '), Just(b'\t'), 0x80u8..=0xff],
        0..24,
    )
    .prop_map(|v| trim(&v).to_vec())
}

fn token_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop::sample::select(
            &b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"[..],
        ),
        1..12,
    )
}

fn target_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop::sample::select(&b"abcXYZ019/?=&%-._~!$'()*+,;:@"[..]),
        0..24,
    )
    .prop_map(|mut t| {
        t.insert(0, b'/');
        t
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes never panic the request or response parser.
    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut f = Fields::new();
        if let Ok(Some(h)) = parse_request(&input, MAX_FIELDS, &mut f) {
            prop_assert!(h.len <= input.len());
            prop_assert!(crlf_only(&input[..h.len]));
            let _ = crate::http::framing::request_info(&input, &h, &f);
        }
        if let Ok(Some(h)) = parse_response(&input, &mut f) {
            let _ = crate::http::framing::response_body(&input, &h, &f, false);
        }
    }

    /// A request prefix then arbitrary bytes: exercises field parsing more than random bytes do.
    #[test]
    fn arbitrary_fields_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..128)) {
        let mut input = b"POST / HTTP/1.1\r\nHost: a\r\n".to_vec();
        input.extend_from_slice(&tail);
        input.extend_from_slice(b"\r\n\r\n");
        let mut f = Fields::new();
        if let Ok(Some(h)) = parse_request(&input, MAX_FIELDS, &mut f) {
            let _ = crate::http::framing::request_info(&input, &h, &f);
        }
    }

    /// A head serialised from valid parts parses back to the same method, target and fields.
    #[test]
    fn serialised_head_parses_back(
        method in token_strategy(),
        target in target_strategy(),
        minor in 0u8..=1,
        fields in proptest::collection::vec((token_strategy(), value_strategy()), 0..8),
    ) {
        let mut wire = Vec::new();
        wire.extend_from_slice(&method);
        wire.push(b' ');
        wire.extend_from_slice(&target);
        wire.extend_from_slice(if minor == 0 { b" HTTP/1.0\r\n" } else { b" HTTP/1.1\r\n" });
        for (n, v) in &fields {
            wire.extend_from_slice(n);
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(v);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        let mut f = Fields::new();
        let h = parse_request(&wire, MAX_FIELDS, &mut f).unwrap().unwrap();
        prop_assert_eq!(h.len, wire.len());
        prop_assert_eq!(&wire[h.method.clone()], &method[..]);
        prop_assert_eq!(&wire[h.target.clone()], &target[..]);
        prop_assert_eq!(h.minor, minor);
        prop_assert_eq!(f.len(), fields.len());
        for (got, (n, v)) in f.iter().zip(&fields) {
            prop_assert_eq!(got.name(&wire), &n[..]);
            prop_assert_eq!(got.value(&wire), &v[..]);
        }
    }
}

fn terminator_strategy() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![Just(&b"\r\n"[..]), Just(&b"\n"[..])]
}

fn whitespace_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![Just(b' '), Just(b'\t')], 0..3)
}

/// A head with every line terminator chosen at random between CRLF and a bare LF: empty lines before
/// the start line, then `start`, then fields with whitespace around (and sometimes nothing in) their
/// values, then the final empty line.
fn head_with_terminators(start: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    let field = (
        token_strategy(),
        whitespace_strategy(),
        value_strategy(),
        whitespace_strategy(),
        terminator_strategy(),
    );
    (
        proptest::collection::vec(terminator_strategy(), 0..2),
        terminator_strategy(),
        proptest::collection::vec(field, 0..6),
        terminator_strategy(),
    )
        .prop_map(move |(leading, after_start, fields, last)| {
            let mut wire = leading.concat();
            wire.extend_from_slice(start);
            wire.extend_from_slice(after_start);
            for (name, before, value, after, end) in fields {
                wire.extend_from_slice(&name);
                wire.push(b':');
                wire.extend_from_slice(&before);
                wire.extend_from_slice(&value);
                wire.extend_from_slice(&after);
                wire.extend_from_slice(end);
            }
            wire.extend_from_slice(last);
            wire
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The line check that reads only the start line and each field line's end (`crlf_lines`) refuses
    /// exactly the heads in which some LF is not after a CR (`crlf_only` over the whole head).
    #[test]
    fn a_request_with_any_bare_lf_is_invalid(wire in head_with_terminators(b"GET /a HTTP/1.1")) {
        let mut f = Fields::new();
        let parsed = parse_request(&wire, MAX_FIELDS, &mut f);
        if crlf_only(&wire) {
            prop_assert_eq!(parsed.map(|h| h.map(|h| h.len)), Ok(Some(wire.len())));
        } else {
            prop_assert_eq!(parsed, Err(HeadError::Invalid));
        }
    }

    /// As above for responses, with a reason phrase, an empty one, none, and one with obs-text (which
    /// httparse reports as empty).
    #[test]
    fn a_response_with_any_bare_lf_is_invalid(
        wire in prop_oneof![
            head_with_terminators(b"HTTP/1.1 200 OK"),
            head_with_terminators(b"HTTP/1.1 204 "),
            head_with_terminators(b"HTTP/1.1 304"),
            head_with_terminators(b"HTTP/1.1 404 Not \x80Found"),
        ]
    ) {
        let mut f = Fields::new();
        let parsed = parse_response(&wire, &mut f).map(|h| h.map(|h| h.len));
        if crlf_only(&wire) {
            prop_assert_eq!(parsed, Ok(Some(wire.len())));
        } else {
            prop_assert_eq!(parsed, Err(HeadError::Invalid));
        }
    }
}

#[test]
fn list_elements_skip_empty() {
    let v: Vec<&[u8]> = list_elements(b" gzip ,, chunked,").collect();
    assert_eq!(v, vec![&b"gzip"[..], b"chunked"]);
}

#[test]
fn response_head() {
    let buf = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    let mut f = Fields::new();
    let h = parse_response(buf, &mut f).unwrap().unwrap();
    assert_eq!(h.status, 404);
    assert_eq!(&buf[h.reason.clone()], b"Not Found");
}
